"""The hybrid recurrent models `qwen35` (Qwen3.5 / 3.6 dense), `qwen35moe` and `qwen3next` as
llama.cpp computes them (src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp): Gated DeltaNet
layers interleaved with gated full-attention layers.

Every layer: x += mixer(rms(x, attn_norm)); x += ffn(rms(x, post_attention_norm)), the ffn a
SwiGLU (qwen35) or routed experts plus a gated shared expert (qwen35moe, qwen3next: hybrid_moe.py).
- Full attention: attn_q gives per head [query | gate]; RMS q/k norms; NEOX RoPE on the first
  rope_dim dims (llama.cpp's IMROPE with every section reading the text position is that);
  attention over the paged KV cache; times sigmoid(gate); attn_output.
- DeltaNet: attn_qkv, then the short causal convolution over [q | k | v] (its window carried per
  sequence) and SiLU; q, k L2-normalised; per value head h (key head h % n_k_heads; qwen3next:
  h // (n_v_heads / n_k_heads)) the gated
  delta rule S = exp(g) S; S += k (beta (v - S^T k))^T; o = S^T q / sqrt(d), with
  g = softplus(alpha + dt_bias) * ssm_a, beta = sigmoid(ssm_beta x) (qwen3next: beta and alpha
  from one ssm_ba, per key head [beta | alpha]); rms(o, ssm_norm) * silu(z), ssm_out.

The invariance contract: matmuls, norms and SiLU go through `Ops` (row-invariant); the gates'
exp and log are exactmath's (float64, the same bits everywhere); the recurrence runs token by
token per sequence in one fixed order, its sums over a head's keys as a fixed halving tree of
IEEE fp32 adds (`_tree_sum`). So a prompt's rows are the same bits prefilled whole, in chunks of
any size, token by token, or beside any other sequences: a chunk of one is the same arithmetic.
On the native kernels a DeltaNet layer's steps between its matmuls run as one C call
(recurrence.c strata_delta_net: these operations in this order, exactmath's float64 steps
included); `delta_net_steps` is that sequence one call at a time, the other backends' path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from strata_engine import exactmath
from strata_engine.api import ModelLoadError
from strata_engine.config import ModelConfig
from strata_engine.gguf_loader import GGUFFile, TensorInfo, required
from strata_engine.hybrid_moe import SharedExpertMoE
from strata_engine.hybrid_moe import forward as moe_forward
from strata_engine.hybrid_moe import load as load_moe
from strata_engine.hybrid_projections import Projections
from strata_engine.kernels.base import Array, AttentionMeta, DeltaNetStep, Ops, like, to_numpy
from strata_engine.kernels.weights import Weight, vector
from strata_engine.model import rope_tables
from strata_engine.recurrent_state import RecurrentStates
from strata_engine.row_packing import lm_head
from strata_engine.tensor_parallel import SINGLE, TensorParallel


@dataclass
class HybridLayer:
    attn_norm: np.ndarray
    post_norm: np.ndarray
    ffn: tuple[Projections, Weight] | SharedExpertMoE  # SwiGLU (gate / up, down) or the experts
    inputs: Projections  # the mixer's matmuls of its input (attention or DeltaNet), fused by type
    weights: dict[str, Weight]  # its output matmul (attn_output or ssm_out), by tensor name
    vectors: dict[str, np.ndarray]  # its norms and per-head parameters


ATTENTION = ("attn_q", "attn_k", "attn_v")  # the mixers' matmuls of the normed input
DELTA_NET = ("attn_qkv", "attn_gate")


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) in float64 with exactmath's exp, rounded to fp32."""
    return _f32(exactmath.sigmoid(x))


def softplus(x: np.ndarray, e: np.ndarray | None = None) -> np.ndarray:
    """log(1 + e^x) in float64 (x above 20: x, as ggml; below -20: e^x), rounded to fp32; `e`:
    exactmath.exp(min(x, 20)) where the caller has it."""
    x64 = np.asarray(x, dtype=np.float64)
    e = exactmath.exp(np.minimum(x64, 20.0)) if e is None else e
    return _f32(np.where(x64 > 20.0, x64, np.where(x64 < -20.0, e, exactmath.log(1.0 + e))))


