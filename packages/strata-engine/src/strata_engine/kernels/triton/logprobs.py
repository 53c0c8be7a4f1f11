"""Full-vocabulary fp32 log-softmax, one program per row, over fixed chunks of the vocabulary
in order (max, then sum of exp, then write): a row's bits are its own."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048


@triton.jit
def _log_softmax_kernel(x_ptr, out_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = row * V
    mx = tl.full([BLOCK], float("-inf"), tl.float32)
    for v0 in range(0, V, BLOCK):
        cols = v0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < V, other=float("-inf"))
        mx = tl.maximum(mx, x)
    m = tl.max(mx, axis=0)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for v0 in range(0, V, BLOCK):
        cols = v0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < V, other=float("-inf"))
        total += tl.exp(x - m)
    lse = m + tl.log(tl.sum(total, axis=0))
    for v0 in range(0, V, BLOCK):
        cols = v0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + cols, mask=cols < V, other=0.0)
        tl.store(out_ptr + base + cols, x - lse, mask=cols < V)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """fp32 log-probabilities of each row of [R, V] logits, on the logits' device."""
    logits = logits.float().contiguous()
    out = torch.empty_like(logits)
    if logits.shape[0] and logits.shape[1]:
        _log_softmax_kernel[(logits.shape[0],)](logits, out, logits.shape[1], BLOCK=BLOCK)
    return out


def log_softmax_reference(logits: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.double(), dim=-1)
