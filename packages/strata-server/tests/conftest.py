"""Hand-made stand-ins for unit tests of the HTTP layer (framing, envelopes, cancellation).

Offered as fixtures (`tokenizer`, `make_engine`) because tests import nothing by path.

They honour the engine contract's shapes, not its numbers: model values are tested only
against the real engine in tests/test_server_*.py.
"""

from __future__ import annotations

import asyncio
import codecs
import math
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from strata_engine.api import LogprobRow, PromptScores, Request, RequestError, Step

EOS = 256


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
    """Generates `max_tokens` copies of the first allowed id (or "a"), then EOS if room."""

    model_name = "fake-model"
    kernels = "fake"
    invariant = True
    ctx_size = 64
    vocab_size = ByteTokenizer.vocab_size
    chat_template = None

    def __init__(self, step_delay: float = 0.0) -> None:
        self.tokenizer = ByteTokenizer()
        self.step_delay = step_delay
        self.active = 0
        self.aborted = 0

    def stats(self) -> dict[str, int]:
        return {"waiting": 0, "running": self.active}

    def check(self, request: Request) -> None:
        for token_id in request.prompt_ids:
            if not 0 <= token_id < self.vocab_size:
                raise RequestError(f"token id {token_id} is outside the vocabulary", "prompt")

    def _row(self, position: int, token_id: int, request: Request) -> LogprobRow:
        params = request.logprobs
        values = {i: fake_value(position, i) for i in range(self.vocab_size)}
        top = sorted(values.items(), key=lambda kv: (-kv[1], kv[0]))[: params.top_n or 0]
        renorm = None
        if params.renormalize_over is not None:
            total = math.log(sum(math.exp(values[i]) for i in params.renormalize_over))
            renorm = {i: values[i] - total for i in params.renormalize_over}
        return LogprobRow(
            token_id=token_id,
            logprob=values[token_id],
            top=tuple(top),
            named={i: values[i] for i in params.named_ids},
            renormalized=renorm,
        )

    async def generate(self, request: Request) -> AsyncIterator[PromptScores | Step]:
        self.check(request)
        self.active += 1
        finished = False
        try:
            prompt = request.prompt_ids
            wants_rows = request.logprobs.top_n is not None
            if request.logprobs.prompt_logprobs:
                rows = (None, *(self._row(p, prompt[p], request) for p in range(1, len(prompt))))
                yield PromptScores(rows=rows, num_prompt_tokens=len(prompt))
            allowed = request.sampling.allowed_token_ids
            token = allowed[0] if allowed else ord("a")
            n = request.sampling.max_tokens
            for k in range(n):
                await asyncio.sleep(self.step_delay)
                last = k == n - 1
                row = self._row(len(prompt) + k, token, request) if wants_rows else None
                yield Step(
                    token_id=token,
                    text=chr(token) if token < 128 else "",
                    logprobs=row,
                    finish_reason="length" if last else None,
                    num_prompt_tokens=len(prompt),
                )
            finished = True
        finally:
            self.active -= 1
            if not finished:
                self.aborted += 1


@pytest.fixture
def tokenizer() -> ByteTokenizer:
    return ByteTokenizer()


@pytest.fixture
def make_engine() -> Callable[..., FakeEngine]:
    return FakeEngine
