"""Every Triton kernel compiled for an H200 (sm_90) on a machine without a GPU.

Triton's interpreter runs a kernel as numpy, one operation at a time, and accepts code the
compiler refuses: a global that is not a `tl.constexpr` object, a variable whose type differs
between the branches of an `if`, an operation with no lowering for a type. So the bits proven
under the interpreter say nothing about whether a GPU can build the kernels. This script does
the GPU's first step without one, in two processes:

    TRITON_INTERPRET=1 STRATA_TRITON_GPU_TILES=1 python triton_compile.py record SPECS.json
    python triton_compile.py compile SPECS.json RESULTS.json       (no TRITON_INTERPRET)

(each may take a last argument SHARD/SHARDS: its share of the work, for processes side by side)

`record` runs engines on tiny models under the interpreter with the GPU's tile sizes (every
mode, prefill and decode, CUDA graphs' static path, device selections and draws, sliding window
and soft-cap, experts) and writes each distinct launch: the kernel, its arguments' types, its
constexprs and its launch options. `compile` builds each with Triton's compiler for a CUDA
target down to a cubin (Triton's bundled ptxas), and writes what failed and why.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

TARGET = ("cuda", 90, 32)  # an H200: compute capability 9.0, warps of 32
TYPES = {
    "float32": "fp32",
    "float64": "fp64",
    "float16": "fp16",
    "bfloat16": "bf16",
    "int8": "i8",
    "uint8": "u8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "bool": "i1",
}


def _type_of(value: Any) -> str:
    """Triton's signature type for a runtime argument (tensors as pointers to their dtype)."""
    if hasattr(value, "data_ptr"):
        return "*" + TYPES[str(value.dtype).removeprefix("torch.")]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"no signature type for {type(value).__name__}")


def _aligned(value: Any) -> bool:
    """A tensor argument whose address is a multiple of 16 (Triton's `tt.divisibility` 16)."""
    return hasattr(value, "data_ptr") and value.data_ptr() % 16 == 0


def record(out: Path, shard: int = 0, shards: int = 1) -> None:
    """Run the workloads (`shard` of `shards`) under the interpreter and write every distinct
    launch to `out`."""
    from triton.runtime import interpreter

    from strata_engine.testing.triton_setup import patch_nested_calls_once

    patch_nested_calls_once()  # the interpreter's redundant work (triton_setup.py); no effect on a launch

    specs: dict[str, dict[str, Any]] = {}
    original = interpreter.InterpretedFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        params = inspect.signature(self.fn).parameters
        bound = dict(zip(self.arg_names, args, strict=False)) | {
            k: v for k, v in kwargs.items() if k in params
        }
        constexpr = {n for n, p in params.items() if "constexpr" in str(p.annotation)}
        spec = {
            "module": self.fn.__module__,
            "name": self.fn.__name__,
            "signature": {n: "constexpr" if n in constexpr else _type_of(bound[n]) for n in self.arg_names},
            "constexprs": {n: bound[n] for n in self.arg_names if n in constexpr},
            "options": {k: v for k, v in kwargs.items() if k not in params},
            # what a GPU launch specialises on: pointers 16-byte aligned (Triton's launcher
            # tells the compiler so; every runtime integer is in do_not_specialize)
            "aligned": [n for n in self.arg_names if n not in constexpr and _aligned(bound[n])],
        }
        specs.setdefault(json.dumps(spec, sort_keys=True), spec)
        return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    interpreter.InterpretedFunction.run = run
    try:
        with tempfile.TemporaryDirectory() as tmp:
            workloads(Path(tmp), shard, shards)
    finally:
        interpreter.InterpretedFunction.run = original
    out.write_text(json.dumps(list(specs.values()), indent=1))


