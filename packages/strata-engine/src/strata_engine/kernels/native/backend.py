"""`NativeOps`: the engine's ops on the C kernels (native/*.c), batch-invariant by construction.

A row's result never depends on the rest of the batch. It works on numpy arrays, so a CPU engine
on the native kernels never imports torch (which would cost over a second of start-up and about
200 MB).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from strata_engine.kernels.base import (
    LIMB_SHIFT,
    Q8_PACKED,
    AttentionMeta,
    DeltaNetStep,
    RopeTable,
    address,
    f32,
    ints,
)
from strata_engine.kernels.kv_types import kv_type
from strata_engine.kernels.native import load
from strata_engine.kernels.weights import Weight

DEFAULT_LIMBS = 3  # the default arithmetic ("native"): activations as three int8 limbs


class KernelOutOfMemory(MemoryError):
    """A kernel could not allocate its temporaries and left outputs uncomputed (native/common.c):
    the step fails with this, never with a crash or with values read from memory never written."""


def mode_suffix(q8: bool, limbs: int) -> str:
    """What an ops name adds after its target: "" for the default (DEFAULT_LIMBS), else the mode."""
    if limbs == DEFAULT_LIMBS:
        return ""
    return f"-limb{limbs}" if limbs else "-q8" if q8 else "-fp32"


class NativeOps:
    """Batch-invariant CPU ops on the C kernels: the same bits on every CPU (see internal.h).

    With `limbs` 3 (kernels "native", the default) or 2 ("native-limb2") matmuls take the
    activations as a power-of-two scale and 3 or 2 int8 limbs per block of 32 (native/limb.c)
    against the weights' integer quants: exact integer sums, fp32-level accuracy at 3. With `q8`
    alone ("native-q8") they quantise the activations to 8 bits (native/q8.c): faster, less
    exact. Neither ("native-fp32"): fp32 matmuls on the dequantised weights. Every mode is
    batch-invariant and gives the same bits on every CPU."""

    invariant = True

    def __init__(self, num_threads: int, target: str | None = None, q8: bool = False, limbs: int = 0) -> None:
        if limbs not in (0, 2, 3):
            raise ValueError(f"limbs must be 2 or 3 (or 0: none), not {limbs}")
        self.lib, self.target = load(target)
        self.q8 = q8 or limbs > 0  # the weights repacked for integer dot products
        self.limbs = limbs
        self.name = f"native-{self.target}" + mode_suffix(self.q8, limbs)
        self.threads = num_threads

    @contextmanager
    def ieee_floats(self) -> Iterator[None]:
        """Run the block (one engine step) with IEEE default float modes on this thread and on
        the kernels' worker threads, then give this thread its own modes back: flush-to-zero or
        denormals-are-zero set by other code in the process (torch.set_flush_denormal) would
        otherwise change the kernels' bits (native/fpmode.c)."""
        saved = self.lib.strata_fp_ieee(self.threads)
        try:
            yield
        finally:
            if saved:
                self.lib.strata_fp_restore(saved)

    def pack(self, w: Weight) -> Weight:
        if not self.q8 or not self.lib.strata_q8_supported(w.kernel_type):
            return w  # fp32 weights and the default mode: as loaded
        size = self.lib.strata_q8_packed_bytes(w.kernel_type, w.out_features, w.in_features)
        packed = np.empty(size, dtype=np.uint8)
        self.lib.strata_q8_pack(
            w.kernel_type, address(w.raw), w.out_features, w.in_features, address(packed), self.threads
        )
        kind = w.kernel_type | Q8_PACKED | self.limbs << LIMB_SHIFT
        return Weight(w.name, w.out_features, w.in_features, kind, packed, w.source)

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
        self.check_allocations()  # every step ends in a linear (the logits): nothing unchecked is read
        return y

    def check_allocations(self) -> None:
        """Raise `KernelOutOfMemory` if any kernel call since the last check could not allocate
        (strata_layer's and attention's too: their outputs feed the next linear)."""
        if failed := self.lib.strata_alloc_failures():
            raise KernelOutOfMemory(
                f"out of memory: the CPU kernels could not allocate their temporaries ({failed} failed "
                "allocations); the step was not computed"
            )

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

    def delta_rule(
        self,
        states: np.ndarray,
        slots: np.ndarray,
        starts: np.ndarray,
        counts: np.ndarray,
        qkv: tuple[np.ndarray, np.ndarray, np.ndarray],
        decay: np.ndarray,
        beta: np.ndarray,
        scale: float,
        captures: tuple[tuple[int, int, int], ...] = (),
    ) -> np.ndarray:
        """The DeltaNet recurrence (recurrence.c; hybrid_model._delta_net states the arithmetic):
        states [slots, HV, D, D] advanced in place, the outputs [T, HV, D] returned."""
        q, k, v = (f32(a) for a in qkv)
        assert states.dtype == np.float32 and states.flags.c_contiguous
        core = np.empty_like(v)
        # every array the call reads held here: an address of a temporary would dangle
        slots, starts, counts = (ints(a, np.int32) for a in (slots, starts, counts))
        decay, beta = f32(decay), f32(beta)
        rows, after, to = (np.array([c[i] for c in captures], dtype=np.int32) for i in range(3))
        self.lib.strata_delta_rule(
            address(states), address(slots), len(slots), address(starts), address(counts), address(q),
            address(k), address(v), address(decay), address(beta), v.shape[1], v.shape[2], scale,
            address(core), address(rows), address(after), address(to), len(captures), self.threads,
        )  # fmt: skip
        return core

    def delta_net(self, s: DeltaNetStep) -> np.ndarray:
        """A DeltaNet layer's host steps and recurrence in one call (recurrence.c strata_delta_net;
        hybrid_model.delta_net_steps states them): ssm_out's input [T, HV * D]."""
        hv, d = s.states.shape[1], s.states.shape[2]
        assert s.states.dtype == np.float32 and s.states.flags.c_contiguous
        assert s.windows.dtype == np.float32 and s.windows.flags.c_contiguous
        # every array the call reads held here: an address of a temporary would dangle
        qkv, z, b, alpha, taps = (f32(a) for a in (s.qkv, s.z, s.b, s.alpha, s.taps))
        dt_bias, ssm_a, norm = f32(s.dt_bias), f32(s.ssm_a), f32(s.norm)
        slots, starts, counts, heads = (
            ints(a, np.int32) for a in (s.state_slots, s.starts, s.counts, s.key_heads)
        )
        rows, after, to = (
            np.array([c[i] for c in s.captures], dtype=np.int32) if s.captures else None for i in range(3)
        )  # no captures (most steps): NULL, never read
        eps_bits = np.array([s.eps], dtype=np.float64).view(np.int64)  # l2_normalize's float64 eps
        out = np.empty((qkv.shape[0], hv * d), dtype=np.float32)
        n_k = (qkv.shape[1] // d - hv) // 2
        self.lib.strata_delta_net(
            address(qkv), address(z), address(b), address(alpha), qkv.shape[0], address(taps), taps.shape[0],
            address(s.windows), address(s.states), address(slots), len(slots), address(starts), address(counts),
            address(rows), address(after), address(to), len(s.captures), address(dt_bias), address(ssm_a),
            address(norm), address(heads), n_k, hv, d, address(eps_bits), s.eps, s.scale, address(out),
            self.threads,
        )  # fmt: skip
        return out

    def sigmoid_gate(self, x: np.ndarray, gate: np.ndarray) -> np.ndarray:
        """x * sigmoid(gate), the sigmoid in float64 as hybrid_model.sigmoid (exactmath's exp)
        rounded to fp32 (recurrence.c strata_sigmoid_gate): the gated attention's output."""
        x, gate = f32(x), f32(gate)
        out = np.empty_like(x)
        self.lib.strata_sigmoid_gate(address(x), address(gate), x.size, address(out), self.threads)
        return out

    def swiglu_oai(self, gate: np.ndarray, up: np.ndarray, alpha: float, limit: float) -> np.ndarray:
        gate, up = f32(gate), f32(up)
        out = np.empty_like(gate)
        self.lib.strata_swiglu_oai(
            address(gate), address(up), gate.size, alpha, limit, address(out), self.threads
        )
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
        sinks: np.ndarray | None = None,
    ) -> np.ndarray:
        t, h, d = q.shape
        q = f32(q)
        tables, token_seq = ints(meta.block_tables, np.int32), ints(meta.token_seq, np.int32)
        positions = ints(meta.positions, np.int32)
        sinks = None if sinks is None else f32(sinks)  # a local: alive through the call
        out = np.empty_like(q)
        self.lib.strata_attention_sinks(
            address(q), t, h, k_cache.shape[2], d, address(k_cache), address(v_cache),
            kv_type(k_cache), meta.block_size, address(tables), tables.shape[1], address(token_seq), address(positions),
            1.0 / math.sqrt(d) if scale is None else scale, softcap, window, address(sinks),
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
            address(k_cache), address(v_cache), kv_type(k_cache), self.threads,
        )  # fmt: skip

    def log_softmax(self, logits: np.ndarray, inplace: bool = False) -> np.ndarray:
        logits = f32(logits)
        # in place: each row's values are all read before its first is written (logprobs.c), and
        # a fresh [512, 49152] output alone costs about 28 ms of page faults
        out = logits if inplace else np.empty_like(logits)
        if logits.shape[0]:
            self.lib.strata_log_softmax(
                address(logits), logits.shape[0], logits.shape[1], address(out), self.threads
            )
        return out
