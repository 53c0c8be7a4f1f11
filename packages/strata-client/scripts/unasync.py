"""Write the sync client (``strata_client/_sync``) from its async source (``strata_client/_async``).

The async code is the only one written by hand, so the two clients cannot drift apart.
Each line goes through ``SUBSTITUTIONS`` (httpcore's unasync approach). Where the two truly
differ, the async file says so explicitly, the sync lines as comments:

    # unasync: sync has
    # <sync lines, each behind "# ">
    # unasync: async has
    <async lines>
    # unasync: end

``python packages/strata-client/scripts/unasync.py`` rewrites ``_sync``; ``--check`` only
says which files are stale (exit status 1). ``tests/test_sync_generated.py`` runs the check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "strata_client"
SOURCE = PACKAGE / "_async"
TARGET = PACKAGE / "_sync"
COMMAND = "python packages/strata-client/scripts/unasync.py"

# (pattern, replacement), applied in order to every line outside the marked blocks.
SUBSTITUTIONS = [
    (r"\basync def\b", "def"),
    (r"\basync for\b", "for"),
    (r"\basync with\b", "with"),
    (r"\bawait ", ""),
    (r"^import asyncio$", "import time"),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\b__aiter__\b", "__iter__"),
    (r"\baclose\b", "close"),
    (r"\baread\b", "read"),
    (r"\baiter_(\w+)", r"iter_\1"),  # aiter_lines, aiter_sse_data
    (r"\ban ``Async", "a ``"),  # the article, in docstrings
    (r"\bAsync([A-Z]\w*)", r"\1"),  # AsyncStrataClient, AsyncStream, httpx.AsyncClient, AsyncIterator, ...
]
MARKERS = {"# unasync: sync has": "sync", "# unasync: async has": "async", "# unasync: end": "both"}


def header(source: Path) -> str:
    """The lines that open every generated file: what it came from, and how to regenerate it."""
    origin = source.relative_to(PACKAGE.parent).as_posix()
    return f"# Generated from {origin} by scripts/unasync.py: do not edit.\n# Regenerate: {COMMAND}\n"


def unasync_line(line: str) -> str:
    for pattern, replacement in SUBSTITUTIONS:
        line = re.sub(pattern, replacement, line)
    return line


def unasync(text: str) -> str:
    """The sync module for one async module's text."""
    out: list[str] = []
    part, indent = "both", ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in MARKERS:
            part, indent = MARKERS[stripped], line[: len(line) - len(line.lstrip())]
        elif part == "both":
            out.append(unasync_line(line))
        elif part == "sync":
            if not stripped.startswith("#"):
                raise ValueError(f"a sync line must be a comment: {line!r}")
            content = stripped.removeprefix("#").removeprefix(" ")
            out.append(indent + content if content else "")
    if part != "both":
        raise ValueError("a '# unasync:' block is not closed by '# unasync: end'")
    return "\n".join(out) + "\n"


def generate() -> dict[Path, str]:
    """Each file of ``_sync`` and the text it must have."""
    return {
        TARGET / source.name: header(source) + unasync(source.read_text())
        for source in sorted(SOURCE.glob("*.py"))
    }


def stale(files: dict[Path, str]) -> list[Path]:
    """The files of ``_sync`` that differ from ``files``, are missing, or have no source."""
    extra = [path for path in sorted(TARGET.glob("*.py")) if path not in files]
    return [path for path, text in files.items() if not path.exists() or path.read_text() != text] + extra


def main(argv: list[str]) -> int:
    files = generate()
    if "--check" in argv:
        for path in stale(files):
            print(f"stale: {path}")
        return 1 if stale(files) else 0
    TARGET.mkdir(exist_ok=True)
    for path in sorted(TARGET.glob("*.py")):
        if path not in files:
            path.unlink()
    for path, text in files.items():
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
