"""A package's import graph, read from its source with `ast`: every import counts (lazy and
TYPE_CHECKING ones too, since each is a dependency), and importing a module runs its parent
packages' __init__ (all but the top package's). The engine's and the server's layer tests and
tools/code_paths.py read it."""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def modules(root: Path, package: str) -> dict[str, Path]:
    return {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The package's own modules that `path` (module `name`) imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target:
                found.add(target)
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the package's modules it imports; importing a module also runs its parent
    packages' __init__, so those count as imported too (all but the top package's: it is the
    public face that imports the engine, and every import runs it first)."""
    mods = modules(root, package)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges = set()
        for target in imports_of(path, name, set(mods)):
            edges.add(target)
            parent = target.rpartition(".")[0]
            while parent.startswith(package + ".") and parent != name:
                edges.add(parent)
                parent = parent.rpartition(".")[0]
        edges.discard(name)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]], among: set[str]) -> list[str] | None:
    """An import circle among the modules `among`, as the list of its modules, or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, set()) & among):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(among):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None
