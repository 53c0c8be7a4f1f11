"""The server's modules import one another without a circle (as the engine's do:
packages/strata-engine/tests/engine/test_import_layers.py).

Read from the source with `ast`: every import of a strata_server module counts, the ones inside
functions and under TYPE_CHECKING included, since each is a dependency. Importing a module runs
its parent packages too (`strata_server.ray`), but not the top package, the public face every
import runs first. The checker itself is tried on a planted circle.
"""

from __future__ import annotations

from pathlib import Path

import strata_server
from strata_engine.testing.import_graph import find_cycle, import_graph

SERVER = Path(strata_server.__file__).parent


def import_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as its modules (the first repeated at the end), or None."""
    return find_cycle(graph, set(graph))


def test_the_server_has_no_import_circle() -> None:
    graph = import_graph(SERVER, "strata_server")
    assert {"strata_server.app", "strata_server.plan", "strata_server.ray.serve"} <= set(graph)
    assert "strata_server.checks" in graph["strata_server.plan"]  # imports were found
    assert import_circle(graph) is None


def test_the_checker_sees_a_lazy_circle_through_a_package(tmp_path: Path) -> None:
    files = {
        "__init__.py": "from pkg.a import A\n",  # the top package: not an edge
        "a.py": "from pkg.sub.b import B\nA = 1\n",
        "sub/__init__.py": "",
        "sub/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\nB = 2\n",
        "sub/c.py": "def f():\n    from pkg import a  # lazy, still a dependency\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.sub", "pkg.sub.b"}
    assert graph["pkg.sub.c"] == {"pkg.a"}
    circle = import_circle(graph)
    assert circle is not None and {"pkg.a", "pkg.sub.b", "pkg.sub.c"} <= set(circle)
    (tmp_path / "sub/c.py").write_text("def f():\n    pass\n")
    assert import_circle(import_graph(tmp_path, "pkg")) is None
