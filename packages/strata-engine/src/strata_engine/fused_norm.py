"""The residual stream's update and the RMSNorm that reads it next, as one backend op where it has one.

model.py updates the residual stream with `linear_add` (attn_output's and ffn_down's matmuls,
the residual added in their epilogue) and reads the result only through an RMSNorm (ffn_norm,
the next layer's attn_norm, the final norm). A backend with `linear_add_norm` (TritonOps: the
integer decode path, addnorm.py) makes both, and the norm's quantisation, in one launch; it
returns None where that does not apply (the fp32 modes, more than ROWS_MAX rows, weights the
integer kernels do not read), and so do backends without it (the CPU's): then the separate ops,
the same bits. The model leaves out the cases whose norm is not the next op (gemma's post-norms,
tensor parallel ranks' sums).
"""

from __future__ import annotations

from strata_engine.kernels.base import Array, Ops, linear_add
from strata_engine.kernels.weights import Weight


def add_norm(
    ops: Ops, x: Array, w: Weight, residual: Array, norm: Array, eps: float, bias: Array | None = None
) -> tuple[Array, Array]:
    """(y, rmsnorm(y, norm, eps)) for y = residual + linear(x, w, bias): the backend's
    `linear_add_norm` where it takes these, else `linear_add` then `ops.rmsnorm`."""
    fused = getattr(ops, "linear_add_norm", None)
    if fused is not None:
        out = fused(x, w, residual, norm, eps, bias)
        if out is not None:
            return out
    y = linear_add(ops, x, w, residual, bias)
    return y, ops.rmsnorm(y, norm, eps)
