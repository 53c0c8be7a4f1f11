"""Soak: mixed traffic against one real strata-server for a bounded time (default 30 minutes).

    python bench/soak.py                     # 30 minutes, 6 clients, a server started here
    python bench/soak.py --minutes 5 --clients 4

Each client loops over a mix: completions, chat, streams, one-token reads, streams it leaves
after two events (disconnects), structured output (a JSON schema) and bad requests (each must
be a 4xx). All greedy over a few fixed prompts, so every answer is checked afterwards against
the same request run alone on the same server (bit for bit: the kernels are batch-invariant).

The KV pool is filled once before the clock starts (distinct prompts until the prefix cache has
touched every block): the pool's pages are mapped the first time a block is written, and the
prefix cache keeps finished prompts, so without this the bounded fill of the pool (1 GiB by
default) would read as growth for the first twenty minutes of a soak.

Printed: per minute the requests answered, p50/p99 latency, 5xx count and the server's peak
resident memory; then the targets: RSS growth under 5% after the first 5 minutes (the last
minute's peak against the peak of minute 5), no 5xx, no answer that differs from its request
alone. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import httpx
from load import PROMPTS, MemoryWatch, isolation, one, pct  # bench/load.py: the requests and their checks

from strata_engine.engine import BLOCK_SIZE
from strata_server.launch import server_process

SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "maxLength": 12}, "sure": {"type": "boolean"}},
    "required": ["answer", "sure"],
}
LOAD_KINDS = ("completion", "chat", "stream", "one_token", "disconnect")
KINDS = (*LOAD_KINDS, "structured", "bad")
BAD_BODIES: list[tuple[str, Any]] = [  # each must be refused with a 4xx, never a 5xx
    ("/v1/completions", {"prompt": "x", "max_tokens": -1}),
    ("/v1/completions", {"prompt": [], "max_tokens": 1}),
    ("/v1/chat/completions", {"messages": [{"role": "nobody", "content": 3}]}),
    ("/v1/completions", {"prompt": "x", "logprobs": 10**9}),
    ("/v1/completions", b'{"prompt": "unterminated'),
    ("/v1/chat/completions", {"messages": [], "response_format": {"type": "json_schema"}}),
]
REFERENCE_KINDS = ("completion", "chat", "stream", "one_token", "structured")  # checked alone


@dataclass
class Minute:
    """What happened in one minute of the soak."""

    latencies: list[float] = field(default_factory=list)
    server_errors: int = 0
    bad_not_4xx: int = 0
    transport_errors: int = 0


@dataclass
class Soak:
    started: float
    minutes: dict[int, Minute] = field(default_factory=lambda: defaultdict(Minute))
    seen: dict[str, list[str]] = field(default_factory=dict)  # request key -> answers under load

    def minute(self) -> Minute:
        return self.minutes[int((time.monotonic() - self.started) // 60)]


async def structured(http: httpx.AsyncClient, prompt: str) -> tuple[int, str | None]:
    body = {
        "messages": [{"role": "user", "content": f"{prompt} Answer in JSON."}],
        "max_tokens": 24,
        "temperature": 0,
        "logprobs": True,
        "top_logprobs": 2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}},
    }
    reply = await http.post("/v1/chat/completions", json=body)
    if reply.status_code != 200:
        return reply.status_code, None
    choice = reply.json()["choices"][0]
    return 200, json.dumps([choice["message"]["content"], choice["logprobs"]], sort_keys=True)


async def bad(http: httpx.AsyncClient, rng: random.Random) -> int:
    route, body = rng.choice(BAD_BODIES)
    if isinstance(body, bytes):
        reply = await http.post(route, content=body, headers={"Content-Type": "application/json"})
    else:
        reply = await http.post(route, json=body)
    return reply.status_code


async def request(
    http: httpx.AsyncClient, kind: str, prompt: str, rng: random.Random
) -> tuple[int, str | None]:
    if kind == "structured":
        return await structured(http, prompt)
    if kind == "bad":
        return await bad(http, rng), None
    return await one(http, kind, prompt, None)


async def client_loop(url: str, seed: int, until: float, soak: Soak) -> None:
    rng = random.Random(seed)
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        while time.monotonic() < until:
            kind, prompt = rng.choice(KINDS), rng.choice(PROMPTS)
            started = time.monotonic()
            try:
                status, answer = await request(http, kind, prompt, rng)
            except httpx.HTTPError:
                soak.minute().transport_errors += 1
                continue
            minute = soak.minute()
            if status >= 500:
                minute.server_errors += 1
            elif kind == "bad":
                minute.bad_not_4xx += not 400 <= status < 500
            elif status == 200:
                minute.latencies.append(time.monotonic() - started)
            if answer is not None and kind in REFERENCE_KINDS:
                soak.seen.setdefault(json.dumps([kind, prompt]), []).append(answer)


async def fill_kv_pool(url: str) -> int:
    """Send distinct prompts of about 1,000 tokens (one token each) until their prompt tokens
    exceed the KV pool's capacity 1.2 times over; returns the prompt tokens sent."""
    metrics = httpx.get(f"{url}/metrics", timeout=60).text
    blocks = float(re.search(r"^strata:kv_blocks_total\{[^}]*\} (\S+)$", metrics, re.M).group(1))  # type: ignore[union-attr]
    goal = int(blocks * BLOCK_SIZE * 1.2)
    sent = 0
    rng = random.Random(1)
    words = [
        "river",
        "stone",
        "cloud",
        "garden",
        "lamp",
        "orbit",
        "violet",
        "copper",
        "meadow",
        "harbor",
        "signal",
        "winter",
    ]

    async def one_prompt(http: httpx.AsyncClient) -> None:
        nonlocal sent
        while sent < goal:
            prompt = " ".join(rng.choice(words) + str(rng.randrange(1000)) for _ in range(300))
            reply = await http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 1})
            sent += reply.json()["usage"]["prompt_tokens"]

    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        await asyncio.gather(*(one_prompt(http) for _ in range(2)))
    return sent


