"""The test/bench launcher reports a server that cannot start, with the reason from its log."""

from __future__ import annotations

import pytest

from strata_server.launch import ServerStartError, running_server


def test_a_server_that_exits_raises_with_its_log_tail(tmp_path):
    missing = tmp_path / "absent.gguf"
    with (
        pytest.raises(ServerStartError, match="exited early") as info,
        running_server("--model", str(missing)),
    ):
        pytest.fail("a server without a model must not become healthy")
    assert str(missing) in str(info.value)
