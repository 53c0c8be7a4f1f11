"""Replicas benchmark: the decision workload scaled to 20 states x 3 questions, through 2
engine replicas on Ray Serve with the prefix-affinity router and with Ray's default
power-of-two routing, and through one plain strata-server for reference.

    pip install './packages/strata-server[ray]' ./packages/strata-client './packages/strata-decide'
    python bench/bench_ray.py [--clients 4] [--json]

The workload is bench_decide.py's: the 5 sample states (copied to 20, each opening with its
own ticket line, so the 20 share only the preamble) and the 3 sample questions, rendered
exactly as the decision gateway renders them; each read is a one-token completion of the
prompt's token ids with the labels' logprobs. `--clients` decision clients run at once; a
client takes a state and asks its 3 questions one after the other, as a decision client
does. Reported per mode: requests/s, p50/p99 latency, and for each replica the prefix-cache
hit rate (cached / prompt tokens, from `usage.prompt_tokens_details.cached_tokens`) and how
many states it served; a state whose questions went to two replicas is counted as split.

Routing overhead per request: each replica reports the time its app took in a
`Server-Timing: replica;dur=<ms>` header; the client's latency minus that is the Ray path's
own cost (the proxy, the ingress, the handle's router and, with affinity, the prefix tree's
look-up and insert, and the way back), taken on the same requests, so background load on the
machine shifts both alike. Given as p50 over the workload's reads and over 40 sequential
one-token reads of a 4-token prompt (tiny engine work); the plain server's p50 for the same
tiny read is printed beside it.

Every engine runs with --parallel 4: each replica and the plain server `single` with
--threads 1, and `single_all` (one engine on all cores, what one CPU host would run) with
--threads <cores>. On a 2-core machine the replicas share the cores with Ray's own processes
and the client, so the absolute numbers are small and noisy; the hit rates and the overhead
are the figures to read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import httpx
from _common import percentile

from strata_client import AsyncStrataClient
from strata_decide.labels import LabelBook
from strata_decide.prompts import messages, render
from strata_decide.questions import from_wire
from strata_decide.samples import QUESTIONS, STATES
from strata_server.launch import free_port, running_server

STATE_COUNT = 20
ENGINE_FLAGS = ("--model", "default", "--threads", "1", "--parallel", "4", "--log-level", "warning")
ALL_CORES_FLAGS = (
    "--model",
    "default",
    "--threads",
    str(os.cpu_count() or 1),
    "--parallel",
    "4",
    "--log-level",
    "warning",
)
PROBE_PROMPT = [1, 2, 3, 4]
PROBE_COUNT = 40


@dataclass(frozen=True)
class Case:
    state: int
    prompt_ids: list[int]
    label_ids: list[int]


@dataclass(frozen=True)
class Read:
    state: int
    replica: str
    seconds: float
    prompt_tokens: int
    cached_tokens: int
    replica_s: float | None  # the replica's own time (Server-Timing), None from a plain server

    @property
    def path_s(self) -> float | None:
        """What the Ray path added: the client's latency minus the replica's own time."""
        return None if self.replica_s is None else self.seconds - self.replica_s


def scaled_states() -> list[str]:
    return [f"Ticket {i + 1} of {STATE_COUNT}.\n{STATES[i % len(STATES)]}" for i in range(STATE_COUNT)]


async def render_cases(url: str) -> list[list[Case]]:
    """Per state, its 3 questions' prompts as the gateway renders them, and their label ids."""
    async with AsyncStrataClient(base_url=url, timeout=300) as client:
        book, per_state = LabelBook(client), []
        for index, state in enumerate(scaled_states()):
            cases = []
            for wire in QUESTIONS.values():
                question = from_wire(wire)
                labels = await book.labels_for(question.kind, len(question.options))
                prompt = await render(client, messages(state, question, question.options, labels))
                cases.append(Case(index, prompt.token_ids, [label.token_id for label in labels]))
            per_state.append(cases)
        return per_state


def read_body(prompt_ids: list[int], label_ids: list[int]) -> dict[str, Any]:
    return {
        "prompt": prompt_ids,
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": len(label_ids),
        "allowed_token_ids": label_ids,
    }


async def ask(http: httpx.AsyncClient, case: Case) -> Read:
    sent = time.perf_counter()
    reply = await http.post("/v1/completions", json=read_body(case.prompt_ids, case.label_ids))
    seconds = time.perf_counter() - sent
    reply.raise_for_status()
    usage = reply.json()["usage"]
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    timing = reply.headers.get("server-timing", "")
    replica_s = float(timing.split("dur=")[1]) / 1000 if "dur=" in timing else None
    return Read(
        case.state,
        reply.headers.get("x-strata-replica", "single"),
        seconds,
        usage["prompt_tokens"],
        cached,
        replica_s,
    )


async def workload(url: str, per_state: list[list[Case]], clients: int) -> tuple[list[Read], float]:
    """`clients` decision clients; each takes the next state and asks its questions in turn."""
    pending: asyncio.Queue[list[Case]] = asyncio.Queue()
    for cases in per_state:
        pending.put_nowait(cases)
    reads: list[Read] = []

    async def client(http: httpx.AsyncClient) -> None:
        while not pending.empty():
            for case in pending.get_nowait():
                reads.append(await ask(http, case))

    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return reads, time.perf_counter() - started