# (model, kernels, CUDA graphs' static path: padded buffers, scratch KV block, KV cache dtype),
# heaviest first; gemma2's run keeps a 2-byte cache (the cache's narrowing kernel, the attention's
# widening loads). The first is the quantised model in the default mode: shard 0 of len(RUNS)
# records it alone (bench/gpu_static.py --fast: its decode matmuls include Q4_K and Q6_K).
RUNS = [("quantised", m, False, "fp32") for m in ("native", "native-limb2", "native-q8", "native-fp32")]
RUNS += [
    ("quantised", "native", True, "fp32"),
    ("tied", "native-q8", False, "fp32"),
    ("tied", "native-fp32", False, "fp32"),
    ("moe", "native-fp32", False, "fp32"),
    ("gemma2", "native-fp32", False, "fp16"),
    ("gpt-oss", "native-fp32", False, "fp32"),  # attention sinks, the clamped SwiGLU
    ("hybrid", "native-fp32", False, "fp32"),  # the DeltaNet recurrence
]


def workloads(tmp: Path, shard: int = 0, shards: int = 1) -> None:
    """Engines on tiny models that launch every kernel the Triton backend has.

    The models have one layer and a narrow FFN: a launch's record (kernel, argument types,
    constexprs) never depends on a width the kernels take as a runtime integer, nor on how many
    layers repeat it, while under the interpreter with the GPU's tiles (one program per row and
    32 outputs) every program costs a fraction of a second. The quantised model has every
    quantised type in its one layer; the tied model keeps two, whose matrices the rotation gives
    every type (the K-quants without a bias among them). `shard` of `shards`: every shards-th run from the shard-th,
    so that processes side by side record them all."""
    from dataclasses import replace

    from gguf import GGMLQuantizationType as QT

    from strata_engine.testing import tiny_models
    from strata_engine.testing.tiny_arch_models import ARCH_SPECS, write_arch_model
    from strata_engine.testing.tiny_gpt_oss import write_gpt_oss
    from strata_engine.testing.tiny_hybrid_models import write_qwen35
    from strata_engine.testing.tiny_models import TINY_SPECS, write_quantised_model, write_tiny_model

    tiny_models.FFN = 256  # one K-quant super-block for ffn_down

    from strata_engine import LLMEngine, LogprobParams, Request, SamplingParams
    from strata_engine.kernels.triton.graphs import SWITCH

    tied = next(s for s in TINY_SPECS if s.arch == "llama")  # a tied embedding: the packed gather
    tiny_models.N_LAYERS = 1
    quantised = write_quantised_model(tmp / "q.gguf")
    tiny_models.N_LAYERS = 2  # the rotation gives the tied model's two layers every type
    models = {
        "quantised": quantised,
        "tied": write_tiny_model(tmp / "t.gguf", tied, seed=6, overrides={"token_embd.weight": QT.Q4_0}),
        "gemma2": write_arch_model(
            tmp / "g.gguf",
            replace(next(s for s in ARCH_SPECS if s.name == "gemma2"), n_layers=1),
            seed=4,
            types=(QT.F32,),
        ),
        "moe": write_arch_model(
            tmp / "m.gguf",
            replace(next(s for s in ARCH_SPECS if s.name == "qwen3moe"), n_layers=1),
            seed=4,
            types=(QT.F32,),
        ),
    }
    models["gpt-oss"] = write_gpt_oss(tmp / "o.gguf", seed=3)
    models["hybrid"] = write_qwen35(tmp / "h.gguf", seed=1)
    prompt = (12, 50, 33, 71, 9, 25, 17, 40, 3)  # 9 rows: past the integer matmul's row path
    requests = [
        Request(
            prompt,
            SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True),
            LogprobParams(top_n=3, named_ids=(1, 2), prompt_logprobs=True),
        ),
        Request(
            prompt[:3], SamplingParams(max_tokens=2, temperature=0.9, top_p=0.8, seed=1, ignore_eos=True)
        ),
        Request(prompt[:2], SamplingParams(max_tokens=2, temperature=0.7, top_k=5, seed=2, ignore_eos=True)),
    ]
    for name, kernels, static, kv in RUNS[shard::shards]:
        print(f"recording {name} {kernels}{', static path' if static else ''}, {kv} KV", flush=True)
        if static:
            os.environ[SWITCH] = "1"
        try:
            LLMEngine(
                models[name],
                device="cuda",
                kernels=kernels,
                parallel=4,
                prefix_cache=False,
                kv_cache_dtype=kv,
            ).generate_batch(requests)
        finally:
            os.environ.pop(SWITCH, None)


