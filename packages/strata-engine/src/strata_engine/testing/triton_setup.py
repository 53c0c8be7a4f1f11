"""Shared set-up for the Triton tests: without a CUDA GPU they run under Triton's interpreter.

TRITON_INTERPRET must be set before any kernel is decorated, so each test module imports this
first; `DEVICE` is where the kernels run (the CPU under the interpreter).

The interpreter proves bits only if it performs each IEEE operation as a GPU does. Its `tl.fma`
rounds once (as `fma.rn` and C's `fmaf` do) from Triton 3.9.0 on; 3.8.0 and older compute
x * y + z in fp32, two roundings, and the C-equality tests fail there for that reason alone. So
on import, under the interpreter, one probe: an fma whose two roundings give another value. An
interpreter that rounds twice stops the run with a message (the `triton` nox session installs
the floor, triton>=3.9.0; on a GPU the hardware fma rounds once whatever the version)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

import triton
import triton.language as tl

from strata_engine import LLMEngine
from strata_engine.kernels.torch_backend import tensor
from strata_engine.kernels.triton.backend import default_device

DEVICE = default_device()
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
TRITON_FLOOR = "3.9.0"  # the first Triton whose interpreter's tl.fma rounds once (noxfile.py)


@triton.jit
def _fma_kernel(out_ptr):
    x = tl.full([1], 1.000244140625, tl.float32)  # 1 + 2^-12: x * x = 1 + 2^-11 + 2^-24, exactly
    tl.store(out_ptr + tl.arange(0, 1), tl.fma(x, x, tl.full([1], -1.0, tl.float32)))


def fma_rounds_once() -> bool:
    """tl.fma(x, x, -1) for x = 1 + 2^-12 is 2^-11 + 2^-24 in one rounding; rounding x * x to
    fp32 first drops the 2^-24 (a tie, to even), leaving 2^-11."""
    out = torch.zeros(1, dtype=torch.float32, device=DEVICE)
    _fma_kernel[(1,)](out)
    return float(out[0]) == 2.0**-11 + 2.0**-24


def patch_nested_calls_once() -> None:
    """Under the interpreter, patch triton.language once per launch, not once per device call.

    A launch patches triton.language's builtins with the interpreter's (and restores them at its
    end); Triton 3.9's interpreter then patches them again at every call of a @triton.jit helper
    inside the kernel (ieee.exp, dequant.block, ...), a walk over the modules' members that finds
    everything already patched and changes nothing: a third of the interpreter's time in these
    tests. Inside a launch a helper whose modules the launch already patched gets an empty scope
    instead. No operation's arithmetic is touched: the numpy code that runs is the same."""
    from triton.runtime import interpreter

    real = interpreter._patch_lang
    active: list[frozenset[int]] = []  # the launch's patched modules while it runs

    def langs(fn) -> frozenset[int]:
        return frozenset(id(v) for v in fn.__globals__.values() if v is tl or v is tl.core)

    def patch_lang(fn):
        if active and langs(fn) <= active[0]:
            return interpreter._LangPatchScope()  # nothing to patch, nothing to restore
        scope = real(fn)
        if active:  # a helper in a module the launch had not patched: as Triton does it
            return scope
        active.append(langs(fn))
        restore = scope.restore

        def restored() -> None:
            active.clear()
            restore()

        scope.restore = restored
        return scope

    if getattr(interpreter._patch_lang, "__name__", "") != "patch_lang":
        interpreter._patch_lang = patch_lang


if INTERPRETED:
    patch_nested_calls_once()
    if not fma_rounds_once():
        pytest.exit(
            f"Triton {triton.__version__}'s interpreter rounds tl.fma twice (x * y, then + z), where "
            "a GPU's fma and C's fmaf round once: the Triton tests cannot prove the C kernels' bits "
            f"with it. Install triton>={TRITON_FLOOR} (`nox -s triton` does), or run them on a GPU."
        )


def engine_on(path: Path, device: str) -> LLMEngine:
    """An fp32-mode engine on `device` ("cpu": the C kernels, the reference; "cuda": Triton) for
    comparing one device's events with the other's: no prefix cache, room for 8 sequences."""
    kw: dict[str, Any] = {"num_threads": 2} if device == "cpu" else {}
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
