"""Strata is installed from its repository: no doc or message names a bare PyPI install of a
Strata package (on PyPI those names are other projects' or nothing). Every install line names a
path (`./packages/strata-server`) or a `git+` URL with `#subdirectory=`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a Strata package's name standing alone: not the tail of a path, not followed by more of one
BARE = re.compile(r"(?<![\w./@-])strata[-_](?:engine|server|client|decide)(?:\[[\w,-]+\])?(?![\w/.-])")
GIT_URL = re.compile(r"\s*@\s*git\+\S+#subdirectory=packages/strata-")


def texts() -> list[Path]:
    """The docs, the packages' code and the benchmarks: everything that tells someone to install."""
    paths = [*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md"), ROOT / "noxfile.py"]
    paths += [*(ROOT / "bench").glob("*.py"), *(ROOT / "bench").glob("*.sh")]
    paths += list((ROOT / "packages").glob("*/src/**/*.py"))
    return sorted(paths)


def bare_installs(text: str) -> list[str]:
    """Lines installing a Strata package by its bare name. A command ends at `&&`, `;` or `|`; one
    in a string literal that the line does not close (a message built of several) goes on in the
    next line's."""
    lines = [*text.splitlines(), ""]
    found = []
    for i, line in enumerate(lines[:-1]):
        for start in (m.start() for m in re.finditer("pip install", line)):
            command = line[start:]
            if command.rstrip().endswith(('"', "'")) and command.count(command.rstrip()[-1]) % 2:
                command += " " + lines[i + 1]
            command = re.split(r"&&|;|\||#(?!subdirectory)", command)[0]
            bare = [m for m in BARE.finditer(command) if not GIT_URL.match(command, m.end())]
            urls = [u for u in re.findall(r"git\+\S+", command) if "#subdirectory=packages/strata-" not in u]
            if bare or urls:
                found.append(line.strip())
    return found


def test_no_install_line_names_a_bare_strata_package() -> None:
    offenders = {
        str(path.relative_to(ROOT)): bad for path in texts() if (bad := bare_installs(path.read_text()))
    }
    assert not offenders, offenders


def test_the_rule_catches_what_it_is_for() -> None:
    assert bare_installs("pip install strata-client")
    assert bare_installs("`pip install 'strata-server[ray]'`")
    assert bare_installs('"pip install torch==2.13.0 "\n"(or \'strata-engine[torch]\')"')
    assert bare_installs("pip install git+https://example.org/strata.git")  # no subdirectory
    assert bare_installs("pip install -e packages/strata-client  # elsewhere: pip install strata-client")
    assert not bare_installs("pip install ./packages/strata-engine './packages/strata-decide[gateway]'")
    assert not bare_installs("pip install -e packages/strata-client pytest")
    assert not bare_installs(
        "pip install 'strata-client @ git+https://example.org/strata.git#subdirectory=packages/strata-client'"
    )
