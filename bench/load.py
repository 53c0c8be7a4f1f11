"""Load test: N concurrent clients against a real strata-server on 127.0.0.1 for a bounded time.

    python bench/load.py                       # 32 clients, 60 s, a server started here
    python bench/load.py --duration 20 --mode overload
    python bench/load.py --url http://127.0.0.1:8000   # an already running local server

Each client loops over a mix: completions, chat, streamed completions, one-token reads
(`max_tokens: 1`, `logprobs: 5`) and streams it leaves after two events (disconnects). All
greedy, over a few fixed prompts, so every response can be checked against the same request
run alone afterwards (the isolation check: bit for bit when the kernels are batch-invariant,
see /health's `invariant`). Prints requests/s, p50/p99 latency of answered requests, time to
first token of streams, statuses, 429s, isolation and the server's peak memory.

`--mode overload` starts the server with a small queue (`--max-queue 8 --parallel 2`) and
offers far more than it can serve (64 clients; a refused client retries after 0.5 s): the
429s show the bound holding, memory stays flat, and the p99 of admitted requests stays
bounded by the queue, not by the offered load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

import httpx
import psutil  # type: ignore[import-untyped]
from _common import percentile

from strata_server.launch import server_process

LOCAL_HOSTS = {"127.0.0.1", "localhost"}
PROMPTS = [
    "The capital of France is",
    "Write a haiku about rain:",
    "List three prime numbers:",
    "Q: Is the sky blue? A:",
    "def fibonacci(n):",
    "The quick brown fox",
]
KINDS = ("completion", "chat", "stream", "one_token", "disconnect")
RETRY_SLEEP_S = 0.5


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)  # answered (200) requests
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    ttft: list[float] = field(default_factory=list)  # streams: to the first token's event
    statuses: Counter = field(default_factory=Counter)
    kinds: Counter = field(default_factory=Counter)
    disconnects: int = 0
    seen: dict[str, list[str]] = field(default_factory=dict)  # request key -> contents under load


def body_for(kind: str, prompt: str) -> tuple[str, dict[str, Any]]:
    """(route, body) of one request of this kind (all greedy, so results are reproducible)."""
    if kind == "chat":
        return "/v1/chat/completions", {
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8,
            "temperature": 0,
            "logprobs": True,
            "top_logprobs": 2,
        }
    if kind == "one_token":
        return "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 5}
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 2}
    if kind in ("stream", "disconnect"):
        body["stream"] = True
    return "/v1/completions", body


def content(reply: dict[str, Any]) -> str:
    """What must be identical to the request run alone: text and logprobs, nothing else."""
    choice = reply["choices"][0]
    text = choice.get("text", (choice.get("message") or {}).get("content"))
    return json.dumps([text, choice.get("logprobs")], sort_keys=True)


def stream_content(events: list[dict[str, Any]]) -> str:
    text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
    logprobs = [e["choices"][0]["logprobs"] for e in events if e.get("choices")]
    return json.dumps([text, logprobs], sort_keys=True)


async def one(http: httpx.AsyncClient, kind: str, prompt: str, stats: Stats | None) -> tuple[int, str | None]:
    """Send one request; record it in `stats` (None: a quiet reference run); status and content."""
    route, body = body_for(kind, prompt)
    started = time.perf_counter()
    if not body.get("stream"):
        reply = await http.post(route, json=body)
        if stats is not None:
            stats.statuses[reply.status_code] += 1
            if reply.status_code == 200:
                stats.latencies.append(time.perf_counter() - started)
                stats.by_kind.setdefault(kind, []).append(stats.latencies[-1])
        return reply.status_code, content(reply.json()) if reply.status_code == 200 else None
    events: list[dict[str, Any]] = []
    async with http.stream("POST", route, json=body) as reply:
        if reply.status_code != 200:
            await reply.aread()
            if stats is not None:
                stats.statuses[reply.status_code] += 1
            return reply.status_code, None
        async for line in reply.aiter_lines():
            if not line.startswith("data: {"):
                continue
            if not events and stats is not None:
                stats.ttft.append(time.perf_counter() - started)
            events.append(json.loads(line[6:]))
            if kind == "disconnect" and len(events) == 2:
                break
    if stats is not None:
        stats.statuses[200] += 1
        if kind == "disconnect":
            stats.disconnects += 1
        else:
            stats.latencies.append(time.perf_counter() - started)
            stats.by_kind.setdefault(kind, []).append(stats.latencies[-1])
    if kind == "disconnect" or any("error" in e for e in events):
        return 200, None
    return 200, stream_content(events)


async def client_loop(url: str, seed: int, until: float, stats: Stats) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=120) as http:
        while time.monotonic() < until:
            kind, prompt = rng.choice(KINDS), rng.choice(PROMPTS)
            stats.kinds[kind] += 1
            try:
                status, result = await one(http, kind, prompt, stats)
            except httpx.HTTPError as exc:
                stats.statuses[type(exc).__name__] += 1
                continue
            if result is not None:
                stats.seen.setdefault(json.dumps([kind, prompt]), []).append(result)
            if status == 429:
                await asyncio.sleep(RETRY_SLEEP_S)  # shorter than Retry-After: keep offering too much


async def quiet(http: httpx.AsyncClient, kind: str, prompt: str) -> tuple[int, str | None]:
    return await one(http, kind, prompt, None)


async def isolation(
    url: str,
    seen: dict[str, list[str]],
    send: Callable[[httpx.AsyncClient, str, str], Awaitable[tuple[int, str | None]]] = quiet,
) -> tuple[int, int]:
    """Run each distinct request (`seen`'s keys: [kind, prompt]) alone by `send`; count the
    answers under load that differ from it. (answers checked, answers that differ)"""
    checked = differ = 0
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        for key, results in seen.items():
            kind, prompt = json.loads(key)
            _, alone = await send(http, kind, prompt)
            checked += len(results)
            differ += sum(result != alone for result in results)
    return checked, differ


class MemoryWatch:
    """Samples the server's resident memory every 0.25 s on a thread."""

    def __init__(self, pid: int | None) -> None:
        self.process = psutil.Process(pid) if pid else None
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while self.process is not None and not self._stop.wait(0.25):
            try:
                self.samples.append(self.process.memory_info().rss / 2**20)
            except psutil.Error:
                return

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def pct(values: list[float], q: float) -> str:
    if not values:
        return "-"
    return f"{percentile(values, q) * 1000:.0f} ms"


@contextmanager
def target(args: argparse.Namespace) -> Iterator[tuple[str, int | None]]:
    """(base URL, server pid): the given local URL, or a server started here."""
    if args.url:
        if urlparse(args.url).hostname not in LOCAL_HOSTS:
            sys.exit("load.py only targets 127.0.0.1")
        yield args.url.rstrip("/"), args.pid
        return
    flags = ["--model", args.model, "--parallel", str(args.parallel), "--log-level", "warning"]
    flags += ["--max-queue", str(args.max_queue)]
    with server_process(*flags) as server:
        yield server.url, server.process.pid


def report(
    args: argparse.Namespace, stats: Stats, wall: float, health: dict, iso: tuple[int, int], rss: list[float]
) -> None:
    answered = stats.statuses[200]
    print(
        f"mode {args.mode}: {args.clients} clients for {wall:.1f} s, --parallel {args.parallel} "
        f"--max-queue {args.max_queue}; kernels {health.get('kernels')} invariant {health.get('invariant')}"
    )
    print(f"requests sent {sum(stats.kinds.values())} ({dict(stats.kinds)})")
    print(f"answered 200: {answered} = {answered / wall:.2f} requests/s (disconnects {stats.disconnects})")
    print(f"latency of answered: p50 {pct(stats.latencies, 0.5)}, p99 {pct(stats.latencies, 0.99)}")
    per_kind = ", ".join(f"{k} {pct(v, 0.5)}/{pct(v, 0.99)}" for k, v in sorted(stats.by_kind.items()))
    print(f"  by kind (p50/p99): {per_kind}")
    print(f"time to first token (streams): p50 {pct(stats.ttft, 0.5)}, p99 {pct(stats.ttft, 0.99)}")
    errors = {k: v for k, v in stats.statuses.items() if k != 200}
    print(f"errors by status: {errors or 'none'}; 429s: {stats.statuses[429]}")
    checked, differ = iso
    print(
        f"isolation: {checked} responses vs the same request alone: {differ} differ"
        + ("" if health.get("invariant") else " (kernels not batch-invariant: differences possible)")
    )
    if rss:
        third = max(len(rss) // 3, 1)
        print(
            f"server memory (RSS): start {rss[0]:.0f} MiB, peak {max(rss):.0f} MiB, "
            f"first third max {max(rss[:third]):.0f} MiB, last third max {max(rss[-third:]):.0f} MiB"
        )


async def run(args: argparse.Namespace) -> None:
    with target(args) as (url, pid):
        health = httpx.get(f"{url}/health").json()
        stats = Stats()
        with MemoryWatch(pid) as memory:
            started = time.monotonic()
            until = started + args.duration
            await asyncio.gather(*(client_loop(url, seed, until, stats) for seed in range(args.clients)))
            wall = time.monotonic() - started
        iso = await isolation(url, stats.seen)
        report(args, stats, wall, health, iso, memory.samples)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=["normal", "overload"], default="normal")
    parser.add_argument("--clients", type=int, default=None, help="default 32 (overload: 64)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load")
    parser.add_argument("--model", default="default")
    parser.add_argument("--parallel", type=int, default=None, help="default 4 (overload: 2)")
    parser.add_argument("--max-queue", type=int, default=None, help="default 256 (overload: 8)")
    parser.add_argument("--url", default=None, help="a running server on 127.0.0.1 instead of starting one")
    parser.add_argument("--pid", type=int, default=None, help="its process id, for the memory figures")
    args = parser.parse_args()
    overload = args.mode == "overload"
    args.clients = args.clients or (64 if overload else 32)
    args.parallel = args.parallel or (2 if overload else 4)
    args.max_queue = args.max_queue if args.max_queue is not None else (8 if overload else 256)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
