"""Requests/s of one-token reads through the HTTP server, and its overhead over the engine.

A one-token read is what a decision client sends: `max_tokens: 1`, `logprobs: 20`, a
~200-token prompt. Each prompt starts with its own number so no two share a cached prefix.

    python bench/bench_server.py [--model default] [--requests 40] [--clients 4]

One engine serves both paths in this process: direct `engine.generate` calls, and the real
app on uvicorn in a background thread reached over loopback HTTP. Overhead per request =
sequential HTTP p50 - sequential direct p50 (it includes the client's own HTTP/JSON work,
which shares this process's GIL).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx
import uvicorn

from strata_engine import AsyncEngine, LogprobParams, Request, SamplingParams
from strata_engine.model_store import resolve_model
from strata_server import create_app

FILLER = (
    "The committee reviewed the quarterly report, noting that revenue grew in every region "
    "while costs stayed flat, and asked the finance team to prepare a forecast for next year. "
)


@dataclass
class Result:
    label: str
    latencies: list[float]
    wall: float

    def row(self) -> str:
        ms = sorted(x * 1000 for x in self.latencies)
        return (
            f"{self.label:<40} {len(ms):>5} {len(ms) / self.wall:>8.1f} "
            f"{statistics.fmean(ms):>9.1f} {ms[len(ms) // 2]:>8.1f} {ms[int(len(ms) * 0.9)]:>8.1f}"
        )


def prompts(engine_tokenizer, count: int, target_tokens: int) -> list[list[int]]:
    """`count` distinct prompts of about `target_tokens` ids each."""
    out = []
    for i in range(count):
        text = f"Report {i}: " + FILLER * 10
        ids = engine_tokenizer.encode(text)[:target_tokens]
        out.append(ids)
    return out


async def timed(jobs: list[Callable[[], Awaitable[None]]], clients: int, label: str) -> Result:
    """Run the jobs with `clients` workers pulling from one queue; time each job."""
    queue: asyncio.Queue = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    latencies: list[float] = []

    async def worker() -> None:
        while not queue.empty():
            job = queue.get_nowait()
            start = time.perf_counter()
            await job()
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return Result(label, latencies, time.perf_counter() - start)


def direct_job(engine: AsyncEngine) -> Callable[[list[int]], Callable[[], Awaitable[None]]]:
    """A one-token read straight on the engine, as the server would submit it."""

    def job(ids: list[int]) -> Callable[[], Awaitable[None]]:
        request = Request(
            prompt_ids=tuple(ids),
            sampling=SamplingParams(max_tokens=1, temperature=0.0),
            logprobs=LogprobParams(top_n=20),
        )

        async def run() -> None:
            async for _ in engine.generate(request):
                pass

        return run

    return job


def http_job(http: httpx.AsyncClient) -> Callable[[list[int]], Callable[[], Awaitable[None]]]:
    """The same read over HTTP (token-id prompt, so both see the same ids)."""

    def job(ids: list[int]) -> Callable[[], Awaitable[None]]:
        body = {"prompt": ids, "max_tokens": 1, "logprobs": 20, "temperature": 0}

        async def run() -> None:
            response = await http.post("/v1/completions", json=body)
            response.raise_for_status()

        return run

    return job


class InProcessServer:
    """The real app on uvicorn in a background thread, sharing this process's engine."""

    def __init__(self, engine: AsyncEngine) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(create_app(engine), port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> InProcessServer:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


async def paired(direct, over_http, a: list, b: list, label: str) -> tuple[Result, Result]:
    """Sequential reads alternating direct / HTTP, so background load hits both alike."""
    d_lat, h_lat = [], []
    d_wall = h_wall = 0.0
    for pa, pb in zip(a, b, strict=True):
        for job, lat in ((direct(pa), d_lat), (over_http(pb), h_lat)):
            start = time.perf_counter()
            await job()
            lat.append(time.perf_counter() - start)
        d_wall, h_wall = d_wall + d_lat[-1], h_wall + h_lat[-1]
    return (
        Result(f"direct engine.generate, {label}", d_lat, d_wall),
        Result(f"HTTP /v1/completions, {label}", h_lat, h_wall),
    )


async def run_all(engine: AsyncEngine, url: str, groups: list[list[list[int]]], clients: int):
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        direct, over_http = direct_job(engine), http_job(http)
        warm, seq_a, seq_b, conc_a, conc_b = groups
        await timed([direct(p) for p in warm[:2]] + [over_http(p) for p in warm[2:]], 1, "warm")
        rows = list(await paired(direct, over_http, seq_a, seq_b, "1 client"))
        same = [warm[0]] * len(seq_a)  # fully cached prompt: isolates the fixed per-request cost
        rows += await paired(direct, over_http, same, same, "1 client, cached")
        rows.append(
            await timed([direct(p) for p in conc_a], clients, f"direct engine.generate, {clients} clients")
        )
        rows.append(
            await timed([over_http(p) for p in conc_b], clients, f"HTTP /v1/completions, {clients} clients")
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="default")
    parser.add_argument("--requests", type=int, default=40, help="reads per measured row")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients")
    parser.add_argument("--parallel", type=int, default=4, help="engine --parallel")
    parser.add_argument("--prompt-tokens", type=int, default=200)
    args = parser.parse_args()

    path = resolve_model(args.model)
    engine = AsyncEngine.from_path(path, parallel=args.parallel)
    n = args.requests
    ps = prompts(engine.tokenizer, 4 + 4 * n, args.prompt_tokens)
    groups = [ps[:4]] + [ps[4 + k * n : 4 + (k + 1) * n] for k in range(4)]
    try:
        with InProcessServer(engine) as server:
            rows = asyncio.run(run_all(engine, server.url, groups, args.clients))
    finally:
        engine.shutdown()

    print(
        f"\none-token reads: max_tokens 1, logprobs 20, {args.prompt_tokens}-token prompts, "
        f"--parallel {args.parallel}, model {path.name}"
    )
    print(f"{'mode':<40} {'reqs':>5} {'req/s':>8} {'mean ms':>9} {'p50 ms':>8} {'p90 ms':>8}")
    for result in rows:
        print(result.row())
    for label, (d, h) in (("uncached", rows[0:2]), ("cached", rows[2:4])):
        diffs = [b - a for a, b in zip(d.latencies, h.latencies, strict=True)]
        print(
            f"server overhead per request, {label} prompt (median of paired HTTP - direct): "
            f"{statistics.median(diffs) * 1000:.1f} ms"
        )


if __name__ == "__main__":
    main()
