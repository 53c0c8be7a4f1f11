"""The one table of weight types (strata_kernels.h's strata_wtypes) is complete and true.

Every type the header's enum names has a row; each row's sizes are gguf-py's own
(GGML_QUANT_SIZES, an independent reference), and its layout arithmetic holds; the C compiler reads
the table as the Python parser does; on every kernel target this host runs, each row's type is
read by each arithmetic its row names (the fp32 unpacking gives gguf-py's values bit for bit; the
q8 and limb kernels run on its repacking); and the Triton dequantiser has a branch for it,
written with the table's names, never a literal type code. Small weights: a few seconds.
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

import strata_engine
from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels import native, transcode
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.native.header import HEADER, INTERFACE
from strata_engine.kernels.weight_types import (
    HALF_SCALES,
    PACK_CODEBOOK,
    PACK_GRID,
    PACK_KQUANT,
    PACK_STORED,
    PACK_WIDEN,
    READS_FP32,
    READS_LIMB,
    READS_Q8,
    TYPES,
    WeightType,
)
from strata_engine.kernels.weights import Weight
from strata_engine.testing.tiny_models import encode_tensor

TRITON = Path(strata_engine.__file__).parent / "kernels" / "triton"
N, K = 20, 512  # a group of 16 outputs and a partial one; two super-blocks of 256


def test_every_enum_member_has_a_row_with_gguf_pys_sizes() -> None:
    codes = INTERFACE.enums["strata_wtype"]
    assert set(INTERFACE.tables["strata_wtypes"]) == set(codes.values())  # no row without a name
    assert {t.code for t in TYPES.values()} == set(codes.values())
    for qtype, t in TYPES.items():
        assert t.code == int(qtype) and f"WT_{qtype.name}" in codes
        assert (t.values, t.stored_bytes) == GGML_QUANT_SIZES[qtype], qtype.name
        assert t.reads & READS_FP32, qtype.name  # the default arithmetic reads every type
        if t.pack in (PACK_STORED, PACK_GRID):  # the grid types: as stored, or fp32
            assert t.kernel_bytes == t.stored_bytes and t.scale_fields == 0
        elif t.pack == PACK_WIDEN:  # each fp16 field becomes an fp32 one
            assert t.kernel_bytes == t.stored_bytes + 2 * t.scale_fields
        elif t.pack == PACK_CODEBOOK:  # an fp32 scale and 16 bytes of indices a 32
            assert t.kernel_bytes * 32 == 20 * t.values and t.scale_fields == 0
        else:
            assert t.pack == PACK_KQUANT and t.values == 256 and t.kernel_bytes > t.stored_bytes


def test_the_c_compiler_reads_the_table_as_the_parser_does(tmp_path: Path) -> None:
    src, exe = tmp_path / "table.c", tmp_path / "table"
    src.write_text(
        '#include <stdio.h>\n#include "strata_kernels.h"\nint main(void) {\n'
        "    for (size_t i = 0; i < sizeof strata_wtypes / sizeof strata_wtypes[0]; i++) {\n"
        "        const strata_wtype_row *r = &strata_wtypes[i];\n"
        '        if (r->values) printf("%zu %d %d %d %d %d %d\\n", i, (int)r->values, (int)r->stored_bytes,\n'
        "                              (int)r->kernel_bytes, (int)r->scale_fields, (int)r->pack, (int)r->reads);\n"
        "    }\n    return 0;\n}\n"
    )
    cc, _ = native.compiler()
    subprocess.run(
        [cc, "-std=c11", "-Wall", "-Werror", f"-I{HEADER.parent}", str(src), "-o", str(exe)], check=True
    )
    c_rows = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.splitlines()
    fields = ("values", "stored_bytes", "kernel_bytes", "scale_fields", "pack", "reads")
    parsed = [
        " ".join(map(str, [t.code, *(getattr(t, f) for f in fields)]))
        for t in sorted(TYPES.values(), key=lambda t: t.code)
    ]
    assert c_rows == parsed


def _weight(t: WeightType) -> tuple[Weight, np.ndarray]:
    """A [N, K] weight of type t as the loader keeps it, and gguf-py's values of it."""
    rng = np.random.default_rng(t.code)
    values = rng.standard_normal((N, K)).astype(np.float32) * 0.05
    if t.qtype in (QT.Q3_K, QT.IQ1_M):  # no quantiser in gguf-py: random quants, d = 2^-9 (0x1800)
        data = rng.integers(0, 256, (N * K // 256, t.stored_bytes), dtype=np.uint8)
        if t.qtype == QT.Q3_K:
            data[:, 108:110] = np.array([0x1800], np.uint16).view(np.uint8)
        else:  # d's nibbles on top of the four scale words, low nibble first
            words = data[:, 48:56].copy().view(np.uint16) & np.uint16(0x0FFF)
            nibbles = (np.uint16(0x1800) >> np.arange(0, 16, 4, dtype=np.uint16)) & np.uint16(15)
            data[:, 48:56] = (words | nibbles << np.uint16(12)).view(np.uint8)
    else:
        data = values if t.qtype == QT.F32 else encode_tensor(values, t.qtype, rng)
    stored = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    w = Weight.from_info(TensorInfo("w", (N, K), t.qtype, stored))
    if t.pack == PACK_WIDEN or t.qtype in transcode.HELD_CODEBOOK:  # the file's blocks, scales and all
        assert w.kernel_type == t.code | HALF_SCALES and np.shares_memory(w.raw, stored)
        assert w.raw.size == N * K // t.values * t.stored_bytes
    else:
        assert w.kernel_type == t.code and w.raw.size == N * t.row_bytes(K)  # kept in block form
    expected = stored.view(np.float32) if t.qtype == QT.F32 else quants.dequantize(stored, t.qtype)
    return w, np.asarray(expected, dtype=np.float32).reshape(N, K)


@pytest.mark.parametrize("target", native.runnable_targets())
def test_every_row_has_a_kernel_on_every_target(target: str) -> None:
    x = np.random.default_rng(0).standard_normal((3, K)).astype(np.float32)
    ids = np.arange(N)
    for t in TYPES.values():
        w, expected = _weight(t)
        reference = x.astype(np.float64) @ expected.astype(np.float64).T
        fp32 = NativeOps(1, target)
        assert np.array_equal(fp32.embed(w, ids).view(np.uint32), expected.view(np.uint32)), t.qtype.name
        np.testing.assert_allclose(fp32.linear(x, w), reference, rtol=1e-4, atol=1e-4)
        q8 = NativeOps(1, target, q8=True)
        assert bool(q8.lib.strata_q8_supported(t.code)) == bool(t.reads & READS_Q8), t.qtype.name
        if t.reads & READS_Q8:
            packed = q8.pack(w)  # the tied head's packed copy: gguf-py's values again
            assert np.array_equal(q8.embed(packed, ids).view(np.uint32), expected.view(np.uint32))
            np.testing.assert_allclose(q8.linear(x, packed), reference, rtol=0.05, atol=0.05)
        if t.reads & READS_LIMB:
            limbs = NativeOps(1, target, limbs=3)
            np.testing.assert_allclose(limbs.linear(x, limbs.pack(w)), reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", native.runnable_targets())
def test_every_row_multiplies_as_its_values_widened_to_f32(target: str) -> None:
    """A matmul on a type's blocks is the matmul on gguf-py's fp32 values of them, bit for bit:
    the dequantised block feeds the same FMA sequence as fp32 weights (few rows: fused; more:
    panels). A type only the fp32 arithmetic reads stays with it in the integer modes (q8,
    limbs): those pack it not, and give the same bits."""
    rng = np.random.default_rng(1)
    for t in TYPES.values():
        w, expected = _weight(t)
        dense = Weight.from_info(TensorInfo("d", (N, K), QT.F32, expected.reshape(-1).view(np.uint8)))
        for m in (1, 3, 11):
            x = rng.standard_normal((m, K)).astype(np.float32)
            want = NativeOps(1, target).linear(x, dense).view(np.uint32)
            assert np.array_equal(NativeOps(2, target).linear(x, w).view(np.uint32), want), (t.qtype.name, m)
            if not t.reads & READS_Q8:
                for ops in (NativeOps(1, target, q8=True), NativeOps(1, target, limbs=3)):
                    assert ops.pack(w) is w, t.qtype.name
                    assert np.array_equal(ops.linear(x, w).view(np.uint32), want), (t.qtype.name, m)


@pytest.mark.parametrize("target", native.runnable_targets())
def test_every_f16_and_bf16_value_is_gguf_pys(target: str) -> None:
    """All 65,536 bit patterns (zeros, subnormals, infinities, NaN payloads) widen to gguf-py's
    fp32 bits."""
    every = np.arange(1 << 16, dtype=np.uint16).view(np.uint8)
    for qtype in (QT.F16, QT.BF16):
        w = Weight.from_info(TensorInfo("w", (64, 1024), qtype, every))
        want = np.asarray(quants.dequantize(every, qtype), dtype=np.float32).reshape(64, 1024)
        got = NativeOps(1, target).embed(w, np.arange(64))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), qtype.name


@pytest.mark.parametrize("target", native.runnable_targets())
def test_every_iq2_grid_entry_is_gguf_pys(target: str) -> None:
    """Each entry of the IQ2 grids (native/iq_grids.h: 512 and 1024 of 8 values) dequantises to
    gguf-py's values: one row whose groups of 8 name every entry once, with random signs."""
    rng = np.random.default_rng(2)
    for qtype, entries in ((QT.IQ2_XS, 512), (QT.IQ2_S, 1024)):
        blocks = rng.integers(0, 256, size=(entries // 32, TYPES[qtype].stored_bytes), dtype=np.uint8)
        blocks[:, :2] = np.full((len(blocks), 1), 1e-3, dtype=np.float16).view(np.uint8)
        index = np.arange(entries).reshape(-1, 32)
        if qtype == QT.IQ2_XS:  # 9 bits of index, 7 of signs
            q = (index | rng.integers(0, 128, size=index.shape) << 9).astype(np.uint16)
            blocks[:, 2:66] = q.view(np.uint8)
        else:  # the low 8 bits in qs, the high 2 in qh (4 groups a byte)
            blocks[:, 2:34] = index & 255
            high = (index >> 8).reshape(-1, 8, 4) << np.array([0, 2, 4, 6])
            blocks[:, 66:74] = high.sum(axis=-1)
        k = entries * 8
        w = Weight.from_info(TensorInfo("w", (1, k), qtype, blocks.reshape(-1)))
        want = np.asarray(quants.dequantize(blocks, qtype), dtype=np.float32).reshape(1, k)
        got = NativeOps(1, target).embed(w, np.arange(1))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), qtype.name


def _function(path: Path, name: str) -> ast.FunctionDef:
    found = [
        n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef) and n.name == name
    ]
    assert len(found) == 1, (path, name)
    return found[0]


def _type_tests(node: ast.AST, param: str) -> list[ast.expr]:
    """What `param` (a kernel's type argument) is compared with anywhere in `node`."""
    return [
        side
        for c in ast.walk(node)
        if isinstance(c, ast.Compare) and isinstance(c.left, ast.Name) and c.left.id == param
        for side in c.comparators
    ]


def test_every_row_has_a_triton_dequantisation_named_by_the_table() -> None:
    """dequant.block has a branch per type, tested by the table's names (triton/wtypes.py makes
    them from the table; read here from the source: no Triton needed); no Triton kernel tests a
    type against a literal."""
    named = {
        side.id
        for side in _type_tests(_function(TRITON / "dequant.py", "block"), "KT")
        if isinstance(side, ast.Name)
    }
    # the codebook and grid types go to the device as the Q8_0 blocks of their values (stored.as_q8_0),
    # Q3_K and IQ1_M as Q6_K's; IQ2_XS and IQ2_S as stored for native-fp32 (dequant.GRIDS; the integer
    # modes read their expanded bytes, triton/kgrid.py)
    device = {QT.IQ2_XS, QT.IQ2_S}
    assert named == {
        t.qtype.name for t in TYPES.values() if t.pack not in (PACK_CODEBOOK, PACK_GRID) or t.qtype in device
    }
    for path in sorted(TRITON.glob("*.py")):
        for param in ("KT", "WT"):
            literals = [
                ast.unparse(s)
                for s in _type_tests(ast.parse(path.read_text()), param)
                if isinstance(s, ast.Constant)
            ]
            assert not literals, f"{path.name}: {param} compared with {literals}"
