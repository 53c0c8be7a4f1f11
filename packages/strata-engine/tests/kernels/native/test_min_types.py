"""Q5_1 and Q2_K read by the integer arithmetics (issue 40), against references built here.

Q5_1: value d * q + m, q 5-bit unsigned, d and m fp16 per 32. Q2_K: 256 values, fp16 d and dmin,
per 16 values a 4-bit scale sc and a 4-bit min m, 2-bit q: (d * sc) * q - (dmin * m).

- every arithmetic's dequantised rows (the fp32 layout's and the packed copy's) are gguf-py's bits
  at the format's extremes: every q, every scale and min nibble, fp16 d / m / dmin at +-0,
  subnormals, the largest, infinities and NaNs;
- q8 and limbs: each output is exactly q8.h's contract, on every target this host runs: the
  activations rounded by the rule's own steps (numpy, from the rule's definition), the integer
  sums S of each block (half) in numpy int64, and the float chain in numpy float32 with each fma
  one rounding of the exact float64 value; rows 1 to 40, with and without a bias, 37 outputs;
- both within the rounding bound of the float64 product of gguf-py's values;
- the packed bytes: Q5_1 7 bits a weight (d and m widened), Q2_K 2.75 (the file's 2.625 plus
  the widened d and dmin).
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES, quants
from gguf import GGMLQuantizationType as QT

from strata_engine.gguf_loader import TensorInfo
from strata_engine.kernels.native import targets_to_test
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.weight_types import HALF_SCALES
from strata_engine.kernels.weights import Weight

N, K = 37, 512
ROWS = 40
TYPES = (QT.Q5_1, QT.Q2_K)
HALVES = {QT.Q5_1: (0, 2), QT.Q2_K: (80, 82)}  # where each block keeps its fp16 fields
SPECIAL_HALVES = [0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE55]
XMAX = {3: 8355711, 2: 32639}
f32, f64 = np.float32, np.float64


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def stored_blocks(qtype: QT, seed: int, finite: bool) -> np.ndarray:
    """[N, K] blocks: random bytes, every q in whole blocks, every scale byte (Q2_K), fp16 fields
    from every class (`finite`: a finite scale of the model's size instead of inf / NaN)."""
    rng = np.random.default_rng(seed)
    block, size = GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(N * K // block, size), dtype=np.uint8)
    for i, at in enumerate(HALVES[qtype]):
        h = rng.integers(0x1000, 0x2400, size=len(data)).astype(np.uint16)  # about 2^-12 .. 2^-6
        special = np.array(SPECIAL_HALVES if not finite else SPECIAL_HALVES[:6], np.uint16)
        h[i::7][: len(special)] = special[: len(h[i::7])]
        data[:, at : at + 2] = h.view(np.uint8).reshape(-1, 2)
    if qtype == QT.Q5_1:  # blocks of q = 0 .. 31 (nibble k, k; qh's high half set), all 0, all 31
        data[3::9, 4:8] = np.array([0xFFFF0000], np.uint32).view(np.uint8)
        data[3::9, 8:] = np.arange(16, dtype=np.uint8) * 17
        data[5::9, 4:] = 0
        data[7::9, 4:] = 0xFF
    else:  # every scale-and-min byte; whole blocks of q = 0, 1, 2, 3
        data[:, :16] = (np.arange(len(data) * 16) % 256).astype(np.uint8).reshape(-1, 16)
        for q in range(4):
            data[q::11, 16:80] = 0x55 * q
    return data.reshape(-1)


def weight(qtype: QT, stored: np.ndarray) -> tuple[Weight, np.ndarray]:
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0, inf - inf: gguf-py's NaNs
        values = np.asarray(quants.dequantize(stored, qtype), dtype=np.float32).reshape(N, K)
    return Weight.from_info(TensorInfo("w", (N, K), qtype, stored)), values


# ---- the integer view of a block, from the format's bits (not the engine's code) ----------------


def decoded(qtype: QT, stored: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output: q [N, K] (unsigned), the scale and the min of each 16 values [N, K/16], each
    the fp32 value the contract multiplies (Q5_1: d and m; Q2_K: d * sc and dmin * m, fp32
    products)."""
    if qtype == QT.Q5_1:
        b = stored.reshape(-1, 24)
        d = b[:, 0:2].copy().view(np.float16).astype(f32)[:, 0]
        m = b[:, 2:4].copy().view(np.float16).astype(f32)[:, 0]
        qh = b[:, 4:8].copy().view(np.uint32)[:, 0]
        k = np.arange(32)
        q = ((b[:, 8 + k % 16] >> (4 * (k // 16)).astype(np.uint8)) & 15).astype(np.int64)
        q |= ((qh[:, None] >> k.astype(np.uint32)) & 1).astype(np.int64) << 4
        return q.reshape(N, K), np.repeat(d, 2).reshape(N, -1), np.repeat(m, 2).reshape(N, -1)
    b = stored.reshape(-1, 84)
    d = b[:, 80:82].copy().view(np.float16).astype(f32)
    dmin = b[:, 82:84].copy().view(np.float16).astype(f32)
    sc = b[:, :16]
    scale = (d * (sc & 15).astype(f32)).astype(f32)  # [blocks, 16]
    mins = (dmin * (sc >> 4).astype(f32)).astype(f32)
    k = np.arange(256)  # element 128n + 32j + l: bits 2j of byte 32n + l
    q = (b[:, 16 + 32 * (k // 128) + k % 32] >> (2 * ((k % 128) // 32)).astype(np.uint8)) & 3
    return q.astype(np.int64).reshape(N, K), scale.reshape(N, -1), mins.reshape(N, -1)


def fma(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fp32 fma: a * b is exact in float64, the sum rounded once there, then to fp32."""
    return (a.astype(f64) * b.astype(f64) + c.astype(f64)).astype(f32)


def q8_rule(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """q8's activations: per block q = round-half-even(x * (127 / amax)) (fp32), d = amax / 127."""
    blocks = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(blocks).max(axis=2)
    inv = np.where(amax > 0, f32(127) / np.where(amax > 0, amax, f32(1)), f32(0)).astype(f32)
    q = np.rint((blocks * inv[..., None]).astype(f32))
    q[np.abs(q) > 127] = 0
    return q.astype(np.int64), (amax / f32(127)).astype(f32)


def limb_rule(x: np.ndarray, limbs: int) -> tuple[np.ndarray, np.ndarray]:
    """The limbs' activations: X = round-half-even(x / s), s the smallest power of two with every
    |X| <= XMAX, at least amax / 2^(8k-1); a block below 2^-100 is zero (s = 0)."""
    blocks = x.reshape(x.shape[0], -1, 32).astype(f64)
    amax = np.abs(blocks).max(axis=2)
    shift = np.frexp(amax)[1] - 1 - (8 * limbs - 2)
    shift = shift + (np.abs(np.rint(blocks / 2.0 ** shift[..., None])).max(axis=2) > XMAX[limbs])
    X = np.rint(blocks / 2.0 ** shift[..., None])
    s = (2.0**shift).astype(f32)
    tiny = amax < 2.0**-100
    X[tiny], s[tiny] = 0, 0
    return X.astype(np.int64), s


def contract(qtype: QT, stored: np.ndarray, x: np.ndarray, limbs: int, bias: np.ndarray | None) -> np.ndarray:
    """q8.h's per-output sequence over the blocks in order (limbs 0: q8's 8-bit rule)."""
    q, scale, mins = decoded(qtype, stored)
    X, dx = q8_rule(x) if limbs == 0 else limb_rule(x, limbs)
    m, nb = x.shape[0], K // 32
    acc = np.zeros((m, N), f32)
    for b in range(nb):
        xb, wb = X[:, b], q[:, 32 * b : 32 * b + 32]
        if qtype == QT.Q5_1:  # acc = fma(d * dx, S, acc); acc = fma(m, dx * sum x, acc)
            S = (xb @ wb.T).astype(f64).astype(f32)
            acc = fma((scale[None, :, 2 * b] * dx[:, b, None]).astype(f32), S, acc)
            dsum = (dx[:, b] * xb.sum(axis=1).astype(f32)).astype(f32)
            acc = fma(
                np.broadcast_to(mins[None, :, 2 * b], acc.shape),
                np.broadcast_to(dsum[:, None], acc.shape),
                acc,
            )
            continue
        for h in range(2):  # each half's scale, then each half's min: fma(dmin * m_h, -dsum_h, acc)
            S = (xb[:, 16 * h : 16 * h + 16] @ wb[:, 16 * h : 16 * h + 16].T).astype(f64).astype(f32)
            acc = fma((scale[None, :, 2 * b + h] * dx[:, b, None]).astype(f32), S, acc)
        for h in range(2):
            dsum = (dx[:, b] * xb[:, 16 * h : 16 * h + 16].sum(axis=1).astype(f32)).astype(f32)
            acc = fma(
                np.broadcast_to(mins[None, :, 2 * b + h], acc.shape),
                -np.broadcast_to(dsum[:, None], acc.shape),
                acc,
            )
    return acc if bias is None else (acc + bias).astype(f32)


def activations(seed: int) -> np.ndarray:
    """Rows of blocks of very different magnitudes, a zero block, a tie-rich block."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (ROWS, K)).astype(f32)
    x.reshape(ROWS, -1, 32)[:, 1] *= 4e4
    x.reshape(ROWS, -1, 32)[:, 3] *= 1e-3
    x[:, 64:96] = 0
    x[::3, 128:160] = np.arange(32, dtype=f32) - 15.5
    return x


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_dequantised_rows_are_gguf_pys_at_every_extreme(qtype: QT) -> None:
    stored = stored_blocks(qtype, seed=int(qtype), finite=False)
    w, values = weight(qtype, stored)
    assert not np.isfinite(values).all()  # the infinities and NaNs are in
    ids = np.arange(N)
    for target in targets_to_test():
        for q8, limbs in ((False, 0), (True, 0), (True, 3)):
            ops = NativeOps(1, target, q8=q8, limbs=limbs)
            np.testing.assert_array_equal(bits(ops.embed(ops.pack(w), ids)), bits(values), err_msg=target)


@pytest.mark.parametrize("limbs", (0, 2, 3), ids=("q8", "limb2", "limb3"))
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_every_target_computes_the_contract_exactly(qtype: QT, limbs: int) -> None:
    stored = stored_blocks(qtype, seed=10 + int(qtype), finite=True)
    w, values = weight(qtype, stored)
    assert np.isfinite(values).all()
    x = activations(seed=limbs)
    bias = np.random.default_rng(3).normal(0, 1, N).astype(f32)
    want = {bb is None: contract(qtype, stored, x, limbs, bb) for bb in (None, bias)}
    exact = x.astype(f64) @ values.astype(f64).T
    if limbs:  # the limbs hold x to within s / 2 an element: near the exact product
        held = limb_rule(x, limbs)
        err = np.abs(want[True].astype(f64) - exact)
        step = np.repeat(held[1].astype(f64) / 2, 32, axis=1)
        assert (err <= step @ np.abs(values.astype(f64)).T + 1e-5 * np.abs(x) @ np.abs(values).T).all()
    for target in targets_to_test():
        ops = NativeOps(2, target, q8=True, limbs=limbs)
        packed = ops.pack(w)
        for m in range(1, ROWS + 1):
            for bb in (None, bias):
                got = ops.linear(x[:m], packed, bb)
                np.testing.assert_array_equal(
                    bits(got), bits(want[bb is None][:m]), err_msg=f"{target}, {m} rows"
                )


def test_packed_bytes_are_held_at_about_the_files_size() -> None:
    """Q5_1: 6 bits a weight (the file's: d and m kept fp16); Q2_K: 2.75 (the file's 2.625, d and
    dmin widened), plus the one super-block header the K-quant layout leaves after a group's last
    (q8_block_at)."""
    groups = -(-N // 16)
    for qtype, group_bytes in ((QT.Q5_1, 6 * 16 * K // 8), (QT.Q2_K, 2.75 * 16 * K // 8 + 128)):
        w, _ = weight(qtype, stored_blocks(qtype, seed=1, finite=True))
        packed = NativeOps(1, limbs=3).pack(w)
        assert packed.raw.nbytes == groups * group_bytes
        assert packed.kernel_type & 255 & ~HALF_SCALES == int(qtype)
