"""The Triton integer matmul (kernels/triton/intmatmul.py) against the C kernels, bit for bit.

The reference is the C code itself: strata_q8_matmul ("native-q8", 1 limb) and strata_limb_matmul
("native", "native-limb2") through NativeOps.linear, on the same bytes strata_q8_pack wrote. Every
quant type, 1 and 3 limbs (2 once), row counts on both paths (1, 2, 5, 8: the decode path on tensor
cores, 4 rows a program; 17, 33: more than one tile), odd N (a partial group of 16, a partial
program) and several block counts; extreme quants and activations (huge, tiny, zero, NaN, infinity
blocks); the decode path equals the tile path; the activation rule equals a numpy port of the C
rule; the packed layout's sizes are the C code's; rows of a packed weight are strata_gather_rows'.
A NaN's payload is not part of the contract (a GPU returns its own), so NaNs compare by place.
Without a GPU these run under Triton's interpreter, on small shapes."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.choice import make_ops
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import intmatmul, kgrid, mmadecode, packed, quantize
from strata_engine.kernels.triton.backend import TritonOps
from strata_engine.kernels.weights import Weight
from strata_engine.provenance import arithmetic
from strata_engine.testing.tiny_models import encode_tensor
from strata_engine.testing.triton_checks import assert_tiny_model_on_both
from strata_engine.testing.triton_setup import DEVICE, on

# The interpreter's numpy says so when an IEEE operation overflows or gives a NaN: the edge cases
# below do that on purpose (a GPU is silent).
pytestmark = pytest.mark.filterwarnings("ignore:(overflow|invalid value) encountered:RuntimeWarning")

TYPES = (QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q2_K, QT.IQ2_XS, QT.IQ2_S)
TYPES += (QT.IQ4_NL, QT.MXFP4, QT.IQ4_XS)  # the codebook types, packed as held (codebook.py)
KQUANTS = (QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q2_K, QT.IQ2_XS, QT.IQ2_S, QT.IQ4_XS)
KGRID = (QT.IQ2_XS, QT.IQ2_S)  # expanded for the device at load (kgrid.py): not the C packer's size
ROWS = (1, 2, 5, 8, 17, 33)  # 1-8: the decode path (mmadecode.py); 17, 33: the tile path
N = 37  # odd: the last group of 16 outputs is partial, and so is the last program's
# stored bytes of quants (block size, start, end) and the byte giving the largest |quant|
EXTREME_BYTES = {
    QT.Q4_0: (18, 2, 18, 0xFF),  # 15 - 8 = 7, and 0x00 for -8 below
    QT.Q4_1: (20, 4, 20, 0xFF),
    QT.Q5_0: (22, 2, 22, 0xFF),  # 31 - 16 = 15, and 0x00 for -16
    QT.Q5_1: (24, 4, 24, 0xFF),  # q = 31
    QT.Q8_0: (34, 2, 34, 0x80),  # -128
    QT.Q4_K: (144, 16, 144, 0xFF),
    QT.Q5_K: (176, 16, 176, 0xFF),
    QT.Q6_K: (210, 0, 192, 0xFF),
    QT.Q2_K: (84, 0, 80, 0xFF),  # scales and mins 15, quants 3 (and 0 below)
    QT.IQ2_XS: (74, 2, 74, 0xFF),  # grid entry 511 (every value 43, signs 127 and parity), scales 15
    QT.IQ2_S: (82, 2, 82, 0xFF),  # grid entry 1023 (qh's high bits too), every sign, scales 15
    QT.IQ4_NL: (18, 2, 18, 0x00),  # index 0: -127 (and 15, 113, below)
    QT.MXFP4: (17, 1, 17, 0x77),  # index 7: 12 (and 15, -12, below); E 0 and 254 below
    QT.IQ4_XS: (136, 8, 136, 0x00),  # index 0: -127; ls 0 (-32) and 63 (31) below
}


def _c_ops(limbs: int) -> NativeOps:
    """The C kernels of `limbs` (1: q8's rule), on one thread (their bits do not depend on it)."""
    return NativeOps(1, q8=True, limbs=0 if limbs == 1 else limbs)


def _weight(qtype: QT, n: int, k: int, rng: np.random.Generator, extreme: bool = False) -> Weight:
    """A real GGUF [n, k] weight as loaded. Q8_0 also gets quants of -128 (valid, never written
    by the quantiser); `extreme`: every quant at its largest magnitude."""
    values = rng.normal(0, 0.05, size=(n, k)).astype(np.float32)
    data = np.ascontiguousarray(encode_tensor(values, qtype, rng))
    blocks = data.reshape(-1, EXTREME_BYTES[qtype][0])
    if extreme:
        _, start, end, byte = EXTREME_BYTES[qtype]
        blocks[:, start:end] = byte
        if qtype == QT.Q4_0:
            blocks[1::2, start:end] = 0  # -8 on every other block
        if qtype == QT.Q2_K:
            blocks[1::2, 16:80] = 0  # all-0 quants (the largest mins alone) on every other block
        if qtype in (QT.IQ4_NL, QT.MXFP4, QT.IQ4_XS):  # the codebook's other end; extreme scales: IQ4_NL's
            blocks[1::2, start:end] = 0xFF  # d 65504 and 2^-24, MXFP4's E 0 and 254, IQ4_XS's ls 0 and 63
            at = {QT.IQ4_NL: slice(0, 2), QT.MXFP4: slice(0, 1), QT.IQ4_XS: slice(2, 8)}[qtype]
            blocks[::3, at] = {QT.IQ4_NL: (0xFF, 0x7B), QT.MXFP4: 0, QT.IQ4_XS: 0}[qtype]
            blocks[1::3, at] = {QT.IQ4_NL: (1, 0), QT.MXFP4: 254, QT.IQ4_XS: 0xFF}[qtype]
    elif qtype == QT.Q8_0:
        blocks[::3, 2 + rng.integers(0, 32)] = 0x80
    return Weight.from_info(TensorInfo("w", (n, k), qtype, data.reshape(-1)))


def _activations(m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Rows of mixed scales: normal values, blocks of very different magnitudes, an outlier,
    and a block of halves (ties for the rounding)."""
    x = rng.normal(0, 1, size=(m, k)).astype(np.float32)
    x *= np.repeat(rng.choice(np.array([1e-3, 1.0, 30.0], dtype=np.float32), size=(m, k // 32)), 32, axis=1)
    x[m // 2, k // 3] = 5e3
    x[0, :32] = np.arange(32, dtype=np.float32) - 15.5
    return x


def _edge_rows(k: int) -> np.ndarray:
    """Blocks at the rules' edges: huge (near fp32's largest), tiny (subnormal, and just below
    limb.c's 2^-100), zero, a NaN, an infinity, a lone value, values that round at a tie."""
    x = np.random.default_rng(7).normal(0, 1, size=(9, k)).astype(np.float32)
    x[0, :32] = 3e38 * np.sign(x[0, :32])
    x[1, :32] = 1e-40
    x[1, 32:64] = np.float32(2.0**-101)
    x[2, :32] = 0.0
    x[2, 40] = -0.0
    x[3, 5] = np.nan
    x[4, 33] = np.inf
    x[4, 70] = -np.inf
    x[5] = 0.0
    x[5, 37] = 3e37
    x[6, :32] = (np.arange(32, dtype=np.float32) - 16) * np.float32(0.5)
    x[7] *= np.float32(2.0**-90)
    x[8, :32] = np.arange(-16, 16, dtype=np.float32) + np.float32(0.5)  # q8: 127 / amax = 1, ties
    x[8, 0] = 127.0
    x[8, 32:64] = 1 + (2 * np.arange(32, dtype=np.float32) + 1) * np.float32(2.0**-23)  # 3 limbs: ties
    return x


def same_bits(got: torch.Tensor | np.ndarray, want: np.ndarray) -> bool:
    """Bitwise equal, NaNs compared by place only (their payload is the device's)."""
    g = got.detach().cpu().numpy() if isinstance(got, torch.Tensor) else got
    if g.shape != want.shape:
        return False
    nan = np.isnan(want)
    return bool(
        np.array_equal(np.isnan(g), nan)
        and np.array_equal(g.view(np.uint32)[~nan], want.view(np.uint32)[~nan])
    )


def _both(
    qtype: QT, limbs: int, x: np.ndarray, w: Weight, bias: np.ndarray | None = None, path: str = "auto"
):
    """(Triton's y, C's y) for x @ w.T (+ bias), on the bytes the C code packed."""
    c = _c_ops(limbs)
    pw = c.pack(w)
    want = c.linear(x, pw, bias)
    got = intmatmul.matmul(on(x), packed.from_packed(pw, DEVICE), None if bias is None else on(bias), path)
    return got, want


def _ks(qtype: QT) -> tuple[int, int]:
    """Two block counts: K-quants 1 and 2 super-blocks (the second's header skipped), else 3 and 9."""
    return (256, 512) if qtype in KQUANTS else (96, 288)


@pytest.mark.parametrize("limbs", (1, 3))
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_equals_the_c_kernels(qtype: QT, limbs: int) -> None:
    rng = np.random.default_rng(int(qtype) + 100 * limbs)
    for i, m in enumerate(ROWS):
        k = _ks(qtype)[i % 2]
        w = _weight(qtype, N, k, rng)
        bias = rng.uniform(-1, 1, N).astype(np.float32) if i % 2 else None
        got, want = _both(qtype, limbs, _activations(m, k, rng), w, bias)
        assert same_bits(got, want), f"{m} rows, K {k}, bias {bias is not None}"


@pytest.mark.parametrize("qtype", KGRID, ids=lambda t: t.name)
def test_kgrid_expanded_a_group_at_a_time_equals_the_c_kernels(qtype: QT, monkeypatch) -> None:
    """kgrid.expand works through a weight CHUNK groups at a time: with one group a chunk, the
    seams fall between every 16 outputs, and the result is still the C kernels' (a group's bytes
    put in another group's place, or a header lost at a seam, fails here)."""
    monkeypatch.setattr(kgrid, "CHUNK", 1)
    rng = np.random.default_rng(int(qtype) + 7)
    w = _weight(qtype, N, 512, rng)
    got, want = _both(qtype, 3, _activations(2, 512, rng), w)
    assert same_bits(got, want)


@pytest.mark.parametrize("qtype", (QT.Q4_K, QT.Q6_K), ids=lambda t: t.name)
def test_the_residual_is_added_as_the_cpu_engine_adds_it(qtype: QT) -> None:
    """`residual` (linear_add, the epilogue of both paths) gives residual + y, the CPU engine's
    fp32 x + o on C's y, NaN and infinity in the residual included."""
    rng = np.random.default_rng(int(qtype) + 300)
    k = _ks(qtype)[1]
    c, w = _c_ops(3), _weight(qtype, N, k, rng)
    pw = c.pack(w)
    for m in (3, 17):
        x = _activations(m, k, rng)
        r = rng.normal(0, 1, size=(m, N)).astype(np.float32)
        r[0, :3] = (np.nan, np.inf, -3e38)
        want = r + c.linear(x, pw, None)
        for path in ("mma", "tile"):
            xq = quantize.quantize(on(x), 3)
            got = intmatmul.matmul_quantised(xq, packed.from_packed(pw, DEVICE), None, path, residual=on(r))
            assert same_bits(got, want), f"{m} rows, {path} path"


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_two_limbs_equal_the_c_kernels(qtype: QT) -> None:
    rng = np.random.default_rng(int(qtype) + 200)
    k = _ks(qtype)[1]
    w = _weight(qtype, N, k, rng)
    for m in (3, 17):
        got, want = _both(qtype, 2, _activations(m, k, rng), w, rng.uniform(-1, 1, N).astype(np.float32))
        assert same_bits(got, want), f"{m} rows"


@pytest.mark.parametrize("limbs", (1, 3))
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_extremes_equal_the_c_kernels(qtype: QT, limbs: int) -> None:
    """Every quant at its largest magnitude against activations at the rules' edges: integer
    sums at their bounds, NaN/infinity/tiny/zero blocks, ties; the tile and the decode path."""
    rng = np.random.default_rng(int(qtype) + 300 * limbs)
    k = _ks(qtype)[0]
    x = _edge_rows(k)
    for extreme in (True, False):
        w = _weight(qtype, N, k, rng, extreme=extreme)
        for path in ("mma", "tile"):
            got, want = _both(qtype, limbs, x, w, path=path)
            assert same_bits(got, want), f"extreme weights {extreme}, {path} path"
    assert np.isnan(want[4]).all() and (limbs == 1 or np.isnan(want[3]).all())  # the edges are reached


def test_three_limb_sum_is_rounded_once() -> None:
    """k = 3: the block's exact sum S (up to 2^37) becomes fp32 in one rounding. With one block,
    a weight scale of 1 and activations that are integers at scale 1, y = (float)S exactly, so
    rows where rounding the limbs' parts first would differ (found by search) show it."""
    rng = np.random.default_rng(11)
    w = rng.integers(-128, 128, size=(N, 32))
    x = rng.integers(-quantize.XMAX[3], quantize.XMAX[3] + 1, size=(4000, 32))
    x[:, 0] = quantize.XMAX[3]  # the block's largest: its scale is 1, so X = x
    exact = x @ w.T
    digits, rest = [], x
    for _ in range(3):
        digits.append(((rest & 255) ^ 128) - 128)
        rest = (rest - digits[-1]) >> 8
    s0, s1, s2 = (d @ w.T for d in digits)
    twice = (s2 * 65536).astype(np.float32) + (s1 * 256 + s0).astype(np.float32)
    rows = np.nonzero((twice != exact.astype(np.float32)).any(axis=1))[0][:6]
    assert len(rows) == 6
    data = np.zeros((N, 34), dtype=np.uint8)
    data[:, :2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    data[:, 2:] = w.astype(np.int8).view(np.uint8)
    weight = Weight.from_info(TensorInfo("w", (N, 32), QT.Q8_0, data.reshape(-1)))
    xs = x[rows].astype(np.float32)
    got, want = _both(QT.Q8_0, 3, xs, weight)
    assert same_bits(got, want) and same_bits(got, exact[rows].astype(np.float32))


def test_three_limb_sum_by_fma_is_rounded_once() -> None:
    """The decode path's k = 3 sum for the narrow types (Q4_0 here: |w| <= 8): fma(S_2 256 + S_1,
    256, S_0), exact only while S_2 256 + S_1 stays below 2^24 (mmadecode._limbs). Weights at
    -8 and 7, activations at scale 1 whose digits push S_1 and S_2 to their bounds, and rows
    whose sum rounds with T past 2^22: the C kernels' bits, which are the exact sum's."""
    rng = np.random.default_rng(12)
    w = rng.choice(np.array([-8, 7]), size=(N, 32), p=(0.9, 0.1))
    x = rng.integers(quantize.XMAX[3] // 2, quantize.XMAX[3] + 1, size=(4000, 32))
    x *= rng.choice(np.array([-1, 1]), size=(4000, 1))  # large sums of one sign: T near its bound
    x[:, 1:8] = -(126 * 65536 + 128 * 256 + 128)  # digits -128, -128, -126: S_0, S_1 at their bounds
    x[:, 0] = quantize.XMAX[3]
    exact = x @ w.T
    digits, rest = [], x
    for _ in range(3):
        digits.append(((rest & 255) ^ 128) - 128)
        rest = (rest - digits[-1]) >> 8
    _, s1, s2 = (d @ w.T for d in digits)
    t = np.abs(s2 * 256 + s1)
    assert t.max() < 2**24 and np.abs(digits[0]).max() == 128
    # rows whose sums round (not fp32 integers) with T past 2^22
    rounds = exact.astype(np.float32).astype(np.int64) != exact
    rows = np.nonzero((rounds & (t >= 2**22)).any(axis=1))[0][:6]
    assert len(rows) == 6
    data = np.zeros((N, 18), dtype=np.uint8)
    data[:, :2] = np.array([1.0], dtype=np.float16).view(np.uint8)
    nib = (w + 8).astype(np.uint8)
    data[:, 2:] = nib[:, :16] | (nib[:, 16:] << 4)  # Q4_0: byte i holds elements i and 16 + i
    weight = Weight.from_info(TensorInfo("w", (N, 32), QT.Q4_0, data.reshape(-1)))
    got, want = _both(QT.Q4_0, 3, x[rows].astype(np.float32), weight, path="mma")
    assert same_bits(got, want) and same_bits(got, exact[rows].astype(np.float32))


def test_split_k_equals_one_program_a_tile(monkeypatch) -> None:
    """The decode path split along K (each range's block sums formed by its own program, the
    float steps over every block in order by the tile's last) gives the bits of one program a
    tile, and the C kernels': Q4_K and Q6_K, 1 and 5 rows, 2 to 4 ranges and a short last one."""
    rng = np.random.default_rng(13)
    for qtype in (QT.Q4_K, QT.Q6_K):
        w = _weight(qtype, N, 768, rng)  # 24 blocks
        for m in (1, 5):
            x = _activations(m, 768, rng)
            monkeypatch.setattr(mmadecode, "PROGRAMS", 1)
            one, want = _both(qtype, 3, x, w, path="mma")
            assert mmadecode.plan(m, N, 24, intmatmul.fit(N, intmatmul.MMA_N, 16))[0][2] == 1
            for programs in (2, 3, 4):
                monkeypatch.setattr(mmadecode, "PROGRAMS", programs * (1 if m == 1 else 2))
                assert mmadecode.plan(m, N, 24, intmatmul.fit(N, intmatmul.MMA_N, 16))[0][2] == programs
                got, _ = _both(qtype, 3, x, w, path="mma")
                assert same_bits(got, want) and torch.equal(got.view(torch.int32), one.view(torch.int32))
    counts = mmadecode.counts(torch.device(DEVICE), 1)
    assert not counts.any(), "every tile's count is back to zero"


@pytest.mark.parametrize(("qtype", "limbs"), [(QT.Q4_1, 1), (QT.Q6_K, 3)], ids=["Q4_1-1", "Q6_K-3"])
def test_decode_path_equals_tile_path(qtype: QT, limbs: int) -> None:
    """The decode path's integer sums (weights as the MMA's wide operand, rows' limbs as
    columns) equal the tile's: the same bits, so a row's result cannot depend on how many rows
    its call had. Every type and limb count meets both paths against the C kernels above
    (test_extremes_equal_the_c_kernels runs the same rows through each): here a plain type with
    a min term on q8's rule and the type with two halves on three limbs, each row on both paths
    and one alone, compared directly."""
    rng = np.random.default_rng(int(qtype) + 400 * limbs)
    k = _ks(qtype)[0]
    c = _c_ops(limbs)
    pw = packed.from_packed(c.pack(_weight(qtype, N, k, rng)), DEVICE)
    x = on(_activations(11, k, rng))
    bias = on(rng.uniform(-1, 1, N).astype(np.float32))
    tile = intmatmul.matmul(x, pw, bias, path="tile")
    rows = intmatmul.matmul(x, pw, bias, path="mma")
    assert torch.equal(tile.view(torch.int32), rows.view(torch.int32))
    alone = intmatmul.matmul(x[7:8], pw, bias)  # the decode path, as decode runs it
    assert torch.equal(alone.view(torch.int32), tile[7:8].view(torch.int32))


# ---- the activation rule ------------------------------------------------------------------


def c_rule(x: np.ndarray, limbs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q8.c's q8_quantize (limbs 1) or limb.c's limb_quantize_block, ported to numpy per block:
    (integers X [M, nb, 32], s [M, nb], dsum [M, nb])."""
    m, k = x.shape
    blocks = x.reshape(m, k // 32, 32).astype(np.float32)
    a = np.abs(blocks)
    with np.errstate(all="ignore"):
        if limbs == 1:
            amax = np.where(np.isnan(a), np.float32(0), a).max(axis=2)
            inv = np.float32(127) / np.where(amax > 0, amax, np.float32(np.inf))  # 0 for a zero block
            v = blocks * inv[..., None]
            ints = np.where(np.abs(np.rint(v)) <= 127, np.rint(v), 0).astype(np.int64)
            s = (amax / np.float32(127)).astype(np.float32)
            return ints, s, (s * ints.sum(axis=2).astype(np.float32)).astype(np.float32)
        finite = a <= np.float32(3.4028234663852886e38)
        bad = ~finite.all(axis=2)
        amax = np.where(finite, a, np.float32(0)).max(axis=2)
        e = (amax.view(np.uint32) >> 23).astype(np.int64) - 127
        zero = bad | (amax == 0) | (e < -100)
        sh = e - (8 * limbs - 2)
        sh += np.rint(amax.astype(np.float64) * 2.0 ** (-sh)) > quantize.XMAX[limbs]
        ints = np.rint(blocks.astype(np.float64) * 2.0 ** (-sh)[..., None])
        ints = np.where(zero[..., None], 0, ints).astype(np.int64)
        s = np.where(bad, np.nan, np.where(zero, 0, 2.0 ** sh.astype(np.float64))).astype(np.float32)
        dsum = np.where(zero, np.float32(0), s * ints.sum(axis=2).astype(np.float32)).astype(np.float32)
        return ints, s, dsum


@pytest.mark.parametrize("limbs", (1, 2, 3))
def test_quantisation_is_the_c_rule(limbs: int) -> None:
    """The integers, scales and dsums of every block, and the limbs are balanced digits of X."""
    rng = np.random.default_rng(limbs)
    x = np.concatenate([_edge_rows(96), _activations(4, 96, rng)])
    xq = quantize.quantize(on(x), limbs)
    ints, s, dsum = c_rule(x, limbs)
    digits = xq.q.cpu().numpy().astype(np.int64)  # [M, nb, limbs, 32]
    held = sum(digits[:, :, j] * 256**j for j in range(limbs))
    assert np.array_equal(held, ints)
    assert same_bits(xq.s, s) and same_bits(xq.dsum, dsum)
    assert np.abs(ints).max() <= (127 if limbs == 1 else quantize.XMAX[limbs])


# ---- layout, rows, wiring -----------------------------------------------------------------


def test_packed_layout_is_the_c_codes() -> None:
    lib = _c_ops(1).lib
    for qtype in TYPES:  # (the codebook types as held: the file's scale fields, WT_HALF_SCALES)
        t = int(qtype) | (128 if int(qtype) | 128 in packed.CODEBOOK else 0)
        for n, k in ((1, 256), (37, 512), (48, 2560)):
            if qtype not in KGRID:
                assert packed.packed_bytes(t, n, k) == lib.strata_q8_packed_bytes(t, n, k)
        assert lib.strata_q8_supported(t) and t in packed.SUPPORTED
    assert not lib.strata_q8_supported(int(QT.F32))


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_rows_of_a_packed_weight_are_the_c_codes(qtype: QT) -> None:
    """A tied LM head's packed copy serves as the embedding: its rows are strata_gather_rows'."""
    rng = np.random.default_rng(int(qtype) + 500)
    c = _c_ops(3)
    pw = c.pack(_weight(qtype, N, _ks(qtype)[1], rng))
    ids = np.array([36, 0, 17, 17, 5], dtype=np.int64)
    want = c.embed(pw, ids)
    got = packed.gather_rows(on(ids), packed.from_packed(pw, DEVICE))
    assert same_bits(got, want)


@pytest.mark.parametrize(
    ("kernels", "limbs"), [("native-q8", 1), ("native", 3), ("auto", 3), ("native-limb2", 2)]
)
def test_integer_modes_run_on_the_gpu_backend(kernels: str, limbs: int) -> None:
    """`--device cuda` with an integer mode (the default's too): TritonOps packing with the C code, computing the C
    kernels' bits, and named so that provenance gives both devices one arithmetic."""
    ops = make_ops(kernels, device="cuda")
    c = _c_ops(limbs)
    assert isinstance(ops, TritonOps) and ops.invariant and ops.limbs == limbs
    assert arithmetic(ops.name) == arithmetic(c.name) == ("native" if kernels == "auto" else kernels)
    rng = np.random.default_rng(limbs)
    w = _weight(QT.Q4_K, N, 256, rng)
    pw = ops.pack(w)  # the C packer's layout (its bytes' values are checked through linear below)
    assert pw.kernel_type == c.pack(w).kernel_type and pw.raw.size == c.pack(w).raw.size
    x = _activations(3, 256, rng)
    bias = rng.uniform(-1, 1, N).astype(np.float32)
    assert same_bits(ops.linear(x, pw, bias), c.linear(x, pw, bias))
    assert same_bits(ops.embed(pw, np.array([3, 36])), c.embed(pw, np.array([3, 36])))
    dense = Weight.from_info(TensorInfo("f", (N, 64), QT.F32, rng.normal(size=(N, 64)).astype(np.float32)))
    assert ops.pack(dense) is dense  # types without integer kernels stay as loaded


def test_q2_k_is_packed_for_the_devices_integer_kernels() -> None:
    """Q2_K goes through TritonOps.pack to the C packer's bytes (the device decodes them), and the
    GPU backend's linear and embed give the C kernels' bits."""
    ops = make_ops("native", device="cuda")
    c = _c_ops(3)
    rng = np.random.default_rng(7)
    w = _weight(QT.Q2_K, N, 256, rng)
    assert int(QT.Q2_K) in packed.SUPPORTED
    pw = ops.pack(w)
    assert pw.kernel_type == c.pack(w).kernel_type and pw.raw.size == c.pack(w).raw.size
    x = _activations(3, 256, rng)
    assert same_bits(ops.linear(x, pw), c.linear(x, pw))
    assert same_bits(ops.embed(pw, np.array([3, 36])), c.embed(pw, np.array([3, 36])))


def _kernels():
    return [
        quantize._quantize_kernel, packed._gather_kernel, intmatmul._tile_kernel, mmadecode._mma_kernel,
    ]  # fmt: skip


@pytest.mark.parametrize("kernel", _kernels(), ids=lambda k: k.fn.__name__ if hasattr(k, "fn") else str(k))
def test_one_binary_per_kernel(kernel) -> None:
    """Every runtime integer is unspecialised (Triton would compile a binary for 1, for multiples
    of 16 and for the rest): the bits rest on one binary, and no compile lands in a timed loop."""
    fn = kernel.fn
    ints = [
        name
        for name, p in inspect.signature(fn).parameters.items()
        if not name.endswith("_ptr") and "constexpr" not in str(p.annotation)
    ]
    unspecialised = (
        kernel.kwargs["do_not_specialize"] if hasattr(kernel, "kwargs") else kernel.do_not_specialize
    )
    assert ints and set(ints) <= set(unspecialised), ints


@pytest.mark.parametrize("weight_type", (None, QT.Q2_K, QT.IQ2_XS), ids=lambda t: t.name if t else "mixed")
def test_tiny_model_equals_the_cpu_engine(tmp_path, weight_type: QT | None) -> None:
    """A whole tiny model (tied head: its packed copy is the embedding; every weight type, or
    every weight Q2_K or IQ2_XS) in "native" (three limbs) on the GPU backend gives the CPU engine's bits:
    prompt logprobs with the top 20, and greedy decode steps."""
    from strata_engine.testing.tiny_models import TINY_SPECS, write_tiny_model

    assert_tiny_model_on_both(write_tiny_model(tmp_path / "m.gguf", TINY_SPECS[0], weight_type=weight_type))
