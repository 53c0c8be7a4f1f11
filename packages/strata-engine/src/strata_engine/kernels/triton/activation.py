"""The gated FFN's elementwise half and logit soft-capping, in the C kernels' arithmetic
(elementwise.c silu, gelu_tanh, strata_softcap, strata_swiglu_oai), with vector.h's own e^x and tanh (ieee.py):
no reduction, so a value depends on its own inputs only, and its bits are the CPU's."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from strata_engine.kernels.triton import ieee
from strata_engine.kernels.triton.quantize import BLOCKS, Quantised, allocate, constants, store_blocks

BLOCK = 1024


@triton.jit(do_not_specialize=["n"])
def _gated_kernel(g_ptr, u_ptr, out_ptr, n, GELU: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask, other=0.0)
    u = tl.load(u_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, _gated_value(g, u, GELU), mask=mask)


@triton.jit
def _gated_value(g, u, GELU: tl.constexpr):
    """act(g) * u elementwise: the one sequence both gated kernels run."""
    if GELU:  # g / (1 + e^(-2u)), -2u = (g * (1 + 0.044715 g^2)) * -2 sqrt(2/pi)
        inner = tl.fma(g * g, 0.044714998453855515, 1.0)
        z = (g * inner) * -1.5957691669464111
        act = tl.div_rn(g, 1.0 + ieee.exp(z))
    else:  # silu: g / (1 + e^(0 - g))
        act = tl.div_rn(g, 1.0 + ieee.exp(0.0 - g))
    return act * u


@triton.jit(do_not_specialize=["total"])
def _gated_quantize_kernel(
    g_ptr, u_ptr, out_ptr, q_ptr, s_ptr, dsum_ptr, total, GELU: tl.constexpr,
    LIMBS: tl.constexpr, SHIFT: tl.constexpr, XMAX: tl.constexpr, MIN_EXP: tl.constexpr,
    BB: tl.constexpr,
):  # fmt: skip
    """BB blocks of 32 of the gated product a program, each quantised where it is made
    (quantize.store_blocks): the down projection's input with no launch of its own."""
    blocks = tl.program_id(0).to(tl.int64) * BB + tl.arange(0, BB)
    ok = blocks < total
    offs = blocks[:, None] * 32 + tl.arange(0, 32)[None, :]
    g = tl.load(g_ptr + offs, mask=ok[:, None], other=0.0)
    u = tl.load(u_ptr + offs, mask=ok[:, None], other=0.0)
    y = _gated_value(g, u, GELU)
    tl.store(out_ptr + offs, y, mask=ok[:, None])
    store_blocks(y, blocks, ok, q_ptr, s_ptr, dsum_ptr, LIMBS, SHIFT, XMAX, MIN_EXP)


@triton.jit(do_not_specialize=["n"])
def _softcap_kernel(x_ptr, out_ptr, n, cap, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, cap * ieee.tanh(tl.div_rn(x, cap)), mask=mask)


@triton.jit(do_not_specialize=["n"])
def _swiglu_oai_kernel(g_ptr, u_ptr, out_ptr, n, alpha, limit, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = ieee.vmin(tl.load(g_ptr + offs, mask=mask, other=0.0), limit)  # vf_min: a NaN gate gives limit
    y = ieee.vmax(ieee.vmin(tl.load(u_ptr + offs, mask=mask, other=0.0), limit), 0.0 - limit)
    e = ieee.exp(0.0 - alpha * x)
    glu = tl.div_rn(x, 1.0 + e)
    tl.store(out_ptr + offs, glu * (y + 1.0), mask=mask)


def _gated(gate: torch.Tensor, up: torch.Tensor, gelu: bool) -> torch.Tensor:
    gate, up = gate.float().contiguous(), up.float().contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    if n:
        _gated_kernel[(triton.cdiv(n, BLOCK),)](gate, up, out, n, GELU=gelu, BLOCK=BLOCK, **ieee.LAUNCH)
    return out


def gated_quantize(
    gate: torch.Tensor, up: torch.Tensor, gelu: bool, limbs: int
) -> tuple[torch.Tensor, Quantised]:
    """`gelu_mul` (gelu) or `silu_mul` of gate, up [M, N] (N a multiple of 32) and, from the
    same launch, the product quantised in `limbs` digits: the bits of `quantize(product, limbs)`."""
    consts = constants(limbs)
    gate, up = gate.float().contiguous(), up.float().contiguous()
    m, n = gate.shape
    if n % 32:
        raise ValueError(f"the integer matmul takes whole blocks of 32 inputs, not K = {n}")
    out = torch.empty_like(gate)
    xq = allocate(m, n // 32, limbs, gate.device)
    if total := m * n // 32:
        bb = ieee.fit(total, BLOCKS)
        _gated_quantize_kernel[(triton.cdiv(total, bb),)](
            gate, up, out, xq.q, xq.s, xq.dsum, total, GELU=gelu, BB=bb, **consts, **ieee.LAUNCH
        )
    return out, xq


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up (SwiGLU), C's bits."""
    return _gated(gate, up, gelu=False)


def gelu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(gate) * up (GeGLU), C's bits."""
    return _gated(gate, up, gelu=True)


def swiglu_oai(gate: torch.Tensor, up: torch.Tensor, alpha: float, limit: float) -> torch.Tensor:
    """gpt-oss's clamped SwiGLU: min(gate, limit) * sigmoid(alpha min(gate, limit)) *
    (clamp(up, -limit, limit) + 1), C's bits (alpha and limit as fp32, as C takes them)."""
    gate, up = gate.float().contiguous(), up.float().contiguous()
    out = torch.empty_like(gate)
    n = gate.numel()
    if n:
        _swiglu_oai_kernel[(triton.cdiv(n, BLOCK),)](
            gate, up, out, n, alpha, limit, BLOCK=BLOCK, **ieee.LAUNCH
        )
    return out


def softcap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """cap * tanh(x / cap) elementwise (Gemma 2's logit soft-capping), C's bits."""
    x = x.float().contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    if n:
        _softcap_kernel[(triton.cdiv(n, BLOCK),)](x, out, n, cap, BLOCK=BLOCK, **ieee.LAUNCH)
    return out


def silu_mul_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """float64 SwiGLU: a sanity check of the arithmetic's accuracy, not of its bits."""
    return torch.nn.functional.silu(gate.double()) * up.double()
