"""Each Triton float kernel computes the C kernels' bits: e^x, RMSNorm, RoPE, SwiGLU/GeGLU,
soft-capping, paged GQA attention and the log-softmax tail, each compared as uint32 with the
native op (NativeOps, native/*.c) on random inputs of odd sizes, one and many rows, and extreme
values; a float64 check of each kernel's accuracy rides along where it is cheap.

Without a GPU these run under Triton's interpreter, which performs each IEEE fp32 operation on
its own (with a single-rounding FMA), so an explicit sequence of operations gives the bits a C
program doing the same sequence gives: equality here proves the sequence is C's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from strata_engine.testing import triton_setup  # (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

import triton
import triton.language as tl

from strata_engine.kernels.base import RopeTable
from strata_engine.kernels.native.backend import NativeOps
from strata_engine.kernels.triton import activation, attention, fmatmul, ieee, logprobs, norm, rope
from strata_engine.kernels.weights import Weight
from strata_engine.testing.triton_checks import (
    LENGTHS,
    POSITIONS,
    TOKEN_SEQ,
    assert_c_bits,
    attention_meta,
    paged_cache,
)
from strata_engine.testing.triton_setup import on


@pytest.fixture(scope="module")
def native() -> NativeOps:
    return NativeOps(1)


EXTREMES = [0.0, -0.0, 1e-30, -1e-30, 1e-45, 0.5, -0.5, 30.0, -30.0, 87.0, -87.0, 87.4, -87.4,
            88.2, 88.4, -88.4, 100.0, -100.0, 1e30, -1e30, 3.4e38, -3.4e38]  # fmt: skip


def _values(n: int, seed: int, scale: float = 4.0) -> np.ndarray:
    """n random fp32 values, the extremes mixed in at random places."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * scale).astype(np.float32)
    at = rng.choice(n, size=min(n, len(EXTREMES)), replace=False)
    x[at] = np.array(EXTREMES[: len(at)], dtype=np.float32)
    return x


@triton.jit
def _exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, ieee.exp(tl.load(x_ptr + offs, mask=offs < n, other=0.0)), mask=offs < n)


def test_exp_is_c_exp(native):
    x = np.concatenate(
        [_values(2000, 1, scale=30.0), np.array([np.inf, -np.inf, -87.3, 88.3, 0.6931472], np.float32)]
    )
    want = np.empty_like(x)
    native.lib.strata_exp(x.ctypes.data, x.size, want.ctypes.data)
    got = torch.empty(x.size, dtype=torch.float32)
    _exp_kernel[(triton.cdiv(x.size, 512),)](on(x), got, x.size, BLOCK=512, **ieee.LAUNCH)
    assert_c_bits(got, want)


@pytest.mark.skipif(not triton_setup.INTERPRETED, reason="a GPU's fma rounds once")
def test_the_fma_probe_refuses_two_roundings(monkeypatch):
    """triton_setup stops the run when fma_rounds_once() is false: it is true here, and false
    under Triton 3.8.0's interpreter fma (x * y + z in fp32), which the exp above would catch too."""
    from triton.runtime import interpreter

    assert triton_setup.fma_rounds_once()

    def fma_3_8(self, x, y, z):  # type: ignore[no-untyped-def]
        return interpreter.TensorHandle(x.data * y.data + z.data, z.dtype.scalar)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fma", fma_3_8)
    assert not triton_setup.fma_rounds_once()


@pytest.mark.parametrize(("rows", "k"), [(1, 7), (5, 64), (3, 200), (2, 33)])
def test_rmsnorm_is_c(native, rows, k):
    rng = np.random.default_rng(rows * k)
    x = (rng.standard_normal((rows, k)) * 3).astype(np.float32)
    x[0, : len(EXTREMES) // 2] = np.array(EXTREMES[: len(EXTREMES) // 2], np.float32)[:k]
    if rows > 2:
        x[1] = 0.0  # a zero row: 1/sqrt(eps)
        x[2] *= np.float32(1e18)  # squares near fp32's top
    w = rng.standard_normal(k).astype(np.float32)
    got = norm.rmsnorm(on(x), on(w), 1e-6).cpu()
    assert_c_bits(got, native.rmsnorm(x, w, 1e-6))
    # 3-d input (per-head q/k norm) and an eps that is not an fp32 value
    x3 = x.reshape(rows, 1, k)
    assert_c_bits(norm.rmsnorm(on(x3), on(w), 1e-5).cpu(), native.rmsnorm(x3, w, 1e-5))
    if rows == 5:  # float64 sanity on the plain rows
        ref = norm.rmsnorm_reference(torch.from_numpy(x[3:]), torch.from_numpy(w), 1e-6)
        assert torch.allclose(got[3:].double(), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("m", "k"), [(1, 75), (5, 16), (19, 200)])
def test_fp32_matmul_is_c(native, m, k):
    """fp32 weights (a MoE router, F16/BF16 weights widened at load) in dot_1's order."""
    rng = np.random.default_rng(m)
    n = 37
    w = rng.standard_normal((n, k)).astype(np.float32)
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x[0, :3] = [0.0, -0.0, 1e30]
    bias = rng.standard_normal(n).astype(np.float32) if m == 5 else None
    weight = Weight("w", n, k, 0, w.view(np.uint8).reshape(-1))  # kernel type 0: F32
    got = fmatmul.matmul(on(x), on(w), on(bias) if bias is not None else None).cpu()
    assert_c_bits(got, native.linear(x, weight, bias))


def _table(ctx: int, dim: int, interleaved: bool, base: float = 10000.0) -> RopeTable:
    half = dim // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / dim)
    ang = np.arange(ctx, dtype=np.float64)[:, None] * inv[None, :]
    return RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), dim, interleaved)


