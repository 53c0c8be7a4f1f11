"""`TritonOps`: the engine's ops as Triton kernels for CUDA GPUs, batch-invariant by construction.

Each kernel family has its module (integer and fp32 matmuls, norm, rope, activation, attention,
logprobs). Every output element is computed by one fixed sequence of float operations, never
chosen by the batch, so a row's bits do not depend on what else runs; in every mode (fp32, with
quantised weights dequantised as C does, and the integer modes) that sequence is the C kernels'
own, so the rows are the CPU engine's (docs/gpu.md).

The engine hands the ops numpy arrays (weights, norm vectors, the RoPE table, the KV cache and the
step's index arrays); TritonOps moves what it needs to its device itself and keeps it there:
weights and other model tensors once (cached by identity), the step's index tensors once per
step, and the KV cache as a device twin of the CPU cache (allocated on first write). Results go
back to the engine as CPU fp32 only at the end, from `log_softmax`. With `graphs` on, decode
steps run on static buffers instead and are captured as CUDA graphs (graphs.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from strata_engine.kernels.base import Q8_PACKED, Array, AttentionMeta, RopeTable
from strata_engine.kernels.kv_types import kv_dtype_name
from strata_engine.kernels.rows import Row, RowRead
from strata_engine.kernels.torch_backend import tensor
from strata_engine.kernels.triton import (
    activation,
    addnorm,
    attention,
    fmatmul,
    gateup,
    intmatmul,
    kv,
    logprobs,
    matmul,
    norm,
    packed,
    qkvrope,
    recurrence,
    rope,
    select,
)
from strata_engine.kernels.triton.graphs import SCRATCH_BLOCKS, DecodeGraphs, switched_on
from strata_engine.kernels.triton.quantize import Quantised, quantize
from strata_engine.kernels.triton.stored import StoredWeight, for_packing, from_weight
from strata_engine.kernels.triton.wtypes import F32
from strata_engine.kernels.weights import Weight


def default_device() -> torch.device:
    """CUDA when present; the CPU only under Triton's interpreter (TRITON_INTERPRET=1, for tests)."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if os.environ.get("TRITON_INTERPRET") == "1":
        return torch.device("cpu")
    raise RuntimeError(
        "the Triton kernels need a CUDA GPU and none is visible to torch "
        f"(torch {torch.__version__}, CUDA build: {torch.version.cuda}); run with --device cpu"
    )


def _same_rows(y: torch.Tensor, x: Array) -> bool:
    """Whether x is y's rows: y itself, or a contiguous view of all of its elements with as
    many rows (the attention output [T, H, D] read as [T, H D])."""
    if x is y:
        return True
    return (
        isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[0] == y.shape[0] and x.numel() == y.numel()
        and x.is_contiguous() and y.is_contiguous() and x.dtype == y.dtype and x.device == y.device
        and x.data_ptr() == y.data_ptr()
    )  # fmt: skip


