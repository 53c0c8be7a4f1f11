"""bench/README.md names every script in bench/, so none is left unexplained."""

from __future__ import annotations

from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_every_bench_script_is_in_the_index() -> None:
    index = (BENCH / "README.md").read_text(encoding="utf-8")
    scripts = [p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh", ".c") and p.name != "_common.py"]
    missing = [name for name in sorted(scripts) if f"`{name}`" not in index]
    assert not missing, f"bench/README.md does not name {missing}"
