"""The synchronous engine: `add` a request, call `step` until it is done, read its stream.

`LLMEngine.step()` schedules, runs the model once for every scheduled token, then hands each
request its own rows and tokens through that request's `RequestStream` (nano-vllm's
add -> step -> output). `async_engine.AsyncEngine` runs this loop on a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

from strata_engine.api import (
    DEFAULT_CHAT,
    ChatOptions,
    EngineError,
    EngineEvent,
    EngineOutOfMemory,
    EngineUnavailable,
    FinishReason,
    ModelLoadError,
    PromptScores,
    Request,
    RequestError,
    Step,
    is_out_of_memory,
)
from strata_engine.block_manager import BlockManager
from strata_engine.checks import check_request
from strata_engine.config import ModelConfig
from strata_engine.gguf_checks import (
    ReadKeys,
    check_keys_read,
    check_metadata_types,
    check_shapes,
    check_tensors_read,
)
from strata_engine.gguf_loader import GGUFFile
from strata_engine.hybrid_model import HybridTransformer
from strata_engine.kernels.choice import make_ops, on_cpu
from strata_engine.kernels.kv_types import kv_head_bytes
from strata_engine.logprobs import Row, build_row
from strata_engine.memory import check_fits
from strata_engine.model import Transformer
from strata_engine.model_runner import ModelRunner, RowRef
from strata_engine.output import RequestStream
from strata_engine.scheduler import Scheduler, Work
from strata_engine.scoring import CandidateScore, candidate_requests, candidate_scores
from strata_engine.sequence import Sequence, Status
from strata_engine.structured import Guides
from strata_engine.tensor_parallel import SINGLE, TensorParallel
from strata_engine.text.chat_template import ChatTemplate, compiled, render_ids
from strata_engine.text.load import load_tokenizer
from strata_engine.text.stream import TextStream, decode_spans

log = logging.getLogger("strata_engine")

BLOCK_SIZE = 16
KV_BYTES_PER_FLOAT = 4  # the default fp32 cache; kv_types.kv_head_bytes gives each type's


def out_of_memory(exc: BaseException) -> EngineOutOfMemory:
    """A failed allocation as the engine's error, saying what could not be allocated."""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return EngineOutOfMemory(detail if detail.startswith("out of memory") else f"out of memory: {detail}")


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
        kv_cache_dtype: str = "fp32",
        device: str = "cpu",
        prefix_cache: bool = True,
        tensor_parallel: TensorParallel = SINGLE,
        chat_template: str | None = None,
    ) -> None:
        t0 = time.perf_counter()
        gguf = GGUFFile(path)  # the file's layout checked: every tensor inside it
        check_metadata_types(gguf.metadata)
        meta = ReadKeys(gguf.metadata)  # records what each reader asks: the rest must be informational
        self.config = cfg = ModelConfig.from_metadata(meta)
        check_shapes(gguf.tensors, cfg, meta)  # every size the kernels use, proven
        check_tensors_read(gguf.tensors, cfg)  # and nothing in the file left unread
        check_keys_read(meta, cfg.arch, tokenizer=False)
        self.model_name = Path(path).stem
        self.ctx_size = min(ctx_size or cfg.ctx_size, cfg.ctx_size)
        self.kv_cache_dtype = kv_cache_dtype  # fp32, bf16, fp16, q8_0: what the KV cache stores (kv_types.py)
        try:
            kv_layers = cfg.n_layers if cfg.hybrid is None else cfg.hybrid.recurrent.count(False)
            # a hybrid's attention layers are alike; gemma4's differ by layer (ModelConfig.heads)
            layer_bytes = [
                h * kv_head_bytes(kv_cache_dtype, d)
                if cfg.owns_kv(i)
                else 0  # gemma4: shared-KV layers own none
                for i, (h, d) in enumerate(map(cfg.heads, range(kv_layers)))
            ]
        except ValueError as exc:  # refused before anything is loaded
            raise ModelLoadError(str(exc)) from None
        per_block = 2 * BLOCK_SIZE * sum(layer_bytes)
        min_blocks = -(-self.ctx_size // BLOCK_SIZE) + 1  # one full-context request always fits
        if not tensor_parallel.active and on_cpu(kernels, device):  # before the kernels or a weight
            weights = sum(t.data.nbytes for t in gguf.tensors.values())
            state = 0 if cfg.hybrid is None else cfg.hybrid.state_bytes  # one sequence's, as the KV
            check_fits(Path(path).name, weights, min_blocks * per_block + state, self.ctx_size)
        if kv_cache_dtype == "q8_0" and not on_cpu(kernels, device):
            raise ModelLoadError(
                "the q8_0 KV cache runs on the CPU kernels only for now; the GPU (Triton) backend "
                "stores fp32, bf16 or fp16 (use one of those, or device cpu)"
            )
        self.ops = make_ops(kernels, device, num_threads)
        # IEEE default float modes around each step, whatever other code in the process set
        # (the native kernels' NativeOps.ieee_floats; other ops run as the process is)
        self._float_modes: Callable[[], AbstractContextManager[None]] = getattr(
            self.ops, "ieee_floats", nullcontext
        )
        self.tp = tensor_parallel  # this rank's place; see tensor_parallel.py
        self.failure: EngineUnavailable | None = None  # set when a rank is lost: nothing runs any more
        # the tokenizer is built beside the weights: reading them mostly waits on page faults,
        # outside the GIL, which the tokenizer's Python work then uses (about 0.1 s less to ready)
        with ThreadPoolExecutor(1, thread_name_prefix="strata-tokenizer") as pool:
            tokenizer = pool.submit(load_tokenizer, meta)
            # RoPE tables for the context this engine serves, not the (larger) one the file claims
            model_cfg = replace(cfg, ctx_size=self.ctx_size)
            family = Transformer if cfg.hybrid is None else HybridTransformer
            self.model = family(gguf, model_cfg, self.ops, tensor_parallel)  # releases the file's pages
            self.tokenizer = tokenizer.result()
        # an operator's template (the server's --chat-template) replaces the file's
        file_template = meta.get("tokenizer.chat_template")
        check_keys_read(meta, cfg.arch, tokenizer=True)
        template = chat_template if chat_template is not None else file_template
        self.chat_template = (
            ChatTemplate(
                template, self._special_text(self.tokenizer.bos_id), self._special_text(self.tokenizer.eos_id)
            )
            if template
            else None
        )
        self.vocab_size = self.model.embedding.out_features  # == cfg.vocab_size (check_shapes)
        self.guides = Guides(self.tokenizer, self.vocab_size)  # structured output's matchers
        self.guides.load()  # llguidance's vocabulary holds the GIL: built before ready, not on a request
        num_blocks = max(kv_cache_mb * 2**20 // per_block, min_blocks)
        states = None
        if isinstance(self.model, HybridTransformer):  # a recurrent state per running sequence and
            # as many prefix-cache snapshots of it (recurrent_state.py)
            states = self.model.make_states(parallel, parallel if prefix_cache else 0)
        self.blocks = BlockManager(num_blocks, BLOCK_SIZE, states)
        self.num_steps = 0
        self.scheduler = Scheduler(self.blocks, parallel, step_tokens, prefix_cache)
        self.runner = ModelRunner(self.model, num_blocks, BLOCK_SIZE, self.tokenizer.eog_ids, kv_cache_dtype)
        tensor_parallel.agree([num_blocks, BLOCK_SIZE, self.ctx_size], "KV blocks, block size, context")
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
        """Refuse what can never run (see `checks.check_request`, the one authority), and
        everything once the engine has lost a tensor-parallel rank (`EngineUnavailable`)."""
        self.check_alive()
        check_request(request, self.vocab_size, self.ctx_size)
        if request.sampling.structured is not None:
            self.guides.check(request.sampling.structured)

    def check_alive(self) -> None:
        """`EngineUnavailable` once the engine has lost a tensor-parallel rank for good."""
        if self.failure is not None:
            raise self.failure

    def render_chat(self, messages: list[dict[str, Any]], options: ChatOptions = DEFAULT_CHAT) -> list[int]:
        """Chat messages -> prompt ids through the model's template, or the request's own
        (`options.template`, compiled once in the same sandbox; see `chat_template.render_ids`)."""
        template = self.chat_template
        if options.template is not None:
            bos, eos = self._special_text(self.tokenizer.bos_id), self._special_text(self.tokenizer.eos_id)
            template = compiled(options.template, bos, eos)
        return render_ids(template, self.tokenizer, messages, options)

    def add(self, request: Request, output: RequestStream | None = None) -> RequestStream:
        """Check and queue a request; its events arrive on the returned stream."""
        self.check(request)
        return self.admit(request, output or RequestStream())

    def admit(self, request: Request, output: RequestStream) -> RequestStream:
        """Queue an already checked request (the async layer checks on the caller's thread)."""
        s = request.sampling
        text = TextStream(
            self.tokenizer,
            s.stop,
            include_stop=s.include_stop_str_in_output,
            skip_special=s.skip_special_tokens,
            min_tokens=s.min_tokens,
        )
        guide = None if s.structured is None else self.guides.new(s.structured)
        self.scheduler.add(Sequence(request, text, output, guide))
        return output

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    # -- the step -------------------------------------------------------------------------
    def step(self) -> None:
        with self._float_modes():  # the step's sampling and listing too: they read floats
            self._step()

    def _step(self) -> None:
        for seq in [s for s in (*self.scheduler.running, *self.scheduler.waiting) if s.aborted]:
            self._finish(seq)
        work = self.scheduler.schedule()
        if not work:
            return
        self.num_steps += 1
        try:
            rows, lps = self.runner.run(work)
        except EngineUnavailable as exc:  # a tensor-parallel rank is gone
            self._fail_for_good(exc)
            return
        except Exception as exc:
            if not self.tp.active:
                if not is_out_of_memory(exc):
                    raise
                self._fail_step(work, exc)  # only this step's requests; the engine goes on
                return
            # this rank left the others mid-step: they wait in a collective it will never join
            self._fail_for_good(
                EngineUnavailable(f"tensor-parallel step failed: {type(exc).__name__}: {exc}")
            )
            return
        for w in work:
            w.seq.num_computed = w.end
            self.blocks.register(w.seq)  # the KV is written: the kernels' allocations were checked
        done = 0
        try:
            for ref, lp in zip(rows, lps, strict=True):  # each row's logits computed as it is read
                self._deliver(ref, lp)
                done += 1
        except Exception as exc:
            if self.tp.active or not is_out_of_memory(exc):
                raise
            self._fail_step([ref.work for ref in rows[done:]], exc)  # rows not delivered: their requests

    def _deliver(self, ref: RowRef, lp: Row) -> None:
        """One row to its request: a prompt row kept, or the next token sampled and sent."""
        seq = ref.work.seq
        if seq.status is Status.FINISHED:  # failed on an earlier row of this step
            return
        try:
            if ref.scores_prompt and seq.prompt_rows is not None:
                seq.prompt_rows.append(
                    build_row(lp, seq.token_ids[ref.position + 1], seq.request.logprobs, prompt=True)
                )
            if ref.samples:
                self._advance(seq, lp)
        except RequestError as exc:  # the request's own fault (a grammar past llguidance's limits)
            self.scheduler.finish(seq)
            seq.output.fail(exc)
        except Exception as exc:  # one request's bug (sampling, listing, text) fails it alone
            log.exception("request failed while processing its step; the others go on")
            self.scheduler.finish(seq)
            seq.output.fail(
                out_of_memory(exc)
                if is_out_of_memory(exc)
                else EngineError(f"internal engine error: {type(exc).__name__}: {exc}")
            )

    def _advance(self, seq: Sequence, lp: Row) -> None:
        """The sequence is fully computed: send prompt scores once, then sample the next token."""
        req, s = seq.request, seq.request.sampling
        if seq.wants_prompt_rows and seq.prompt_rows is not None:
            seq.prompt_scores_sent = True
            text, offsets = decode_spans(self.tokenizer, req.prompt_ids)
            seq.output.put(
                PromptScores(tuple(seq.prompt_rows), seq.num_prompt, seq.num_cached, text, offsets)
            )
        if seq.num_generated >= s.max_tokens:  # max_tokens == 0: prompt scoring only
            self._finish(seq)
            return
        token = seq.sampler.sample(lp, seq.token_ids[seq.num_prompt :], self.tokenizer.eog_ids)
        lpp = req.logprobs
        wants_row = lpp.top_n is not None or lpp.named_ids or lpp.renormalize_over
        row = build_row(lp, token, lpp) if wants_row else None
        seq.token_ids.append(token)
        if seq.guide is not None:
            seq.guide.advance(token)
        offset = seq.text.offset
        finish: FinishReason | None = None
        if (token in self.tokenizer.eog_ids and not s.ignore_eos) or token in s.stop_token_ids:
            text, finish = seq.text.end_on_token(token), "stop"
        else:
            text, hit = seq.text.push(token)
            if hit:
                finish = "stop"
            elif seq.guide is not None and seq.guide.finished:  # the grammar is complete
                text += seq.text.finish()
                finish = "stop"
            elif seq.num_generated >= s.max_tokens or len(seq) >= self.ctx_size:
                text += seq.text.finish()
                finish = "length"
        seq.output.put(Step(token, text, row, finish, seq.num_prompt, seq.num_cached, offset))
        if finish:
            self._finish(seq)

    def _finish(self, seq: Sequence) -> None:
        self.scheduler.finish(seq)
        seq.output.finish()

    def _fail_step(self, work: list[Work], exc: BaseException) -> None:
        """A step that could not get its memory: its requests fail (their blocks freed), the
        waiting ones and the engine go on."""
        log.error("engine step out of memory, its %d requests failed: %s", len(work), exc)
        error = out_of_memory(exc)
        for seq in dict.fromkeys(w.seq for w in work):
            if seq.status is not Status.FINISHED:
                self.scheduler.finish(seq)
                seq.output.fail(error)

    def fail_all(self, error: EngineError) -> None:
        """End every request in flight with `error` (after an unexpected failure in a step)."""
        for seq in [*self.scheduler.running, *self.scheduler.waiting]:
            self.scheduler.finish(seq)
            seq.output.fail(error)

    # -- tensor parallelism (no-ops with one rank) ----------------------------------------------
    def heartbeat(self) -> None:
        """While idle: check that every tensor-parallel rank still answers (about once a second)."""
        if self.failure is None:
            try:
                self.tp.heartbeat()
            except EngineUnavailable as exc:
                self._fail_for_good(exc)

    def _fail_for_good(self, failure: EngineUnavailable) -> None:
        """Fail every request in flight and refuse every later one (loudly, never a hang)."""
        log.error("%s", failure)
        self.failure = failure
        self.tp.abandon(failure)
        self.fail_all(failure)

    def follow(self) -> None:
        """Ranks other than 0: run rank 0's steps until it stops (it runs the scheduler)."""
        with self._float_modes():
            self.runner.follow()

    def close(self) -> None:
        """Release the other ranks (they exit) and leave the process group."""
        self.tp.close()

    def stats(self) -> dict[str, int]:
        return {
            "waiting": len(self.scheduler.waiting),
            "running": len(self.scheduler.running),
            "kv_blocks_total": self.blocks.num_blocks,
            "kv_blocks_free": self.blocks.num_available,
            "steps": self.num_steps,  # model steps run so far (how fast an abort takes effect)
            "preemptions": self.scheduler.preemptions,  # sequences sent back to wait for KV blocks
        }

    def generate(self, request: Request) -> list[EngineEvent]:
        """Run one request to completion on the calling thread (tests, the CLI)."""
        return self.generate_batch([request])[0]

    def score(
        self, prompt_ids: list[int], candidates: list[list[int]], top_n: int | None = None
    ) -> list[CandidateScore]:
        """Score candidate continuations of one prompt on the calling thread (see `scoring`)."""
        events = self.generate_batch(candidate_requests(prompt_ids, candidates, top_n))
        scores = [next(e for e in own if isinstance(e, PromptScores)) for own in events]
        return candidate_scores(len(prompt_ids), candidates, scores)

    def generate_batch(self, requests: list[Request]) -> list[list[EngineEvent]]:
        """Add all requests at once and step until every one has finished; each one's events."""
        outputs = [self.add(request) for request in requests]
        events: list[list[EngineEvent]] = [[] for _ in requests]
        while not all(output.drained for output in outputs):
            self.step()
            for sink, output in zip(events, outputs, strict=True):
                sink.extend(output.take())
        return events