def rss_by_minute(samples: list[tuple[float, float]], started: float) -> dict[int, float]:
    peaks: dict[int, float] = {}
    for at, mib in samples:
        minute = int((at - started) // 60)
        peaks[minute] = max(peaks.get(minute, 0.0), mib)
    return peaks


def report(soak: Soak, rss: dict[int, float], checked: int, differ: int, settle: int) -> bool:
    print("minute  answered  p50       p99       5xx  bad-not-4xx  transport  RSS peak")
    for index in sorted(soak.minutes):
        m = soak.minutes[index]
        print(
            f"{index + 1:>6}  {len(m.latencies):>8}  {pct(m.latencies, 0.5):>8}  {pct(m.latencies, 0.99):>8}"
            f"  {m.server_errors:>3}  {m.bad_not_4xx:>11}  {m.transport_errors:>9}  {f'{rss[index]:.0f} MiB' if index in rss else '-'}"
        )
    server_errors = sum(m.server_errors + m.bad_not_4xx + m.transport_errors for m in soak.minutes.values())
    last = max(rss)
    base = rss.get(settle - 1, rss[min(rss)])
    growth = (rss[last] - base) / base
    checks = [
        (
            f"RSS growth after minute {settle}: {growth:+.1%} ({base:.0f} -> {rss[last]:.0f} MiB)",
            growth < 0.05,
        ),
        (
            f"5xx, bad requests not refused with a 4xx, or dropped connections: {server_errors}",
            server_errors == 0,
        ),
        (f"answers that differ from their request alone: {differ} of {checked}", differ == 0),
    ]
    for line, ok in checks:
        print(f"{'ok  ' if ok else 'MISS'} {line}")
    return all(ok for _, ok in checks)


class TimedMemoryWatch(MemoryWatch):
    """The server's RSS every 0.25 s, each sample with its time."""

    def __init__(self, pid: int | None) -> None:
        super().__init__(pid)
        self.timed: list[tuple[float, float]] = []

    def _run(self) -> None:
        while self.process is not None and not self._stop.wait(0.25):
            try:
                self.timed.append((time.monotonic(), self.process.memory_info().rss / 2**20))
            except Exception:  # the process ended
                return


async def run(args: argparse.Namespace) -> bool:
    flags = ["--model", args.model, "--parallel", str(args.parallel), "--log-level", "warning"]
    with server_process(*flags) as server:
        filled = await fill_kv_pool(server.url)
        print(f"KV pool filled before the clock: {filled} prompt tokens", flush=True)
        soak = Soak(started=time.monotonic())
        memory = TimedMemoryWatch(server.process.pid)
        with memory:
            until = soak.started + args.minutes * 60
            await asyncio.gather(
                *(client_loop(server.url, seed, until, soak) for seed in range(args.clients))
            )
        rng = random.Random(0)
        checked, differ = await isolation(
            server.url, soak.seen, lambda http, kind, prompt: request(http, kind, prompt, rng)
        )
    print(
        f"soak: {args.minutes:g} minutes, {args.clients} clients, --parallel {args.parallel}, model {args.model}"
    )
    return report(
        soak, rss_by_minute(memory.timed, soak.started), checked, differ, min(args.settle, int(args.minutes))
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--model", default="default")
    parser.add_argument("--settle", type=int, default=5, help="minutes before RSS growth is counted")
    args = parser.parse_args()
    raise SystemExit(0 if asyncio.run(run(args)) else 1)


if __name__ == "__main__":
    main()
