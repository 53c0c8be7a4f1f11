"""The sync client is generated from the async source; the committed ``_sync`` must be current."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "unasync.py"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sync_client_is_what_the_async_source_generates() -> None:
    unasync = load_generator()
    stale = unasync.stale(unasync.generate())
    assert not stale, f"stale generated files {[str(p) for p in stale]}; regenerate: {unasync.COMMAND}"


def test_marked_blocks_give_each_side_its_own_lines() -> None:
    source = (
        "class AsyncThing(AsyncClosing):\n"
        "    # unasync: sync has\n"
        '    # """Sync words."""\n'
        "    #\n"
        "    # unasync: async has\n"
        '    """Async words."""\n'
        "    # unasync: end\n"
        "    async def close(self) -> None:\n"
        "        await self.response.aclose()\n"
    )
    assert load_generator().unasync(source) == (
        "class Thing(Closing):\n"
        '    """Sync words."""\n'
        "\n"
        "    def close(self) -> None:\n"
        "        self.response.close()\n"
    )


def test_an_unclosed_block_is_refused() -> None:
    with pytest.raises(ValueError, match="not closed"):
        load_generator().unasync("    # unasync: sync has\n    # x = 1\n")
