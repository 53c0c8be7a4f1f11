"""The feed-forward block of `qwen35moe` as llama.cpp computes it (src/models/qwen35moe.cpp,
build_layer_ffn): routed experts plus a sigmoid-gated shared expert, in place of qwen35's SwiGLU.

    moe    = sum over the row's top-k experts (softmax routing, weights renormalised) of
             w_e * down_e(silu(gate_e h) * up_e h)                      (experts.py's orders)
    shared = down_s(silu(gate_s h) * up_s h)
    out    = moe + shared * sigmoid(ffn_gate_inp_shexp . h)             (one scalar per row)

The routing, the per-expert matmuls and their ascending-id sum are experts.py's (the same code
qwen3moe and gpt-oss run); the shared expert's gate is a one-row matmul through `Ops`, so a row's
result depends on that row alone. llama.cpp passes no weight scale here (expert_weights_scale is
not read for the family), so none is applied. The matmuls of the block's input (router, shared
gate, shared gate / up) and each expert's gate / up are fused by type (hybrid_projections.py):
the same bits, fewer calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from strata_engine import exactmath
from strata_engine.experts import mix
from strata_engine.gguf_loader import TensorInfo
from strata_engine.hybrid_projections import Projections
from strata_engine.kernels.base import Array, Ops, like, to_numpy
from strata_engine.kernels.weights import Weight, packed_experts

Swiglu = tuple[Projections, Weight]  # gate / up ("gate", "up"), down


@dataclass
class SharedExpertMoE:
    inputs: Projections  # "router" [n_experts, hidden], "shared_gate" [1, hidden], the shared "gate", "up"
    experts: list[Swiglu]
    shared_down: Weight


def load(ops: Ops, need: Callable[[str], TensorInfo], p: str) -> SharedExpertMoE:
    """Layer `p`'s routed and shared experts, packed for `ops`."""
    gates, ups, downs = (packed_experts(need(f"{p}ffn_{x}_exps.weight")) for x in ("gate", "up", "down"))
    gate = need(p + "ffn_gate_inp_shexp.weight")  # [hidden]: stored 1-D, read as one output row
    one_row = TensorInfo(gate.name, (1, *gate.shape), gate.qtype, gate.data)
    inputs = {
        "router": Weight.from_info(need(p + "ffn_gate_inp.weight")),
        "shared_gate": Weight.from_info(one_row),
        **{x: Weight.from_info(need(f"{p}ffn_{x}_shexp.weight")) for x in ("gate", "up")},
    }
    return SharedExpertMoE(
        inputs=Projections.of(ops, inputs),
        experts=[
            (Projections.of(ops, {"gate": g, "up": u}), ops.pack(d))
            for g, u, d in zip(gates, ups, downs, strict=True)
        ],
        shared_down=ops.pack(Weight.from_info(need(p + "ffn_down_shexp.weight"))),
    )


def _swiglu(ops: Ops, x: Array, w: Swiglu) -> Array:
    y = w[0].apply(ops, x)
    return ops.linear(ops.silu_mul(y["gate"], y["up"]), w[1])


def shared_gate(logits: np.ndarray) -> np.ndarray:
    """sigmoid of the shared expert's per-row logit, float64 with exactmath's exp, then fp32."""
    return exactmath.sigmoid(logits).astype(np.float32)


def forward(ops: Ops, h: Array, moe: SharedExpertMoE, k: int) -> Array:
    """The block's output for rows `h`: the routed mixture plus the gated shared expert, added in
    llama.cpp's order (the shared output times its gate, rounded, then added to the mixture)."""
    y = moe.inputs.apply(ops, h)
    routed = mix(h, y["router"], k, lambda e, x: _swiglu(ops, x, moe.experts[e]))
    shared = to_numpy(ops.linear(ops.silu_mul(y["gate"], y["up"]), moe.shared_down))
    gate = shared_gate(to_numpy(y["shared_gate"]))  # [rows, 1]
    return routed + like(routed, shared * gate)
