"""The engine: a synchronous step loop (`LLMEngine`) and its threaded asyncio face (`AsyncEngine`).

`LLMEngine.step()` schedules, runs the model once for every scheduled token, then hands each
request its own rows and tokens. `AsyncEngine` runs that loop in a worker thread fed by a
queue, so an event loop never runs model code.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import torch

from strata_engine.api import EngineError, EngineEvent, PromptScores, Request, RequestError, Step
from strata_engine.block_manager import BlockManager
from strata_engine.chat_template import ChatTemplate
from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import GGUFFile
from strata_engine.logprobs import build_row
from strata_engine.model import Transformer
from strata_engine.model_runner import ModelRunner
from strata_engine.ops import make_ops
from strata_engine.scheduler import Scheduler
from strata_engine.sequence import Sequence
from strata_engine.text_stream import TextStream
from strata_engine.tokenizer import Tokenizer

log = logging.getLogger("strata_engine")

BLOCK_SIZE = 16
KV_BYTES_PER_FLOAT = 4


class LLMEngine:
    """Model, tokenizer and scheduler; not thread-safe (one thread drives `step`)."""

    def __init__(
        self,
        path: str | Path,
        *,
        parallel: int = 4,
        ctx_size: int | None = None,
        kv_cache_mb: int = 1024,
        step_tokens: int = 256,
        num_threads: int | None = None,
        kernels: str = "auto",
        device: str = "cpu",
        prefix_cache: bool = True,
    ) -> None:
        t0 = time.perf_counter()
        if num_threads:
            torch.set_num_threads(num_threads)
        gguf = GGUFFile(path)
        self.config = cfg = ModelConfig.from_metadata(gguf.metadata)
        self.model_name = Path(path).stem
        self.ctx_size = min(ctx_size or cfg.ctx_size, cfg.ctx_size)
        self.tokenizer = Tokenizer.from_metadata(gguf.metadata)
        template = gguf.get("tokenizer.chat_template")
        self.chat_template = (
            ChatTemplate(template, self._special_text(self.tokenizer.bos_id), self._special_text(self.tokenizer.eos_id))
            if template
            else None
        )
        self.vocab_size = cfg.vocab_size
        self.ops = make_ops(kernels, device, num_threads or torch.get_num_threads())
        self.model = Transformer(gguf, cfg, self.ops)
        per_block = 2 * cfg.n_layers * BLOCK_SIZE * cfg.n_kv_heads * cfg.head_dim * KV_BYTES_PER_FLOAT
        min_blocks = -(-self.ctx_size // BLOCK_SIZE) + 1  # one full-context request always fits
        num_blocks = max(kv_cache_mb * 2**20 // per_block, min_blocks)
        self.blocks = BlockManager(num_blocks, BLOCK_SIZE)
        self.scheduler = Scheduler(self.blocks, parallel, step_tokens, prefix_cache)
        self.runner = ModelRunner(self.model, num_blocks, BLOCK_SIZE)
        self.load_seconds = time.perf_counter() - t0

    @property
    def kernels(self) -> str:
        """Which kernels run, e.g. "native-avx2" or "torch" (see ops.make_ops)."""
        return self.ops.name

    @property
    def invariant(self) -> bool:
        """Whether a request's bits are independent of the rest of the batch."""
        return self.ops.invariant

    def _special_text(self, token_id: int | None) -> str:
        return "" if token_id is None else self.tokenizer.decode([token_id])

    # -- requests -----------------------------------------------------------------------
    def check(self, request: Request) -> None:
        """Refuse what can never run: ids outside the vocabulary, empty or over-long prompts."""
        if not request.prompt_ids:
            raise RequestError("the prompt is empty", "prompt")
        s, lp = request.sampling, request.logprobs
        for param, ids in (
            ("prompt", request.prompt_ids),
            ("allowed_token_ids", s.allowed_token_ids or ()),
            ("stop_token_ids", s.stop_token_ids),
            ("logprob_token_ids", lp.named_ids),
            ("allowed_token_ids", lp.renormalize_over or ()),
        ):
            for i in ids:
                if not 0 <= i < self.vocab_size:
                    raise RequestError(f"token id {i} is out of vocabulary (valid ids: 0..{self.vocab_size - 1})", param)
        if s.allowed_token_ids is not None and not s.allowed_token_ids:
            raise RequestError("allowed_token_ids must not be empty", "allowed_token_ids")
        if s.max_tokens < 0:
            raise RequestError("max_tokens must be at least 0", "max_tokens")
        total = len(request.prompt_ids) + s.max_tokens
        if total > self.ctx_size:
            raise RequestError(
                f"This model's maximum context length is {self.ctx_size} tokens. However, you requested "
                f"{total} tokens ({len(request.prompt_ids)} in the prompt, {s.max_tokens} for the completion).",
                "max_tokens",
            )

    def add(self, request: Request, emit: Callable[[EngineEvent | None], None]) -> Sequence:
        self.check(request)
        seq = Sequence(request, TextStream(self.tokenizer, request.sampling.stop), emit)
        self.scheduler.add(seq)
        return seq

    def abort(self, seq: Sequence) -> None:
        seq.aborted = True

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # -- the step -------------------------------------------------------------------------
    def step(self) -> None:
        for seq in [s for s in (*self.scheduler.running, *self.scheduler.waiting) if s.aborted]:
            self._finish(seq)
        work = self.scheduler.schedule()
        if not work:
            return
        rows, lps = self.runner.run(work)
        for w in work:
            w.seq.num_computed = w.end
            self.blocks.register(w.seq)
        for ref, lp in zip(rows, lps, strict=True):
            seq = ref.work.seq
            if ref.scores_prompt:
                top = seq.request.logprobs.top_n or 0
                seq.prompt_rows.append(build_row(lp, seq.token_ids[ref.position + 1], seq.request.logprobs, top))
            if ref.samples:
                self._advance(seq, lp)

    def _advance(self, seq: Sequence, lp: torch.Tensor) -> None:
        """The sequence is fully computed: send prompt scores once, then sample the next token."""
        req, s = seq.request, seq.request.sampling
        if seq.wants_prompt_rows:
            seq.prompt_scores_sent = True
            seq.emit(PromptScores(tuple(seq.prompt_rows), seq.num_prompt, seq.num_cached))
        if seq.num_generated >= s.max_tokens:  # max_tokens == 0: prompt scoring only
            self._finish(seq)
            return
        token = seq.sampler.sample(lp)
        lpp = req.logprobs
        wants_row = lpp.top_n is not None or lpp.named_ids or lpp.renormalize_over
        row = build_row(lp, token, lpp, lpp.top_n or 0) if wants_row else None
        seq.token_ids.append(token)
        finish = None
        if (token in self.tokenizer.eog_ids and not s.ignore_eos) or token in s.stop_token_ids:
            text, finish = seq.text.finish(), "stop"
        else:
            text, hit = seq.text.push(token)
            if hit:
                finish = "stop"
            elif seq.num_generated >= s.max_tokens or len(seq) >= self.ctx_size:
                text += seq.text.finish()
                finish = "length"
        seq.emit(Step(token, text, row, finish, seq.num_prompt, seq.num_cached))
        if finish:
            self._finish(seq)

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        seq.emit(None)

    def fail_all(self, error: EngineError) -> None:
        """End every request in flight with `error` (after an unexpected failure in a step)."""
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            self.scheduler.finish(seq)
            seq.emit(error)

    def stats(self) -> dict[str, int]:
        return {
            "waiting": len(self.scheduler.waiting),
            "running": len(self.scheduler.running),
            "kv_blocks_total": self.blocks.num_blocks,
            "kv_blocks_free": self.blocks.num_available,
        }

    def generate(self, request: Request) -> list[EngineEvent]:
        """Run one request to completion on the calling thread (tests, the CLI)."""
        events: list[EngineEvent] = []
        done = []
        self.add(request, lambda ev: events.append(ev) if ev is not None else done.append(True))
        while not done:
            self.step()
        return events


