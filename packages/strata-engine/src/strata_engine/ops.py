"""The operations the model calls, behind one interface with interchangeable backends.

`NativeOps` (C kernels, see native/kernels.c) is batch-invariant by construction: a row's
result never depends on the rest of the batch. It works on numpy arrays, so a CPU engine on
the native kernels never imports torch (which would cost over a second of start-up and about
200 MB). `TorchOps` (torch_ops.py: MKL GEMMs and SDPA, not batch-invariant) is the fallback
where the kernels cannot build and the "invariance off" switch for tests and benchmarks;
`TritonOps` (triton_ops/) runs the same methods on a GPU. The engine hands every backend
numpy arrays (weights, the KV cache, the step's indices); the torch backends take them over
as tensors themselves, and `to_numpy` brings their results back.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from strata_engine.api import ModelLoadError
from strata_engine.weights import Weight

logger = logging.getLogger("strata_engine")
Q8_PACKED = 256  # added to a weight's kernel type once repacked for 8-bit activations (q8.h)


@dataclass(frozen=True)
class AttentionMeta:
    """Where each token of a step sits: its sequence's block table row and its position."""

    positions: np.ndarray  # [T] int32 absolute positions
    token_seq: np.ndarray  # [T] int32 row of `block_tables` for each token
    block_tables: np.ndarray  # [S, max_blocks] int32
    slots: np.ndarray  # [T] int64 flat cache slot (block * block_size + offset) to write
    block_size: int


@dataclass(frozen=True)
class RopeTable:
    """cos/sin per absolute position, [ctx, rot/2] fp32 (computed in float64 once)."""

    cos: np.ndarray
    sin: np.ndarray
    dim: int  # rotated dims (the first `dim` of each head)
    interleaved: bool  # pairs (2i, 2i+1) as in llama GGUFs, else (i, i + dim/2)


Array = Any  # a backend's own array: numpy for NativeOps, a torch tensor for TorchOps and TritonOps


class Ops(Protocol):
    """What the model calls. `name` says which kernels run (e.g. "native-avx2", "torch");
    `invariant` whether a row's bits are independent of the rest of the batch."""

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
    ) -> Array:
        """Causal attention; `scale` defaults to 1/sqrt(head_dim); `window` > 0 attends only to the
        last `window` positions (sliding-window layers); `softcap` > 0 caps the scores."""
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


