"""Hand-made stand-ins for unit tests of the HTTP layer (framing, envelopes, cancellation).

Offered as fixtures (`tokenizer`, `make_engine`) because tests import nothing by path.

`FakeEngine` satisfies `strata_engine.protocol.EngineClient` with the engine's own checks,
listing rules and streams, over made-up values: model values are tested only against the
real engine in tests/test_server_*.py. test_engine_contract.py runs the same behavioural
checks against it and against the real `AsyncEngine` on a tiny model, so it cannot drift.
"""

from __future__ import annotations

import asyncio
import codecs
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from strata_engine.api import (
    DEFAULT_CHAT,
    ChatOptions,
    EngineUnavailable,
    LogprobRow,
    PromptScores,
    Request,
    Step,
)
from strata_engine.async_engine import Choices, Wakeup
from strata_engine.checks import check_request
from strata_engine.logprobs import build_row
from strata_engine.output import RequestStream
from strata_engine.text.chat_template import ChatTemplate, render_ids
from strata_engine.text.stream import decode_spans

EOS = 256
# A ChatML-like template, so chat bodies reach the server's checks past "no chat template".
FAKE_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


class ByteDecoder:
    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._decoder.decode(bytes([token_id]) if token_id < 256 else b"")

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class ByteTokenizer:
    """Ids 0..255 are bytes, 256 is `<eos>`; no BOS."""

    vocab_size = 257
    bos_id = None
    eos_id = EOS
    pad_id = None
    eog_ids = frozenset({EOS})
    add_bos = False

    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        parts = text.split("<eos>") if parse_special else [text]
        ids: list[int] = []
        for i, part in enumerate(parts):
            if i:
                ids.append(EOS)
            ids.extend(part.encode())
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return b"".join(self.token_bytes(i) for i in ids).decode(errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        return b"<eos>" if token_id == EOS else bytes([token_id])

    def token_text(self, token_id: int) -> str:
        raw = self.token_bytes(token_id)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)

    def new_decoder(self) -> ByteDecoder:
        return ByteDecoder()


def fake_value(position: int, token_id: int) -> float:
    """A made-up but position- and id-dependent logprob (id 0 is impossible: -inf)."""
    return -math.inf if token_id == 0 else -0.5 - ((token_id * 7 + position) % 50) / 10


class FakeEngine:
    """Generates `max_tokens` copies of the first allowed id (or "a").

    `aborted` counts runs that stopped because their stream was aborted, seen at a step, as
    the real engine drops an aborted request; a run cancelled when its event loop closes is
    counted in `cancelled` instead, so a test cannot mistake loop shutdown for an abort.
    """

    model_name = "fake-model"
    kernels = "fake"
    invariant = True
    load_seconds = 0.0
    ctx_size = 64
    vocab_size = ByteTokenizer.vocab_size
    failure = None
    kv_blocks_total = 16

    def __init__(
        self, step_delay: float = 0.0, chat_template: str | None = FAKE_CHAT_TEMPLATE, ctx_size: int = 64
    ) -> None:
        self.ctx_size = ctx_size
        self.tokenizer = ByteTokenizer()
        self.chat_template = None if chat_template is None else ChatTemplate(chat_template)
        self.step_delay = step_delay
        self.active = 0
        self.aborted = 0
        self.cancelled = 0
        self.steps = 0
        self._tasks: set[asyncio.Future[None]] = set()

    def stats(self) -> dict[str, int]:
        """The real engine's keys (test_engine_contract.py holds them equal)."""
        used = min(self.active, self.kv_blocks_total)
        return {
            "waiting": 0,
            "running": self.active,
            "kv_blocks_total": self.kv_blocks_total,
            "kv_blocks_free": self.kv_blocks_total - used,
            "steps": self.steps,
            "preemptions": 0,
        }

    def render_chat(self, messages: list[dict[str, Any]], options: ChatOptions = DEFAULT_CHAT) -> list[int]:
        return render_ids(self.chat_template, self.tokenizer, messages, options)

    def _row(self, position: int, token_id: int, request: Request) -> LogprobRow:
        """A row built by the engine's own listing rules over made-up values."""
        values = np.array([fake_value(position, i) for i in range(self.vocab_size)], dtype=np.float32)
        return build_row(values, token_id, request.logprobs)

    def check(self, requests: Sequence[Request]) -> None:
        for request in requests:
            check_request(request, self.vocab_size, self.ctx_size)

    def submit(self, requests: Sequence[Request], *, checked: bool = False) -> Choices:
        if not checked:
            self.check(requests)
        wakeup = Wakeup()
        streams = [RequestStream(wakeup) for _ in requests]
        for request, stream in zip(requests, streams, strict=True):
            task = asyncio.ensure_future(self._run(request, stream))
            self._tasks.add(task)  # held until done, so the loop cannot drop it
            task.add_done_callback(self._tasks.discard)
        return Choices(streams, wakeup)

    def _events(self, request: Request) -> Iterator[PromptScores | Step]:
        prompt = request.prompt_ids
        wants_rows = request.logprobs.top_n is not None
        if request.logprobs.prompt_logprobs:
            rows = (None, *(self._row(p, prompt[p], request) for p in range(1, len(prompt))))
            text, offsets = decode_spans(self.tokenizer, prompt)
            yield PromptScores(rows=rows, num_prompt_tokens=len(prompt), text=text, offsets=offsets)
        allowed = request.sampling.allowed_token_ids
        token = allowed[0] if allowed else ord("a")
        n = request.sampling.max_tokens
        for k in range(n):
            row = self._row(len(prompt) + k, token, request) if wants_rows else None
            text = chr(token) if token < 128 else ""
            yield Step(
                token, text, row, "length" if k == n - 1 else None, len(prompt), 0, k if token < 128 else 0
            )

    async def _run(self, request: Request, stream: RequestStream) -> None:
        self.active += 1
        stream.mark_scheduled()
        try:
            for k, event in enumerate(self._events(request)):
                if k:
                    await asyncio.sleep(self.step_delay)
                if stream.aborted:
                    self.aborted += 1
                    return
                self.steps += 1
                stream.put(event)
            stream.finish()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        except Exception as exc:  # as the real engine does: the request fails, it never hangs
            stream.fail(EngineUnavailable(f"the fake engine failed: {exc!r}"))
        finally:
            self.active -= 1


async def eventually(predicate: Callable[[], bool], within_s: float = 5.0) -> None:
    """Poll `predicate` on the running loop until it holds; fail the test at the deadline.

    Abort tests await this inside their coroutine, before `asyncio.run` cancels what is left.
    """
    deadline = asyncio.get_running_loop().time() + within_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, f"not true within {within_s} s"
        await asyncio.sleep(0.005)


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    return eventually


@pytest.fixture
def tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


@pytest.fixture
def make_engine() -> Callable[..., FakeEngine]:
    return FakeEngine
