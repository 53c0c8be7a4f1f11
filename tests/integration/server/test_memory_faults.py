"""Memory faults on the real server and the default model (issue 43): a step out of memory, a
model too large for the machine, the KV cache exhausted under load.

A model whose weights and one full context of KV cache do not fit in the memory available is
refused at start with one line giving the three numbers (`STRATA_MEMORY_LIMIT` stands for a
small machine: a real cgroup limit needs privileges a test does not have).

A step whose memory cannot be allocated is a 503 with Retry-After for the requests in it, and
the server goes on serving the same bits. The allocation really fails: the server's address
space is capped from outside (`prlimit`, as RLIMIT_AS in test_kernel_out_of_memory.py) once it
is warm, with glibc's one arena (MALLOC_ARENA_MAX=1) so no thread has reserved room of its own.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from strata_server.launch import server_process

# a 300-token prompt computes a 256-token chunk first: each layer's C scratch then needs about 8 MB,
# more than this headroom, while the HTTP side of a request needs far less
HEADROOM_BYTES = 4 * 2**20
LONG_PROMPT = {"prompt": "hi " * 300, "max_tokens": 2, "temperature": 0, "logprobs": 1}


def _address_space(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/PID/status")


def _warm(url: str) -> None:
    """Threads and small scratch made before the cap. Concurrent requests start several of the
    server's worker threads: a thread is started only when none is idle, so with two or more made
    the capped request's work finds one idle, and its allocation that fails is the step's (a
    thread's 8 MiB stack would not fit in the headroom either: that case is a 503 as well, tested
    in packages/strata-server/tests/test_app.py)."""
    bodies = [{"prompt": f"hi {i}", "max_tokens": 1} for i in range(8)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = list(
            pool.map(lambda body: httpx.post(f"{url}/v1/completions", json=body, timeout=60), bodies)
        )
    assert all(reply.status_code == 200 for reply in replies), [reply.text for reply in replies]
    assert httpx.get(f"{url}/health", timeout=10).status_code == 200


@pytest.mark.skipif(sys.platform != "linux", reason="prlimit and /proc are Linux's")
def test_out_of_memory_in_a_step_is_a_503_and_the_server_goes_on(server_url: str) -> None:
    args = ("--model", "default", "--parallel", "2", "--log-level", "warning")
    with server_process(*args, env={"MALLOC_ARENA_MAX": "1"}) as server:
        url, pid = server.url, server.process.pid
        _warm(url)
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


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def test_a_model_that_does_not_fit_in_memory_is_refused_with_the_numbers(engine_model_path: Path) -> None:
    """The weights and one full context of KV (the default model's 8,192 tokens) against
    STRATA_MEMORY_LIMIT: one line, exit 1, before the kernels are built or a weight is read."""
    import gguf

    reader = gguf.GGUFReader(engine_model_path)  # an independent reader's sizes
    weights = sum(int(t.n_bytes) for t in reader.tensors)
    field = {name: int(f.parts[-1][0]) for name, f in reader.fields.items() if name.startswith("llama.")}
    ctx, head_dim = (
        field["llama.context_length"],
        field["llama.embedding_length"] // field["llama.attention.head_count"],
    )
    kv = (
        (ctx // 16 + 1)
        * 16
        * 2
        * field["llama.block_count"]
        * field["llama.attention.head_count_kv"]
        * head_dim
        * 4
    )
    done = subprocess.run(
        [sys.executable, "-m", "strata_server", "--model", str(engine_model_path), "--port", "0"],
        env={**os.environ, "STRATA_MEMORY_LIMIT": "200M"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not fit in memory" in lines[0], done.stderr[-2000:]
    for number in (_mib(weights), _mib(kv), "200.0 MiB", "8,192-token", "STRATA_MEMORY_LIMIT"):
        assert number in lines[0], (number, lines[0])


def test_kv_blocks_exhausted_under_load_preempt_and_every_answer_keeps_its_bits() -> None:
    """A KV budget of one 128-token context (9 blocks) and 8 concurrent requests of 37 tokens
    (3 blocks each): the engine preempts and recomputes, each answer is a 200 with the bits the
    same request gets alone, or a 429; never a 5xx, a crash or a hang."""
    args = ("--model", "default", "--ctx-size", "128", "--kv-cache-mb", "1", "--parallel", "8")
    bodies = [
        {"prompt": f"Story {i}: the cat sat on the mat and the dog", "max_tokens": 24, "temperature": 0}
        | {"logprobs": 1, "ignore_eos": True}
        for i in range(8)
    ]
    with server_process(*args, "--log-level", "warning") as server, httpx.Client(base_url=server.url) as http:
        with ThreadPoolExecutor(len(bodies)) as pool:
            burst = list(pool.map(lambda b: http.post("/v1/completions", json=b, timeout=120), bodies))
        metrics = text_string_to_metric_families(http.get("/metrics").text)
        preempted = next(s.value for f in metrics for s in f.samples if s.name == "strata_engine_preemptions")
        alone = [http.post("/v1/completions", json=b, timeout=120) for b in bodies]
        assert server.process.poll() is None, server.log()[-3000:]
    assert preempted > 0, "the budget was never exhausted: the test proves nothing"
    for under_load, single in zip(burst, alone, strict=True):
        assert under_load.status_code in (200, 429), under_load.text
        assert single.status_code == 200, single.text
        if under_load.status_code == 200:
            assert under_load.json()["choices"] == single.json()["choices"]
