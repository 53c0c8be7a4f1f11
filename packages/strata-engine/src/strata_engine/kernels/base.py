"""The interface every kernel backend implements, and the types and helpers they share.

`Ops` is what the model calls; `AttentionMeta` and `RopeTable` describe a step's positions and
the rotary table; `Array` is a backend's own array. The backends (native/backend.py on the C
kernels, torch_backend.py, triton/) implement `Ops`; choice.py picks one. The engine hands every
backend numpy arrays (weights, the KV cache, the step's indices); the torch backends take them
over as tensors themselves, and `to_numpy` brings their results back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from strata_engine.kernels.native.header import INTERFACE
from strata_engine.kernels.weights import Weight

# added to a weight's kernel type once repacked for 8-bit activations (q8.c; strata_kernels.h)
Q8_PACKED = INTERFACE.constant("WT_Q8_PACKED")
LIMB_SHIFT = INTERFACE.constant("WT_LIMB_SHIFT")  # where a repacked weight's type holds its limbs (limb.c)


def stored_type(kernel_type: int) -> int:
    """A weight's stored type, without the integer kernels' repacking flags (C: WT_BASE)."""
    return kernel_type & (Q8_PACKED - 1)


@dataclass(frozen=True)
class AttentionMeta:
    """Where each token of a step sits: its sequence's block table row and its position."""

    positions: np.ndarray  # [T] int32 absolute positions
    token_seq: np.ndarray  # [T] int32 row of `block_tables` for each token
    block_tables: np.ndarray  # [S, max_blocks] int32
    slots: np.ndarray  # [T] int64 flat cache slot (block * block_size + offset) to write
    block_size: int
    state_slots: np.ndarray | None = None  # [S] int32: each sequence's recurrent state (hybrid models)
    # (row, tokens of the row computed, snapshot slot): copy the row's state there at that point
    state_captures: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class RopeTable:
    """cos/sin per absolute position, [ctx, rot/2] fp32 (computed in float64 once)."""

    cos: np.ndarray
    sin: np.ndarray
    dim: int  # rotated dims (the first `dim` of each head)
    interleaved: bool  # pairs (2i, 2i+1) as in llama GGUFs, else (i, i + dim/2)


@dataclass(frozen=True)
class DeltaNetStep:
    """One DeltaNet layer's step between its input matmuls and ssm_out (hybrid_model.py): what
    its host steps read, handed whole to a backend that runs them in one call (`delta_net`)."""

    qkv: np.ndarray  # [T, C] attn_qkv's output, C = [q | k | v] channels
    z: np.ndarray  # [T, HV * D] attn_gate's output
    b: np.ndarray  # [T, HV] beta's logits
    alpha: np.ndarray  # [T, HV] alpha (before dt_bias)
    taps: np.ndarray  # [d_conv, C] the convolution's taps, tap j a row
    windows: np.ndarray  # [slots, d_conv - 1, C] the convolutions' windows, advanced in place
    states: np.ndarray  # [slots, HV, D, D] the DeltaNet states, advanced in place
    state_slots: np.ndarray  # [S] each sequence's slot
    starts: np.ndarray  # [S] each sequence's first token in the step
    counts: np.ndarray  # [S] its tokens
    captures: tuple[tuple[int, int, int], ...]  # (row, tokens done, snapshot slot)
    dt_bias: np.ndarray  # [HV]
    ssm_a: np.ndarray  # [HV]
    norm: np.ndarray  # [D] ssm_norm
    key_heads: np.ndarray  # [HV] the key head each value head reads
    eps: float
    scale: float


Array = Any  # a backend's own array: numpy for NativeOps, a torch tensor for TorchOps and TritonOps


