"""The prefix cache on a hybrid model (qwen35; the first test also qwen35moe and qwen3next): the recurrent state cannot be rebuilt from KV
blocks, so the cache keeps state snapshots at block boundaries (recurrent_state.py). A request
whose prompt starts with a cached prefix starts from the snapshot and must get the bits of a cold
run (a fresh engine) whether the snapshot was taken in a whole prefill, inside a chunk, or beside
other sequences; snapshots are bounded and evicted least recently used first, and a reserved
slot is given back when its sequence ends before filling it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams, Step
from strata_engine.block_manager import SNAPSHOT_STRIDE
from strata_engine.testing.compare import run_batch, signature
from strata_engine.testing.tiny_hybrid_models import SPEC, SPEC_MOE, SPEC_NEXT, write_qwen35
from strata_engine.testing.tiny_models import VOCAB_SIZE

SHARED = 70  # tokens two prompts share: blocks of 16 end at 64, where a snapshot is taken


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_qwen35(tmp_path_factory.mktemp("qwen35") / "q35.gguf", seed=1)


def _ids(seed: int, n: int) -> list[int]:
    return np.random.default_rng(seed).integers(7, VOCAB_SIZE - 3, size=n).tolist()


def _request(ids: list[int], rows_from: int | None = None) -> Request:
    """Greedy decode with top-5 rows; with `rows_from`, also the prompt's rows from there on
    (a decision client's read: the prefix before it may come from the cache)."""
    return Request(
        tuple(ids),
        SamplingParams(max_tokens=3, temperature=0.0),
        LogprobParams(top_n=5, prompt_logprobs=rows_from is not None, prompt_rows_from=rows_from or 0),
    )


def _engine(path: Path, **kw: object) -> LLMEngine:
    return LLMEngine(path, num_threads=2, kv_cache_mb=16, **kw)  # type: ignore[arg-type]


def _cold(path: Path, request: Request) -> list:
    return run_batch(_engine(path, prefix_cache=False), [request])[0]


@pytest.mark.parametrize(
    ("spec", "step_tokens"),  # whole prefills, or snapshots inside chunks; each hybrid family
    [(SPEC, None), (SPEC, 7), (SPEC_MOE, 7), (SPEC_NEXT, 7)],
    ids=["qwen35", "qwen35-chunks", "qwen35moe-chunks", "qwen3next-chunks"],
)
def test_a_cache_hit_gives_the_cold_runs_bits(tmp_path: Path, spec, step_tokens: int | None) -> None:
    tiny = write_qwen35(tmp_path / "tiny.gguf", spec, seed=1)
    prefix = _ids(1, SHARED)
    first, second = prefix + _ids(2, 9), prefix + _ids(3, 12)
    kw = {} if step_tokens is None else {"step_tokens": step_tokens}
    engine = _engine(tiny, **kw)
    assert run_batch(engine, [_request(first)])[0] == _cold(tiny, _request(first))
    # the second prompt shares 70 tokens: it starts from the snapshot at 64
    for request in (_request(second), _request(second, rows_from=SHARED)):
        steps = [e for e in engine.generate(request) if isinstance(e, Step)]
        assert steps[0].num_cached_tokens == 64
        assert run_batch(engine, [request])[0] == _cold(tiny, request)
    states = engine.blocks.states
    assert states is not None and states.snapshot_hits >= 3 and states.live == 0


def test_snapshots_taken_beside_other_sequences_are_the_cold_bits(tiny: Path) -> None:
    prefix = _ids(4, SHARED)
    engine = _engine(tiny)
    others = [_request(_ids(5, 40)), _request(prefix + _ids(6, 5)), _request(_ids(7, 90))]
    run_batch(engine, others)
    request = _request(prefix + _ids(8, 7), rows_from=SHARED - 2)
    got = engine.generate(request)
    assert next(e for e in got if isinstance(e, Step)).num_cached_tokens == 64
    assert run_batch(engine, [request])[0] == _cold(tiny, request)


def test_a_prompt_keeps_snapshots_at_its_end_and_a_stride_apart(tiny: Path) -> None:
    """A prompt of 120 tokens leaves snapshots at 112 (its last boundary) and 64 (a multiple of
    the stride within reach); a prompt that leaves it at 100 starts from 64."""
    prefix = _ids(9, 120)
    engine = _engine(tiny)
    run_batch(engine, [_request(prefix)])
    states = engine.blocks.states
    assert states is not None and len(states.snapshots) == 2
    request = _request(prefix[:100] + _ids(10, 6))
    steps = [e for e in engine.generate(request) if isinstance(e, Step)]
    assert steps[0].num_cached_tokens == SNAPSHOT_STRIDE == 64
    assert run_batch(engine, [request])[0] == _cold(tiny, request)


def test_snapshots_are_bounded_and_the_least_recently_used_goes_first(tiny: Path) -> None:
    engine = _engine(tiny, parallel=2)  # two snapshot slots
    states = engine.blocks.states
    assert states is not None
    prompts = [_ids(20 + i, 40) for i in range(3)]  # each keeps one snapshot, at 32
    for ids in prompts:
        run_batch(engine, [_request(ids)])
    assert len(states.snapshots) == 2
    hits = [
        next(e for e in engine.generate(_request([*ids, 9])) if isinstance(e, Step)) for ids in prompts[::-1]
    ]
    assert [h.num_cached_tokens for h in hits] == [32, 32, 0]  # the first prompt's was dropped
    assert states.live == 0 and len(states.snapshot_free) + len(states.snapshots) == 2


def test_a_snapshot_outlives_its_aborted_prefill(tiny: Path) -> None:
    """A prefill aborted after its chunk passed 64 leaves that snapshot (the cold state there),
    its running slot and no reservation behind."""
    engine = _engine(tiny, step_tokens=8)
    states = engine.blocks.states
    assert states is not None
    prefix = _ids(30, 100)
    stream = engine.add(_request(prefix))
    for _ in range(9):  # 72 of 100 tokens
        engine.step()
    assert len(states.snapshots) == 1
    stream.abort()
    engine.step()
    assert not engine.has_work() and states.live == 0
    assert len(states.snapshot_free) + len(states.snapshots) == 4
    request = _request(prefix[:SHARED] + _ids(31, 4))
    steps = [e for e in engine.generate(request) if isinstance(e, Step)]
    assert steps[0].num_cached_tokens == 64
    assert run_batch(engine, [request])[0] == _cold(tiny, request)


def test_candidates_start_from_the_boundary_before_their_scored_rows(tiny: Path) -> None:
    """Candidates of one prompt score rows from 90 on: the first leaves a snapshot at 80 (the last
    boundary before them, not a stride's multiple), where the second starts."""
    prefix = _ids(40, 90)
    engine = _engine(tiny)
    run_batch(engine, [_request(prefix + _ids(41, 30), rows_from=90)])
    request = _request(prefix + _ids(42, 30), rows_from=90)
    steps = [e for e in engine.generate(request) if isinstance(e, Step)]
    assert steps[0].num_cached_tokens == 80
    assert run_batch(engine, [request])[0] == _cold(tiny, request)


def test_prompts_computed_side_by_side_keep_one_snapshot_and_leak_no_slot(tiny: Path) -> None:
    """Two prompts that share 70 tokens, sent together, both compute the boundary at 64 side by
    side and each fills its snapshot: one is kept, the other's slot goes back to the free ones."""
    engine = _engine(tiny)
    states = engine.blocks.states
    assert states is not None
    prefix = _ids(50, SHARED)
    requests = [_request(prefix + _ids(51, 9)), _request(prefix + _ids(52, 12))]
    got = run_batch(engine, requests)
    assert got == [_cold(tiny, r) for r in requests]
    assert len(states.snapshots) == 2  # at 64 (once) and at the second's last boundary, 80
    assert len(states.snapshot_free) + len(states.snapshots) == 4  # parallel = 4 snapshot slots
    assert states.live == 0


def test_the_n_choices_of_a_prompt_fork_the_first_ones_state(tiny: Path) -> None:
    """Three copies of one prompt sent together (what n = 3 sends): the first computes the prompt,
    the others wait for it and start from its snapshot at 32, the last boundary before the
    final token (a fork of its state): each gets the cold run's bits."""
    engine = _engine(tiny)
    states = engine.blocks.states
    assert states is not None
    request = _request(_ids(53, 40))
    streams = [engine.add(request) for _ in range(3)]
    while engine.has_work():
        engine.step()
    events = [stream.take() for stream in streams]
    cached = [next(e for e in own if isinstance(e, Step)).num_cached_tokens for own in events]
    assert cached == [0, 32, 32]
    assert [signature(own) for own in events] == [_cold(tiny, request)] * 3
    assert len(states.snapshots) == 1 and states.snapshot_hits == 2 and states.live == 0
