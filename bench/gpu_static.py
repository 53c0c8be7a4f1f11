"""What the Triton kernels cost an H200, shown without a GPU: instructions, registers, launches.

    python bench/gpu_static.py [--fast] [--specs SPECS.json] [--kernels native] [--types T,..] [--json PATH]

Issue 42's targets for a decode that streams its weights at memory speed are static properties of
the compiled code, so they can be read on a machine with no GPU. Three steps, each in its own
process (the first two under Triton's interpreter, the third with its compiler):

1. record every distinct launch the engine makes on tiny models with the GPU's tile sizes
   (strata_engine.testing.triton_compile's record step; `--fast`: only its first run, the
   quantised model in the default mode, whose decode matmuls include Q4_K and Q6_K);
2. count one decode step's launches per layer for Llama-3.1-8B's Q4_K_M layer mixes
   (strata_engine.testing.decode_launches: a tiny Llama of the same mixes, 2 layers less 1);
3. compile each launch for sm_90 (triton_compile's compile step) and read its cubin
   (strata_engine.testing.sass_stats: the innermost loop by its backward branch, its
   instructions a weight, its MMAs, the registers, shared memory, local memory and spills;
   `--fast`: only the matmuls and the chain kernels; the chain kernels' loops: the global loads
   each issues before its first float operation, of its loads an iteration).

On a shared 2-core host the full run takes about 5 min (3 recording, under 1 counting, 1.2
compiling 74 launches with Triton's cache empty); `--fast` about 2 min. `--specs` keeps the
recorded launches in a file and reuses it when it exists. `--types IQ4_NL,MXFP4,IQ4_XS` also
compiles the recorded integer matmul launches (decode, tile, gate/up, pair) with each named type's
packed layout, for types the tiny models' recording does not reach.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import write_results

from strata_engine.testing.sass_stats import decode_forms
from strata_engine.testing.triton_compile import RUNS

TARGET_INSTRUCTIONS = 0.15  # warp-instructions a weight in the decode loop body (Q4_K, Q6_K)
TARGET_LAUNCHES = 4  # launches a layer in a decode step
TARGET_TYPES = ("Q4_K", "Q6_K")
TARGET_PROGRAMS = 132  # an H100's or H200's SMs
DECODE = ("mmadecode._mma_kernel", "matmul._matmul_kernel")  # the matmuls a decode step runs
# the kernels whose sums are C's serial chains (RMSNorm's dot_1, log-softmax's compensated sum,
# attention's softmax sum and V sum): each loop's global loads issued before its first float
# operation, of its loads an iteration, shown after the kernels' table
CHAINS = ("norm._rmsnorm_kernel", "norm._rmsnorm_quantize_kernel", "logprobs._log_softmax_kernel",
          "attention._attention_kernel")  # fmt: skip


def _module(name: str, *args: str, interpret: bool, gpu_tiles: bool = True) -> None:
    """`python -m strata_engine.testing.<name> args` in a fresh process, interpreted or not;
    interpreted with the GPU's tiles (what a GPU compiles) or the interpreter's (fewer, larger
    programs: quicker, and the same launches)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "STRATA_TRITON_GPU_TILES")}
    if interpret:
        env |= {"TRITON_INTERPRET": "1"} | ({"STRATA_TRITON_GPU_TILES": "1"} if gpu_tiles else {})
    subprocess.run([sys.executable, "-m", f"strata_engine.testing.{name}", *args], env=env, check=True)


def is_decode(row: dict[str, Any]) -> bool:
    """A matmul launch of the decode path: the integer modes' tensor-core decode kernel, or the
    fp32 mode's one-row tile (BM 1)."""
    return row["kernel"] == DECODE[0] or (row["kernel"] == DECODE[1] and row["constexprs"].get("BM") == 1)


RETYPED = ("_mma_kernel", "_tile_kernel", "_gateup_kernel", "_pair_kernel")  # the integer matmuls


