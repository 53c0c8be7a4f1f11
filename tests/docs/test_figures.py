"""The speed figures in the docs are bench/figures.py's, generated from bench/results/*.json: each
page's generated block is what the results give now, README.md's first screen shows the
summary chart, and no page quotes a generated ratio outside a generated block."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def figures() -> ModuleType:
    spec = importlib.util.spec_from_file_location("figures", ROOT / "bench" / "figures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["figures"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_the_pages_carry_the_generated_figures(figures: ModuleType) -> None:
    assert figures.stale() == [], "run `python bench/figures.py` and commit the pages"


def test_each_generated_block_is_on_its_page(figures: ModuleType) -> None:
    placed = {
        match.group("name"): page.name
        for page in figures.PAGES
        for match in figures.BLOCK.finditer(page.read_text())
    }
    assert placed == {"summary": "README.md", "table": "performance.md"}


def test_the_readme_shows_the_chart_on_its_first_screen(figures: ModuleType) -> None:
    first_screen = "\n".join((ROOT / "README.md").read_text().splitlines()[:30])
    assert "](bench/results/speed_ratios.png)" in first_screen
    assert (ROOT / "bench" / "results" / "speed_ratios.png").stat().st_size > 10_000


def test_the_summary_reads_every_file_and_instruction_set(figures: ModuleType) -> None:
    ratios = figures.summary_ratios(figures.runs())
    assert {(m, i) for m, i, _ in ratios} == {(m, i) for m in figures.MODELS for i in figures.ISAS}
    assert all(0.1 < v < 20 for values in ratios.values() for v in values)


def speed_claims(text: str) -> list[str]:
    """The table rows and prose paragraphs that speak of speed against llama.cpp."""
    units = [line for line in text.splitlines() if line.startswith("|")]
    units += [p for p in re.split(r"\n\s*\n", text) if not p.startswith("|")]
    return [u for u in units if "llama.cpp" in u and re.search(r"decode|prefill", u)]


def test_no_page_quotes_a_generated_ratio_by_hand(figures: ModuleType) -> None:
    """A ratio of the generated blocks (e.g. 1.65x) written again by hand in a sentence about
    speed against llama.cpp would be a second copy, which the next benchmark run leaves behind."""
    ratios = set(re.findall(r"\d+\.\d\dx", "".join(figures.blocks().values())))
    for page in [*figures.PAGES, ROOT / "CHANGELOG.md", ROOT / "CONTRIBUTING.md"]:
        for claim in speed_claims(figures.BLOCK.sub("", page.read_text())):
            quoted = set(re.findall(r"(?<![\d.-])\d+\.\d\dx", claim)) & ratios
            assert not quoted, f"{page.name} quotes {sorted(quoted)} by hand: {claim[:200]!r}"
