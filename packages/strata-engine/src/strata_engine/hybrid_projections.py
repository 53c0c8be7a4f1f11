"""The matmuls of a hybrid layer that read one input (DeltaNet's attn_qkv, attn_gate, beta and
alpha; attention's q, k, v; the FFN's gate and up; the MoE block's router, shared gate and shared
gate / up), fused into one matmul a stored type: a decode step pays one call, one split of the
input into limbs and one fork of the threads per type instead of one a weight.

An output feature depends on its own weight row alone (each is one fixed-order chain over the
input, whatever rows share the call: matmul.c, q8.c, limb.c), so every member's columns are the
bits of its own matmul. Members of different types are never stacked (model.fuse_projections).
"""

from __future__ import annotations

from dataclasses import dataclass

from strata_engine.kernels.base import Array, Ops
from strata_engine.kernels.weights import Weight
from strata_engine.model import FusedProjection, fuse_projections, fused_linear


@dataclass(frozen=True)
class Projections:
    """Weights of one input, fused by stored type; `apply` gives each member's output by name."""

    fused: tuple[FusedProjection, ...]
    names: tuple[str, ...]  # the members in the fused order: grouped by type, else as given

    @classmethod
    def of(cls, ops: Ops, weights: dict[str, Weight]) -> Projections:
        """`weights` (unpacked, as loaded) stacked per kernel type and packed for `ops`."""
        names = tuple(sorted(weights, key=lambda n: weights[n].kernel_type))  # stable
        members = [weights[n] for n in names]
        return cls(fuse_projections(members, [None] * len(members), ops), names)

    def apply(self, ops: Ops, x: Array) -> dict[str, Array]:
        """Every member's output for the rows `x`, contiguous, by name."""
        return dict(zip(self.names, fused_linear(ops, x, self.fused), strict=True))