@pytest.mark.parametrize("interleaved", [True, False], ids=["llama", "neox"])
@pytest.mark.parametrize(
    ("t", "h", "d", "dim"), [(1, 1, 8, 8), (5, 3, 64, 64), (4, 2, 24, 16), (2, 2, 40, 8)]
)
def test_rope_is_c(native, interleaved, t, h, d, dim):
    table = _table(64, dim, interleaved)
    rng = np.random.default_rng(t * h + d)
    x = (rng.standard_normal((t, h, d)) * 5).astype(np.float32)
    x.flat[:5] = np.array([1e30, -1e30, 0.0, -0.0, 3e38], np.float32)[: min(5, x.size)]
    pos = rng.integers(0, 64, t).astype(np.int32)
    got = rope.rope(on(x), on(pos), table, on(table.cos), on(table.sin)).cpu()
    assert_c_bits(got, native.rope(x.copy(), pos, table))
    if t == 5:  # float64 sanity (finite rows)
        xs = torch.from_numpy(x[1:])
        ref = rope.rope_reference(xs, torch.from_numpy(pos[1:]), table)
        assert torch.allclose(got[1:].double(), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n", [1, 37, 1500])
@pytest.mark.parametrize("act", ["silu", "gelu"])
def test_gated_ffn_is_c(native, n, act):
    g, u = _values(n, n), _values(n, n + 1, scale=1.0)
    ours, theirs = (
        (activation.silu_mul, native.silu_mul) if act == "silu" else (activation.gelu_mul, native.gelu_mul)
    )
    got = ours(on(g), on(u)).cpu()
    assert_c_bits(got, theirs(g, u))
    if act == "silu" and n == 1500:  # float64 sanity on the moderate values
        keep = (np.abs(g) < 50) & (np.abs(u) < 50)
        ref = activation.silu_mul_reference(torch.from_numpy(g[keep]), torch.from_numpy(u[keep]))
        assert torch.allclose(got[keep].double(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cap", [30.0, 0.7])
def test_softcap_is_c(native, cap):
    x = _values(777, 5, scale=40.0)
    assert_c_bits(activation.softcap(on(x), cap).cpu(), native.softcap(x, cap))


def _attend(q, k, v, meta, **kw) -> torch.Tensor:
    mp = int(meta.positions.max())
    return attention.attention(
        on(q), on(k), on(v), meta, on(meta.positions), on(meta.token_seq), on(meta.block_tables), mp, **kw
    ).cpu()


@pytest.mark.parametrize(
    ("h", "kvh", "d"),
    [(4, 4, 16), (6, 2, 64), (8, 2, 24), (3, 1, 8)],
    ids=["mha", "gqa3", "gqa4-odd-d", "gqa3-1kv"],
)
def test_attention_is_c(native, h, kvh, d):
    bs = 16
    k, v, tables = paged_cache(LENGTHS, kvh, d, bs, seed=h + d)
    rng = np.random.default_rng(d)
    q = rng.standard_normal((len(POSITIONS), h, d)).astype(np.float32)
    meta = attention_meta(tables, TOKEN_SEQ, POSITIONS, bs)
    out = _attend(q, k, v, meta)
    assert_c_bits(out, native.attention(q, k, v, meta))
    if d == 64:  # float64 sanity
        ref = attention.attention_reference(
            torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v), meta
        )
        assert (out.double() - ref).abs().max() < 2e-6
    for i in (1, 5):  # a token alone (a decode step) gives the same bits
        one = attention_meta(tables[TOKEN_SEQ[i] : TOKEN_SEQ[i] + 1], [0], [POSITIONS[i]], bs)
        assert_c_bits(_attend(q[i : i + 1], k, v, one), native.attention(q[i : i + 1], k, v, one))


@pytest.mark.parametrize(
    "kw",
    [
        {"scale": 0.0625, "window": 7},  # Gemma-style query scale, a sliding window
        {"softcap": 50.0},  # Gemma 2's attention soft-capping
        {"scale": 3.0, "softcap": 5.0, "window": 20},
    ],
    ids=["scale-window", "softcap", "all"],
)
def test_attention_options_are_c(native, kw):
    bs, h, kvh, d = 16, 4, 2, 32
    k, v, tables = paged_cache(LENGTHS, kvh, d, bs, seed=3)
    q = np.random.default_rng(4).standard_normal((len(POSITIONS), h, d)).astype(np.float32)
    meta = attention_meta(tables, TOKEN_SEQ, POSITIONS, bs)
    assert_c_bits(_attend(q, k, v, meta, **kw), native.attention(q, k, v, meta, **kw))


def test_attention_extremes_are_c(native):
    """Huge scores (e^x's clamps, numerators that underflow to 0), all-zero queries (every
    score a zero: the max's first-zero rule) and a negative scale (scores of -0.0)."""
    bs, h, kvh, d = 16, 3, 1, 16
    k, v, tables = paged_cache(LENGTHS, kvh, d, bs, seed=9)
    q = np.random.default_rng(5).standard_normal((len(POSITIONS), h, d)).astype(np.float32) * 40
    q[:, 1] = 0.0
    q[2, 2] = -0.0
    meta = attention_meta(tables, TOKEN_SEQ, POSITIONS, bs)
    for kw in ({}, {"scale": -0.25}):
        assert_c_bits(_attend(q, k, v, meta, **kw), native.attention(q, k, v, meta, **kw))


def _logits(rows: int, vocab: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, vocab)) * 5).astype(np.float32)
    if vocab > 40:
        x[0, ::7] = -np.inf  # masked tokens
        x[-1, :22] = np.array(EXTREMES, np.float32) * np.float32(1e-28)  # zeros, tiny and huge values
        x[-1, 30] = 95.0  # a large logit: e^(x - max) underflows for most
    return x


