"""A pytest plugin: every nox session's skip summary, and in CI a failure for a skip that CI
could have removed. The noxfile loads it in every session (`-p tests.skip_summary`).

A skip hides a test. Some skips are facts of the host that no setup step can change (no GPU,
one SIMD target on this CPU, not Linux) or are run by another nox session (the Ray and Triton
tests); every other skip (a model not cached, a tool not installed, a path that moved) means
the test silently stopped testing. At the end of each run the skips are listed, grouped by
reason; with `--strict-skips` (the noxfile passes it when `CI=true`) a skip whose reason
matches nothing in `ALLOWED_SKIPS` fails the run.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

# Reasons CI cannot remove, as regular expressions searched in the skip's reason. Add one only
# with a line saying why no CI step can make that test run.
ALLOWED_SKIPS: dict[str, str] = {
    r"needs a GPU|CUDA is not available|no GPU": "the CI machines have no GPU",
    r"one target only on this CPU|no vector target on this host|no AMX": "the host CPU decides",
    r"needs a clang without libomp": "Apple clang only; CI's clang has libomp",
    r"needs Linux|reads /proc/<pid>/maps": "the host OS decides",
    r"no GELU|dense model: covered by test_invariance": "a parametrization that does not apply",
    r"nox -s ray runs these tests": "run by the `ray` session, which has the [ray] extra",
    r"the Triton kernels need `pip install triton`": "run by the `triton` session",
    r"nox -s lm_eval runs this test": "run by the `lm_eval` session, the one that installs lm_eval",
}

_skips: Counter[tuple[str, str]] = Counter()  # (reason, where) -> count


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--strict-skips",
        action="store_true",
        default=False,
        help="fail the run when a test skips for a reason not in tests/skip_summary.py's ALLOWED_SKIPS (CI)",
    )


def skip_reason(report: Any) -> str:
    """The reason of a skipped report (pytest stores (path, line, 'Skipped: reason'))."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def allowed(reason: str) -> bool:
    return any(re.search(pattern, reason) for pattern in ALLOWED_SKIPS)


def _record(report: Any) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skips[(skip_reason(report), report.nodeid.split("::")[0])] += 1


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _record(report)  # a whole module skipped at import (importorskip, pytestmark)


def unexpected_skips() -> list[tuple[str, str]]:
    return sorted(key for key in _skips if not allowed(key[0]))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if session.config.getoption("--strict-skips") and unexpected_skips() and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not _skips:
        return
    write = terminalreporter.write_line
    terminalreporter.section("skip summary")
    for (reason, where), count in sorted(_skips.items()):
        mark = "allowed" if allowed(reason) else "NOT ALLOWED"
        write(f"{count:4d} {mark:11s} {where}: {reason}")
    bad = unexpected_skips()
    if bad and config.getoption("--strict-skips"):
        write(
            f"{len(bad)} skip reason(s) not in tests/skip_summary.py's ALLOWED_SKIPS: the run fails (--strict-skips)"
        )