def retyped(specs: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """The first recorded launch of each integer matmul kernel with each named type's packed
    layout (a codebook type's as held: packed.CODEBOOK), both weights of a two-weight launch."""
    from gguf import GGMLQuantizationType as QT

    from strata_engine.kernels.triton import packed
    from strata_engine.kernels.weight_types import HALF_SCALES, TYPES

    firsts = [
        next(s for s in specs if s["name"] == name)
        for name in RETYPED
        if any(s["name"] == name for s in specs)
    ]
    out = []
    for name in names:
        code = TYPES[QT[name]].code
        layout = packed.layout(code | HALF_SCALES if code | HALF_SCALES in packed.CODEBOOK else code)
        for spec in firsts:
            c = spec["constexprs"] | layout
            if "WT2" in c:
                c |= {f"{k}2": v for k, v in layout.items()}
            out.append(spec | {"constexprs": c})
    return out


def measure(
    fast: bool, specs_path: Path | None, kernels: str, types: list[str] | None = None
) -> dict[str, Any]:
    """The three steps; the record of the run (kernels' rows, launches, timings)."""
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        specs = specs_path or Path(tmp) / "specs.json"
        t = time.perf_counter()
        if not specs.exists():
            # the record step's first run only (the quantised model, default mode), or all
            _module(
                "triton_compile", "record", str(specs), f"0/{len(RUNS)}" if fast else "0/1", interpret=True
            )
        seconds["record"] = time.perf_counter() - t
        t = time.perf_counter()
        launches = Path(tmp) / "launches.json"
        _module("decode_launches", str(launches), kernels, interpret=True, gpu_tiles=False)
        seconds["launches"] = time.perf_counter() - t
        t = time.perf_counter()
        stats = Path(tmp) / "stats.json"
        forms = Path(tmp) / "forms.json"  # each decode matmul in its three forms (sass_stats.decode_forms)
        recorded = json.loads(specs.read_text())
        forms.write_text(json.dumps(decode_forms(recorded + retyped(recorded, types or []))))
        _module(
            "triton_compile",
            "analyse",
            str(forms),
            str(stats),
            *(["--matmuls"] if fast else []),
            interpret=False,
        )
        chains: list[dict[str, Any]] = []
        if fast:  # the chain kernels too (a few seconds): their table below
            chain_specs, chain_stats = Path(tmp) / "chains.json", Path(tmp) / "chains_stats.json"
            names = {name.split(".")[1] for name in CHAINS}
            chain_specs.write_text(json.dumps([s for s in recorded if s["name"] in names]))
            _module("triton_compile", "analyse", str(chain_specs), str(chain_stats), interpret=False)
            chains = json.loads(chain_stats.read_text())
        # the q/k/v launch with RoPE and the KV write, which no recorded model takes: its forms
        # recorded and compiled on their own (testing/qkvrope_launches.py)
        qkv, qkv_stats = Path(tmp) / "qkvrope.json", Path(tmp) / "qkvrope_stats.json"
        _module("qkvrope_launches", str(qkv), interpret=True)
        qkv.write_text(
            json.dumps([s for s in json.loads(qkv.read_text()) if s["name"] == "_qkv_rope_kernel"])
        )
        _module("triton_compile", "analyse", str(qkv), str(qkv_stats), interpret=False)
        seconds["compile"] = time.perf_counter() - t
        return {
            "kernels": json.loads(stats.read_text()) + json.loads(qkv_stats.read_text()) + chains,
            "programs": programs(),
            "launches": json.loads(launches.read_text()),
            "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "fast": fast,
        }


# Llama-3.1-8B's decode matmuls (outputs, inputs), q/k/v and gate/up fused where they share a
# type (Q4_K_M: in half the layers attn_v is Q6_K, so q/k fuse and v's tiles join their launch,
# mmapair.py: the same grid as q/k/v fused)
PROJECTIONS_8B = {
    "q/k/v fused (Q4_K)": (6144, 4096),
    "q/k fused + v Q6_K, one launch": (6144, 4096),
    "attn_output 4096x4096": (4096, 4096),
    "gate/up fused 4096->2x14336": (28672, 4096),
    "ffn_down 14336->4096": (4096, 14336),
    "LM head (128256 outputs)": (128256, 4096),
}
BATCHES = (1, 8)


def programs() -> list[dict[str, Any]]:
    """Programs a decode launch gets for each 8B projection at batch 1 and 8: before the K split
    (one program a tile of 256 outputs and 4 rows) and now (mmadecode.plan)."""
    from strata_engine.kernels.triton import mmadecode

    rows = []
    for name, (n, k) in PROJECTIONS_8B.items():
        for m in BATCHES:
            grid, per = mmadecode.plan(m, n, k // 32, 256)
            rows.append(
                {
                    "projection": name, "rows": m, "tiles": grid[0] * grid[1], "k_ranges": grid[2],
                    "blocks_a_range": per, "programs": grid[0] * grid[1] * grid[2],
                }
            )  # fmt: skip
    return rows


def _tile(constexprs: dict[str, Any]) -> str:
    """The launch's constexprs, short: a matmul's weight layout (decided by its type, shown in
    the type column) left out."""
    layout = {"WT", "KT", "KQ", "SB", "SCB"} | ({"BB"} if "WT" in constexprs else set())
    return " ".join(f"{k}={int(v)}" for k, v in constexprs.items() if k not in layout)


def _loop(row: dict[str, Any]) -> str:
    """The loop's instructions; split along K, the programs' loop + the float steps' loop over
    the blocks one iteration of it takes (sass_stats.KernelStats)."""
    tail = row.get("tail_instructions", 0)
    return (
        f"{row['loop_instructions']} + {tail}/{row.get('tail_blocks', 1)}"
        if tail
        else str(row["loop_instructions"])
    )


def table(record: dict[str, Any]) -> str:
    """The kernels' rows (one per distinct compiled launch, matmuls by weight type), then the
    decode targets beside the measured figures."""
    lines = [
        "| kernel | type | constexprs | warps | regs | shared B | local B | spill instr | loop instr | "
        "MMA in loop | weights/iter | warp-instr/weight |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    rows = sorted(record["kernels"], key=lambda r: (r["kernel"], r["wtype"] or "", _tile(r["constexprs"])))
    for r in rows:
        per = r["warp_instructions_per_weight"]
        lines.append(
            f"| {r['kernel']} | {r['wtype'] or ''} | {_tile(r['constexprs'])} | {r['warps']} | {r['registers']} | "
            f"{r['shared_bytes']} | {r['local_bytes']} | {r['spill_instructions']} | {_loop(r)} | "
            f"{r['loop_mma']} | {r['weights_per_iteration'] or ''} | {'' if per is None else f'{per:.3f}'} |"
        )
    lines += ["", "| figure | measured | target (a bandwidth-bound decode) |", "|---|---|---|"]
    for wtype in TARGET_TYPES:
        for r in rows:
            if is_decode(r) and r["wtype"] == wtype:
                limbs = f"limbs {r['constexprs']['LIMBS']}" if "LIMBS" in r["constexprs"] else "fp32 mode"
                if r["constexprs"].get("SPLIT"):
                    limbs += f", split along K, float steps for {r['constexprs']['CR']} rows: both loops"
                lines.append(
                    f"| {wtype} decode loop, {r['kernel']} ({limbs}): warp-instructions a weight "
                    f"| {r['warp_instructions_per_weight']:.3f} | <= {TARGET_INSTRUCTIONS} |"
                )
    spilling = [r["kernel"] for r in rows if r["spill_instructions"] or r["local_bytes"]]
    lines.append(f"| kernels that spill (or use local memory) | {len(spilling)} of {len(rows)} | 0 |")
    launches = record["launches"]
    for mix, m in launches["mixes"].items():
        lines.append(
            f"| launches a layer, 8B Q4_K_M layer with {mix} ({launches['kernels']}): "
            f"Triton {m['triton_per_layer']} + torch {m['torch_per_layer']} | {m['per_layer']} | <= {TARGET_LAUNCHES} |"
        )
    lines.append(
        f"| launches a decode step, Llama-3.1-8B (32 layers; fixed part {launches['fixed']}) "
        f"| {launches['step_8b']} | <= {32 * TARGET_LAUNCHES} + fixed |"
    )
    lines += [
        "",
        "| chain kernel | constexprs | loops: loads before the first float op / loads an iteration |",
    ]
    lines.append("|---|---|---|")
    for r in rows:
        if r["kernel"] in CHAINS:
            loops = ", ".join(f"{ahead}/{loads}" for loads, ahead in r.get("loop_loads", ()))
            lines.append(f"| {r['kernel']} | {_tile(r['constexprs'])} | {loops} |")
    lines += [
        "",
        "| 8B decode matmul (batch) | programs before (tiles) | K ranges | programs | target |",
        "|---|---|---|---|---|",
    ]
    for p in record.get("programs", []):
        lines.append(
            f"| {p['projection']} ({p['rows']}) | {p['tiles']} | {p['k_ranges']} x {p['blocks_a_range']} blocks "
            f"| {p['programs']} | >= {TARGET_PROGRAMS} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--fast", action="store_true", help="the default mode's launches, matmuls and chain kernels only"
    )
    parser.add_argument(
        "--specs", type=Path, help="recorded launches: reused if the file exists, else written"
    )
    parser.add_argument("--kernels", default="native", help="the engine mode whose launches are counted")
    parser.add_argument("--types", help="also the integer matmuls with these types' layouts (IQ4_NL,MXFP4)")
    parser.add_argument("--json", type=Path, help="also write the record as JSON here")
    args = parser.parse_args()
    record = measure(args.fast, args.specs, args.kernels, args.types.split(",") if args.types else None)
    if args.json:  # first: the measurement survives a table that fails to print
        write_results(args.json, record)
    print(table(record))
    print(f"\nseconds: {record['seconds']}")


if __name__ == "__main__":
    main()
