"""The operations the model calls, behind one interface with interchangeable backends.

`NativeOps` (C kernels, see native/kernels.c) is batch-invariant by construction: a row's
result never depends on the rest of the batch. `TorchOps` uses MKL GEMMs and SDPA: faster
to write, not batch-invariant, kept as the fallback where the kernels cannot build and as
the "invariance off" switch for tests and benchmarks. A GPU backend implements the same
methods with Triton kernels.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from strata_engine.weights import Weight

logger = logging.getLogger("strata_engine")
Q8_PACKED = 256  # added to a weight's kernel type once repacked for 8-bit activations (q8.h)


@dataclass(frozen=True)
class AttentionMeta:
    """Where each token of a step sits: its sequence's block table row and its position."""

    positions: torch.Tensor  # [T] int32 absolute positions
    token_seq: torch.Tensor  # [T] int32 row of `block_tables` for each token
    block_tables: torch.Tensor  # [S, max_blocks] int32
    slots: torch.Tensor  # [T] int64 flat cache slot (block * block_size + offset) to write
    block_size: int


@dataclass(frozen=True)
class RopeTable:
    """cos/sin per absolute position, [ctx, rot/2] fp32 (computed in float64 once)."""

    cos: torch.Tensor
    sin: torch.Tensor
    dim: int  # rotated dims (the first `dim` of each head)
    interleaved: bool  # pairs (2i, 2i+1) as in llama GGUFs, else (i, i + dim/2)


