"""What a compiled kernel costs a GPU, read from its cubin without one (bench/gpu_static.py).

Issue 42 asks how far the Triton kernels are from a decode that streams its weights at memory
speed; without a GPU to time, the compiler's output is the evidence. A cubin (triton_compile.py
builds one per recorded launch) is disassembled with the cuobjdump Triton bundles, and:

- the main loop is the innermost loop, found by its backward branch (a branch to an address at
  or before its own; the self-branch that pads the code after the last EXIT is not a loop); when
  several loops are innermost (none inside another), the longest, where the time goes (the
  decode matmul split along K: its two loops together, the programs' loop once a block and the
  last program's float steps, unrolled, once every `mmadecode.tail_blocks` blocks);
- each warp runs the loop body once per iteration, so warp-instructions a weight is the body's
  length times the launch's warps over the weights one iteration of a program consumes, taken
  from the kernel's tile constexprs (WEIGHTS_PER_ITERATION);
- MMA instructions (IMMA, HMMA and Hopper's warpgroup GMMAs) are counted in the loop body: a
  matmul on CUDA cores has none;
- registers and local memory come from `cuobjdump -res-usage`, the shared memory from Triton's
  metadata (its allocation is dynamic, which res-usage does not see); ptxas's spills are stores
  to and loads from local memory (STL, LDL), counted in the whole kernel.

The parser is tested on a hand-written excerpt, so a change in the disassembler's format fails
a test rather than printing zeros.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOADS = ("LDG",)  # global-memory loads
FLOAT = ("FADD", "FMUL", "FFMA", "DADD", "DMUL", "DFMA")  # float arithmetic: what a chain waits in
MMA = ("IMMA", "HMMA", "HGMMA", "IGMMA", "QGMMA", "DMMA")  # tensor-core opcodes (GMMA: sm_90 wgmma)
SPILLS = ("STL", "LDL")  # local-memory stores and loads: ptxas's spill code

# weights one iteration of the main loop consumes in one program, from the launch's constexprs:
# the integer matmuls and the fp32 mode's stored-block matmul take one block of 32 inputs for
# BN outputs an iteration; the fp32-weight matmul 16 inputs for BN outputs
WEIGHTS_PER_ITERATION: dict[str, Callable[[dict[str, Any]], int]] = {
    "intmatmul._tile_kernel": lambda c: 32 * c["BN"],
    "mmadecode._mma_kernel": lambda c: 32 * c["BN"],
    "matmul._matmul_kernel": lambda c: 32 * c["BN"],
    "fmatmul._dot1_kernel": lambda c: 16 * c["BN"],
}

_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_TARGET = re.compile(r"(?:0x([0-9a-f]+)|\.L_x_(\d+))")


@dataclass(frozen=True)
class Instruction:
    """One SASS instruction: its address, mnemonic (with modifiers) and a branch's target."""

    address: int
    opcode: str
    target: int | None  # a BRA's destination address; None for anything else


def parse_sass(text: str) -> list[Instruction]:
    """The instructions of `cuobjdump -sass` output (one function), in address order.

    cuobjdump writes a branch's target as an address (`BRA 0x470`); nvdisasm as a label
    (`BRA `(.L_x_3)`), resolved here to the address the label marks."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    out: list[Instruction] = []
    raw: list[tuple[int, str, str]] = []
    for line in text.splitlines():
        label = re.match(r"\s*\.L_x_(\d+):", line)
        if label:
            pending.append(label.group(1))
            continue
        m = _LINE.search(line)
        if not m:
            continue
        address = int(m.group(1), 16)
        for name in pending:
            labels[name] = address
        pending = []
        raw.append((address, m.group(3), m.group(4)))
    for address, opcode, operands in raw:
        target = None
        if opcode.split(".")[0] in ("BRA", "JMP"):
            t = _TARGET.search(operands)
            if t:
                target = int(t.group(1), 16) if t.group(1) else labels.get(t.group(2))
        out.append(Instruction(address, opcode, target))
    return out


def loops(instructions: list[Instruction]) -> list[tuple[int, int]]:
    """Every loop as (first, last) indices into `instructions`: a branch back to an address at or
    before its own (not to itself: that is the trap after the last EXIT)."""
    index = {ins.address: i for i, ins in enumerate(instructions)}
    found = []
    for i, ins in enumerate(instructions):
        if ins.target is not None and ins.target < ins.address and ins.target in index:
            found.append((index[ins.target], i))
    return found


def innermost_loops(instructions: list[Instruction]) -> list[list[Instruction]]:
    """The bodies of the loops with no other loop inside, longest first."""
    found = loops(instructions)
    inner = [(a, b) for a, b in found if not any((a, b) != (c, d) and a <= c and d <= b for c, d in found)]
    inner.sort(key=lambda loop: loop[0] - loop[1])
    return [instructions[a : b + 1] for a, b in inner]


def innermost_loop(instructions: list[Instruction]) -> list[Instruction]:
    """The main loop's body: of the loops with no other loop inside, the longest; [] if none."""
    bodies = innermost_loops(instructions)
    return bodies[0] if bodies else []


