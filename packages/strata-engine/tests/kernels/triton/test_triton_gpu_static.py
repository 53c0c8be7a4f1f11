"""The decode's static costs on an H200 do not grow: a ratchet on what bench/gpu_static.py shows.

Issue 42's targets are 0.15 warp-instructions a weight in the Q4_K and Q6_K decode loops, no
spills, 4 launches a layer; these tests hold today's figures so that a change can only bring them
closer: the decode matmuls for Q4_K and Q6_K compiled for sm_90 (their loop's instructions a
weight, tensor-core MMAs in the loop, no local memory), and one decode step's launches a layer for
the 8B's Q4_K_M layer mixes. A change that lowers a figure should lower it here too. The SASS parser is
tested on a hand-written excerpt, so a change in the disassembler's format fails here rather
than printing zeros. Only the two decode kernels are compiled (seconds), not every launch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: the other Triton tests in this process run interpreted)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from strata_engine.testing import decode_launches, sass_stats, triton_compile

# Today's figures (Triton 3.9.0's ptxas, sm_90, compiled with the 16-byte pointer alignment a
# launch specialises on; the default mode: limbs 3, mmadecode's BN 256, 4 warps, 2 pipeline
# stages). Each is the decode loop's warp-instructions a weight (loop body x warps / 32 x BN;
# split along K, its two loops together: the programs' once a block, the float steps' once every
# mmadecode.tail_blocks blocks); the target is 0.15.
FORMS = {(False, 4): "one program a tile", (True, 1): "split, 1 row", (True, 4): "split, 4 rows"}
MAX_PER_WEIGHT = {
    ("Q4_K", "one program a tile"): 0.110,  # 224 instructions x 4 warps / 8192 weights, 4 IGMMAs
    # 299 x 4 / 8192 (two halves' sums, each with its own scale; 4 IGMMAs of 32 columns), with
    # the residual add in the epilogue (ffn_down's launch, HAS_RES)
    ("Q6_K", "one program a tile"): 0.146,
    # split along K (an 8B projection at batch 1: 180 + 168 / 4 instructions, the float steps'
    # loop unrolled over 4 blocks, the scratch read unmasked; 4 rows: 174 + 309 / 4)
    ("Q4_K", "split, 1 row"): 0.109,
    ("Q4_K", "split, 4 rows"): 0.123,
    # 235 + 273 / 8 (one row's two halves as the 16 columns of a 64x16 MMA; the float steps
    # unrolled over 8 blocks)
    ("Q6_K", "split, 1 row"): 0.132,
    # 233 + 561 / 8 (an output's rows and halves side by side in the scratch, stored in the
    # MMA accumulator's layout and read in the scales' own: no move through shared memory)
    ("Q6_K", "split, 4 rows"): 0.149,
}
DECODE = "_mma_kernel"
# Launches a layer of one decode step (Triton + torch kernels; the target is 4) for the two layer
# mixes of Llama-3.1-8B's Q4_K_M, and the 8B step (the fixed part + 16 layers of each).
MAX_PER_LAYER = {
    # 4 Triton (q/k fused and v Q6_K in one launch with RoPE, the KV write and the attention:
    # qkvrope.py, qkvattn.py; gate/up with SwiGLU and its quantisation in one: gateup.py; wo and
    # down each with the residual add, the next RMSNorm and its quantisation in one: addnorm.py),
    # no torch
    "attn_v, ffn_down Q6_K": 4,
    # 4 Triton (q/k/v fused with RoPE, the KV write and the attention, its output quantised for wo;
    # gate/up + SwiGLU in one launch; wo's and down's launches add the residual and make the next
    # norm's digits)
    "all Q4_K": 4,
}
# 8 + 16 x 4 + 16 x 4 (the first attn_norm in the fixed part, the final norm in the last down)
MAX_STEP_8B = 136

# A hand-written excerpt in cuobjdump's format: an outer loop (0x0040 back from 0x00c0) around an
# inner one (0x0060 back from 0x00a0), a shorter loop after it, and the trap after the EXIT.
SASS = """
        Function : _kernel
        /*0000*/                   LDC R1, c[0x0][0x28] ;             /* 0x00000a00ff017b82 */
                                                                       /* 0x000fe20000000800 */
        /*0010*/                   S2R R0, SR_TID.X ;                 /* 0x0000000000007919 */
        /*0020*/                   STL [R1], R0 ;                     /* 0x0000000000007919 */
        /*0030*/              @!P0 BRA 0x110 ;                        /* 0x0000001000608947 */
        /*0040*/                   IMAD R2, R0, 0x4, RZ ;             /* 0x0000000000007919 */
        /*0050*/                   LDG.E R3, desc[UR4][R2.64] ;       /* 0x0000000000007919 */
        /*0060*/                   IMMA.16832.S8.S8 R4, R8, R12, R4 ; /* 0x0000000000007919 */
        /*0070*/                   HMMA.16816.F32 R4, R8, R12, R4 ;   /* 0x0000000000007919 */
        /*0080*/                   IADD3 R5, R5, 0x1, RZ ;            /* 0x0000000000007919 */
        /*0090*/                   ISETP.GE.AND P1, PT, R5, R6, PT ;  /* 0x0000000000007919 */
        /*00a0*/               @P1 BRA 0x60 ;                         /* 0xfffffff000801947 */
        /*00b0*/                   LDL R7, [R1] ;                     /* 0x0000000000007919 */
        /*00c0*/               @P2 BRA 0x40 ;                         /* 0xfffffff000801947 */
        /*00d0*/                   FADD R9, R9, 1 ;                   /* 0x0000000000007919 */
        /*00e0*/              @!UP0 BRA 0xd0 ;                        /* 0xfffffff000801947 */
        /*00f0*/                   STG.E desc[UR4][R2.64], R9 ;       /* 0x0000000000007919 */
        /*0100*/                   EXIT ;                             /* 0x000000000000794d */
        /*0110*/                   BRA 0x110;                         /* 0xfffffffc00fc7947 */
