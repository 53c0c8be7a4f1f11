"""The prefix cache checked as a model checker would (issue 39).

A wrong cache hit is silent: the request still gets rows, just not its own. So a seeded random
workload built from a small pool of KV blocks (shared prefixes, the same middle or tail after
different prefixes, partial last blocks, duplicates, n > 1 copies, prompt scoring from a block
boundary) arrives in overlapping waves at an engine whose KV memory is too small to keep it all:
blocks are evicted, sequences preempted and recomputed, and many prompts start from cached
blocks. Every request's events (each prompt row and each generated token's row, over the whole
vocabulary, and the tokens) must be bit for bit those of the same request on an engine with no
prefix cache. The mutation tests plant realistic cache bugs and prove the check catches each.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from strata_engine import block_manager, scheduler
from strata_engine.api import (
    EngineEvent,
    LogprobParams,
    LogprobRow,
    PromptScores,
    Request,
    SamplingParams,
    Step,
)
from strata_engine.block_manager import BlockManager
from strata_engine.engine import BLOCK_SIZE, LLMEngine
from strata_engine.sequence import Sequence
from strata_engine.testing.tiny_models import BOS_ID, TINY_SPECS, VOCAB_SIZE, write_tiny_model

BS = BLOCK_SIZE
ALL_IDS = tuple(range(VOCAB_SIZE))  # every row is reported over the whole vocabulary
ORDINARY = BOS_ID  # ids below it are ordinary tokens (the specials come last)
CTX = 112  # the tiny model's context here: the smallest cache holds CTX / BS + 1 = 8 blocks
MAX_STEPS = 5_000  # a planted bug may stall the scheduler: fail instead of hanging


@dataclass(frozen=True)
class Workload:
    """Requests arriving in waves: after wave i arrives the engine runs `pauses[i]` steps."""

    waves: tuple[tuple[Request, ...], ...]
    pauses: tuple[int, ...]

    @property
    def requests(self) -> list[Request]:
        return [r for wave in self.waves for r in wave]


def make_workload(seed: int, n_requests: int, pool_size: int = 4) -> Workload:
    """Prompts composed from `pool_size` token blocks, so that the same block recurs at many
    places and after many different prefixes, with each prompt's options drawn at random."""
    rng = random.Random(seed)
    pool = [tuple(rng.randrange(ORDINARY) for _ in range(BS)) for _ in range(pool_size)]
    prompts: list[tuple[int, ...]] = []

    def fresh() -> tuple[int, ...]:
        ids = [t for _ in range(rng.randint(1, 4)) for t in rng.choice(pool)]
        if rng.random() < 0.5:  # a partial last block: the head of a pool block
            ids += rng.choice(pool)[: rng.randint(1, BS - 1)]
        return tuple(ids)

    def prompt() -> tuple[int, ...]:
        if not prompts or rng.random() < 0.35:
            return fresh()
        old = rng.choice(prompts)
        form = rng.randrange(3)
        if form == 0:  # an earlier prompt extended: its blocks are a shared prefix
            extra = [t for _ in range(rng.randint(1, 2)) for t in rng.choice(pool)]
            return old + tuple(extra[: rng.randint(1, 2 * BS)])
        if form == 1 and len(old) > BS:  # the same middle and tail after a different first block
            return rng.choice(pool) + old[BS:]
        return old  # a duplicate

    def request(ids: tuple[int, ...], seed: int | None) -> Request:
        room = CTX - len(ids)
        if rng.random() < 0.4:  # prompt scoring, its rows from a block boundary or anywhere
            starts = [s for k in range(1, len(ids) // BS + 1) for s in (k * BS, k * BS + 1) if s < len(ids)]
            starts.append(rng.randrange(len(ids)))
            logprobs = LogprobParams(
                prompt_logprobs=True, prompt_rows_from=rng.choice(starts), named_ids=ALL_IDS
            )
            max_tokens = rng.randint(0, min(2, room))
        else:
            logprobs = LogprobParams(named_ids=ALL_IDS)
            max_tokens = rng.randint(1, min(6, room))
        temperature = 0.0 if seed is None else 0.9
        return Request(ids, SamplingParams(max_tokens, temperature, seed=seed, ignore_eos=True), logprobs)

    waves: list[tuple[Request, ...]] = []
    pauses: list[int] = []
    total = 0
    while total < n_requests:
        wave: list[Request] = []
        for _ in range(rng.randint(2, 6)):
            ids = prompt()[: CTX - 1]
            prompts.append(ids)
            n = rng.choice([1, 1, 1, 2, 3])  # n > 1: copies of one request with their own seeds
            base = None if n == 1 and rng.random() < 0.5 else rng.randrange(1 << 30)
            wave += [request(ids, None if base is None else base + i) for i in range(n)]
        waves.append(tuple(wave))
        pauses.append(rng.randint(1, 6))
        total += len(wave)
    return Workload(tuple(waves), tuple(pauses))


def _row(row: LogprobRow | None) -> bytes | None:
    """A row's token and every value in it, as bytes (so -0.0, NaN and infinities compare exactly)."""
    if row is None:
        return None
    values = [row.logprob, *(row.named[i] for i in ALL_IDS)]
    return struct.pack(f"<i{len(values)}d", row.token_id, *values)


def signature(events: list[EngineEvent]) -> list[tuple]:
    """Everything a request got back except how many of its tokens came from the cache."""
    out: list[tuple] = []
    for ev in events:
        if isinstance(ev, PromptScores):
            out.append(("prompt", ev.num_prompt_tokens, tuple(_row(r) for r in ev.rows)))
        elif isinstance(ev, Step):
            out.append(("step", ev.token_id, ev.text, ev.finish_reason, _row(ev.logprobs)))
    return out


@dataclass
class Served:
    """One run of a workload: each request's signature and what the cache did meanwhile."""

    signatures: list[list[tuple]]
    cached_tokens: int  # prompt tokens read from the prefix cache, over all requests
    requests_hit: int  # requests that read at least one block from the cache
    scoring_hits: int  # of those, requests that score their prompt (from `prompt_rows_from` on)
    evictions: int  # cached blocks whose content was dropped to make room
    preemptions: int  # running sequences sent back to wait (recomputed later)

    def __repr__(self) -> str:  # what a failed assertion shows (not every row's bytes)
        return (
            f"Served({len(self.signatures)} requests, {self.cached_tokens} cached tokens in "
            f"{self.requests_hit} requests ({self.scoring_hits} scoring), {self.evictions} evictions, "
            f"{self.preemptions} preemptions)"
        )


def serve(engine: LLMEngine, workload: Workload) -> Served:
    """Submit each wave, run its pause's steps, then step until every request has finished."""
    streams = []
    steps = 0
    for wave, pause in zip(workload.waves, workload.pauses, strict=True):
        streams += [engine.add(request) for request in wave]
        for _ in range(pause):
            engine.step()
    events: list[list[EngineEvent]] = [[] for _ in streams]
    while engine.has_work():
        engine.step()
        steps += 1
        assert steps < MAX_STEPS, "the engine stopped making progress"
    for sink, stream in zip(events, streams, strict=True):
        sink.extend(stream.take())
    cached = [next((e.num_cached_tokens for e in own), 0) for own in events]
    scoring = [r.logprobs.prompt_logprobs for r in workload.requests]
    return Served(
        [signature(own) for own in events],
        sum(cached),
        sum(c > 0 for c in cached),
        sum(c > 0 and s for c, s in zip(cached, scoring, strict=True)),
        engine.blocks.evictions,
        engine.scheduler.preemptions,
    )


def differing(got: Served, want: Served) -> list[int]:
    """Indices of the requests whose events differ in any bit."""
    return [i for i, (g, w) in enumerate(zip(got.signatures, want.signatures, strict=True)) if g != w]


def report(got: Served, want: Served, workload: Workload) -> str:
    """Where the first differing request first differs (for a failure message)."""
    bad = differing(got, want)
    if not bad:
        return "no request differs"
    i = bad[0]
    g, w = got.signatures[i], want.signatures[i]
    at = next((k for k, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), min(len(g), len(w)))
    r = workload.requests[i]
    rows = (
        f"prompt rows from {r.logprobs.prompt_rows_from}" if r.logprobs.prompt_logprobs else "no prompt rows"
    )
    return (
        f"{len(bad)} of {len(got.signatures)} requests differ; the first, request {i} "
        f"({len(r.prompt_ids)} prompt tokens, {rows}, {r.sampling.max_tokens} new tokens), "
        f"first differs at event {at} of {len(w)}"
    )


# -- planted bugs ------------------------------------------------------------------------------
# Each is a small, plausible edit of block_manager.py or scheduler.py that keeps every request
# running to the end with rows of the right shape: only the bits say that something is wrong.


def forgetful_hash(prev: int | None, tokens: tuple[int, ...]) -> int:
    """A block's hash that forgets the blocks before it: Z after X and Z after Y look the same."""
    return hash((None, tokens))


def take_keeping_published(self: BlockManager) -> int | None:
    """Eviction that reuses a cached block but leaves it published under its old content."""
    if self.free:
        block = self.free.pop()
    elif self.evictable:
        block, _ = self.evictable.popitem(last=False)  # bug: self.content and self.by_hash keep it
        self.evictions += 1
    else:
        return None
    self.ref[block] = 1
    return block


def admit_leaving_evictable(
    self: BlockManager, seq: Sequence, use_cache: bool, limit: int | None = None
) -> None:
    """A cache hit that takes a reference but leaves the block on the LRU list: it can be
    evicted (and overwritten by another sequence) while this one still reads it."""
    if not use_cache:
        return
    bs = self.block_size
    cacheable = len(seq) - 1 if limit is None else min(limit, len(seq) - 1)
    hashes = self._extend_hashes(seq, [], max(cacheable, 0) // bs)
    for i, h in enumerate(hashes):
        block = self.by_hash.get(h)
        if block is None or self.content[block][1] != self._tokens(seq, i):
            break
        self.ref[block] += 1  # bug: not taken off self.evictable
        seq.block_table.append(block)
    seq.block_hashes = hashes[: len(seq.block_table)]
    seq.num_computed = seq.num_cached = len(seq.block_table) * bs


def cache_limit_one_too_many(seq: Sequence) -> int | None:
    """Off by one in how many tokens a prompt-scoring request may skip: the row of the last
    skipped position (which scores the first wanted token) is never computed."""
    if not seq.wants_prompt_rows:
        return None
    return seq.request.logprobs.prompt_rows_from  # bug: prompt_rows_from - 1


def register_unfinished(self: BlockManager, seq: Sequence) -> None:
    """Publishes every full block of the sequence's tokens that has memory, computed or not:
    a block still being written by a chunked prefill can be hit."""
    done = len(seq.block_hashes)
    full = min(len(seq) // self.block_size, len(seq.block_table))  # bug: seq.num_computed // bs
    self._extend_hashes(seq, seq.block_hashes, full)
    for i in range(done, full):
        block, h = seq.block_table[i], seq.block_hashes[i]
        if block not in self.content and h not in self.by_hash:
            self.content[block] = (h, self._tokens(seq, i))
            self.by_hash[h] = block


MUTANTS: dict[str, tuple[object, str, Callable[..., object]]] = {  # (where, what, the bug)
    "forgetful_block_hash": (block_manager, "block_hash", forgetful_hash),
    "eviction_keeps_it_published": (BlockManager, "_take", take_keeping_published),
    "hit_leaves_it_evictable": (BlockManager, "admit", admit_leaving_evictable),
    "cache_limit_off_by_one": (scheduler, "cache_limit", cache_limit_one_too_many),
    "register_unfinished_blocks": (BlockManager, "register", register_unfinished),
}


@contextmanager
def planted(name: str) -> Iterator[None]:
    """The engine code with MUTANTS[name] in place of the real function, for the block's length."""
    with pytest.MonkeyPatch.context() as mp:
        owner, attr, bug = MUTANTS[name]
        mp.setattr(owner, attr, bug)
        yield


# -- the tests ---------------------------------------------------------------------------------
SEEDS = (14, 18, 22)  # workloads the real engine must serve exactly; each plant is caught on SEEDS[0]
N_REQUESTS = 28


def features(workload: Workload) -> set[str]:
    """Which of the situations the checker needs a workload holds (so a change to the generator
    cannot quietly drop one)."""
    found: set[str] = set()
    seen: dict[tuple[int, ...], int] = {}  # prompt -> the wave it first arrived in
    after: dict[tuple[int, ...], set[tuple[int, ...]]] = {}  # block -> the first blocks before it
    for w, wave in enumerate(workload.waves):
        for i, r in enumerate(wave):
            ids, lp = r.prompt_ids, r.logprobs
            if seen.get(ids, w) < w:
                found.add("duplicate in a later wave")
            seen.setdefault(ids, w)
            if i and wave[i - 1].prompt_ids == ids and wave[i - 1].sampling.seed != r.sampling.seed:
                found.add("n > 1")
            if len(ids) % BS:
                found.add("partial last block")
            if lp.prompt_logprobs and lp.prompt_rows_from and lp.prompt_rows_from % BS == 0:
                found.add("prompt rows from a block boundary")
            for k in range(1, len(ids) // BS):
                after.setdefault(ids[k * BS : (k + 1) * BS], set()).add(ids[:BS])
    if any(len(firsts) > 1 for firsts in after.values()):
        found.add("one block after different prefixes")
    return found


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The smallest tiny model (two layers, 64-wide heads, tied head)."""
    return write_tiny_model(tmp_path_factory.mktemp("prefix") / "llama.gguf", TINY_SPECS[0], seed=3)


def tight_engine(model: Path) -> LLMEngine:
    """The engine under test: prefix cache on, and the smallest KV cache the engine allows
    (`kv_cache_mb=0`: one CTX request plus a block, 8 blocks), so the workload's blocks are
    evicted and its sequences preempted; 32-token steps, so prefills arrive in chunks.
    One thread: on a loaded 2-core machine a second one spins more than it computes."""
    return LLMEngine(
        model, num_threads=1, kernels="native", parallel=6, step_tokens=32, kv_cache_mb=0, ctx_size=CTX
    )


@pytest.fixture(scope="module")
def reference(model: Path) -> dict[int, Served]:
    """Each workload on an engine with no prefix cache and room for every request at once."""
    out = {}
    for seed in SEEDS:
        engine = LLMEngine(
            model, num_threads=1, kernels="native", parallel=64, prefix_cache=False, kv_cache_mb=16
        )
        assert engine.invariant
        out[seed] = serve(engine, make_workload(seed, N_REQUESTS))
        assert out[seed].cached_tokens == 0 and out[seed].preemptions == 0
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_every_request_equals_the_run_without_a_prefix_cache(model, reference, seed: int) -> None:
    workload = make_workload(seed, N_REQUESTS)
    assert features(workload) == {
        "duplicate in a later wave",
        "n > 1",
        "partial last block",
        "prompt rows from a block boundary",
        "one block after different prefixes",
    }
    engine = tight_engine(model)
    assert engine.blocks.num_blocks == CTX // BS + 1
    got = serve(engine, workload)
    assert differing(got, reference[seed]) == [], report(got, reference[seed], workload)
    # the run met what it checks: cache hits (prompt scoring ones too), evictions, preemptions
    assert got.requests_hit >= 10 and got.scoring_hits >= 1, got
    assert got.evictions > 0 and got.preemptions > 0, got


@pytest.mark.parametrize("bug", list(MUTANTS))
def test_the_check_catches_a_planted_bug(model, reference, bug: str) -> None:
    seed = SEEDS[0]
    workload = make_workload(seed, N_REQUESTS)
    with planted(bug):
        got = serve(tight_engine(model), workload)
    assert differing(got, reference[seed]), f"{bug}: every request still matched the reference ({got})"