def gates(b: np.ndarray, alpha: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """beta = sigmoid(b) and the decay e^(softplus(alpha) a), as `sigmoid` and `softplus` compute
    them, the exps of -b and of min(alpha, 20) in one exactmath call (elementwise: the same bits,
    one pass of its steps instead of two: they are most of a decode step's numpy time)."""
    b64, x64 = np.asarray(b, dtype=np.float64), np.asarray(alpha, dtype=np.float64)
    e = exactmath.exp(np.concatenate((-b64, np.minimum(x64, 20.0))))
    beta = _f32(1.0 / (1.0 + e[: b64.shape[0]]))
    return beta, _f32(exactmath.exp(softplus(alpha, e[b64.shape[0] :]) * a))


def _tree_sum(p: np.ndarray) -> np.ndarray:
    """Sum over the last axis as a fixed halving tree of elementwise fp32 adds (zeros pad an odd
    length): one order of IEEE operations, whatever numpy's reductions would pick."""
    while p.shape[-1] > 1:
        if p.shape[-1] % 2:
            p = np.concatenate((p, np.zeros((*p.shape[:-1], 1), dtype=p.dtype)), axis=-1)
        half = p.shape[-1] // 2
        p = p[..., :half] + p[..., half:]
    return p[..., 0]


def l2_normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """x / max(|x|, eps) over the last axis, as ggml_l2_norm: the sum of squares in float64 (fp32
    products are exact there) by the fixed tree, the scale rounded to fp32, one multiply."""
    x64 = x.astype(np.float64)
    norm = np.sqrt(_tree_sum(x64 * x64))
    return x * _f32(1.0 / np.maximum(norm, eps))[..., None]


def delta_rule(
    states: np.ndarray,
    state_slots: np.ndarray,
    starts: np.ndarray,
    counts: np.ndarray,
    qkv: tuple[np.ndarray, np.ndarray, np.ndarray],
    decay: np.ndarray,
    beta: np.ndarray,
    scale: np.float32,
    state_captures: tuple[tuple[int, int, int], ...] = (),
) -> np.ndarray:
    """The gated delta rule, token by token per sequence (the torch fallback's; the native
    kernels run recurrence.c, the same operations in the same order): the k-th token of every
    sequence that has one together, as elementwise operations on [sequences, head, value j,
    key i], so each sequence's values are its own arithmetic. `states` advance in place; after
    `done` tokens of a row its state is copied to a snapshot slot (state_captures)."""
    q, k, v = qkv
    n, hv, ds = v.shape
    core = np.empty((n, hv, ds), dtype=np.float32)
    slots = state_slots.astype(np.int64)
    captures: dict[int, list[tuple[int, int]]] = {}  # step -> (slot, snapshot) copied after it
    for row, done, snapshot in state_captures:
        captures.setdefault(done - 1, []).append((int(slots[row]), snapshot))
    for step in range(int(counts.max())):
        live = np.flatnonzero(counts > step)
        t = starts[live] + step
        s = states[slots[live]] * decay[t][:, :, None, None]
        delta = (v[t] - _tree_sum(s * k[t][:, :, None, :])) * beta[t][:, :, None]
        s = s + delta[:, :, :, None] * k[t][:, :, None, :]
        core[t] = _tree_sum(s * q[t][:, :, None, :]) * scale
        states[slots[live]] = s
        for slot, snapshot in captures.get(step, ()):
            states[snapshot] = states[slot]
    return core


def delta_net_steps(ops: Ops, s: DeltaNetStep, ref: Array) -> Array:
    """A DeltaNet layer's steps from its matmuls' outputs to ssm_out's input [T, HV * D], one
    `Ops` or numpy call at a time (the native kernels' strata_delta_net runs these same operations
    in one call; `ref`: an array of the backend's, for `like`)."""
    n, ds, hv = s.qkv.shape[0], s.norm.shape[0], s.ssm_a.shape[0]
    kd = (s.qkv.shape[1] - hv * ds) // 2
    beta, decay = gates(s.b, s.alpha + s.dt_bias, s.ssm_a)  # decay e^g, g < 0
    # the short convolution per sequence, its window carried in the state: each token's taps
    # multiplied and added in tap order (one fixed order per element, whatever the chunk)
    conv = np.empty_like(s.qkv)
    keep = s.taps.shape[0] - 1
    for row, (slot, start, m) in enumerate(
        zip(s.state_slots.tolist(), s.starts.tolist(), s.counts.tolist(), strict=True)
    ):
        tokens = slice(start, start + m)  # a sequence's tokens are consecutive in the step
        window = np.concatenate((s.windows[slot], s.qkv[tokens]))
        acc = window[0:m] * s.taps[0]
        for j in range(1, keep + 1):
            acc = acc + window[j : j + m] * s.taps[j]
        conv[tokens] = acc
        for _, done, snapshot in (c for c in s.captures if c[0] == row):
            s.windows[snapshot] = window[done : done + keep]  # the window after `done` tokens
        s.windows[slot] = window[window.shape[0] - keep :]
    conv = to_numpy(ops.silu_mul(like(ref, conv), like(ref, np.ones_like(conv))))
    qk = l2_normalize(conv[:, : 2 * kd].reshape(n, 2, kd // ds, ds), s.eps)  # per head: one call
    q, k = qk[:, 0], qk[:, 1]
    if not np.array_equal(s.key_heads, np.arange(hv)):  # each value head's key head
        q, k = q[:, s.key_heads], k[:, s.key_heads]
    v = conv[:, 2 * kd :].reshape(n, hv, ds)
    args = (s.states, s.state_slots, s.starts, s.counts, (q, k, v), decay, beta)
    rule = getattr(ops, "delta_rule", None)  # the native kernels' C loop: these same bits
    if rule is not None:
        core = rule(*args, s.scale, s.captures)
    else:
        core = delta_rule(*args, np.float32(s.scale), s.captures)
    normed = ops.rmsnorm(like(ref, core), s.norm, s.eps)
    return ops.silu_mul(s.z.reshape(n, hv, ds), normed).reshape(n, -1)


class HybridTransformer:
    """The qwen35 / qwen35moe forward with the interface `Transformer` offers the model runner."""

    def __init__(self, gguf: GGUFFile, cfg: ModelConfig, ops: Ops, tp: TensorParallel = SINGLE) -> None:
        if tp.active:
            raise ModelLoadError(
                f"{cfg.arch}: tensor parallelism is not supported for hybrid recurrent models"
            )
        assert cfg.hybrid is not None
        self.cfg, self.ops, self.tp, self.hybrid = cfg, ops, tp, cfg.hybrid
        self.fused = None  # no fused native layer: the per-op path only
        self.q_temp = None
        t = gguf.tensors

        def need(name: str) -> TensorInfo:
            return required(t, name)

        def matmul(name: str) -> Weight:
            return ops.pack(Weight.from_info(need(name)))

        def fused(p: str, names: tuple[str, ...]) -> Projections:  # by short name: "attn_q"
            return Projections.of(ops, {n: Weight.from_info(need(f"{p}{n}.weight")) for n in names})

        self.embedding, self.output = lm_head(ops, need, "output.weight" in t, gguf.release_pages)
        self.norm = vector(need("output_norm.weight"))
        self.layers: list[HybridLayer] = []
        for i, recurrent in enumerate(self.hybrid.recurrent):
            p = f"blk.{i}."
            ba = ("ssm_ba",) if self.hybrid.fused_beta_alpha else ("ssm_beta", "ssm_alpha")
            names = DELTA_NET + ba if recurrent else ATTENTION
            out = "ssm_out" if recurrent else "attn_output"
            vecs = (
                ("ssm_dt.bias", "ssm_a", "ssm_norm.weight")
                if recurrent
                else ("attn_q_norm.weight", "attn_k_norm.weight")
            )
            self.layers.append(
                HybridLayer(
                    attn_norm=vector(need(p + "attn_norm.weight")),
                    post_norm=vector(need(p + "post_attention_norm.weight")),
                    ffn=(
                        load_moe(ops, need, p)
                        if self.hybrid.n_experts
                        else (fused(p, ("ffn_gate", "ffn_up")), matmul(p + "ffn_down.weight"))
                    ),
                    inputs=fused(p, names),
                    weights={out: matmul(f"{p}{out}.weight")},
                    vectors={n: vector(need(p + n)) for n in vecs},
                )
            )
            if recurrent:  # stored [channels, d_conv]: kept [d_conv, channels], tap j a row
                conv = need(p + "ssm_conv1d.weight")
                taps = np.ascontiguousarray(vector(conv).reshape(conv.shape).T)
                self.layers[-1].vectors["conv_taps"] = taps
            gguf.release_pages()
        self.rope, _ = rope_tables(cfg, t)
        self.states: RecurrentStates | None = None
        self.key_heads = self.hybrid.key_heads().astype(np.int32)
        self.scale = np.float32(1.0 / np.sqrt(np.float32(self.hybrid.d_state)))

    def make_states(self, n_slots: int, n_snapshots: int = 0) -> RecurrentStates:
        """The recurrent states of up to `n_slots` running sequences (the engine's `parallel`)
        and `n_snapshots` prefix-cache snapshots."""
        self.states = RecurrentStates(self.hybrid, n_slots, n_snapshots)
        place = getattr(self.ops, "recurrent_states", None)  # a backend whose recurrence runs on
        if place is not None:  # its device keeps the DeltaNet states there (triton/recurrence.py)
            self.states.ssm = {i: place(a) for i, a in self.states.ssm.items()}
        return self.states

    def forward(self, ids: np.ndarray, meta: AttentionMeta, kv: list[tuple[np.ndarray, np.ndarray]]) -> Array:
        """Hidden states after the final norm, [T, hidden]; the DeltaNet layers advance the
        states of `meta.state_slots` by the step's tokens."""
        cfg, ops = self.cfg, self.ops
        x = ops.embed(self.embedding, ids)
        rows = None  # each sequence's tokens, starts[r] .. starts[r] + counts[r] - 1 of the step
        if meta.state_slots is not None:
            n_rows = len(meta.state_slots)
            rows = (
                np.searchsorted(meta.token_seq, np.arange(n_rows)).astype(np.int32),
                np.bincount(meta.token_seq, minlength=n_rows).astype(np.int32),
            )
        for i, layer in enumerate(self.layers):
            h = ops.rmsnorm(x, layer.attn_norm, cfg.rms_eps)
            if self.hybrid.recurrent[i]:
                assert rows is not None
                o = self._delta_net(i, layer, h, meta, rows)
            else:
                o = self._attention(layer, h, meta, kv[i])
            x = x + o
            h = ops.rmsnorm(x, layer.post_norm, cfg.rms_eps)
            if isinstance(layer.ffn, SharedExpertMoE):
                x = x + moe_forward(ops, h, layer.ffn, cfg.n_experts_used)
            else:
                gate_up, down = layer.ffn
                y = gate_up.apply(ops, h)
                x = x + ops.linear(ops.silu_mul(y["ffn_gate"], y["ffn_up"]), down)
        return ops.rmsnorm(x, self.norm, cfg.rms_eps)

    def _attention(
        self, layer: HybridLayer, h: Array, meta: AttentionMeta, cache: tuple[np.ndarray, np.ndarray]
    ) -> Array:
        cfg, ops, w = self.cfg, self.ops, layer.weights
        n, d = h.shape[0], cfg.head_dim
        y = layer.inputs.apply(ops, h)
        qg = to_numpy(y["attn_q"]).reshape(n, cfg.n_heads, 2, d)
        q = like(h, np.ascontiguousarray(qg[:, :, 0]))
        gate = qg[:, :, 1].reshape(n, -1)
        k = y["attn_k"].reshape(n, cfg.n_kv_heads, d)
        v = y["attn_v"].reshape(n, cfg.n_kv_heads, d)
        q = ops.rope(
            ops.rmsnorm(q, layer.vectors["attn_q_norm.weight"], cfg.rms_eps), meta.positions, self.rope
        )
        k = ops.rope(
            ops.rmsnorm(k, layer.vectors["attn_k_norm.weight"], cfg.rms_eps), meta.positions, self.rope
        )
        ops.kv_write(k, v, cache[0], cache[1], meta.slots)
        a = to_numpy(ops.attention(q, cache[0], cache[1], meta)).reshape(n, -1)
        gated = getattr(ops, "sigmoid_gate", None)  # the native kernels' one pass: these same bits
        a = gated(a, gate) if gated is not None else a * sigmoid(gate)
        return ops.linear(like(h, a), w["attn_output"])

    def _delta_net(
        self, i: int, layer: HybridLayer, h: Array, meta: AttentionMeta, rows: tuple[np.ndarray, np.ndarray]
    ) -> Array:
        hy, ops, vec = self.hybrid, self.ops, layer.vectors
        assert self.states is not None and meta.state_slots is not None
        n, hv = h.shape[0], hy.n_v_heads
        y = layer.inputs.apply(ops, h)
        if hy.fused_beta_alpha:  # per key head: [beta | alpha] of its n_v / n_k value heads
            ba = to_numpy(y["ssm_ba"]).reshape(n, hy.n_k_heads, 2, -1)
            b, alpha = ba[:, :, 0].reshape(n, hv), ba[:, :, 1].reshape(n, hv)
        else:
            b, alpha = to_numpy(y["ssm_beta"]), to_numpy(y["ssm_alpha"])
        step = DeltaNetStep(
            qkv=to_numpy(y["attn_qkv"]),
            z=y["attn_gate"],
            b=b,
            alpha=alpha,
            taps=vec["conv_taps"],
            windows=self.states.conv[i],
            states=self.states.ssm[i],
            state_slots=meta.state_slots,
            starts=rows[0],
            counts=rows[1],
            captures=meta.state_captures,
            dt_bias=vec["ssm_dt.bias"],
            ssm_a=vec["ssm_a"],
            norm=vec["ssm_norm.weight"],
            key_heads=self.key_heads,
            eps=self.cfg.rms_eps,
            scale=float(self.scale),
        )
        fused = getattr(ops, "delta_net", None)  # the native kernels' one call: these same bits
        gated = like(h, fused(step)) if fused is not None else delta_net_steps(ops, step, h)
        return ops.linear(gated, layer.weights["ssm_out"])

    def logits(self, hidden: Array, out: np.ndarray | None = None) -> Array:
        """fp32 logits [R, vocab] for the selected rows (see `Transformer.logits`)."""
        return self.ops.linear(hidden, self.output, out=out)
