"""One contract, two engines: the fake the HTTP tests use (conftest.py) and the real
`AsyncEngine` on a tiny random GGUF (strata-engine's tiny_models), so the fake cannot drift
from what the server really gets.

Each check runs on both: the order of events, refusals raised by `submit` before anything
runs, an abort mid-stream that frees the engine, the keys `stats()` reports, and chat
rendering through the model's template.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from strata_engine import AsyncEngine, LLMEngine
from strata_engine.api import (
    ErrorCode,
    LogprobParams,
    PromptScores,
    Request,
    RequestError,
    SamplingParams,
    Step,
)
from strata_engine.protocol import EngineClient
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

TEMPLATE = (  # the same template on both engines
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CTX = 256  # the tiny model's context; the fake is given the same


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsyncEngine]:
    path = write_tiny_model(
        tmp_path_factory.mktemp("tiny") / "model.gguf", TINY_SPECS[0], seed=3, chat_template=TEMPLATE
    )
    engine = AsyncEngine(LLMEngine(path, num_threads=1, parallel=2))
    yield engine
    engine.shutdown()


@pytest.fixture(params=["fake", "tiny"])
def engine(request: pytest.FixtureRequest, make_engine: Callable[..., Any], tiny_engine: AsyncEngine) -> Any:
    if request.param == "fake":
        return make_engine(step_delay=0.001, chat_template=TEMPLATE, ctx_size=CTX)
    return tiny_engine


async def idle(engine: Any, within_s: float = 10.0) -> dict[str, int]:
    """The engine's stats once nothing runs or waits (polled on the running loop)."""
    deadline = asyncio.get_running_loop().time() + within_s
    while True:
        stats = dict(engine.stats())
        if stats["running"] == 0 and stats["waiting"] == 0:
            return stats
        assert asyncio.get_running_loop().time() < deadline, f"still busy after {within_s} s: {stats}"
        await asyncio.sleep(0.01)


def test_both_satisfy_the_protocol(engine: Any) -> None:
    assert isinstance(engine, EngineClient)
    assert engine.ctx_size == CTX and engine.failure is None


def test_stats_have_the_same_keys(make_engine: Callable[..., Any], tiny_engine: AsyncEngine) -> None:
    fake, real = make_engine().stats(), tiny_engine.stats()
    assert set(fake) == set(real)
    assert all(isinstance(value, int) for value in (*fake.values(), *real.values()))


def test_events_come_in_order(engine: Any) -> None:
    """Prompt scores first (when asked), then one step per token, `length` on the last only."""
    request = Request(
        prompt_ids=(72, 101, 108, 108),
        sampling=SamplingParams(max_tokens=5, temperature=0, ignore_eos=True),
        logprobs=LogprobParams(top_n=2, prompt_logprobs=True),
    )

    async def run() -> list[Any]:
        events = [event async for _, event in engine.submit([request])]
        await idle(engine)
        return events

    events = asyncio.run(run())
    assert isinstance(events[0], PromptScores) and events[0].num_prompt_tokens == 4
    assert len(events[0].rows) == 4 and events[0].rows[0] is None
    steps = events[1:]
    assert len(steps) == 5 and all(isinstance(step, Step) for step in steps)
    assert [step.finish_reason for step in steps] == [None] * 4 + ["length"]
    assert all(step.logprobs is not None and len(step.logprobs.top) == 2 for step in steps)


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (Request(prompt_ids=(1, 10**6)), ErrorCode.TOKEN_ID_OUT_OF_VOCAB),
        (
            Request(prompt_ids=(1, 2), sampling=SamplingParams(max_tokens=CTX)),
            ErrorCode.CONTEXT_LENGTH_EXCEEDED,
        ),
        (Request(prompt_ids=()), ErrorCode.EMPTY_PROMPT),
    ],
    ids=["out-of-vocab", "over-context", "empty"],
)
def test_refusals_are_raised_by_submit_before_anything_runs(
    engine: Any, request_: Request, code: str
) -> None:
    good = Request(prompt_ids=(1, 2), sampling=SamplingParams(max_tokens=2))

    async def run() -> dict[str, int]:
        before = dict(engine.stats())
        with pytest.raises(RequestError) as info:
            engine.submit([good, request_])  # all or none: the good one is not queued either
        assert info.value.code == code
        await asyncio.sleep(0.1)
        assert engine.stats()["steps"] == before["steps"]
        return await idle(engine)

    asyncio.run(run())


def test_an_abort_mid_stream_frees_the_engine(engine: Any) -> None:
    endless = Request(prompt_ids=(1, 2, 3), sampling=SamplingParams(max_tokens=CTX - 3, ignore_eos=True))

    async def run() -> None:
        events = aiter(engine.submit([endless, endless]))
        for _ in range(3):
            await anext(events)
        assert engine.stats()["running"] == 2
        at_close = engine.stats()["steps"]
        await events.aclose()  # type: ignore[attr-defined]
        stats = await idle(engine)  # polled while the loop runs: an abort that did nothing fails
        assert stats["kv_blocks_free"] == stats["kv_blocks_total"]
        assert stats["steps"] - at_close < 20  # stopped within a few steps, not run out (~250)

    asyncio.run(run())


def test_chat_renders_through_the_template(engine: Any) -> None:
    assert engine.chat_template is not None
    messages = [{"role": "user", "content": "Hi"}]
    ids = engine.render_chat(messages)
    assert engine.tokenizer.decode(ids) == "<|user|>Hi\n<|assistant|>"
    with pytest.raises(RequestError):
        engine.render_chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