def default_threads() -> int:
    """The CPUs this process may run on (the kernels' thread count unless one is given)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def cuda_present() -> bool:
    """Whether CUDA can run here, asked without importing torch unless an NVIDIA driver is loaded."""
    if not Path("/proc/driver/nvidia/version").exists():
        return False
    import torch

    return torch.cuda.is_available()


class NativeOps:
    """Batch-invariant CPU ops on the C kernels: the same bits on every CPU (see kernels.c).

    With `q8` (kernels "native-q8", opt-in), matmuls quantise their activations to 8 bits and
    take integer dot products (native/q8.h): faster, less exact, still batch-invariant and the
    same bits on every CPU."""

    invariant = True

    def __init__(self, num_threads: int, target: str | None = None, q8: bool = False) -> None:
        from strata_engine.native import load

        self.lib, self.target = load(target)
        self.q8 = q8
        self.name = f"native-{self.target}" + ("-q8" if q8 else "")
        self.threads = num_threads

    def pack(self, w: Weight) -> Weight:
        if not self.q8 or not self.lib.strata_q8_supported(w.kernel_type):
            return w  # fp32 weights and the default mode: as loaded
        size = self.lib.strata_q8_packed_bytes(w.kernel_type, w.out_features, w.in_features)
        packed = np.empty(size, dtype=np.uint8)
        self.lib.strata_q8_pack(
            w.kernel_type, address(w.raw), w.out_features, w.in_features, address(packed), self.threads
        )
        return Weight(w.name, w.out_features, w.in_features, w.kernel_type | Q8_PACKED, packed, w.source)

    def linear(
        self, x: np.ndarray, w: Weight, bias: np.ndarray | None = None, out: np.ndarray | None = None
    ) -> np.ndarray:
        x, bias = f32(x), None if bias is None else f32(bias)  # locals: alive through the call
        m = x.shape[0]
        y = np.empty((m, w.out_features), dtype=np.float32) if out is None else out
        assert y.shape == (m, w.out_features) and y.dtype == np.float32 and y.flags["C_CONTIGUOUS"]
        if m:
            self.lib.strata_matmul(
                address(x), m, w.in_features, address(w.raw), w.kernel_type, w.out_features,
                address(bias), address(y), self.threads,
            )  # fmt: skip
        return y

    def embed(self, w: Weight, ids: np.ndarray) -> np.ndarray:
        ids = ints(ids, np.int64)
        out = np.empty((ids.shape[0], w.in_features), dtype=np.float32)
        self.lib.strata_gather_rows(
            address(w.raw), w.kernel_type, w.in_features, address(ids), ids.shape[0], address(out)
        )
        return out

    def rmsnorm(self, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
        x, weight = f32(x), f32(weight)
        y = np.empty_like(x)
        rows = x.size // x.shape[-1]
        self.lib.strata_rmsnorm(address(x), rows, x.shape[-1], address(weight), eps, address(y), self.threads)
        return y

    def silu_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        gate, up = f32(gate), f32(up)
        out = np.empty_like(gate)
        self.lib.strata_silu_mul(address(gate), address(up), gate.size, address(out), self.threads)
        return out

    def gelu_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        gate, up = f32(gate), f32(up)
        out = np.empty_like(gate)
        self.lib.strata_gelu_mul(address(gate), address(up), gate.size, address(out), self.threads)
        return out

    def softcap(self, x: np.ndarray, cap: float) -> np.ndarray:
        x = f32(x)
        out = np.empty_like(x)
        self.lib.strata_softcap(address(x), x.size, cap, address(out))
        return out

    def attention(
        self,
        q: np.ndarray,
        k_cache: np.ndarray,
        v_cache: np.ndarray,
        meta: AttentionMeta,
        scale: float | None = None,
        window: int = 0,
        softcap: float = 0.0,
    ) -> np.ndarray:
        t, h, d = q.shape
        q = f32(q)
        tables, token_seq = ints(meta.block_tables, np.int32), ints(meta.token_seq, np.int32)
        positions = ints(meta.positions, np.int32)
        out = np.empty_like(q)
        self.lib.strata_attention(
            address(q), t, h, k_cache.shape[2], d, address(k_cache), address(v_cache),
            meta.block_size, address(tables), tables.shape[1], address(token_seq), address(positions),
            1.0 / math.sqrt(d) if scale is None else scale, softcap, window,
            address(out), self.threads,
        )  # fmt: skip
        return out

    def rope(self, x: np.ndarray, positions: np.ndarray, table: RopeTable) -> np.ndarray:
        x, positions = f32(x), ints(positions, np.int32)  # x rotated in place: a fresh linear output
        t, h, d = x.shape
        self.lib.strata_rope(
            address(x), t, h, d, table.dim, address(positions), address(table.cos),
            address(table.sin), int(table.interleaved),
        )  # fmt: skip
        return x

    def kv_write(
        self,
        k: np.ndarray,
        v: np.ndarray,
        k_cache: np.ndarray,
        v_cache: np.ndarray,
        slots: np.ndarray,
    ) -> None:
        k, v, slots = f32(k), f32(v), ints(slots, np.int64)
        self.lib.strata_kv_write(
            address(k), address(v), k.shape[0], k[0].size, address(slots),
            address(k_cache), address(v_cache), self.threads,
        )  # fmt: skip

    def log_softmax(self, logits: np.ndarray, inplace: bool = False) -> np.ndarray:
        logits = f32(logits)
        # in place: each row's values are all read before its first is written (kernels.c), and
        # a fresh [512, 49152] output alone costs about 28 ms of page faults
        out = logits if inplace else np.empty_like(logits)
        if logits.shape[0]:
            self.lib.strata_log_softmax(
                address(logits), logits.shape[0], logits.shape[1], address(out), self.threads
            )
        return out


KERNEL_CHOICES = ("auto", "native", "native-q8", "torch")
DEVICE_CHOICES = ("auto", "cpu", "cuda")


def make_ops(kernels: str = "auto", device: str = "cpu", num_threads: int | None = None) -> Ops:
    """The backend for `kernels` (auto | native | native-q8 | torch) on `device` (auto | cpu | cuda).

    `auto` on the CPU takes the native kernels and falls back to torch only when they cannot
    be built, with one WARNING that says why (the fallback is not batch-invariant).
    """
    if kernels not in KERNEL_CHOICES:
        raise ValueError(f"kernels must be one of {', '.join(KERNEL_CHOICES)}, not {kernels!r}")
    if device not in DEVICE_CHOICES:
        raise ValueError(f"device must be one of {', '.join(DEVICE_CHOICES)}, not {device!r}")
    if kernels == "native-q8" and device == "cuda":
        raise ValueError("kernels native-q8 (8-bit activations) run on the CPU only; use --device cpu")
    if device == "cuda" or (device == "auto" and kernels != "native-q8" and cuda_present()):
        try:
            from strata_engine.triton_ops import TritonOps
        except ImportError as exc:
            raise ModelLoadError(
                f"the GPU kernels need torch and triton ({exc}): pip install 'strata-engine[gpu]'"
            ) from exc
        return TritonOps()
    threads = num_threads or default_threads()
    if kernels == "torch":
        return torch_ops(threads)
    from strata_engine.native import NativeUnavailable

    if kernels == "native-q8":  # asked for by name: no fallback
        return NativeOps(threads, q8=True)
    try:
        return NativeOps(threads)
    except NativeUnavailable as exc:
        if kernels == "native":
            raise
        try:
            fallback = torch_ops(threads)
        except ModelLoadError:
            raise NativeUnavailable(
                f"{exc}; the torch fallback is not installed either (pip install torch==2.13.0)"
            ) from exc
        logger.warning(
            "native kernels unavailable (%s); running the torch fallback, which is slower and NOT "
            "batch-invariant. Install a C compiler (e.g. `apt-get install gcc`, `xcode-select --install`) "
            "and restart to get exact, batch-invariant results.",
            exc,
        )
        return fallback


def torch_ops(threads: int) -> Ops:
    """The torch fallback kernels; torch is optional (the engine's `torch` extra)."""
    try:
        from strata_engine.torch_ops import TorchOps
    except ImportError as exc:
        raise ModelLoadError(
            f"kernels torch need torch ({exc}): pip install torch==2.13.0 (or 'strata-engine[torch]')"
        ) from exc
    return TorchOps(threads)


def describe(kernels: str, invariant: bool) -> str:
    """One line for logs and CLIs, like llama.cpp's system info."""
    kind = "batch-invariant, the same bits on every CPU" if invariant else "NOT batch-invariant"
    return f"kernels: {kernels} ({kind})"
