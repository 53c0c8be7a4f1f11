"""Launches a decode step makes on the Triton backend, counted under the interpreter: per layer
and for the rest of the step, each bounded by the number docs/gpu.md states.

What is counted: Triton kernel launches, and torch's own kernels (copies, scatters, arithmetic;
not views or allocations), seen through a TorchDispatchMode; `.item()`-style reads of a device
value (host synchronisations) are counted apart. Host-to-device copies of the step's index arrays
are invisible here (the interpreter's device is the CPU). Per layer is the difference between a
2-layer and a 1-layer model of one shape, so the step's fixed part cancels out.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from torch.utils._python_dispatch import TorchDispatchMode
from triton.runtime import interpreter

from strata_engine import LLMEngine, Request, SamplingParams
from strata_engine.testing import tiny_models
from strata_engine.testing.decode_launches import NOT_KERNELS  # allocations and aliases
from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

# The documented bounds (docs/gpu.md, "Launches per decode step"): raise them only with the docs.
MAX_PER_LAYER = 11
# with the selection of what the host reads of each row and the draw (select.py, draw.py). The
# figure is the 1-layer step less the 2-layer file's second layer; the tiny model's two layers
# now launch alike, so it is the step's own part (it read one less while the first layer launched
# one fewer than the second)
MAX_FIXED = 9
MAX_SYNCS = 1  # the step's one read of its results back to the host (the logprob rows)


class Launches(TorchDispatchMode):
    """Counts torch kernels (by name) and host syncs while active; Triton launches are added by
    the patched interpreter entry point."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels: Counter[str] = Counter()
        self.syncs = 0
        self.inside_triton = False  # the interpreter's own copies of a launch's arguments: not kernels

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        if self.inside_triton:
            pass
        elif name == "_local_scalar_dense":
            self.syncs += 1
        elif not func.is_view and name not in NOT_KERNELS:
            self.kernels[f"torch.{name}"] += 1
        return func(*args, **(kwargs or {}))


SAMPLINGS = {
    "greedy": SamplingParams(max_tokens=2, temperature=0, ignore_eos=True),
    "sampled": SamplingParams(
        max_tokens=2, temperature=0.8, top_p=0.9, seed=3, ignore_eos=True
    ),  # drawn on the device
}


def _decode_step_launches(path: Path, monkeypatch: pytest.MonkeyPatch, sampling: SamplingParams) -> Launches:
    engine = LLMEngine(path, device="cuda", kernels="native", parallel=2)
    out = engine.add(Request((5, 70, 100, 33), sampling))
    engine.step()  # the prefill (the interpreter compiles nothing: no warm-up is needed)
    counted = Launches()
    original = interpreter.InterpretedFunction.run

    def run(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted.kernels[f"triton.{self.fn.__name__}"] += 1
        counted.inside_triton = True
        try:
            return original(self, *args, **kwargs)
        finally:
            counted.inside_triton = False

    monkeypatch.setattr(interpreter.InterpretedFunction, "run", run)
    with counted:
        engine.step()  # the decode step that is counted
    monkeypatch.undo()
    assert out.take(), "the request produced its tokens"
    return counted


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("spec", TINY_SPECS[:1], ids=lambda s: s.name)
def test_a_decode_step_launches_a_bounded_number_of_kernels(tmp_path, monkeypatch, spec, sampling) -> None:
    counts = {}
    for layers in (1, 2):
        monkeypatch.setattr(tiny_models, "N_LAYERS", layers)
        path = write_tiny_model(tmp_path / f"{layers}.gguf", spec)
        monkeypatch.undo()
        counts[layers] = _decode_step_launches(path, monkeypatch, SAMPLINGS[sampling])
    one, two = (sum(counts[n].kernels.values()) for n in (1, 2))
    per_layer, fixed = two - one, 2 * one - two
    detail = f"per layer {per_layer}, fixed {fixed}: {dict(counts[2].kernels)}"
    print(detail)
    assert 0 < per_layer <= MAX_PER_LAYER, detail
    assert 0 < fixed <= MAX_FIXED, detail
    assert counts[2].syncs <= MAX_SYNCS, f"{counts[2].syncs} host syncs in one decode step"
