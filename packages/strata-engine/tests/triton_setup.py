"""Shared set-up for the Triton tests: without a CUDA GPU they run under Triton's interpreter.

TRITON_INTERPRET must be set before any kernel is decorated, so each test module imports this
first; `DEVICE` is where the kernels run (the CPU under the interpreter)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine import LLMEngine
from strata_engine.kernels.torch_backend import tensor
from strata_engine.kernels.triton.backend import default_device

DEVICE = default_device()


def engine_on(path: Path, device: str) -> LLMEngine:
    """An fp32-mode engine on `device` ("cpu": the C kernels, the reference; "cuda": Triton) for
    comparing one device's events with the other's: no prefix cache, room for 8 sequences."""
    kw = {"num_threads": 2} if device == "cpu" else {}
    return LLMEngine(
        path, device=device, kernels="native-fp32", parallel=8, prefix_cache=False, kv_cache_mb=16, **kw
    )


class FixedUniform:
    """A request's generator that always draws `u`: the CPU sampler and a device draw (or two
    samplers) given one uniform, so their tokens can be compared at chosen points."""

    def __init__(self, u: float) -> None:
        self.u = u

    def draw(self) -> float:
        return self.u


def on(t: torch.Tensor | np.ndarray) -> torch.Tensor:
    """A tensor, or one of the engine's numpy arrays (RoPE table, step indices), on DEVICE."""
    return tensor(t).to(DEVICE)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaNs and signed zeros included)."""
    a, b = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))
