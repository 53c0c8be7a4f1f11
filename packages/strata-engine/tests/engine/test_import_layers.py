"""The engine's wings, the kernels (strata_engine/kernels/) and the text layer
(strata_engine/text/), are each a folder whose imports all point down; the engine has no
import circle at all.

Read from the source with `ast` (every import, lazy and TYPE_CHECKING ones included, since each
is a dependency): no import circle inside a wing, and outside it only the few engine modules
that sit below it (for the kernels: errors, the cache's home, a tensor as stored, the float64
math the sampler draws with; for the text layer: errors and the front-end contract), which must
not import the wing back. The checker itself is tried on a planted circle and a planted upward
import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import strata_engine
from strata_engine.testing.import_graph import find_cycle, import_graph

ENGINE = Path(strata_engine.__file__).parent
# each wing, and the engine modules outside it that it may use: small, and below the wing
WINGS = {
    "strata_engine.kernels": {
        "strata_engine.api",
        "strata_engine.paths",
        "strata_engine.gguf_loader",
        "strata_engine.exactmath",
    },
    "strata_engine.text": {"strata_engine.api", "strata_engine.protocol"},
}


def violations(graph: dict[str, set[str]], wing: str, below: set[str]) -> list[str]:
    """Every rule the wing breaks: a circle inside it, an import of an engine module above it,
    a module it may import that imports the wing back."""
    name = wing.rpartition(".")[2]
    inside = {m for m in graph if m == wing or m.startswith(wing + ".")}
    found = []
    if cycle := find_cycle(graph, inside):
        found.append("import circle: " + " -> ".join(cycle))
    for module in sorted(inside):
        for target in sorted(graph[module] - inside):
            if target not in below and target != wing.rpartition(".")[0]:
                found.append(f"{module} imports {target}, an engine module above the {name}")
    for low in sorted(below & set(graph)):
        reach, todo = set(), [low]
        while todo:
            for nxt in graph[todo.pop()] - reach:
                reach.add(nxt)
                todo.append(nxt)
        if reach & inside:
            found.append(
                f"{low} is meant to sit below the {name} but reaches {', '.join(sorted(reach & inside))}"
            )
    return found


@pytest.mark.parametrize("wing", sorted(WINGS))
def test_the_wing_imports_point_down(wing: str) -> None:
    graph = import_graph(ENGINE, "strata_engine")
    assert len([m for m in graph if m.startswith(wing + ".")]) >= 4  # the wing was found
    assert violations(graph, wing, WINGS[wing]) == []


def test_the_engine_has_no_import_circle() -> None:
    graph = import_graph(ENGINE, "strata_engine")
    assert {"strata_engine.text.tokenizer", "strata_engine.text.spm_tokenizer"} <= set(graph)
    assert find_cycle(graph, set(graph) - {"strata_engine"}) is None


def test_nothing_in_the_engine_imports_its_test_support() -> None:
    """strata_engine.testing (tiny model writers, the float64 reference) sits on top: the engine
    runs without it, and without the torch and pytest some of it needs."""
    graph = import_graph(ENGINE, "strata_engine")
    testing = {m for m in graph if m.startswith("strata_engine.testing")}
    assert len(testing) >= 10  # the test support was found
    users = sorted(m for m, deps in graph.items() if m not in testing and deps & testing)
    assert users == []


def test_no_test_support_is_left_among_the_tests() -> None:
    """The builders live in strata_engine.testing, importable by every package's tests, the
    benchmarks and the tools alike; a test file imports no other test file."""
    tests = Path(__file__).resolve().parents[1]
    assert {p.name for p in tests.rglob("*.py")} - {"conftest.py"} == {
        p.name for p in tests.rglob("test_*.py")
    }
    for path in tests.rglob("test_*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                assert not node.module.startswith("test_"), f"{path.name} imports {node.module}"


def test_no_kernel_code_is_left_outside_the_wing() -> None:
    """The modules that used to hold kernel code live only under kernels/."""
    for old in (
        "ops.py",
        "torch_ops.py",
        "weights.py",
        "kquants.py",
        "fused_layer.py",
        "native",
        "triton_ops",
    ):
        assert not (ENGINE / old).exists(), old
    assert not [p for p in ENGINE.rglob("*.[ch]") if "kernels" not in p.relative_to(ENGINE).parts]


def test_no_text_code_is_left_outside_the_wing() -> None:
    """The modules that used to hold the text layer live only under text/."""
    for old in (
        "tokenizer",
        "spm_tokenizer",
        "pretokenizers",
        "chat_template",
        "stop_matcher",
        "text_stream",
    ):
        assert not (ENGINE / f"{old}.py").exists(), old


def _plant(root: Path, files: dict[str, str]) -> dict[str, set[str]]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return import_graph(root, "pkg")


def test_the_checker_sees_a_circle_through_a_package_init(tmp_path: Path) -> None:
    graph = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "k/__init__.py": "",
            "k/n/__init__.py": "from pkg.k.n.backend import X\n",  # the package runs its backend
            "k/n/backend.py": "from pkg.k.base import Y\nX = 1\n",
            "k/base.py": "def f():\n    from pkg.k.n import load  # lazy, still a dependency\nY = 2\n",
        },
    )
    found = violations(graph, "pkg.k", set())
    assert len(found) == 1 and found[0].startswith("import circle:"), found
    assert {"pkg.k.n", "pkg.k.base", "pkg.k.n.backend"} <= set(found[0].split(": ")[1].split(" -> "))


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    graph = _plant(
        tmp_path,
        {
            "__init__.py": "",
            "engine.py": "from pkg.k import base\n",
            "api.py": "from pkg.k.base import Y\n",  # allowed below, but it imports the wing back
            "k/__init__.py": "",
            "k/base.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..engine import E\nY = 1\n",
        },
    )
    assert violations(graph, "pkg.k", {"pkg.api"}) == [
        "pkg.k.base imports pkg.engine, an engine module above the k",
        "pkg.api is meant to sit below the k but reaches pkg.k, pkg.k.base",
    ]
