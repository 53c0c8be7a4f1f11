"""The feed-forward block of `qwen35moe` as llama.cpp computes it (src/models/qwen35moe.cpp,
build_layer_ffn): routed experts plus a sigmoid-gated shared expert, in place of qwen35's SwiGLU.

    moe    = sum over the row's top-k experts (softmax routing, weights renormalised) of
             w_e * down_e(silu(gate_e h) * up_e h)                      (experts.py's orders)
    shared = down_s(silu(gate_s h) * up_s h)
    out    = moe + shared * sigmoid(ffn_gate_inp_shexp . h)             (one scalar per row)

The routing, the per-expert matmuls and their ascending-id sum are experts.py's (the same code
qwen3moe and gpt-oss run); the shared expert's gate is a one-row matmul through `Ops`, so a row's
result depends on that row alone. llama.cpp passes no weight scale here (expert_weights_scale is
not read for the family), so none is applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from strata_engine import exactmath
from strata_engine.experts import mix
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.base import Array, Ops, like, to_numpy
from strata_engine.kernels.weights import Weight, packed_experts

Swiglu = tuple[Weight, Weight, Weight]  # gate, up, down


@dataclass
class SharedExpertMoE:
    router: Weight  # ffn_gate_inp [n_experts, hidden]
    experts: list[Swiglu]
    shared: Swiglu
    shared_gate: Weight  # ffn_gate_inp_shexp as a [1, hidden] weight: one logit per row


def load(ops: Ops, need: Callable[[str], TensorInfo], p: str) -> SharedExpertMoE:
    """Layer `p`'s routed and shared experts, packed for `ops`."""
    gates, ups, downs = (
        [ops.pack(w) for w in packed_experts(need(f"{p}ffn_{x}_exps.weight"))] for x in ("gate", "up", "down")
    )
    router = ops.pack(Weight.from_info(need(p + "ffn_gate_inp.weight")))
    gate = need(p + "ffn_gate_inp_shexp.weight")  # [hidden]: stored 1-D, read as one output row
    one_row = TensorInfo(gate.name, (1, *gate.shape), gate.qtype, gate.data)
    shared = tuple(
        ops.pack(Weight.from_info(need(f"{p}ffn_{x}_shexp.weight"))) for x in ("gate", "up", "down")
    )
    return SharedExpertMoE(
        router=router,
        experts=list(zip(gates, ups, downs, strict=True)),
        shared=(shared[0], shared[1], shared[2]),
        shared_gate=ops.pack(Weight.from_info(one_row)),
    )


def _swiglu(ops: Ops, x: Array, w: Swiglu) -> Array:
    return ops.linear(ops.silu_mul(ops.linear(x, w[0]), ops.linear(x, w[1])), w[2])


def shared_gate(logits: np.ndarray) -> np.ndarray:
    """sigmoid of the shared expert's per-row logit, float64 with exactmath's exp, then fp32."""
    return exactmath.sigmoid(logits).astype(np.float32)


def forward(ops: Ops, h: Array, moe: SharedExpertMoE, k: int) -> Array:
    """The block's output for rows `h`: the routed mixture plus the gated shared expert, added in
    llama.cpp's order (the shared output times its gate, rounded, then added to the mixture)."""
    routed = mix(h, ops.linear(h, moe.router), k, lambda e, x: _swiglu(ops, x, moe.experts[e]))
    shared = to_numpy(_swiglu(ops, h, moe.shared))
    gate = shared_gate(to_numpy(ops.linear(h, moe.shared_gate)))  # [rows, 1]
    return routed + like(routed, shared * gate)