class AsyncEngine:
    """`LLMEngine` on a worker thread; `generate` is an async iterator of that request's events."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="strata-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_path(cls, path: str | Path, **kwargs) -> AsyncEngine:
        return cls(LLMEngine(path, **kwargs))

    # the surface the server uses
    @property
    def model_name(self) -> str:
        return self.engine.model_name

    @property
    def ctx_size(self) -> int:
        return self.engine.ctx_size

    @property
    def vocab_size(self) -> int:
        return self.engine.vocab_size

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self.engine.chat_template

    @property
    def kernels(self) -> str:
        return self.engine.kernels

    @property
    def load_seconds(self) -> float:
        return self.engine.load_seconds

    @property
    def invariant(self) -> bool:
        return self.engine.invariant

    def check(self, request: Request) -> None:
        self.engine.check(request)

    def stats(self) -> dict[str, int]:
        return self.engine.stats()

    def _loop(self) -> None:
        while not self._stopped:
            while True:
                try:
                    kind, request, emit, holder = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if kind == "add":
                    try:
                        holder.append(self.engine.add(request, emit))
                    except RequestError as exc:
                        emit(exc)
                elif holder:  # the inbox is FIFO, so an abort always follows its add
                    self.engine.abort(holder[0])
            if not self.engine.has_work():
                self._wake.wait(0.05)
                self._wake.clear()
                continue
            try:
                self.engine.step()
            except Exception as exc:  # a bug must not wedge the engine: fail what is in flight, go on
                log.exception("engine step failed")
                self.engine.fail_all(EngineError(f"internal engine error: {exc}"))

    async def generate(self, request: Request) -> AsyncIterator[EngineEvent]:
        self.engine.check(request)
        loop = asyncio.get_running_loop()
        events: asyncio.Queue = asyncio.Queue()
        holder: list[Sequence] = []

        def emit(ev) -> None:
            try:
                loop.call_soon_threadsafe(events.put_nowait, ev)
            except RuntimeError:  # the caller's event loop is closed; its abort is already queued
                pass

        self._inbox.put(("add", request, emit, holder))
        self._wake.set()
        finished = False
        try:
            while True:
                ev = await events.get()
                if ev is None:
                    finished = True
                    return
                if isinstance(ev, Exception):
                    finished = True
                    raise ev
                yield ev
        finally:
            if not finished:
                self._abort(holder)

    def _abort(self, holder: list[Sequence]) -> None:
        self._inbox.put(("abort", None, None, holder))
        self._wake.set()

    def shutdown(self) -> None:
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