class Ops(Protocol):
    """What the model calls. `name` says which kernels run (e.g. "native-avx2", "torch");
    `invariant` whether a row's bits are independent of the rest of the batch."""

    name: str
    invariant: bool

    def pack(self, w: Weight) -> Weight:
        """`w` in the form this backend's `linear` reads (at load; `w` itself except for native-q8)."""
        ...

    def linear(
        self, x: torch.Tensor, w: Weight, bias: torch.Tensor | None = None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x @ w.T (+ bias); `out`, a contiguous fp32 [rows, out_features] buffer, may receive the
        result (which is returned either way)."""
        ...

    def embed(self, w: Weight, ids: torch.Tensor) -> torch.Tensor: ...
    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor: ...
    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor: ...
    def gelu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """GeGLU: gelu(gate) * up, GELU's tanh approximation (Gemma)."""
        ...

    def softcap(self, x: torch.Tensor, cap: float) -> torch.Tensor:
        """cap * tanh(x / cap), elementwise (Gemma 2's final logit soft-capping)."""
        ...

    def attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMeta,
        scale: float | None = None,
        window: int = 0,
        softcap: float = 0.0,
    ) -> torch.Tensor:
        """Causal attention; `scale` defaults to 1/sqrt(head_dim); `window` > 0 attends only to the
        last `window` positions (sliding-window layers); `softcap` > 0 caps the scores."""
        ...

    def rope(self, x: torch.Tensor, positions: torch.Tensor, table: RopeTable) -> torch.Tensor:
        """x [T, H, D] rotated; may rotate x in place and return it (callers own x)."""
        ...

    def kv_write(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slots: torch.Tensor,
    ) -> None: ...
    def log_softmax(self, logits: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        """fp32 log-probabilities of each row of [R, vocab] logits (the logprob tail); with
        `inplace` the backend may write them over `logits` (which the caller gives up)."""
        ...


def address(t: torch.Tensor | None) -> int | None:
    """A tensor's data address for the C kernels, None (NULL) for an absent one."""
    return None if t is None else t.data_ptr()


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
        packed = torch.empty(size, dtype=torch.uint8)
        self.lib.strata_q8_pack(
            w.kernel_type, w.raw.data_ptr(), w.out_features, w.in_features, packed.data_ptr(), self.threads
        )
        return Weight(w.name, w.out_features, w.in_features, w.kernel_type | Q8_PACKED, packed, w.source)

    def linear(
        self, x: torch.Tensor, w: Weight, bias: torch.Tensor | None = None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x.contiguous()
        m = x.shape[0]
        y = torch.empty(m, w.out_features, dtype=torch.float32) if out is None else out
        assert y.shape == (m, w.out_features) and y.dtype == torch.float32 and y.is_contiguous()
        if m:
            self.lib.strata_matmul(
                x.data_ptr(), m, w.in_features, w.raw.data_ptr(), w.kernel_type, w.out_features,
                address(bias), y.data_ptr(), self.threads,
            )  # fmt: skip
        return y

    def embed(self, w: Weight, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.to(torch.int64).contiguous()
        out = torch.empty(ids.shape[0], w.in_features, dtype=torch.float32)
        self.lib.strata_gather_rows(
            w.raw.data_ptr(), w.kernel_type, w.in_features, ids.data_ptr(), ids.shape[0], out.data_ptr()
        )
        return out

    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        rows = x.numel() // x.shape[-1]
        self.lib.strata_rmsnorm(
            x.data_ptr(), rows, x.shape[-1], weight.data_ptr(), eps, y.data_ptr(), self.threads
        )
        return y

    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty_like(gate)
        self.lib.strata_silu_mul(gate.data_ptr(), up.data_ptr(), gate.numel(), out.data_ptr(), self.threads)
        return out

    def gelu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate, up = gate.contiguous(), up.contiguous()
        out = torch.empty_like(gate)
        self.lib.strata_gelu_mul(gate.data_ptr(), up.data_ptr(), gate.numel(), out.data_ptr(), self.threads)
        return out

    def softcap(self, x: torch.Tensor, cap: float) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        self.lib.strata_softcap(x.data_ptr(), x.numel(), cap, out.data_ptr())
        return out

    def attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMeta,
        scale: float | None = None,
        window: int = 0,
        softcap: float = 0.0,
    ) -> torch.Tensor:
        t, h, d = q.shape
        q = q.contiguous()
        out = torch.empty_like(q)
        self.lib.strata_attention(
            q.data_ptr(), t, h, k_cache.shape[2], d, k_cache.data_ptr(), v_cache.data_ptr(),
            meta.block_size, meta.block_tables.data_ptr(), meta.block_tables.shape[1],
            meta.token_seq.data_ptr(), meta.positions.data_ptr(),
            1.0 / math.sqrt(d) if scale is None else scale, softcap, window,
            out.data_ptr(), self.threads,
        )  # fmt: skip
        return out

    def rope(self, x: torch.Tensor, positions: torch.Tensor, table: RopeTable) -> torch.Tensor:
        x = x.contiguous()  # rotated in place: q and k are fresh outputs of linear
        t, h, d = x.shape
        self.lib.strata_rope(
            x.data_ptr(), t, h, d, table.dim, positions.data_ptr(), table.cos.data_ptr(),
            table.sin.data_ptr(), int(table.interleaved),
        )  # fmt: skip
        return x

    def kv_write(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        k, v = k.contiguous(), v.contiguous()
        self.lib.strata_kv_write(
            k.data_ptr(), v.data_ptr(), k.shape[0], k[0].numel(), slots.data_ptr(),
            k_cache.data_ptr(), v_cache.data_ptr(),
        )  # fmt: skip

    def log_softmax(self, logits: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        logits = logits.float().contiguous()
        # in place: each row's values are all read before its first is written (kernels.c), and
        # a fresh [512, 49152] output alone costs about 28 ms of page faults
        out = logits if inplace else torch.empty_like(logits)
        if logits.shape[0]:
            self.lib.strata_log_softmax(
                logits.data_ptr(), logits.shape[0], logits.shape[1], out.data_ptr(), self.threads
            )
        return out


class TorchOps:
    """Plain PyTorch ops (MKL, SDPA). Correct, but a row's bits depend on the batch shape."""

    name = "torch"
    invariant = False

    def pack(self, w: Weight) -> Weight:
        return w

    def linear(
        self, x: torch.Tensor, w: Weight, bias: torch.Tensor | None = None, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        return F.linear(x, w.dense(), bias)

    def embed(self, w: Weight, ids: torch.Tensor) -> torch.Tensor:
        return w.dense()[ids.to(torch.int64)]

    def rmsnorm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def silu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.silu(gate) * up

    def gelu_mul(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return F.gelu(gate, approximate="tanh") * up

    def softcap(self, x: torch.Tensor, cap: float) -> torch.Tensor:
        return torch.tanh(x / cap) * cap

    def attention(
        self,
        q: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        meta: AttentionMeta,
        scale: float | None = None,
        window: int = 0,
        softcap: float = 0.0,
    ) -> torch.Tensor:
        out = torch.empty_like(q)
        group = q.shape[1] // k_cache.shape[2]
        bs = meta.block_size
        for row in torch.unique(meta.token_seq).tolist():
            idx = (meta.token_seq == row).nonzero().squeeze(1)
            pos = meta.positions[idx].to(torch.int64)
            n = int(pos.max()) + 1
            table = meta.block_tables[row].to(torch.int64)
            j = torch.arange(n)
            slots = table[j // bs] * bs + j % bs
            k = k_cache.flatten(0, 1)[slots].repeat_interleave(group, dim=1).transpose(0, 1)
            v = v_cache.flatten(0, 1)[slots].repeat_interleave(group, dim=1).transpose(0, 1)
            mask = j[None, :] <= pos[:, None]
            if window:
                mask &= j[None, :] > pos[:, None] - window
            qh = q[idx].transpose(0, 1)
            if softcap:  # SDPA cannot cap the scores: written out
                s = qh @ k.transpose(1, 2) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[2]))
                s = (torch.tanh(s / softcap) * softcap).masked_fill(~mask, float("-inf"))
                o = torch.softmax(s, dim=-1) @ v
            else:
                o = F.scaled_dot_product_attention(qh, k, v, attn_mask=mask, scale=scale)
            out[idx] = o.transpose(0, 1)
        return out

    def rope(self, x: torch.Tensor, positions: torch.Tensor, table: RopeTable) -> torch.Tensor:
        pos = positions.to(torch.int64)
        cos, sin = table.cos[pos][:, None, :], table.sin[pos][:, None, :]
        rot, rest = x[..., : table.dim], x[..., table.dim :]
        if table.interleaved:
            a, b = rot[..., 0::2], rot[..., 1::2]
            out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
        else:
            half = table.dim // 2
            a, b = rot[..., :half], rot[..., half:]
            out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        return torch.cat((out, rest), dim=-1) if rest.shape[-1] else out

    def kv_write(
        self,
        k: torch.Tensor,
        v: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        k_cache.view(-1, *k.shape[1:])[slots] = k
        v_cache.view(-1, *v.shape[1:])[slots] = v

    def log_softmax(self, logits: torch.Tensor, inplace: bool = False) -> torch.Tensor:
        rows = [torch.log_softmax(row, dim=-1) for row in logits.float()]  # one row at a time
        return torch.stack(rows) if rows else logits.float()


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
    if device == "cuda" or (device == "auto" and torch.cuda.is_available() and kernels != "native-q8"):
        from strata_engine.triton_ops import TritonOps

        return TritonOps()
    threads = num_threads or torch.get_num_threads()
    if kernels == "torch":
        return TorchOps()
    from strata_engine.native import NativeUnavailable

    if kernels == "native-q8":  # asked for by name: no fallback
        return NativeOps(threads, q8=True)
    try:
        return NativeOps(threads)
    except NativeUnavailable as exc:
        if kernels == "native":
            raise
        logger.warning(
            "native kernels unavailable (%s); running the torch fallback, which is slower and NOT "
            "batch-invariant. Install a C compiler (e.g. `apt-get install gcc`, `xcode-select --install`) "
            "and restart to get exact, batch-invariant results.",
            exc,
        )
        return TorchOps()


def describe(kernels: str, invariant: bool) -> str:
    """One line for logs and CLIs, like llama.cpp's system info."""
    kind = "batch-invariant, the same bits on every CPU" if invariant else "NOT batch-invariant"
    return f"kernels: {kernels} ({kind})"