@pytest.mark.parametrize(("rows", "vocab"), [(1, 1), (1, 7), (3, 300), (2, 4099)])
def test_log_softmax_is_c(native, rows, vocab):
    x = _logits(rows, vocab, vocab)
    got = logprobs.log_softmax(on(x)).cpu()
    assert got.dtype == torch.float32
    assert_c_bits(got, native.log_softmax(x))
    if rows == 3:  # float64 sanity on the plain middle row
        ref = logprobs.log_softmax_reference(torch.from_numpy(x[1:2]))
        assert (got[1:2].double() - ref).abs().max() < 2e-6


@pytest.mark.parametrize(
    "row",
    [[-0.0], [0.0], [-1.0, -0.0, 0.0, -3.0], [-2.0, 0.0, -0.0], [-np.inf, 3.0], [1e4, -1e4, 0.0]],
    ids=["neg-zero", "zero", "first-zero-neg", "first-zero-pos", "masked", "wide"],
)
def test_log_softmax_zero_signs_are_c(native, row):
    """The max is max_n's: where the largest logit is a zero, the first zero's sign (the sign
    reaches the output through x - max)."""
    x = np.array([row], dtype=np.float32)
    assert_c_bits(logprobs.log_softmax(on(x)).cpu(), native.log_softmax(x))


def test_the_gpus_tile_sizes_give_the_same_bits(native, monkeypatch):
    """Under the interpreter the kernels take many rows a program (ieee.INTERPRETED); a GPU
    takes few. Which outputs share a program never changes an output's operations: the GPU's
    sizes, run here, give C's bits too."""
    monkeypatch.setattr(norm, "ROWS", 1)
    monkeypatch.setattr(logprobs, "ROWS", 1)
    monkeypatch.setattr(fmatmul, "BM", 8)
    monkeypatch.setattr(fmatmul, "BN", 16)
    monkeypatch.setattr(attention, "TOK", 1)
    monkeypatch.setattr(attention, "UNROLL", 8)  # steps of the sum and V chain past the end (GPU: 32)
    monkeypatch.setattr(norm, "STEPS", tl.constexpr(32))  # and of RMSNorm's chain
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 75)) * 3).astype(np.float32)
    w = rng.standard_normal(75).astype(np.float32)
    assert_c_bits(norm.rmsnorm(on(x), on(w), 1e-6).cpu(), native.rmsnorm(x, w, 1e-6))
    x2, w2 = rng.standard_normal((2, 1100)).astype(np.float32), rng.standard_normal(1100).astype(np.float32)
    assert_c_bits(norm.rmsnorm(on(x2), on(w2), 1e-6).cpu(), native.rmsnorm(x2, w2, 1e-6))  # 3 chunks
    assert_c_bits(logprobs.log_softmax(on(x)).cpu(), native.log_softmax(x))
    m = rng.standard_normal((37, 75)).astype(np.float32)
    weight = Weight("w", 37, 75, 0, m.view(np.uint8).reshape(-1))
    assert_c_bits(fmatmul.matmul(on(x), on(m)).cpu(), native.linear(x, weight))
    k, v, tables = paged_cache(LENGTHS, 2, 24, 16, seed=1)
    q = rng.standard_normal((len(POSITIONS), 6, 24)).astype(np.float32)
    meta = attention_meta(tables, TOKEN_SEQ, POSITIONS, 16)
    assert_c_bits(_attend(q, k, v, meta, window=9), native.attention(q, k, v, meta, window=9))