def loads_ahead(body: list[Instruction]) -> tuple[int, int]:
    """A loop body's global loads, and how many of them it issues before its first float
    arithmetic: the loads in flight when a chain's first step waits (a chain that loads a step
    at a time issues one or a few; one that loads its chunk first, the chunk)."""
    first = next((i for i, ins in enumerate(body) if ins.opcode.split(".")[0] in FLOAT), len(body))
    return count(body, LOADS), count(body[:first], LOADS)


def count(instructions: list[Instruction], prefixes: tuple[str, ...]) -> int:
    """How many of `instructions` have a mnemonic whose base (before the first dot) is one of
    `prefixes`."""
    return sum(ins.opcode.split(".")[0] in prefixes for ins in instructions)


def tools() -> Path:
    """The folder of the CUDA tools Triton's NVIDIA backend bundles (ptxas, cuobjdump, nvdisasm)."""
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin"


def cuobjdump(cubin: bytes, *args: str) -> str:
    """The bundled cuobjdump's output for `cubin` (`-sass`: the code; `-res-usage`: resources)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run(
            [str(tools() / "cuobjdump"), *args, str(path)], check=True, capture_output=True, text=True
        ).stdout


def resources(text: str) -> dict[str, int]:
    """`cuobjdump -res-usage`'s figures for the (one) function: REG, STACK, SHARED, LOCAL, ..."""
    line = next((ln for ln in text.splitlines() if "REG:" in ln), "")
    return {k: int(v) for k, v in re.findall(r"([A-Z]+)(?:\[\d+\])?:(\d+)", line)}


@dataclass(frozen=True)
class KernelStats:
    """One compiled launch's static costs (see the module's docstring for how each is read)."""

    kernel: str  # module.function
    wtype: str | None  # the weight type a matmul reads (None: not a matmul)
    constexprs: dict[str, Any]
    warps: int
    registers: int
    shared_bytes: int
    local_bytes: int
    spill_instructions: int
    loop_instructions: int  # 0: no loop
    loop_mma: int
    weights_per_iteration: int | None
    tail_instructions: int = 0  # split along K: the float steps' loop (0: none)
    tail_blocks: int = 1  # blocks one iteration of that loop takes
    # each innermost loop in code order: (its global loads, those before its first float
    # operation: loads_ahead)
    loop_loads: tuple[tuple[int, int], ...] = ()

    @property
    def warp_instructions_per_weight(self) -> float | None:
        """The main loop's warp-instructions a weight (None where the kernel reads no weights);
        split along K, with the float steps' loop's share of a block added."""
        if not self.weights_per_iteration or not self.loop_instructions:
            return None
        per_block = self.loop_instructions + self.tail_instructions / self.tail_blocks
        return per_block * self.warps / self.weights_per_iteration


def weight_type(name: str, constexprs: dict[str, Any]) -> str | None:
    """The GGML name of the weight type a matmul launch reads (its WT or KT constexpr)."""
    if name not in WEIGHTS_PER_ITERATION:
        return None
    if name == "fmatmul._dot1_kernel":
        return "F32"
    from gguf import GGMLQuantizationType as QT

    from strata_engine.kernels.weight_types import HALF_SCALES

    # (a codebook type's held packing, triton/codebook.py: its code with WT_HALF_SCALES)
    return QT(constexprs.get("WT", constexprs.get("KT")) & ~HALF_SCALES).name