class Ops(Protocol):
    """What the model calls. `name` says which kernels run (e.g. "native-avx2", "torch");
    `invariant` whether a row's bits are independent of the rest of the batch. A backend that
    pays per launch may also set `fuses_projections = True`: the model then reads q/k/v and
    gate/up through one matmul each run of same-typed weights (model.FusedProjection). A backend
    that holds the rows on a device may set `selects_on_device = True` and offer
    `read_rows(logits, reads)`: log-softmax there, and copy back of each row only what
    `row_reads.read_for` says its request reads (triton/select.py). A backend that runs gpt-oss
    also offers `swiglu_oai` and takes `sinks` in `attention` (gpt_oss.SwigluOps). One may offer
    `linear_add(x, w, residual, bias)`, residual + linear(x, w, bias) in one launch, and
    `rope_kv_write` (`linear_add` and `rope_kv_write` below)."""

    name: str
    invariant: bool

    def pack(self, w: Weight) -> Weight:
        """`w` in the form this backend's `linear` reads (at load; `w` itself except for native-q8)."""
        ...

    def linear(self, x: Array, w: Weight, bias: Array | None = None, out: Array | None = None) -> Array:
        """x @ w.T (+ bias); `out`, a contiguous fp32 [rows, out_features] buffer, may receive the
        result (which is returned either way)."""
        ...

    def embed(self, w: Weight, ids: Array) -> Array: ...
    def rmsnorm(self, x: Array, weight: Array, eps: float) -> Array: ...
    def silu_mul(self, gate: Array, up: Array) -> Array: ...
    def gelu_mul(self, gate: Array, up: Array) -> Array:
        """GeGLU: gelu(gate) * up, GELU's tanh approximation (Gemma)."""
        ...

    def softcap(self, x: Array, cap: float) -> Array:
        """cap * tanh(x / cap), elementwise (Gemma 2's final logit soft-capping)."""
        ...

    def attention(
        self,
        q: Array,
        k_cache: Array,
        v_cache: Array,
        meta: AttentionMeta,
        scale: float | None = None,
        window: int = 0,
        softcap: float = 0.0,
        sinks: Array | None = None,
    ) -> Array:
        """Causal attention; `scale` defaults to 1/sqrt(head_dim); `window` > 0 attends only to the
        last `window` positions (sliding-window layers); `softcap` > 0 caps the scores; `sinks`
        [H] (gpt-oss) adds one logit per head to the softmax's denominator, with no value."""
        ...

    def rope(self, x: Array, positions: Array, table: RopeTable) -> Array:
        """x [T, H, D] rotated; may rotate x in place and return it (callers own x)."""
        ...

    def kv_write(
        self,
        k: Array,
        v: Array,
        k_cache: Array,
        v_cache: Array,
        slots: Array,
    ) -> None: ...
    def log_softmax(self, logits: Array, inplace: bool = False) -> Array:
        """fp32 log-probabilities of each row of [R, vocab] logits (the logprob tail); with
        `inplace` the backend may write them over `logits` (which the caller gives up)."""
        ...


def linear_add(ops: Ops, x: Array, w: Weight, residual: Array, bias: Array | None = None) -> Array:
    """residual + linear(x, w, bias), the residual stream's update: the backend's own
    `linear_add` where it has one (the add in the matmul's epilogue: one launch, not two; the
    same fp32 addition), else the model's two steps."""
    fused = getattr(ops, "linear_add", None)
    if fused is not None:
        return fused(x, w, residual, bias)
    return residual + ops.linear(x, w, bias)


def linear_runs(ops: Ops, x: Array, runs: list[tuple[Weight, Array | None]]) -> list[Array]:
    """[linear(x, w, b) for w, b in runs]: the backend's own `linear_runs` where it has one (several
    weights of one input in fewer launches, the same bits), else one linear each."""
    fused = getattr(ops, "linear_runs", None)
    if fused is not None and len(runs) > 1:
        return list(fused(x, runs))
    return [ops.linear(x, w, b) for w, b in runs]


def rope_kv_write(
    ops: Ops, q: Array, k: Array, v: Array, meta: AttentionMeta, table: RopeTable, k_cache: Array, v_cache: Array,
    after: Callable[[Array], Array] | None = None,
) -> Array:  # fmt: skip
    """The rotated queries (then `after` of them, where given), K rotated and written with V to the
    caches: the backend's own `rope_kv_write` where it has one and nothing comes after (one launch,
    the same operations), else the model's steps."""
    fused = getattr(ops, "rope_kv_write", None)
    if fused is not None and after is None:
        return fused(q, k, v, meta.positions, table, k_cache, v_cache, meta.slots)
    q, k = ops.rope(q, meta.positions, table), ops.rope(k, meta.positions, table)
    q = q if after is None else after(q)
    ops.kv_write(k, v, k_cache, v_cache, meta.slots)
    return q


def address(a: np.ndarray | None) -> int | None:
    """An array's data address for the C kernels, None (NULL) for an absent one."""
    return None if a is None else a.ctypes.data


def f32(a: np.ndarray) -> np.ndarray:
    """`a` as the C kernels read it: contiguous fp32 (no copy when it already is)."""
    return np.ascontiguousarray(a, dtype=np.float32)


def ints(a: np.ndarray, dtype: type[np.integer]) -> np.ndarray:
    """An index array as the C kernels read it: contiguous int32 or int64 (no copy when it is)."""
    return np.ascontiguousarray(a, dtype=dtype)


def to_numpy(a: Array) -> np.ndarray:
    """A backend's result as a host numpy array (no copy for numpy or a CPU tensor)."""
    return a if isinstance(a, np.ndarray) else a.detach().cpu().numpy()


def like(ref: Array, a: np.ndarray) -> Array:
    """Host values `a` as the same kind of array as `ref` (on its device)."""
    if isinstance(ref, np.ndarray):
        return a
    import torch

    return torch.from_numpy(a).to(ref.device)
