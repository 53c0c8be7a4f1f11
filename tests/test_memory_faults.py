"""Memory faults over HTTP, on the real server and the default model (issue 43).

A step whose memory cannot be allocated is a 503 with Retry-After for the requests in it, and
the server goes on serving the same bits. The allocation really fails: the server's address
space is capped from outside (`prlimit`, as RLIMIT_AS in test_kernel_out_of_memory.py) once it
is warm, with glibc's one arena (MALLOC_ARENA_MAX=1) so no thread has reserved room of its own.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import httpx
import pytest

from strata_server.launch import server_process

# a 300-token prompt computes a 256-token chunk first: each layer's C scratch then needs about 8 MB,
# more than this headroom, while the HTTP side of a request needs far less
HEADROOM_BYTES = 4 * 2**20
LONG_PROMPT = {"prompt": "hi " * 300, "max_tokens": 2, "temperature": 0, "logprobs": 1}

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="prlimit and /proc are Linux's")


def _address_space(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/PID/status")


def test_out_of_memory_in_a_step_is_a_503_and_the_server_goes_on(server_url: str) -> None:
    args = ("--model", "default", "--parallel", "2", "--log-level", "warning")
    with server_process(*args, env={"MALLOC_ARENA_MAX": "1"}) as server:
        url, pid = server.url, server.process.pid
        warm = httpx.post(f"{url}/v1/completions", json={"prompt": "hi", "max_tokens": 1}, timeout=60)
        assert warm.status_code == 200  # threads and small scratch made before the cap
        soft, hard = resource.prlimit(pid, resource.RLIMIT_AS)
        resource.prlimit(pid, resource.RLIMIT_AS, (_address_space(pid) + HEADROOM_BYTES, hard))
        try:
            refused = httpx.post(f"{url}/v1/completions", json=LONG_PROMPT, timeout=60)
            health = httpx.get(f"{url}/health", timeout=10)
        finally:
            resource.prlimit(pid, resource.RLIMIT_AS, (soft, hard))
        again = httpx.post(f"{url}/v1/completions", json=LONG_PROMPT, timeout=60)
        assert server.process.poll() is None, server.log()[-3000:]
        log = server.log()
    assert refused.status_code == 503, (refused.text, log[-3000:])
    assert refused.headers["Retry-After"] == "2"
    error = refused.json()["error"]
    assert error["code"] == "out_of_memory" and error["type"] == "server_error"
    assert "out of memory" in error["message"] and "could not allocate" in error["message"]
    assert health.status_code == 200
    alone = httpx.post(f"{server_url}/v1/completions", json=LONG_PROMPT, timeout=60)
    # nothing of the failed step was kept: the prefix cache holds no unwritten KV
    assert again.status_code == 200 and again.json()["choices"] == alone.json()["choices"], log[-3000:]