"""

# A loop as nvdisasm writes it (its real layout): a label for each target, the trap's on itself.
NVDISASM = """
.L_x_0:
        /*0000*/                   IADD3 R5, R5, 0x1, RZ ;
        /*0010*/                   ISETP.GE.AND P1, PT, R5, R6, PT ;
        /*0020*/               @P1 BRA `(.L_x_0) ;
        /*0030*/                   EXIT ;
.L_x_1:
        /*0040*/                   BRA `(.L_x_1);
"""


def test_the_sass_parser_finds_the_innermost_loop_and_counts_it() -> None:
    code = sass_stats.parse_sass(SASS)
    assert [i.address for i in code] == list(range(0, 0x120, 0x10)), (
        "one instruction a line, not the encodings"
    )
    assert code[3].opcode == "BRA" and code[3].target == 0x110 and code[6].opcode == "IMMA.16832.S8.S8"
    assert sass_stats.loops(code) == [(6, 10), (4, 12), (13, 14)], "backward branches, not the trap"
    body = sass_stats.innermost_loop(code)
    assert [i.address for i in body] == [0x60, 0x70, 0x80, 0x90, 0xA0], "the longest loop with none inside"
    assert sass_stats.count(body, sass_stats.MMA) == 2
    assert sass_stats.count(code, sass_stats.SPILLS) == 2
    assert sass_stats.innermost_loop(code[:4]) == [], "no loop, no body"
    labelled = sass_stats.parse_sass(NVDISASM)
    assert [i.target for i in labelled if i.target is not None] == [0x0, 0x40]
    assert sass_stats.loops(labelled) == [(0, 2)]


def test_res_usage_is_read_and_per_weight_is_body_times_warps_over_weights() -> None:
    text = " Function _mma_kernel:\n  REG:108 STACK:0 SHARED:1024 LOCAL:8 CONSTANT[0]:616 TEXTURE:0\n"
    assert sass_stats.resources(text) == {
        "REG": 108, "STACK": 0, "SHARED": 1024, "LOCAL": 8, "CONSTANT": 616, "TEXTURE": 0,
    }  # fmt: skip
    stats = sass_stats.KernelStats(
        "mmadecode._mma_kernel", "Q4_K", {"BN": 256}, 4, 108, 1024, 0, 0, 263, 4, 8192
    )
    assert stats.warp_instructions_per_weight == 263 * 4 / 8192
    assert sass_stats.weight_type("mmadecode._mma_kernel", {"WT": 12}) == "Q4_K"
    assert sass_stats.weight_type("norm._rmsnorm_kernel", {}) is None


def _module(name: str, *args: str, interpret: bool) -> None:
    """`python -m strata_engine.testing.<name> args` in a fresh process: the GPU's tiles are
    chosen when the kernels' modules are imported, which this process has done interpreted."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "STRATA_TRITON_GPU_TILES")}
    if interpret:
        env |= {"TRITON_INTERPRET": "1", "STRATA_TRITON_GPU_TILES": "1"}
    command = [sys.executable, "-m", f"strata_engine.testing.{name}", *args]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_the_q4_k_and_q6_k_decode_loops_do_not_grow_and_do_not_spill(tmp_path, recorded) -> None:
    specs = tmp_path / "specs.json"
    # the record step's first run (`recorded`: bench/gpu_static.py --fast's); each decode launch
    # (an add-norm launch as its weight's own, the residual added) in its three forms, whichever
    # the tiny model's widths took: one program a tile, and split along K with the float steps
    # for 1 row (an 8B projection at batch 1) or 4
    launches = [s for s in recorded if s["name"] in (DECODE, "_addnorm_kernel")]
    decode = [
        s
        for s in sass_stats.decode_forms(launches)
        if s["name"] == DECODE
        and sass_stats.weight_type(f"mmadecode.{DECODE}", s["constexprs"]) in {t for t, _ in MAX_PER_WEIGHT}
    ]
    specs.write_text(json.dumps(decode))
    out = tmp_path / "stats.json"
    _module("triton_compile", "analyse", str(specs), str(out), interpret=False)
    rows: dict[tuple[str, str], dict] = {}
    for r in json.loads(out.read_text()):  # the larger figure of each type and form
        key = (r["wtype"], FORMS[(r["constexprs"]["SPLIT"], r["constexprs"]["CR"])])
        if key not in rows or r["warp_instructions_per_weight"] > rows[key]["warp_instructions_per_weight"]:
            rows[key] = r
    assert set(rows) == set(MAX_PER_WEIGHT), rows
    for (wtype, form), row in rows.items():
        print(wtype, form, row)
        limit = MAX_PER_WEIGHT[wtype, form]
        assert row["local_bytes"] == 0 and row["spill_instructions"] == 0, f"{wtype}: spills"
        assert row["constexprs"]["BN"] == 256 and row["constexprs"]["LIMBS"] == 3, (
            "the GPU's tile, the default mode"
        )
        assert row["loop_mma"] > 0, f"{wtype}: the decode loop runs on tensor cores"
        assert 0 < row["warp_instructions_per_weight"] <= limit, (
            f"{wtype} ({form}): {row['warp_instructions_per_weight']:.3f} warp-instructions a "
            f"weight, more than today's {limit} (lower the figure when it falls)"
        )


