"""Launches one decode step makes per layer on the Triton backend, for an 8B model's layer.

Issue 42 bounds a decode step's launches per layer (each launch costs a GPU a few microseconds
whatever its work, 32 layers over). Under Triton's interpreter a step on a tiny model makes the
same launches as on a large one: the kernels take widths as runtime integers, and what is fused
depends only on which weights share a type. So a layer of Llama-3.1-8B in Q4_K_M is counted on
a tiny Llama whose layer has the same type mix, and per layer is the difference between a 2-layer
and a 1-layer file, so that the step's fixed part (embedding, head, selection) cancels.

Q4_K_M gives attn_v and ffn_down Q6_K in 16 of the 8B's 32 layers (llama.cpp's use_more_bits:
the first and last eighth, every third between) and Q4_K in the others, every other matrix Q4_K,
the head Q6_K; both layer mixes are counted, and the step is fixed + 16 of each.

Counted: Triton launches, and torch's own kernels (copies, scatters, arithmetic; not views or
allocations), through a TorchDispatchMode. Run under the interpreter:

    TRITON_INTERPRET=1 python -m strata_engine.testing.decode_launches OUT.json [KERNELS]
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

LAYERS_8B = 32
MIXES = {  # layer mix -> layers of Llama-3.1-8B Q4_K_M that have it
    "attn_v, ffn_down Q6_K": 16,
    "all Q4_K": 16,
}
NOT_KERNELS = {
    "empty",
    "empty_strided",
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "detach",
    "lift_fresh",
    "alias",
    "set_",
}  # allocations and aliases


def _types(mixes: tuple[str, ...]) -> dict[str, Any]:
    """The file's types, layer i in mixes[i]: every matrix Q4_K, the head Q6_K, attn_v and
    ffn_down Q6_K or Q4_K per the layer's mix."""
    from gguf import GGMLQuantizationType as QT

    types = {"token_embd.weight": QT.Q4_K, "output.weight": QT.Q6_K}
    for i, mix in enumerate(mixes):
        wide = QT.Q4_K if mix == "all Q4_K" else QT.Q6_K
        for name in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"):
            types[f"blk.{i}.{name}.weight"] = QT.Q4_K
        for name in ("attn_v", "ffn_down"):
            types[f"blk.{i}.{name}.weight"] = wide
    return types


def step_launches(path: Path, kernels: str) -> Counter[str]:
    """The kernels (`triton.<name>` or `torch.<op>`) of one greedy decode step after a prefill."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from triton.runtime import interpreter

    from strata_engine import LLMEngine, Request, SamplingParams

    counted: Counter[str] = Counter()
    inside = [False]  # the interpreter's own copies of a launch's arguments are not kernels

    class Launches(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not inside[0] and not func.is_view and name not in NOT_KERNELS | {"_local_scalar_dense"}:
                counted[f"torch.{name}"] += 1
            return func(*args, **(kwargs or {}))

    engine = LLMEngine(path, device="cuda", kernels=kernels, parallel=2, prefix_cache=False)
    out = engine.add(Request((5, 70, 100, 33), SamplingParams(max_tokens=2, temperature=0, ignore_eos=True)))
    engine.step()  # the prefill
    original = interpreter.InterpretedFunction.run

    def run(self, *args, **kwargs):
        counted[f"triton.{self.fn.__name__}"] += 1
        inside[0] = True
        try:
            return original(self, *args, **kwargs)
        finally:
            inside[0] = False

    interpreter.InterpretedFunction.run = run
    try:
        with Launches():
            engine.step()  # the decode step that is counted
    finally:
        interpreter.InterpretedFunction.run = original
    assert out.take(), "the request produced its tokens"
    return counted


def per_layer(kernels: str = "native") -> dict[str, Any]:
    """Per mix: the launches of one layer (total, Triton, torch, by kernel); the step's fixed
    part; the 8B step's total (fixed + each mix's layers). Three files: one layer of the first
    mix, then two layers whose second is each mix, so a layer's count is a 2-layer file's less
    the 1-layer file's."""
    from strata_engine.testing import tiny_models
    from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

    spec = replace(next(s for s in TINY_SPECS if s.arch == "llama"), name="llama-untied", tied=False)
    first, *others = MIXES
    files = [(first,), (first, first)] + [(first, mix) for mix in others]  # 1 layer, then 2
    counts: dict[tuple[str, ...], Counter[str]] = {}
    saved = tiny_models.N_LAYERS
    with tempfile.TemporaryDirectory() as tmp:
        for i, layers in enumerate(files):
            tiny_models.N_LAYERS = len(layers)
            try:
                path = write_tiny_model(Path(tmp) / f"{i}.gguf", spec, overrides=_types(layers))
            finally:
                tiny_models.N_LAYERS = saved
            counts[layers] = step_launches(path, kernels)
    one = sum(counts[(first,)].values())
    result: dict[str, Any] = {"kernels": kernels, "fixed": 0, "mixes": {}}
    for mix in MIXES:
        layer = counts[(first, mix)] - counts[(first,)]  # the second layer's kernels (positive differences)
        result["mixes"][mix] = {
            "per_layer": sum(counts[(first, mix)].values()) - one,
            "triton_per_layer": sum(v for k, v in layer.items() if k.startswith("triton.")),
            "torch_per_layer": sum(v for k, v in layer.items() if k.startswith("torch.")),
            "layer_kernels": dict(sorted(layer.items())),
        }
    mixes = result["mixes"]
    result["fixed"] = one - mixes[first]["per_layer"]  # the step less its one layer
    result["step_8b"] = result["fixed"] + sum(mixes[m]["per_layer"] * n for m, n in MIXES.items())
    result["per_layer_max"] = max(m["per_layer"] for m in mixes.values())
    return result


if __name__ == "__main__":
    assert os.environ.get("TRITON_INTERPRET") == "1", "the launches are counted under the interpreter"
    from strata_engine.testing import triton_setup  # noqa: F401  (the interpreter's setup, before triton)

    Path(sys.argv[1]).write_text(json.dumps(per_layer(*sys.argv[2:3]), indent=1))