class TritonOps:
    """Batch-invariant GPU ops (see the module docstring for where tensors live)."""

    invariant = True
    fuses_projections = True  # q/k/v and gate/up through one matmul per run of same-typed weights
    selects_on_device = True  # `read_rows`: greedy and scoring rows come back as their selection

    def __init__(
        self, device: torch.device | str | None = None, limbs: int | None = None, graphs: bool | None = None
    ) -> None:
        """`limbs` 3 (the default), 1 (q8's 8-bit rule) or 2: the CPU's integer matmuls ("native",
        "native-q8", "native-limb2"; intmatmul.py) on weights packed by its C code; None: fp32
        matmuls ("native-fp32"). `graphs`: decode steps on static buffers, captured as CUDA graphs (graphs.py); None reads the
        switch STRATA_CUDA_GRAPHS (off unless "1")."""
        self.device = torch.device(device) if device is not None else default_device()
        if self.device.type == "cuda" and self.device.index is None:  # "cuda" is one GPU: name it,
            self.device = torch.device("cuda", torch.cuda.current_device())  # so tensors on it compare equal
        self.limbs = limbs
        self._packer = packed.packer(limbs) if limbs is not None else None
        self.name = packed.arithmetic_name(limbs)
        self._weights: dict[int, tuple[Weight, StoredWeight]] = {}
        self._packed: dict[int, tuple[Weight, packed.PackedWeight]] = {}
        self._model_tensors: dict[int, tuple[Array, torch.Tensor]] = {}
        self._step_tensors: dict[int, tuple[Array, torch.Tensor]] = {}
        self._caches: dict[int, tuple[Array, torch.Tensor]] = {}
        # the static decode path (the engine's runner asks it first), or None: off
        on = switched_on() if graphs is None else graphs
        self.decode_graphs = DecodeGraphs(self.device, logprobs.log_softmax) if on else None
        self._device_states = False  # a hybrid model's states are on the device (recurrent_states)
        # the last activation a kernel quantised as it made it (RMSNorm, the gated FFN): the
        # integer matmuls that take that very tensor read its digits instead of quantising again
        self._made: tuple[torch.Tensor, Quantised] | None = None
        self.bytes_read = 0  # bytes of log-probabilities copied back to the host so far
        self.device_draws = 0  # tokens drawn on the device so far (draw.py)

    # -- where tensors live ---------------------------------------------------------------
    def _weight(self, w: Weight) -> StoredWeight:
        hit = self._weights.get(id(w))
        if hit is None or hit[0] is not w:
            hit = (w, from_weight(w, self.device))
            self._weights[id(w)] = hit
        return hit[1]

    def _packed_weight(self, w: Weight) -> packed.PackedWeight:
        """A weight packed for integer dot products, its bytes moved once."""
        hit = self._packed.get(id(w))
        if hit is None or hit[0] is not w:
            hit = (w, packed.from_packed(w, self.device))
            self._packed[id(w)] = hit
        return hit[1]

    def _moved(self, t: Array, cache: dict[int, tuple[Array, torch.Tensor]]) -> torch.Tensor:
        """`t` on the device, copied once per array object (the cache holds `t`, so ids stay unique)."""
        if isinstance(t, torch.Tensor) and t.device == self.device:
            return t.contiguous()
        hit = cache.get(id(t))
        if hit is None or hit[0] is not t:
            hit = (t, tensor(t).to(self.device).contiguous())
            cache[id(t)] = hit
        return hit[1]

    def _model(self, t: Array) -> torch.Tensor:
        """A model tensor (norm weight, bias, RoPE table): moved once for the engine's lifetime."""
        return self._moved(t, self._model_tensors)

    def _step(self, t: Array) -> torch.Tensor:
        """A step's index array (positions, tables, slots): moved once, shared by every layer."""
        if len(self._step_tensors) > 16:
            self._step_tensors.clear()
        return self._moved(t, self._step_tensors)

    def _cache(self, c: Array) -> torch.Tensor:
        """The device twin of a KV cache array (the host one is never touched), zeroed, with
        the static path's scratch block past the engine's blocks."""
        if isinstance(c, torch.Tensor) and c.device == self.device:
            return c
        hit = self._caches.get(id(c))
        if hit is None or hit[0] is not c:
            blocks = c.shape[0] + (SCRATCH_BLOCKS if self.decode_graphs is not None else 0)
            dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[kv_dtype_name(c)]
            hit = (c, torch.zeros((blocks, *c.shape[1:]), dtype=dtype, device=self.device))
            self._caches[id(c)] = hit
        return hit[1]

    # -- the hybrid models' recurrence ---------------------------------------------------------
    def recurrent_states(self, a: np.ndarray) -> Array:
        """A DeltaNet layer's states [slots, HV, D, D] where the recurrence will run: on the
        device (recurrence.py) for a head size it supports, else `a` itself, on the host."""
        if not recurrence.supported(a.shape[-1]):
            return a
        self._device_states = True
        return torch.from_numpy(a).to(self.device)

    @property
    def delta_rule(self) -> Callable[..., np.ndarray] | None:
        """The DeltaNet recurrence of a hybrid model (hybrid_model._delta_net): on the device
        where `recurrent_states` put the states there; else None, and the model runs its numpy
        sequence on the host (the same operations, about ten times slower than C). The CPU's
        bits either way."""
        return self._device_delta_rule if self._device_states else None

    def _device_delta_rule(
        self,
        states: torch.Tensor,
        slots: np.ndarray,
        starts: np.ndarray,
        counts: np.ndarray,
        qkv: tuple[np.ndarray, np.ndarray, np.ndarray],
        decay: np.ndarray,
        beta: np.ndarray,
        scale: float,
        captures: tuple[tuple[int, int, int], ...] = (),
    ) -> np.ndarray:
        """recurrence.delta_rule on the step's host arrays; the outputs back on the host, where
        the model's DeltaNet layer goes on."""
        dev = self.device

        def ints(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a, dtype=np.int32)).to(dev)

        q, k, v = (tensor(a).to(dev) for a in qkv)
        core = recurrence.delta_rule(
            states, ints(slots), ints(starts), ints(counts), (q, k, v),
            tensor(decay).to(dev), tensor(beta).to(dev), scale, captures,
        )  # fmt: skip
        return core.cpu().numpy()

    # -- the ops --------------------------------------------------------------------------
    def pack(self, w: Weight) -> Weight:
        """Packed by the C code for the integer matmuls, where the device decodes the type
        (packed.SUPPORTED); otherwise
        as loaded, for the fp32 matmul."""
        if self._packer is None:
            return w
        w = for_packing(w)
        return self._packer.pack(w) if w.kernel_type in packed.SUPPORTED else w

    def linear(
        self, x: Array, w: Weight, bias: Array | None = None, out: Array | None = None
    ) -> torch.Tensor:
        b = self._model(bias) if bias is not None else None
        if w.kernel_type & Q8_PACKED:
            pw = self._packed_weight(w)
            return intmatmul.matmul_quantised(self._quantised(x, pw.limbs), pw, b)
        x = tensor(x).to(self.device, torch.float32)
        sw = self._weight(w)
        if sw.kt == F32:  # fp32 weights: the C kernels' dot_1 order in every mode (fmatmul.py)
            return fmatmul.matmul(x, sw.wf.view(sw.out_features, sw.in_features), b)
        return matmul.matmul(x, sw.wq, sw.wf, sw.kt, sw.out_features, sw.in_features, sw.row_bytes, b)

    def linear_runs(self, x: Array, runs: list[tuple[Weight, Array | None]]) -> list[torch.Tensor]:
        """[linear(x, w, b) for w, b in runs], the same bits (model.fused_linear): each two
        consecutive runs that the integer kernels read take one launch whatever their types
        (intmatmul.matmul_pair)."""
        out: list[torch.Tensor] = []
        for i in range(0, len(runs), 2):
            pair = runs[i : i + 2]
            if len(pair) == 2 and all(w.kernel_type & Q8_PACKED for w, _ in pair):
                pw1, pw2 = self._packed_weight(pair[0][0]), self._packed_weight(pair[1][0])
                if pw1.limbs == pw2.limbs:
                    b1, b2 = (self._model(b) if b is not None else None for _, b in pair)
                    out += intmatmul.matmul_pair(self._quantised(x, pw1.limbs), pw1, pw2, (b1, b2))
                    continue
            out += [self.linear(x, w, b) for w, b in pair]
        return out

    def linear_add(self, x: Array, w: Weight, residual: Array, bias: Array | None = None) -> torch.Tensor:
        """residual + linear(x, w, bias) (base.linear_add): the integer matmuls add the residual
        in their epilogue (one launch, the same fp32 addition); the other kernels leave it to torch."""
        r = tensor(residual).to(self.device, torch.float32)
        if not w.kernel_type & Q8_PACKED:
            return r + self.linear(x, w, bias)
        b = self._model(bias) if bias is not None else None
        pw = self._packed_weight(w)
        return intmatmul.matmul_quantised(self._quantised(x, pw.limbs), pw, b, residual=r)

    def linear_add_norm(
        self, x: Array, w: Weight, residual: Array, weight: Array, eps: float, bias: Array | None = None
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(y, rmsnorm(y, weight, eps)) for y = residual + linear(x, w, bias), with the norm's
        quantisation, in one launch (addnorm.py) where the integer decode path takes it; else
        None (fused_norm.add_norm then runs linear_add and rmsnorm: the same bits)."""
        if self.limbs is None or not w.kernel_type & Q8_PACKED or len(getattr(x, "shape", ())) != 2:
            return None
        pw = self._packed_weight(w)
        r, g = tensor(residual).to(self.device, torch.float32), self._model(weight)
        if pw.limbs != self.limbs or not addnorm.fits(x.shape[0], x.shape[1], pw, r, g):
            return None
        b = self._model(bias) if bias is not None else None
        y, h, hq = addnorm.linear_add_norm(self._quantised(x, pw.limbs), pw, r, g, eps, b)
        self._made = (h, hq)
        return y, h

    def _quantised(self, x: Array, limbs: int) -> Quantised:
        """x's digits in `limbs` limbs: those its kernel made with it when x is that very tensor
        (RMSNorm, the gated FFN: no launch of their own), else quantised now."""
        made = self._made
        if made is not None and made[1].limbs == limbs and _same_rows(made[0], x):
            return made[1]
        return quantize(tensor(x).to(self.device, torch.float32), limbs)

    def embed(self, w: Weight, ids: Array) -> torch.Tensor:
        if w.kernel_type & Q8_PACKED:  # a tied LM head's packed copy, standing in for the embedding
            return packed.gather_rows(tensor(ids), self._packed_weight(w))
        sw = self._weight(w)
        return matmul.gather_rows(
            tensor(ids).to(self.device), sw.wq, sw.wf, sw.kt, sw.in_features, sw.row_bytes
        )

    def _quantises(self, x: torch.Tensor) -> bool:
        """Whether an activation x is made with its quantisation (the integer modes, rows of
        whole blocks): what a matmul's input usually is, so its own quantise launch is saved."""
        return self.limbs is not None and x.dim() == 2 and x.shape[0] > 0 and x.shape[1] % 32 == 0

    def rmsnorm(self, x: Array, weight: Array, eps: float) -> torch.Tensor:
        x = tensor(x).to(self.device)
        if self.limbs is not None and self._quantises(x):
            y, xq = norm.rmsnorm_quantize(x, self._model(weight), eps, self.limbs)
            self._made = (y, xq)
            return y
        return norm.rmsnorm(x, self._model(weight), eps)

    def silu_mul(self, gate: Array, up: Array) -> torch.Tensor:
        return self._gated(gate, up, gelu=False)

    def _gated(self, gate: Array, up: Array, gelu: bool) -> torch.Tensor:
        g, u = tensor(gate).to(self.device), tensor(up).to(self.device)
        if self.limbs is not None and self._quantises(g) and g.shape == u.shape:
            y, xq = activation.gated_quantize(g, u, gelu, self.limbs)
            self._made = (y, xq)
            return y
        return activation.gelu_mul(g, u) if gelu else activation.silu_mul(g, u)

    def gated_linear(
        self, x: Array, runs: list[tuple[Weight, tuple[int, ...]]], gelu: bool
    ) -> torch.Tensor | None:
        """act(x gate^T) * (x up^T) from gate/up stored as `runs` (weight, member widths), with
        its quantisation, in one launch (gateup.py) where the decode path takes it; else None
        (the model then runs linear_runs and silu_mul / gelu_mul: the same bits)."""
        if self.limbs is None or not all(w.kernel_type & Q8_PACKED for w, _ in runs):
            return None
        members = [m for w, widths in runs for m in gateup.members(self._packed_weight(w), widths)]
        if len(members) != 2 or members[0].limbs != self.limbs or len(getattr(x, "shape", ())) != 2:
            return None
        if not 0 < x.shape[0] <= intmatmul.ROWS_MAX:
            return None
        xq = self._quantised(x, self.limbs)
        if not gateup.fits(xq, members[0], members[1]):
            return None
        y, yq = gateup.gated(xq, members[0], members[1], gelu)
        self._made = (y, yq)
        return y

    def rope(self, x: Array, positions: Array, table: RopeTable) -> torch.Tensor:
        pos = self._step(positions)
        return rope.rope(
            tensor(x).to(self.device), pos, table, self._model(table.cos), self._model(table.sin)
        )

    def kv_write(
        self,
        k: Array,
        v: Array,
        k_cache: Array,
        v_cache: Array,
        slots: Array,
    ) -> None:
        s = self._step(slots)
        kc, vc = self._cache(k_cache), self._cache(v_cache)
        k, v = tensor(k).to(self.device), tensor(v).to(self.device)
        # K and V to distinct slots in one launch: no arithmetic (a 2-byte cache's values rounded: kv.py)
        kv.write(k, v, kc, vc, s)

    def rope_kv_write(
        self, q: Array, k: Array, v: Array, positions: Array, table: RopeTable, k_cache: Array, v_cache: Array,
        slots: Array,
    ) -> torch.Tensor:  # fmt: skip
        """base.rope_kv_write: q and k rotated, k and v written to the caches, in one launch."""
        dev = self.device
        return rope.rope_write(
            tensor(q).to(dev), tensor(k).to(dev), tensor(v).to(dev), self._step(positions), self._step(slots),
            table, self._model(table.cos), self._model(table.sin), self._cache(k_cache), self._cache(v_cache),
        )  # fmt: skip

    def qkv_rope(
        self, x: Array, runs: list[tuple[Weight, tuple[int, ...]]], heads: tuple[int, int, int], positions: Array,
        table: RopeTable, k_cache: Array, v_cache: Array, slots: Array,
    ) -> torch.Tensor | None:  # fmt: skip
        """The rotated queries [T, HQ, D] of x's q/k/v projections stored as `runs` (weight, member
        widths: [q | k | v], heads (HQ, HK, D)), the rotated keys and the values written to the
        caches, in one launch (qkvrope.py) where the decode path takes it; else None (the model
        then runs linear_runs and rope_kv_write: the same bits)."""
        args = self._qkv_args(x, runs, heads, positions, table, k_cache, v_cache, slots)
        return None if args is None else qkvrope.qkv_rope(**args)

    def qkv_attention(
        self, x: Array, runs: list[tuple[Weight, tuple[int, ...]]], heads: tuple[int, int, int],
        table: RopeTable, k_cache: Array, v_cache: Array, meta: AttentionMeta, scale: float | None = None,
        window: int = 0, softcap: float = 0.0, sinks: Array | None = None,
    ) -> torch.Tensor | None:  # fmt: skip
        """`attention` of the queries `qkv_rope` makes, on the caches it writes, all in that one
        launch (qkvattn.py) where it takes them and the attention quantises its rows for the output
        projection (its head size); else None (the model's separate ops: the same bits)."""
        args = self._qkv_args(x, runs, heads, meta.positions, table, k_cache, v_cache, meta.slots)
        if args is None or not attention.quantizes(heads[2]):
            return None
        where = self._attention_args(meta, scale, window, softcap, sinks)
        _, out, xq = qkvrope.qkv_rope_attention(**args, meta=meta, **where, limbs=self.limbs)
        if xq is not None:
            self._made = (out, xq)
        return out

    def _qkv_args(
        self, x: Array, runs: list[tuple[Weight, tuple[int, ...]]], heads: tuple[int, int, int], positions: Array,
        table: RopeTable, k_cache: Array, v_cache: Array, slots: Array,
    ) -> dict[str, Any] | None:  # fmt: skip
        """qkvrope.qkv_rope's arguments where its one launch takes these projections, else None."""
        if self.limbs is None or not all(w.kernel_type & Q8_PACKED for w, _ in runs):
            return None
        if (
            len(getattr(x, "shape", ())) != 2
            or [w for _, ws in runs for w in ws] != [heads[0] * heads[2]] + [heads[1] * heads[2]] * 2
        ):
            return None
        weights = [self._packed_weight(w) for w, _ in runs]
        kc, vc = self._cache(k_cache), self._cache(v_cache)
        if not qkvrope.fits(x.shape[0], x.shape[1], weights, self.limbs, heads, table, kc, vc):
            return None
        return {
            "xq": self._quantised(x, self.limbs), "weights": weights, "heads": heads,
            "positions": self._step(positions), "slots": self._step(slots), "table": table,
            "cos": self._model(table.cos), "sin": self._model(table.sin), "k_cache": kc, "v_cache": vc,
        }  # fmt: skip

    def _attention_args(
        self, meta: AttentionMeta, scale: float | None, window: int, softcap: float, sinks: Array | None
    ) -> dict[str, Any]:
        """attention.attention_quantize's arguments after the caches and positions, but `limbs`."""
        # every position lies in its table row: the width bounds them with no read of a value
        # (on the static path the width is the context's, the same every step)
        bound = meta.block_tables.shape[1] * meta.block_size - 1
        sink = None if sinks is None else self._model(sinks).float()
        return {
            "token_seq": self._step(meta.token_seq), "block_tables": self._step(meta.block_tables),
            "max_position": bound, "scale": scale, "window": window, "softcap": softcap, "sinks": sink,
        }  # fmt: skip

    def gelu_mul(self, gate: Array, up: Array) -> torch.Tensor:
        return self._gated(gate, up, gelu=True)

    def swiglu_oai(self, gate: Array, up: Array, alpha: float, limit: float) -> torch.Tensor:
        """gpt-oss's clamped SwiGLU (gpt_oss.SwigluOps), C's bits."""
        return activation.swiglu_oai(tensor(gate).to(self.device), tensor(up).to(self.device), alpha, limit)

    def softcap(self, x: Array, cap: float) -> torch.Tensor:
        return activation.softcap(tensor(x).to(self.device), cap)

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
    ) -> torch.Tensor:
        q = tensor(q).to(self.device)
        # in the integer modes the output rows are quantised in the same launch, for the
        # attention output's matmul (which reads them through `_quantised`: no launch of its own)
        limbs = self.limbs if self.limbs is not None and attention.quantizes(q.shape[-1]) else None
        out, xq = attention.attention_quantize(
            q, self._cache(k_cache), self._cache(v_cache), meta, self._step(meta.positions),
            **self._attention_args(meta, scale, window, softcap, sinks), limbs=limbs,
        )  # fmt: skip
        if xq is not None:
            self._made = (out, xq)
        return out

    def log_softmax(self, logits: Array, inplace: bool = False) -> torch.Tensor:
        """The logprob tail on the device; the rows come back to the engine as CPU fp32."""
        rows = logprobs.log_softmax(tensor(logits).to(self.device)).cpu()
        self.bytes_read += rows.numel() * 4
        return rows

    def read_rows(self, logits: Array, reads: list[RowRead | None]) -> list[Row]:
        """The logprob tail on the device, and of each row what `reads` asks (row_reads.py), in
        one copy back: a full fp32 row where its read is None, else the device's selection (and
        the token drawn on the device where the read asks for a draw)."""
        return self.read_logprobs(logprobs.log_softmax(tensor(logits).to(self.device)), reads)

    def read_logprobs(
        self, lp: torch.Tensor, reads: list[RowRead | None], at: Sequence[int] | None = None
    ) -> list[Row]:
        """`read_rows` of rows already log-softmaxed on the device (the static decode path's,
        graphs.py): read i of row `at[i]` of `lp` (None: row i), nothing recomputed."""
        rows, copied = select.read_rows(lp, reads, at)
        self.bytes_read += copied
        self.device_draws += sum(r is not None and r.draw is not None for r in reads)
        return rows
