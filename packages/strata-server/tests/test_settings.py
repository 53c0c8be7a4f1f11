"""Each `strata-server` flag is one field of strata_server.settings: the parser is generated
from the fields (one flag each, no hand-written ones), parsing no flags gives the fields'
defaults, refused values stop the server with the same lines as before, and neither the CLI
nor the Ray application is imported by the settings (no import circle)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from strata_server.cli import main
from strata_server.flags import option_fields
from strata_server.limits import RequestLimits
from strata_server.limits import from_args as limits_from_args
from strata_server.settings import (
    DEFAULT_REQUEST_TIMEOUT_S,
    FLAG_GROUPS,
    EngineOptions,
    ServerSettings,
    build_parser,
    engine_options,
    server_settings,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "strata_server"


def test_each_option_field_has_exactly_one_generated_flag() -> None:
    actions = [a for a in build_parser()._actions if a.dest not in ("help", "version")]
    by_dest = {a.dest: a for a in actions}
    declared = [(f.name, f.metadata["option"]["flags"]) for cls, _ in FLAG_GROUPS for f in option_fields(cls)]
    assert len(by_dest) == len(actions) == len(declared)  # no flag twice, none written by hand
    for name, flags in declared:
        assert tuple(by_dest[name].option_strings) == flags, name


def test_parsing_no_flags_gives_the_dataclass_defaults() -> None:
    args = build_parser().parse_args([])
    assert engine_options(args) == {f.name: f.default for f in fields(EngineOptions)}
    assert limits_from_args(args) == RequestLimits()
    settings = server_settings(args, ())
    expected = ServerSettings(
        request_timeout=DEFAULT_REQUEST_TIMEOUT_S,  # the CLI's default; an embedder's is none
        allowed_hosts=settings.allowed_hosts,  # derived from --host (loopback names by default)
    )
    assert settings == expected
    assert settings.allowed_hosts  # bound to 127.0.0.1: only loopback names


def test_flags_become_their_fields_values() -> None:
    args = build_parser().parse_args(
        [
            "--threads",
            "3",
            "--no-prefix-cache",
            "--max-queue",
            "-1",
            "--request-timeout",
            "0",
            "--parallel",
            "2",
        ]
    )
    assert engine_options(args)["num_threads"] == 3 and engine_options(args)["prefix_cache"] is False
    settings = server_settings(args, ("k",))
    assert settings.max_queue is None and settings.request_timeout is None
    assert settings.slots == 2 and settings.keys == ("k",)


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["--parallel", "0"], "strata-server: --parallel must be at least 1"),
        (["--tensor-parallel", "0"], "strata-server: --tensor-parallel must be at least 1"),
        (["--max-logprobs", "-1"], "strata-server: --max-logprobs must be >= 0"),
        (["--max-n", "0"], "strata-server: --max-n must be at least 1"),
        (["--max-tokens-limit", "0"], "strata-server: --max-tokens-limit must be at least 1"),
        (["--max-prompt-tokens", "0"], "strata-server: --max-prompt-tokens must be at least 1"),
        (["--max-candidates", "0"], "strata-server: --max-candidates must be positive, got 0"),
        (["--body-timeout", "0"], "strata-server: --body-timeout must be positive, got 0.0"),
    ],
)
def test_a_refused_value_stops_the_server_with_one_line(argv: list[str], line: str) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == line


def test_settings_import_neither_the_cli_nor_ray() -> None:
    code = (
        "import sys, strata_server.settings; "
        "print([m for m in sys.modules if m == 'strata_server.cli' or m.startswith(('ray', 'strata_server.ray'))])"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert shown.strip() == "[]"
    for module in (SRC / "ray").glob("*.py"):  # the Ray side reads flags through settings only
        assert "strata_server.cli" not in module.read_text(), module.name
