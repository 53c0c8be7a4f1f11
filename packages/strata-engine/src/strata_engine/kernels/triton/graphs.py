"""Decode steps on static buffers, captured as one CUDA graph per batch-size bucket.

A decode step on TritonOps is about twenty launches a layer, each paid in Python; a CUDA graph
replays all of them from one call. A replay repeats every launch verbatim (the same addresses,
scalar arguments and grids), so a step that is captured must not depend on host values that
change between steps. The static path makes a decode step so:

- the step's inputs (token ids, positions, token_seq, slots, block tables) are copied into
  buffers allocated once, sized for the largest bucket and the engine's whole context (tables
  padded to `ctx_size / block_size` blocks): their addresses never change;
- the batch is padded up to a bucket (`BUCKETS`); a padding row is token 0 at position 0 of a
  scratch block that the device KV cache holds past the engine's blocks (`SCRATCH_BLOCKS`), it
  writes its K/V there and its outputs are never read; the kernels are batch-invariant, so the
  real rows' bits are the eager step's;
- nothing in the forward reads a device value on the host or sizes a launch from a host value:
  attention's loops end where each token's position (device data) says, its scratch is sized by
  the table width (a constant here), and every other op's sizes follow the bucket.

The step runs on past the final norm: the LM head over every row of the bucket (soft-capped
where the model says) and each row's log-softmax, in place over the logits, so a replay leaves
the rows' log-probabilities in the bucket's output (`StaticStep`); the runner then reads of
them what each request asks (TritonOps.read_logprobs), with no log-softmax again.

On CUDA the first step of a bucket runs once eagerly on a side stream (compiles, moves the
weights), is captured with `torch.cuda.CUDAGraph` (one memory pool for every bucket), and every
later step of that bucket replays it. Under Triton's interpreter (the CPU) the same buffers and
padding run eagerly each step: that is how the tests prove the bits and that a step's launches
repeat verbatim. Off by default; `STRATA_CUDA_GRAPHS=1` turns it on (docs/gpu.md, "CUDA graphs").
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import torch

from strata_engine.kernels.base import AttentionMeta


class _Ranks(Protocol):
    @property
    def active(self) -> bool: ...


class _Layer(Protocol):
    @property
    def experts(self) -> object: ...


class _Config(Protocol):
    @property
    def ctx_size(self) -> int: ...


class StaticModel(Protocol):
    """What the static path reads of the engine's model (model.Transformer), stated here so
    that the kernels import nothing above them: its tensor-parallel ranks, its layers' experts,
    its context, its forward and its LM head (`logits`: soft-capped where the model says)."""

    @property
    def tp(self) -> _Ranks: ...

    @property
    def layers(self) -> Sequence[_Layer]: ...

    @property
    def cfg(self) -> _Config: ...

    def forward(self, ids: np.ndarray, meta: AttentionMeta, kv: list[tuple[Any, Any]]) -> Any: ...

    def logits(self, hidden: Any) -> Any: ...


SWITCH = "STRATA_CUDA_GRAPHS"  # "1": TritonOps runs decode steps on the static path
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # batch sizes a step is padded up to
SCRATCH_BLOCKS = 1  # KV blocks past the engine's, written and read by padding rows only
PAD_TOKEN = 0


def switched_on() -> bool:
    """Whether the environment asks for the static path (`STRATA_CUDA_GRAPHS=1`)."""
    return os.environ.get(SWITCH, "") == "1"


def bucket(rows: int) -> int | None:
    """The smallest bucket that holds `rows`, None above the largest."""
    return next((b for b in BUCKETS if b >= rows), None)


@dataclass(frozen=True)
class StepBuffers:
    """One step's inputs for the largest bucket; a bucket's step reads the first rows."""

    ids: torch.Tensor  # [B] int64
    positions: torch.Tensor  # [B] int32
    token_seq: torch.Tensor  # [B] int32
    slots: torch.Tensor  # [B] int64
    tables: torch.Tensor  # [B, max_blocks] int32

    @classmethod
    def allocate(cls, max_blocks: int, device: torch.device, pin: bool = False) -> StepBuffers:
        rows = BUCKETS[-1]

        def zeros(*shape: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device, pin_memory=pin)

        return cls(
            zeros(rows, dtype=torch.int64),
            zeros(rows, dtype=torch.int32),
            zeros(rows, dtype=torch.int32),
            zeros(rows, dtype=torch.int64),
            zeros(rows, max_blocks, dtype=torch.int32),
        )

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.ids, self.positions, self.token_seq, self.slots, self.tables


@dataclass(frozen=True)
class StaticStep:
    """What a step on the static path computed, on the device: views of its bucket's outputs,
    owned by DecodeGraphs (on CUDA the graph's, rewritten by the bucket's next replay), so read
    them before the next step. The real rows come first; the padding rows' are not included."""

    hidden: torch.Tensor  # [T, hidden]: after the final norm
    logprobs: torch.Tensor  # [T, vocab] fp32: the LM head and log-softmax of each row, C's bits


