"""bench/README.md and tools/README.md name every script in their folder, so none is left
unexplained, and tools/ holds no benchmark (a script that times against llama.cpp)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("folder", ["bench", "tools"])
def test_every_script_is_in_the_folders_index(folder: str) -> None:
    index = (ROOT / folder / "README.md").read_text(encoding="utf-8")
    scripts = [
        p.name
        for p in (ROOT / folder).iterdir()
        if p.suffix in (".py", ".sh", ".c") and p.name != "_common.py"
    ]
    missing = [name for name in sorted(scripts) if f"`{name}`" not in index]
    assert not missing, f"{folder}/README.md does not name {missing}"


def test_no_script_reaches_into_a_tests_folder() -> None:
    """Test support is importable code (strata_engine.testing), not a path to put on sys.path."""
    for folder in ("bench", "tools"):
        for path in (ROOT / folder).glob("*.py"):
            assert "sys.path.insert" not in path.read_text(encoding="utf-8"), path
