"""Start-up to ready and peak memory of a real `strata-server`, against llama.cpp on the same GGUF.

Strata: each round launches `python -m strata_server` on the default model with warm caches
(the model file downloaded, the kernels compiled), polls `/health` every 10 ms and records the
seconds from the launch to the first 200. It then serves the work whose memory matters: a
512-token prompt scored at every position (echo), four concurrent 64-token decodes and a chat
decision read, and reads the process's peak RSS (VmHWM). The targets (docs/performance.md): start-up under
1 s, and peak RSS no more than the GGUF's size plus the KV budget plus 150 MB, with the KV budget
as configured (`--kv-cache-mb`, default here 64 MiB with `--ctx-size 1024`).

llama.cpp (llama-cpp-python), for reference: a process that imports llama_cpp and loads the
same GGUF (same context, 2 threads), timed from its launch to loaded, then evaluates the same
512 tokens with every position's logits; its peak RSS. With every position's logits
llama-cpp-python keeps an [n_ctx, vocab] fp32 array (1 GiB at Gemma 3's 262k ids), so each
round also runs a second process that asks for the last position's logits only: llama.cpp's
own peak holding the file, which issue 40's memory target is set against (plus 150 MB).
A build of llama.cpp other than the wheel's is used through LLAMA_CPP_LIB_PATH.

    python bench/bench_startup.py [--rounds 5] [--kernels native|native-q8] [--kv-cache-mb 64] [--model PATH]
        [--work-rounds 1]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import peak_rss_bytes

from strata_server.launch import free_port

CTX = 1024
PROMPT_TOKENS = 512
MB = 1e6
MIB = 2**20
LLAMA_CHILD = """
import sys, time
import llama_cpp
every = sys.argv[4] == "all"
llm = llama_cpp.Llama(sys.argv[1], n_ctx=int(sys.argv[2]), n_threads=2, logits_all=every, verbose=False)
print("loaded", flush=True)
llm.eval([100 + (i * 7919) % 49000 for i in range(int(sys.argv[3]))])
print([int(x.split()[1]) / 1024 for x in open('/proc/self/status') if x.startswith('VmHWM:')][0], flush=True)
"""


def request(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request(method, path, json.dumps(body) if body else None, {"Content-Type": "application/json"})
        reply = conn.getresponse()
        return reply.status, reply.read()
    finally:
        conn.close()


def wait_ready(port: int, process: subprocess.Popen, t0: float) -> float:
    """Seconds from `t0` (the launch) to the first 200 from /health."""
    while True:
        if process.poll() is not None:
            raise RuntimeError("strata-server exited during start-up")
        try:
            if request(port, "GET", "/health")[0] == 200:
                return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.01)


def serve_work(port: int, round_: int = 0) -> None:
    """The requests whose memory the figure includes (each must succeed; the chat read is a
    completion of the same text where the file has no chat template). Round r > 0 shifts the
    scored prompt and the seeds, so that it writes KV blocks of its own (--work-rounds)."""
    ids = [100 + (i * 7919 + 13 * round_) % 49000 for i in range(PROMPT_TOKENS)]
    scored = {"prompt": ids, "max_tokens": 1, "echo": True, "logprobs": 5}
    decode = {
        "prompt": "Once upon a time",
        "max_tokens": 64,
        "temperature": 0.8,
        "seed": 1 + round_,
        "ignore_eos": True,
    }
    chat = {
        "messages": [{"role": "user", "content": "Is the sky blue? Answer yes or no."}],
        "max_tokens": 1,
        "logprobs": True,
        "top_logprobs": 5,
    }
    jobs = [("/v1/completions", scored), *[("/v1/completions", decode)] * 4, ("/v1/chat/completions", chat)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        for status, body in pool.map(lambda job: request(port, "POST", *job), jobs):
            if status == 400 and b"chat_template_error" in body:
                status, body = request(
                    port, "POST", "/v1/completions", {"prompt": "Is the sky blue?", "max_tokens": 1}
                )
            if status != 200:
                raise RuntimeError(f"request failed: {status} {body[:200]!r}")


def kv_budget_bytes(port: int, model: Path) -> int:
    """The KV cache's configured size: its blocks (from /metrics) times a block's bytes."""
    from strata_engine.config import ModelConfig
    from strata_engine.engine import BLOCK_SIZE, KV_BYTES_PER_FLOAT
    from strata_engine.gguf_loader import GGUFFile

    cfg = ModelConfig.from_metadata(GGUFFile(model).metadata)
    per_block = 2 * cfg.n_layers * BLOCK_SIZE * cfg.n_kv_heads * cfg.head_dim * KV_BYTES_PER_FLOAT
    text = request(port, "GET", "/metrics")[1].decode()
    line = next(x for x in text.splitlines() if "kv_blocks_total" in x and not x.startswith("#"))
    return int(float(line.split()[-1])) * per_block


def strata_round(args: argparse.Namespace, model: Path) -> dict:
    port = free_port()
    command = [sys.executable, "-m", "strata_server", "--model", str(model), "--port", str(port)]
    command += ["--kernels", args.kernels, "--threads", "2", "--ctx-size", str(CTX)]
    command += ["--kv-cache-mb", str(args.kv_cache_mb), "--log-level", "warning"]
    t0 = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready = wait_ready(port, process, t0)
        rss_ready = peak_rss_bytes(process.pid) / MB
        for work_round in range(args.work_rounds):
            serve_work(port, work_round)
        return {
            "ready_s": ready,
            "rss_ready_mb": rss_ready,
            "rss_mb": peak_rss_bytes(process.pid) / MB,
            "kv_mb": kv_budget_bytes(port, model) / MB,
        }
    finally:
        process.terminate()
        process.wait()


def llama_round(model: Path, logits: str = "all") -> dict:
    """One llama.cpp process: launch to loaded, and its peak RSS after the eval (MB)."""
    t0 = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-c", LLAMA_CHILD, str(model), str(CTX), str(PROMPT_TOKENS), logits],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    if child.stdout.readline().strip() != "loaded":
        raise RuntimeError("llama.cpp did not load")
    ready = time.perf_counter() - t0
    rss = float(child.stdout.readline())
    child.wait()
    return {"ready_s": ready, "rss_mb": rss * MIB / MB}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kernels", default="native", choices=["native", "native-fp32", "native-q8"])
    parser.add_argument("--kv-cache-mb", type=int, default=64)
    parser.add_argument(
        "--work-rounds", type=int, default=1, help="rounds of the work (3 write the whole 64 MiB KV budget)"
    )
    parser.add_argument("--no-llama", action="store_true", help="skip the llama.cpp reference")
    parser.add_argument("--model", default="default", help="a GGUF path or reference (default: SmolLM2)")
    args = parser.parse_args()
    from strata_engine.model_store import resolve_model

    model = Path(resolve_model(args.model))
    gguf_mb = os.path.getsize(model) / MB
    strata, llama, llama_last = [], [], []
    for r in range(args.rounds):
        strata.append(strata_round(args, model))
        if not args.no_llama:
            llama.append(llama_round(model))
            llama_last.append(llama_round(model, "last"))
        line = (
            f"round {r}: strata ready {strata[-1]['ready_s']:.3f} s, peak RSS {strata[-1]['rss_mb']:.0f} MB"
        )
        if llama:
            line += f"; llama.cpp loaded {llama[-1]['ready_s']:.3f} s, peak RSS {llama[-1]['rss_mb']:.0f} MB"
            line += f" ({llama_last[-1]['rss_mb']:.0f} MB with the last logits only)"
        print(line, flush=True)

    def spread(rows: list[dict], key: str) -> str:
        values = [row[key] for row in rows]
        return f"min {min(values):.3f}, median {statistics.median(values):.3f}, max {max(values):.3f}"

    kv = strata[0]["kv_mb"]
    budget = gguf_mb + kv + 150
    rss = min(row["rss_mb"] for row in strata)
    print(
        f"\nkernels {args.kernels}; GGUF {gguf_mb:.1f} MB; KV budget {kv:.1f} MB (--kv-cache-mb {args.kv_cache_mb})"
    )
    print(f"strata start-up to ready (s): {spread(strata, 'ready_s')}  (target < 1 s)")
    print(f"strata peak RSS at ready (MB): {spread(strata, 'rss_ready_mb')}")
    print(f"strata peak RSS after the work (MB): {spread(strata, 'rss_mb')}")
    print(
        f"  target: GGUF + KV budget + 150 MB = {budget:.0f} MB; best run {rss:.0f} MB ({rss - budget:+.0f} MB)"
    )
    if llama:
        print(f"llama.cpp launch to loaded (s): {spread(llama, 'ready_s')}")
        print(f"llama.cpp peak RSS after the 512-token all-logits eval (MB): {spread(llama, 'rss_mb')}")
        print(f"llama.cpp peak RSS after the 512-token last-logits eval (MB): {spread(llama_last, 'rss_mb')}")
        own = min(row["rss_mb"] for row in llama_last)
        print(
            f"  target: llama.cpp's own peak + 150 MB = {own + 150:.0f} MB; "
            f"strata best run {rss:.0f} MB ({rss - own - 150:+.0f} MB)"
        )


if __name__ == "__main__":
    main()
