"""How the code holds together, measured: the import circles of each package, and the path a
completion's body takes through the server's modules.

    python tools/code_paths.py [--root PATH]

`--root` points at another checkout (e.g. a `git worktree` of an older commit) to measure it
the same way; its packages are imported from there (run it with that tree's `src` folders on
PYTHONPATH, as the command it prints says).

Import circles: every import of every module (module level, lazy and TYPE_CHECKING ones alike,
read with `ast`), and the strongly connected groups of two or more modules.

The body's path: `strata_server.completions.completion_plan(body, ctx)` on a fixed body (a
prompt, `max_tokens`, `logprobs`, `stop`, `n`) with the server tests' stand-in engine, traced
call by call (`sys.setprofile`); the server file that runs after each call and each return,
each call from one server file into another (returns are not steps; a call repeating the one
before is one step). "Back to a file" counts the calls into a file the path has entered before; "up the layers" counts the calls from a
file into one it does not import (directly or through others): a call back into a module above
it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _this_trees_import_graph() -> Any:
    """strata_engine.testing.import_graph from this checkout (it needs nothing but ast), so that
    an older checkout, which may not have it, is read by the same rules."""
    path = ROOT / "packages/strata-engine/src/strata_engine/testing/import_graph.py"
    spec = importlib.util.spec_from_file_location("import_graph_rules", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RULES = _this_trees_import_graph()
import_graph, modules = RULES.import_graph, RULES.modules
PACKAGES = ("strata_engine", "strata_server", "strata_client", "strata_decide")
BODY = {"model": "fake-model", "prompt": "Is this ticket a bug?", "max_tokens": 2, "logprobs": 3,
        "stop": ["\n"], "n": 1, "temperature": 0}  # fmt: skip


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of two or more modules (Tarjan), packages' __init__ left out:
    importing a submodule runs its package's __init__, which is not a dependency of design."""
    nodes = [n for n in graph if not any(m.startswith(n + ".") for m in graph)]
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in nodes:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            visit(v)
    return found


def reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def body_path(root: Path) -> list[tuple[str, str]]:
    """The calls from one server file into another that completion_plan makes, in order."""
    spec = importlib.util.spec_from_file_location(
        "server_test_support", root / "packages/strata-server/tests/conftest.py"
    )
    assert spec is not None and spec.loader is not None
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    context = importlib.import_module("strata_server.context")
    completions = importlib.import_module("strata_server.completions")
    protocol = importlib.import_module("strata_server.protocol")
    settings_cls = (
        getattr(context, "ServerSettings", None)
        or importlib.import_module("strata_server.settings").ServerSettings
    )
    ctx = context.ServerContext(engine=support.FakeEngine(), settings=settings_cls())
    import msgspec

    body = msgspec.convert(BODY, protocol.CompletionRequest)
    server = str(Path(importlib.import_module("strata_server").__file__).parent)
    steps: list[tuple[str, str]] = []

    def file_of(frame: Any) -> str | None:
        while frame is not None and not frame.f_code.co_filename.startswith(server):
            frame = frame.f_back
        return None if frame is None else frame.f_code.co_filename[len(server) + 1 :]

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(server):
            callee = frame.f_code.co_filename[len(server) + 1 :]
            caller = file_of(frame.f_back)
            if caller is not None and callee != caller and (not steps or steps[-1] != (caller, callee)):
                steps.append((caller, callee))

    sys.setprofile(profile)
    try:
        completions.completion_plan(body, ctx)
    finally:
        sys.setprofile(None)
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    root = ap.parse_args().root.resolve()
    got = Path(importlib.import_module("strata_server").__file__).resolve()
    if root not in got.parents:
        sys.exit(f"strata_server comes from {got}: run with PYTHONPATH={root}/packages/*/src (each)")
    server_graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        src = root / "packages" / package.replace("_", "-") / "src" / package
        graph = import_graph(src, package)
        if package == "strata_server":
            server_graph = graph
        found = circles(graph)
        print(f"{package}: {len(graph)} modules, {len(found)} import circle(s)")
        for group in found:
            print("   ", " <-> ".join(m.removeprefix(package + ".") for m in group))
    steps = body_path(root)
    server_src = root / "packages/strata-server/src/strata_server"
    by_file = {str(p.relative_to(server_src)): m for m, p in modules(server_src, "strata_server").items()}
    back = sum(1 for i, (_, b) in enumerate(steps) if any(b == s[1] for s in steps[:i]))
    up = sum(1 for a, b in steps if by_file[b] not in reach(server_graph, by_file[a]))
    files = {f for s in steps for f in s}
    print(f"completion_plan: {len(steps)} calls between files, {len(files)} files, back to a file {back} times, "
          f"up the layers {up} times")  # fmt: skip
    for a, b in steps:
        mark = " (up)" if by_file[b] not in reach(server_graph, by_file[a]) else ""
        print(f"    {a.removesuffix('.py')} -> {b.removesuffix('.py')}{mark}")


if __name__ == "__main__":
    main()