class DecodeGraphs:
    """The static decode path of one engine's TritonOps (see the module docstring)."""

    def __init__(self, device: torch.device, log_softmax: Callable[..., torch.Tensor]) -> None:
        """`log_softmax(logits, out=logits)`: the rows' log-softmax written over them (the
        backend's: logprobs.py), passed in so that this module imports no Triton."""
        self.device = device
        self._log_softmax = log_softmax
        self.capture = device.type == "cuda"  # else (the interpreter) the same path, eagerly
        self.buffers: StepBuffers | None = None  # on the device: the step's inputs
        self._host: StepBuffers | None = None  # staging (pinned on CUDA), one copy per buffer
        self._shape: tuple[int, int, int] | None = None  # (max_blocks, block_size, scratch block)
        self._views: dict[int, tuple[torch.Tensor, AttentionMeta]] = {}
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self._pool: Any = None  # the graphs' shared memory pool
        self._staged: torch.cuda.Event | None = None  # the last step's copies out of the staging
        self.steps: Counter[int] = Counter()  # steps run on the static path, by bucket

    @staticmethod
    def covers(model: StaticModel) -> bool:
        """Whether the model's forward can run on the static path: not a mixture of experts
        (its routing is read on the host), not tensor-parallel (ranks exchange per step), and no
        query temperature (mistral3: its factors are picked by the step's positions on the host),
        no recurrent layers (hybrid models: their convolution and gates run on the host)."""
        return (
            getattr(model, "hybrid", None) is None
            and not model.tp.active
            and all(layer.experts is None for layer in model.layers)
            and getattr(model, "q_temp", None) is None
        )

    def step(
        self, model: StaticModel, ids: np.ndarray, meta: AttentionMeta, kv: list[tuple[Any, Any]]
    ) -> StaticStep | None:
        """The step on the static path: its hidden states and every row's log-probabilities, or
        None where it does not apply (the caller runs the step eagerly): a row of more than one
        token (T != sequences), more rows than the largest bucket, a block table wider than the
        context, a model it does not cover."""
        t = len(ids)
        b = bucket(t)
        if b is None or not t or t != len(meta.block_tables) or not self.covers(model):
            return None
        max_blocks = -(-model.cfg.ctx_size // meta.block_size)
        if meta.block_tables.shape[1] > max_blocks:
            return None
        self._prepare(max_blocks, meta.block_size, kv[0][0].shape[0])
        self.stage(ids, meta, b)
        self.steps[b] += 1
        hidden, lp = self.run(model, kv, b)
        return StaticStep(hidden[:t], lp[:t])

    def _prepare(self, max_blocks: int, block_size: int, num_blocks: int) -> None:
        """The buffers, allocated once for the engine's shape (its context, blocks, block size)."""
        shape = (max_blocks, block_size, num_blocks)
        if self._shape == shape:
            return
        self._shape = shape
        self.buffers = StepBuffers.allocate(max_blocks, self.device)
        self._host = StepBuffers.allocate(max_blocks, torch.device("cpu"), pin=self.capture)
        self._views.clear()
        self._graphs.clear()

    def stage(self, ids: np.ndarray, meta: AttentionMeta, b: int) -> None:
        """The step's arrays into the buffers' first `b` rows, padding rows after the real ones."""
        assert self._host is not None and self.buffers is not None and self._shape is not None
        _, block_size, scratch = self._shape
        if self._staged is not None:  # the pinned staging is rewritten only once copied out
            self._staged.synchronize()
        t, w = len(ids), meta.block_tables.shape[1]
        h = [x.numpy() for x in self._host.tensors()]
        ids_h, pos_h, seq_h, slots_h, tables_h = h
        ids_h[:t], ids_h[t:b] = ids, PAD_TOKEN
        pos_h[:t], pos_h[t:b] = meta.positions, 0
        seq_h[:t], seq_h[t:b] = meta.token_seq, np.arange(t, b)
        slots_h[:t], slots_h[t:b] = meta.slots, scratch * block_size
        tables_h[:t, :w], tables_h[:t, w:], tables_h[t:b] = meta.block_tables, scratch, scratch
        for dst, src in zip(self.buffers.tensors(), self._host.tensors(), strict=True):
            dst[:b].copy_(src[:b], non_blocking=True)
        if self.capture:
            self._staged = torch.cuda.Event()
            self._staged.record()

    def inputs(self, b: int) -> tuple[torch.Tensor, AttentionMeta]:
        """Bucket `b`'s token ids and AttentionMeta: views of the buffers, made once."""
        hit = self._views.get(b)
        if hit is None:
            assert self.buffers is not None and self._shape is not None
            ids, pos, seq, slots, tables = (x[:b] for x in self.buffers.tensors())
            # the device tensors stand in for the meta's numpy arrays (TritonOps takes either)
            meta = AttentionMeta(
                cast(np.ndarray, pos), cast(np.ndarray, seq), cast(np.ndarray, tables),
                cast(np.ndarray, slots), self._shape[1],
            )  # fmt: skip
            hit = self._views[b] = (ids, meta)
        return hit

    @property
    def captured(self) -> list[int]:
        """The buckets captured as CUDA graphs so far (none without CUDA)."""
        return sorted(self._graphs)

    def run(self, model: StaticModel, kv: list[tuple[Any, Any]], b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Bucket `b`'s step over its buffers: the hidden states [b, hidden] and the
        log-probabilities [b, vocab]; what a CUDA graph captures and replays (eagerly each step
        without CUDA)."""
        if not self.capture:
            return self._forward(model, kv, b)
        graph = self._graphs.get(b)
        if graph is None:
            graph = self._graphs[b] = self._capture(model, kv, b)
        graph[0].replay()
        return graph[1], graph[2]

    def _forward(
        self, model: StaticModel, kv: list[tuple[Any, Any]], b: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward to the final norm, the LM head over every row of the bucket and each row's
        log-softmax, in place over the logits (one [b, vocab] fp32 tensor: the rows' bits do not
        depend on the padding rows, the kernels being batch-invariant)."""
        ids, meta = self.inputs(b)
        hidden = cast(torch.Tensor, model.forward(cast(np.ndarray, ids), meta, kv))
        logits = cast(torch.Tensor, model.logits(hidden))
        return hidden, self._log_softmax(logits, out=logits)

    def _capture(
        self, model: StaticModel, kv: list[tuple[Any, Any]], b: int
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        """Bucket `b`'s step warmed up once (kernels compiled, weights moved, caches made) and
        captured; the capture does not run it (the caller replays)."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self._forward(model, kv, b)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the server's other threads may query the device while this one captures
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            hidden, lp = self._forward(model, kv, b)
        if self._pool is None:
            self._pool = graph.pool()
        return graph, hidden, lp