async def probe(url: str) -> list[Read]:
    """Tiny sequential reads (the same work on every replica)."""
    case = Case(-1, PROBE_PROMPT, [5, 6])
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for _ in range(5):
            await ask(http, case)  # warm: connections, caches
        return [await ask(http, case) for _ in range(PROBE_COUNT)]


def path_ms(reads: list[Read]) -> float | None:
    paths = [r.path_s for r in reads if r.path_s is not None]
    return round(statistics.median(paths) * 1000, 2) if paths else None


def summary(reads: list[Read], wall: float, probes: list[Read]) -> dict[str, Any]:
    seconds = [r.seconds for r in reads]
    by_replica: dict[str, list[Read]] = defaultdict(list)
    replicas_of_state: dict[int, set[str]] = defaultdict(set)
    for read in reads:
        by_replica[read.replica].append(read)
        replicas_of_state[read.state].add(read.replica)
    prompt = sum(r.prompt_tokens for r in reads)
    return {
        "requests": len(reads),
        "wall_s": round(wall, 3),
        "requests_per_s": round(len(reads) / wall, 2),
        "p50_ms": round(percentile(seconds, 0.5) * 1000, 1),
        "p99_ms": round(percentile(seconds, 0.99) * 1000, 1),
        "hit_rate": round(sum(r.cached_tokens for r in reads) / prompt, 3),
        "split_states": sum(len(s) > 1 for s in replicas_of_state.values()),
        "replicas": {
            replica: {
                "requests": len(rs),
                "states": len({r.state for r in rs}),
                "hit_rate": round(sum(r.cached_tokens for r in rs) / sum(r.prompt_tokens for r in rs), 3),
            }
            for replica, rs in sorted(by_replica.items())
        },
        "probe_p50_ms": round(statistics.median(r.seconds for r in probes) * 1000, 2),
        "path_p50_ms": path_ms(reads),
        "probe_path_p50_ms": path_ms(probes),
    }


def run_mode(url: str, per_state: list[list[Case]], clients: int) -> dict[str, Any]:
    """The workload, then the tiny probe reads."""
    reads, wall = asyncio.run(workload(url, per_state, clients))
    return summary(reads, wall, asyncio.run(probe(url)))


def run_ray(router: str, per_state: list[list[Case]], clients: int) -> dict[str, Any]:
    from strata_server.ray.options import RayOptions
    from strata_server.ray.serve import start, stop
    from strata_server.settings import build_parser

    args = build_parser().parse_args([*ENGINE_FLAGS, "--ray", "--replicas", "2", "--router", router])
    port = free_port()
    start(RayOptions.from_args(args, ()), "127.0.0.1", port)
    try:
        return run_mode(f"http://127.0.0.1:{port}", per_state, clients)
    finally:
        stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4, help="decision clients at once")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    report: dict[str, Any] = {"states": STATE_COUNT, "questions": len(QUESTIONS), "clients": args.clients}
    with running_server(*ENGINE_FLAGS, startup_timeout_s=180) as url:
        per_state = asyncio.run(render_cases(url))
        report["prompt_tokens_mean"] = round(
            statistics.mean(len(c.prompt_ids) for cases in per_state for c in cases), 1
        )
        report["single"] = run_mode(url, per_state, args.clients)
    with running_server(*ALL_CORES_FLAGS, startup_timeout_s=180) as url:
        report["single_all"] = run_mode(url, per_state, args.clients)
    for router in ("affinity", "pow2"):
        report[f"ray_{router}"] = run_ray(router, per_state, args.clients)
    modes = ("single", "single_all", "ray_affinity", "ray_pow2")

    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(
        f"{STATE_COUNT} states x {len(QUESTIONS)} questions, {args.clients} clients, "
        f"prompts {report['prompt_tokens_mean']} tokens on average (noisy: 2 shared cores)"
    )
    print(
        f"{'mode':<14}{'req/s':>7}{'p50 ms':>9}{'p99 ms':>9}{'hits':>6}{'split':>6}{'path ms':>9}"
        f"{'tiny p50':>10}{'tiny path':>10}  per replica: requests, states, hits"
    )
    for mode in modes:
        row = report[mode]
        replicas = "; ".join(
            f"{r}: {v['requests']}, {v['states']}, {v['hit_rate']:.0%}" for r, v in row["replicas"].items()
        )
        print(
            f"{mode:<14}{row['requests_per_s']:>7}{row['p50_ms']:>9}{row['p99_ms']:>9}"
            f"{row['hit_rate']:>6.0%}{row['split_states']:>6}{row['path_p50_ms'] or '-':>9}"
            f"{row['probe_p50_ms']:>10}{row['probe_path_p50_ms'] or '-':>10}  {replicas}"
        )
    counts = Counter(report[m]["requests"] for m in modes)
    return 0 if len(counts) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