def compile_all(specs_path: Path, out: Path, shard: int = 0, shards: int = 1) -> None:
    """Compile each recorded launch (every shards-th from the shard-th) for TARGET; write
    [(kernel, error or None, local memory bytes a thread, seconds)]."""
    from strata_engine.testing.sass_stats import cuobjdump, resources

    results = []
    for spec in json.loads(specs_path.read_text())[shard::shards]:
        t = time.perf_counter()
        local = None
        try:
            kernel = compile_spec(spec)
            error = None if kernel.asm.get("cubin") else "no cubin"
            if not error:  # local memory: ptxas's spills (and arrays it could not keep in registers)
                local = resources(cuobjdump(kernel.asm["cubin"], "-res-usage")).get("LOCAL", 0)
        except Exception as exc:  # the compiler's message is the finding
            error = "".join(traceback.format_exception_only(exc)).strip()[-2000:]
        label = f"{spec['module'].rsplit('.', 1)[-1]}.{spec['name']} {spec['constexprs']}"
        seconds = round(time.perf_counter() - t, 1)
        results.append({"kernel": label, "error": error, "local_bytes": local, "seconds": seconds})
    out.write_text(json.dumps(results, indent=1))


def compile_spec(spec: dict[str, Any]) -> Any:
    """One recorded launch compiled for TARGET: Triton's CompiledKernel (its `asm` holds the
    cubin; bench/gpu_static.py reads its instructions). Separate from compile_all so that the
    static analysis builds exactly what this check builds."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(spec["module"]), spec["name"])
    names = list(spec["signature"])
    constexprs = {(names.index(n),): v for n, v in spec["constexprs"].items()}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec.get("aligned", [])}
    source = ASTSource(fn=fn, signature=spec["signature"], constexprs=constexprs, attrs=attrs)
    return triton.compile(source, target=GPUTarget(*TARGET), options=spec["options"])


def compile_and_analyse(specs: list[dict[str, Any]], matmuls_only: bool = False) -> list[dict[str, Any]]:
    """Each recorded launch (`matmuls_only`: those of WEIGHTS_PER_ITERATION's kernels) compiled
    by triton_compile's step, the one the compile check runs, and analysed; as JSON-ready rows
    (a launch that fails to compile is the compile check's finding, and is left out here)."""
    from strata_engine.testing.sass_stats import WEIGHTS_PER_ITERATION, analyse

    rows = []
    for spec in specs:
        name = f"{spec['module'].rsplit('.', 1)[-1]}.{spec['name']}"
        if matmuls_only and name not in WEIGHTS_PER_ITERATION:
            continue
        stats = analyse(spec, compile_spec(spec))
        rows.append(stats.__dict__ | {"warp_instructions_per_weight": stats.warp_instructions_per_weight})
    return rows


if __name__ == "__main__":
    # record SPECS.json [SHARD/SHARDS]; compile SPECS.json RESULTS.json [SHARD/SHARDS];
    # analyse SPECS.json STATS.json [--matmuls] (sass_stats' figures, for bench/gpu_static.py)
    if sys.argv[1] == "analyse":
        assert os.environ.get("TRITON_INTERPRET") != "1", "the analysis compiles for a GPU"
        rows = compile_and_analyse(json.loads(Path(sys.argv[2]).read_text()), "--matmuls" in sys.argv[4:])
        Path(sys.argv[3]).write_text(json.dumps(rows, indent=1))
        sys.exit(0)
    args = sys.argv[2:]
    part = (0, 1)
    if args and "/" in args[-1]:
        i, n = args.pop().split("/")
        part = (int(i), int(n))
    if sys.argv[1] == "record":
        assert os.environ.get("TRITON_INTERPRET") == "1", "record runs under the interpreter"
        record(Path(args[0]), *part)
    else:
        assert os.environ.get("TRITON_INTERPRET") != "1", "compile runs Triton's compiler"
        compile_all(Path(args[0]), Path(args[1]), *part)
