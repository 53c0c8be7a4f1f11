"""A bug in one request's processing (here: its logprob listing) fails that request alone;
the requests batched with it finish normally and the engine keeps serving."""

from __future__ import annotations

import asyncio

import pytest

import strata_engine.engine as engine_module
from strata_engine import AsyncEngine, EngineError, LLMEngine, LogprobParams, Request, SamplingParams

POISON_TOP_N = 3  # the poisoned request is the one asking for 3 alternatives


@pytest.fixture
def async_engine(model_path):
    engine = AsyncEngine(LLMEngine(model_path, num_threads=2, parallel=2))
    yield engine
    engine.shutdown()


def _request(engine: AsyncEngine, top_n: int) -> Request:
    ids = tuple(engine.tokenizer.encode("Hello there"))
    return Request(
        ids, SamplingParams(max_tokens=4, temperature=0, ignore_eos=True), LogprobParams(top_n=top_n)
    )


async def _outcome(engine: AsyncEngine, request: Request) -> int | str:
    try:
        return len([ev async for ev in engine.generate(request)])
    except EngineError as exc:
        return str(exc)


def test_a_bug_in_one_request_fails_it_alone(async_engine, monkeypatch):
    real_build_row = engine_module.build_row

    def buggy_build_row(lp, token, params, **kwargs):
        if params.top_n == POISON_TOP_N:
            raise ValueError("simulated listing bug")
        return real_build_row(lp, token, params, **kwargs)

    monkeypatch.setattr(engine_module, "build_row", buggy_build_row)

    async def both() -> list[int | str]:
        good, bad = _request(async_engine, 2), _request(async_engine, POISON_TOP_N)
        return list(await asyncio.gather(_outcome(async_engine, good), _outcome(async_engine, bad)))

    good, bad = asyncio.run(both())
    assert good == 4  # batched with the failing one, still all its tokens
    assert isinstance(bad, str) and "simulated listing bug" in bad
    again = asyncio.run(_outcome(async_engine, _request(async_engine, 2)))
    assert again == 4
    stats = async_engine.stats()
    assert stats["running"] == 0 and stats["kv_blocks_free"] == stats["kv_blocks_total"]
