"""The threaded engine: requests stream their own events, early exits free their slot, and a
failing step ends only the requests in flight, never the worker."""

from __future__ import annotations

import asyncio
import time

import pytest

from strata_engine import (
    AsyncEngine,
    EngineError,
    LLMEngine,
    LogprobParams,
    Request,
    RequestError,
    SamplingParams,
    Step,
)


@pytest.fixture
def async_engine(model_path):
    engine = AsyncEngine(LLMEngine(model_path, num_threads=2, parallel=2))
    yield engine
    engine.shutdown()


def _request(engine: AsyncEngine, text: str, max_tokens: int) -> Request:
    ids = tuple(engine.tokenizer.encode(text))
    return Request(
        ids, SamplingParams(max_tokens=max_tokens, temperature=0, ignore_eos=True), LogprobParams(top_n=2)
    )


async def _collect(engine: AsyncEngine, request: Request) -> list:
    return [ev async for ev in engine.generate(request)]


def test_concurrent_requests_get_their_own_rows(async_engine):
    a = _request(async_engine, "The sun rises in the", 6)
    b = _request(async_engine, "def add(x, y):", 3)

    async def both():
        return await asyncio.gather(_collect(async_engine, a), _collect(async_engine, b))

    got_a, got_b = asyncio.run(both())
    alone_a = asyncio.run(_collect(async_engine, a))
    assert [s.logprobs for s in got_a] == [s.logprobs for s in alone_a]
    assert len(got_a) == 6 and len(got_b) == 3
    assert got_a[-1].finish_reason == "length" and got_b[-1].finish_reason == "length"


def test_leaving_early_aborts_and_frees_the_slot(async_engine):
    async def first_token_only() -> dict:
        stream = async_engine.generate(_request(async_engine, "Count to one hundred:", 4000))
        async for ev in stream:
            assert isinstance(ev, Step)
            break
        await stream.aclose()  # what the server does when a client disconnects
        deadline = time.monotonic() + 3  # generating 4000 tokens would take far longer
        while async_engine.stats()["running"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return async_engine.stats()

    stats = asyncio.run(first_token_only())
    assert stats["running"] == 0 and stats["waiting"] == 0


def test_an_aborted_request_holds_no_blocks_once_it_is_not_running(async_engine, monkeypatch):
    """`stats` is read from other threads while the engine's thread ends a request: whenever it
    no longer counts the request as running, the request's KV blocks must already be free
    (a client that waits for idle, then reads the blocks, must find them free)."""
    blocks = async_engine.engine.scheduler.blocks
    release, running_then = blocks.release, []

    def watched(seq) -> None:
        running_then.append(async_engine.stats()["running"])
        release(seq)

    monkeypatch.setattr(blocks, "release", watched)

    async def abort_after_one_token() -> None:
        stream = async_engine.generate(_request(async_engine, "Count to one hundred:", 4000))
        async for _ev in stream:
            break
        await stream.aclose()
        deadline = time.monotonic() + 3
        while not running_then and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    asyncio.run(abort_after_one_token())
    assert running_then == [1]  # released while still counted; the count drops after


def test_refusals_raise_request_error(async_engine):
    bad = Request((1, 2, 10**9), SamplingParams(max_tokens=1))
    with pytest.raises(RequestError, match="1000000000"):
        asyncio.run(_collect(async_engine, bad))


def test_a_failing_step_fails_the_request_but_not_the_engine(async_engine, monkeypatch):
    runner = async_engine.engine.runner
    real_run = runner.run
    calls = {"n": 0}

    def broken_once(work):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated kernel failure")
        return real_run(work)

    monkeypatch.setattr(runner, "run", broken_once)
    with pytest.raises(EngineError, match="simulated kernel failure"):
        asyncio.run(_collect(async_engine, _request(async_engine, "Hello", 2)))
    after = asyncio.run(_collect(async_engine, _request(async_engine, "Hello", 2)))
    assert len(after) == 2 and after[-1].finish_reason == "length"
    stats = async_engine.stats()
    assert stats["kv_blocks_free"] == stats["kv_blocks_total"]  # the failed request released its blocks


def test_one_submit_reads_every_choice_in_one_loop(async_engine):
    """n > 1: one `submit`, one reader; each choice gets exactly its own events, in order."""
    a = _request(async_engine, "The sun rises in the", 3)
    b = _request(async_engine, "def add(x, y):", 2)

    async def together() -> list[list]:
        got: list[list] = [[], []]
        async for index, event in async_engine.submit([a, b]):
            got[index].append(event)
        return got

    got_a, got_b = asyncio.run(together())
    assert [s.logprobs for s in got_a] == [s.logprobs for s in asyncio.run(_collect(async_engine, a))]
    assert len(got_b) == 2 and got_b[-1].finish_reason == "length"


def test_a_refused_choice_queues_none_of_them(async_engine):
    good = _request(async_engine, "Hello", 2)
    bad = Request((1, 10**9), SamplingParams(max_tokens=1))

    async def submit_both() -> None:
        async_engine.submit([good, bad])

    with pytest.raises(RequestError) as info:
        asyncio.run(submit_both())
    assert info.value.code == "token_id_out_of_vocab" and info.value.param == "prompt_ids"
    assert async_engine.stats()["waiting"] == 0 and async_engine.stats()["running"] == 0
