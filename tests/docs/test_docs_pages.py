"""The pages hold together: user pages say what a user can do and see (how it is tested is in
CONTRIBUTING.md), CONTRIBUTING.md names every nox session and only tests that exist, and every
link between the pages reaches a page and a heading that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES = [*USER_PAGES, ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
DEVELOPER_WORDS = re.compile(r"\btest_\w+|\btests/|\bnox\b|\bpytest\b|conftest")


def user_text(page: Path) -> str:
    text = page.read_text()
    if page.name == "engine.md":  # its supported-models sections name the test behind each row
        text = text.split("\n## Supported models", 1)[0]
    return text


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: p.name)
def test_user_pages_do_not_speak_of_the_tests(page: Path) -> None:
    found = sorted(set(DEVELOPER_WORDS.findall(user_text(page))))
    assert not found, f"{page.name} names {found}: that belongs in CONTRIBUTING.md"


def test_contributing_names_every_nox_session() -> None:
    noxfile = (ROOT / "noxfile.py").read_text()
    sessions = re.findall(r"@nox\.session\([^)]*\)\ndef (\w+)\(", noxfile)
    assert len(sessions) >= 10
    table = (ROOT / "CONTRIBUTING.md").read_text().split("| session | what it runs |", 1)[1].split("\n\n")[0]
    listed = set(re.findall(r"`(\w+)`", "\n".join(row.split("|")[1] for row in table.splitlines()[2:])))
    assert listed == set(sessions)


def test_contributing_names_only_tests_that_exist() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    files = [
        str(p.relative_to(ROOT)) for d in ("packages", "tests", "bench") for p in (ROOT / d).rglob("*.*")
    ]
    sources = "\n".join((ROOT / f).read_text(errors="ignore") for f in files if f.endswith(".py"))
    for name in set(re.findall(r"[\w/.]*test_\w+(?:\.py)?", text)):
        if name.endswith(".py"):
            assert any(f.endswith(name) for f in files), name
        else:
            assert f"def {name}(" in sources, name


def anchors(page: Path) -> set[str]:
    """A page's heading anchors as GitHub writes them, and its explicit `<a id>`s."""
    text = page.read_text()
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
    return slugs | set(re.findall(r'<a id="([^"]+)"', text))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_between_pages_resolve(page: Path) -> None:
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page.name} links to {target}: no such heading"