def test_an_8b_decode_step_launches_no_more_a_layer_than_today() -> None:
    launches = decode_launches.per_layer("native")
    print(json.dumps(launches, indent=1))
    for mix, limit in MAX_PER_LAYER.items():
        assert 0 < launches["mixes"][mix]["per_layer"] <= limit, (mix, launches["mixes"][mix])
    assert launches["step_8b"] <= MAX_STEP_8B, launches["step_8b"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> list[dict]:
    """The launches of the record step's first run (the quantised model in the default mode)."""
    specs = tmp_path_factory.mktemp("recorded") / "specs.json"
    _module("triton_compile", "record", str(specs), f"0/{len(triton_compile.RUNS)}", interpret=True)
    return json.loads(specs.read_text())


def test_the_gate_up_launch_does_not_spill(tmp_path, recorded) -> None:
    """The gate/up launch with SwiGLU and its quantisation in its epilogue (gateup.py), in the
    three forms a GPU runs, with the tiny model's types and the 8B's (Q4_K gate and up; Q4_K and
    Q6_K), compiled for sm_90: no local memory, no spills."""
    from strata_engine.kernels.triton.packed import layout
    from strata_engine.kernels.triton.wtypes import Q4_K, Q6_K

    recorded = [s for s in recorded if s["name"] == "_gateup_kernel"]
    assert recorded, "the tiny model's decode takes the gate/up launch"
    forms = []
    for types in ((), (Q4_K, Q4_K), (Q4_K, Q6_K)):
        pair = {}
        if types:
            pair = layout(types[0].value) | {f"{k}2": v for k, v in layout(types[1].value).items()}
        for split, cr in FORMS:
            sig = recorded[0]["signature"] | {
                "cnt_ptr": "*i32" if split else recorded[0]["signature"]["g_ptr"]
            }
            c = recorded[0]["constexprs"] | pair | {"SPLIT": split, "CR": cr}
            forms.append(recorded[0] | {"signature": sig, "constexprs": c})
    for r in _compiled_without_spills(tmp_path, forms):
        c = r["constexprs"]
        print(c["WT"], c["WT2"], c["SPLIT"], c["CR"], r["registers"])


def test_the_add_norm_launch_does_not_spill(tmp_path, recorded) -> None:
    """The residual matmul with the next RMSNorm and its quantisation (addnorm.py), in the three
    forms a GPU runs, with the tiny model's type and the 8B's (Q4_K wo, Q6_K down) and the
    tiny model's norm chunk and the 8B's (addnorm.CHUNK: 8 blocks a step), compiled for sm_90:
    no local memory, no spills."""
    from strata_engine.kernels.triton.packed import layout
    from strata_engine.kernels.triton.wtypes import Q4_K, Q6_K

    found = [s for s in recorded if s["name"] == "_addnorm_kernel"]
    assert found, "the tiny model's decode takes the add-norm launch"
    forms = []
    for types in ((), (Q4_K,), (Q6_K,)):
        for chunk in ({}, {"CB": 8}):  # the 8B's: addnorm.CHUNK on a GPU
            for split, cr in FORMS:
                c = found[0]["constexprs"] | (layout(types[0].value) if types else {}) | chunk
                forms.append(found[0] | {"constexprs": c | {"SPLIT": split, "CR": cr}})
    for r in _compiled_without_spills(tmp_path, forms):
        c = r["constexprs"]
        print(c["WT"], c["CB"], c["SPLIT"], c["CR"], r["registers"])


def _compiled_without_spills(tmp_path, forms: list[dict]) -> list[dict]:
    """`forms` (recorded launches) compiled for sm_90 in the GPU's tile and the default mode: each
    one's statistics, after asserting that none uses local memory or spills."""
    specs, out = tmp_path / "specs.json", tmp_path / "stats.json"
    specs.write_text(json.dumps(forms))
    _module("triton_compile", "analyse", str(specs), str(out), interpret=False)
    rows = json.loads(out.read_text())
    assert len(rows) == len(forms)
    for r in rows:
        assert r["constexprs"]["BN"] == 256 and r["constexprs"]["LIMBS"] == 3, (
            "the GPU's tile, the default mode"
        )
        assert r["local_bytes"] == 0 and r["spill_instructions"] == 0, f"spills: {r}"
    return rows


# The chain kernels (C's serial sums: RMSNorm's dot_1, log-softmax's compensated sum, attention's
# softmax sum and V sum) load a chunk of their row before the chain consumes it: some innermost
# loop of each issues at least this many global loads an iteration, at least `ahead` of them
# before its first float operation (sass_stats.loads_ahead). Today's figures; before, a step at a
# time: RMSNorm 4 loads an iteration, 4 ahead (ptxas's unroll); log-softmax 4, 4; attention's sum
# 16, 16 and V chain 12, 12 (the attention's own launch; inside the q/k/v launch its steps are
# as before: attention.FUSED_UNROLL).
CHAIN_LOADS = {
    "norm._rmsnorm_kernel": [(32, 12)],  # 32 steps of 16 floats (norm.STEPS)
    "norm._rmsnorm_quantize_kernel": [(32, 15)],  # (the add-norm launch's: 32, 32)
    "logprobs._log_softmax_kernel": [(16, 14)],  # 16 steps (logprobs.UNROLL)
    "attention._attention_kernel": [(32, 21), (96, 13)],  # 32 positions (attention.UNROLL)
}


def test_the_chain_kernels_load_their_row_before_chaining(tmp_path, recorded) -> None:
    """The chain kernels of the recorded run (and the plain RMSNorm, which the integer mode does
    not launch), compiled for sm_90: each chain loop issues its chunk's loads together; no
    local memory or spills."""
    f32 = "*fp32"
    rmsnorm = {
        "module": "strata_engine.kernels.triton.norm", "name": "_rmsnorm_kernel",
        "signature": {"x_ptr": f32, "w_ptr": f32, "y_ptr": f32, "M": "i32", "K": "i32", "eps": "fp32",
                      "ROWS": "constexpr", "OUT": "constexpr"},
        "constexprs": {"ROWS": 1, "OUT": 1024}, "options": {"enable_fp_fusion": False},
        "aligned": ["x_ptr", "w_ptr", "y_ptr"],
    }  # fmt: skip
    names = {k.split(".")[1] for k in CHAIN_LOADS}
    specs = [rmsnorm] + [s for s in recorded if s["name"] in names]
    (tmp_path / "specs.json").write_text(json.dumps(specs))
    _module(
        "triton_compile", "analyse", str(tmp_path / "specs.json"), str(tmp_path / "out.json"), interpret=False
    )
    rows = json.loads((tmp_path / "out.json").read_text())
    assert {r["kernel"] for r in rows} == set(CHAIN_LOADS), [r["kernel"] for r in rows]
    for r in rows:
        print(r["kernel"], r["registers"], r["loop_loads"])
        assert r["local_bytes"] == 0 and r["spill_instructions"] == 0, f"spills: {r}"
        for loads, ahead in CHAIN_LOADS[r["kernel"]]:
            assert any(n >= loads and a >= ahead for n, a in r["loop_loads"]), (
                f"{r['kernel']}: no loop issues {loads} loads an iteration, {ahead} before its first "
                f"float operation: {r['loop_loads']}"
            )