def analyse(spec: dict[str, Any], kernel: Any) -> KernelStats:
    """The static costs of `kernel`, Triton's CompiledKernel for the recorded launch `spec`."""
    cubin = kernel.asm["cubin"]
    code = parse_sass(cuobjdump(cubin, "-sass"))
    res = resources(cuobjdump(cubin, "-res-usage"))
    body = innermost_loop(code)
    tail: list[Instruction] = []
    tail_blocks = 1
    if spec["constexprs"].get("SPLIT") and spec["name"] == "_mma_kernel":
        # the decode matmul split along K: the programs' loop over their blocks (integer sums,
        # first in the code) and the tile's last program's loop over every block (the float
        # steps, after it; `tail_blocks` blocks an iteration) both count, each a block (a pair
        # launch, mmapair.py, has two such loops a weight: its longest loop is shown)
        from strata_engine.kernels.triton.mmadecode import tail_blocks as blocks

        body, tail = sorted(innermost_loops(code)[:2], key=lambda loop: loop[0].address)
        tail_blocks = blocks(spec["constexprs"]["WT"], bool(spec["constexprs"]["KQ"]))
    name = f"{spec['module'].rsplit('.', 1)[-1]}.{spec['name']}"
    per_iteration = WEIGHTS_PER_ITERATION.get(name)
    return KernelStats(
        kernel=name,
        wtype=weight_type(name, spec["constexprs"]),
        constexprs=spec["constexprs"],
        warps=kernel.metadata.num_warps,
        registers=res.get("REG", 0),
        shared_bytes=max(kernel.metadata.shared, res.get("SHARED", 0)),
        local_bytes=res.get("LOCAL", 0),
        spill_instructions=count(code, SPILLS),
        loop_instructions=len(body),
        loop_mma=count(body + tail, MMA),
        tail_instructions=len(tail),
        tail_blocks=tail_blocks,
        weights_per_iteration=per_iteration(spec["constexprs"]) if per_iteration else None,
        loop_loads=tuple(
            loads_ahead(b) for b in sorted(innermost_loops(code), key=lambda loop: loop[0].address)
        ),
    )


def decode_forms(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The recorded launches, each decode matmul (mmadecode._mma_kernel) in the three forms a
    GPU runs whatever widths the tiny models had: one program a tile (SPLIT False: an 8B's LM
    head), and split along K with the float steps for 1 row (CR 1: batch 1) and for 4 (CR 4)."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for spec in [s for pair in specs for s in _pair_parts(pair)]:
        forms = [spec]
        if spec["name"] == "_mma_kernel":
            forms = []
            for split, cr in ((False, 4), (True, 1), (True, 4)):
                sig = spec["signature"] | {"cnt_ptr": "*i32" if split else spec["signature"]["y_ptr"]}
                constexprs = spec["constexprs"] | {"SPLIT": split, "CR": cr}
                forms.append(spec | {"signature": sig, "constexprs": constexprs})
        for form in forms:
            key = json.dumps(form, sort_keys=True)
            if key not in seen:
                seen.add(key)
                out.append(form)
    return out


_ONE_WEIGHT = {  # mmadecode._mma_kernel's signature (a pair launch's arguments per weight)
    "q_ptr": "*i32", "s_ptr": "*fp32", "dsum_ptr": "*fp32", "wq_ptr": "*u8", "wf_ptr": "*fp32",
    "b_ptr": "*fp32", "r_ptr": "*fp32", "y_ptr": "*fp32", "f_ptr": "*fp32", "cnt_ptr": "*i32",
    "M": "i32", "N": "i32", "nb": "i32", "GB": "i32", "PER": "i32",
}  # fmt: skip


def _pair_parts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """A recorded launch; a pair launch (mmapair._pair_kernel, two weights' tiles in one grid:
    each runs mmadecode's one-weight program) also as each of its weights' own decode launch,
    and an add-norm launch (addnorm._addnorm_kernel: mmadecode's program with the residual
    added, then the next RMSNorm) as its weight's, so that every type a decode reads keeps its
    figures."""
    if spec["name"] == "_addnorm_kernel":
        return [spec, _one_weight(spec, "", True)]
    if spec["name"] != "_pair_kernel":
        return [spec]
    return [spec, _one_weight(spec, "", False), _one_weight(spec, "2", False)]


def _one_weight(spec: dict[str, Any], suffix: str, residual: bool) -> dict[str, Any]:
    """mmadecode._mma_kernel's launch for the weight of `spec` whose layout constexprs end in
    `suffix`, the residual added (HAS_RES) or not."""
    c = spec["constexprs"]
    layout = {k: c[k + suffix] for k in ("WT", "KQ", "BB", "SB", "SCB")}
    constexprs = layout | {k: c[k] for k in ("LIMBS", "HAS_BIAS")} | {"HAS_RES": residual}
    constexprs |= {k: c[k] for k in ("BN", "SPLIT", "CR")}
    return spec | {
        "module": "strata_engine.kernels.triton.mmadecode",
        "name": "_mma_kernel",
        "signature": _ONE_WEIGHT
        | {"cnt_ptr": spec["signature"]["cnt_ptr"]}
        | dict.fromkeys(constexprs, "constexpr"),
        "constexprs": constexprs,
        "aligned": [k for k in _ONE_WEIGHT if k.endswith("_ptr")],
    }
