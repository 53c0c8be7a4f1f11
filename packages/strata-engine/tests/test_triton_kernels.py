"""Each Triton kernel against an independent float64 torch reference (and gguf-py's dequantiser),
and bitwise batch invariance: row i of an M-row call equals the one-row call (issue 11).

Without a GPU these run under Triton's interpreter, on tiny shapes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import triton_setup  # noqa: F401  (before triton: TRITON_INTERPRET=1 without a GPU)

pytest.importorskip(
    "triton", reason="the Triton kernels need `pip install triton` (the engine's [gpu] extra)"
)

from gguf import GGMLQuantizationType as QT
from gguf import quants
from tiny_models import encode_tensor
from triton_setup import DEVICE, on, same_bits

from strata_engine.kernels.base import AttentionMeta, RopeTable
from strata_engine.kernels.triton import activation, attention, logprobs, matmul, norm, rope
from strata_engine.kernels.triton.stored import from_gguf
from strata_engine.kernels.weights import NATIVE_TYPES

QTYPES = (QT.F32, QT.Q4_0, QT.Q4_1, QT.Q8_0, QT.Q4_K, QT.Q5_K, QT.Q6_K)


def _stored(qtype: QT, n: int, k: int, seed: int = 0):
    """(stored weight on the device, gguf-py's fp32 values [n, k]) for random weights."""
    rng = np.random.default_rng(seed)
    values = rng.normal(0.0, 0.05, size=(n, k)).astype(np.float32)
    blocks = values if qtype == QT.F32 else encode_tensor(values, qtype, rng)
    dense = np.asarray(quants.dequantize(blocks, qtype), dtype=np.float32).reshape(n, k)
    return from_gguf(blocks, qtype, (n, k), DEVICE), torch.from_numpy(dense)


def _matmul(x: torch.Tensor, sw, bias=None) -> torch.Tensor:
    b = on(bias) if bias is not None else None
    return matmul.matmul(on(x), sw.wq, sw.wf, sw.kt, sw.out_features, sw.in_features, sw.row_bytes, b).cpu()


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda q: q.name)
def test_dequantise_is_gguf_py_bit_for_bit(qtype):
    sw, dense = _stored(qtype, 7, 512)
    ids = torch.tensor([6, 0, 3, 3, 1])
    got = matmul.gather_rows(on(ids), sw.wq, sw.wf, sw.kt, 512, sw.row_bytes)
    assert same_bits(got, dense[ids])


@pytest.mark.parametrize("qtype", QTYPES, ids=lambda q: q.name)
@pytest.mark.parametrize("m", [1, 5, 19])
def test_matmul_matches_float64_and_is_batch_invariant(qtype, m):
    n, k = 37, (75 if qtype == QT.F32 else 512)  # odd sizes; quantised K is whole blocks
    sw, dense = _stored(qtype, n, k, seed=m)
    gen = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=gen)
    bias = torch.randn(n, generator=gen) if m == 5 else None
    y = _matmul(x, sw, bias)
    ref = matmul.matmul_reference(x, dense, bias)
    scale = (x.double().abs() @ dense.double().abs().T).max()
    assert (y.double() - ref).abs().max() <= 1e-6 * scale
    for i in sorted({0, m // 2, m - 1}):
        assert same_bits(_matmul(x[i : i + 1], sw, bias), y[i : i + 1]), f"row {i} of {m} differs"


def test_matmul_invariant_across_tiles_and_empty_batch():
    """A row gives the same bits at every offset inside an M tile and in a later tile."""
    sw, _ = _stored(QT.Q4_K, 33, 256)
    gen = torch.Generator().manual_seed(1)
    row = torch.randn(1, 256, generator=gen)
    alone = _matmul(row, sw)
    for offset in (3, 16, 21):
        x = torch.randn(24, 256, generator=gen)
        x[offset] = row[0]
        assert same_bits(_matmul(x, sw)[offset : offset + 1], alone)
    assert _matmul(torch.zeros(0, 256), sw).shape == (0, 33)


@pytest.mark.parametrize("shape", [(1, 64), (3, 7, 33), (9, 200)])
def test_rmsnorm(shape):
    gen = torch.Generator().manual_seed(len(shape))
    x, w = torch.randn(*shape, generator=gen) * 3, torch.randn(shape[-1], generator=gen)
    y = norm.rmsnorm(on(x), on(w), 1e-6).cpu()
    assert torch.allclose(y.double(), norm.rmsnorm_reference(x, w, 1e-6), rtol=1e-6, atol=1e-6)
    flat = x.reshape(-1, shape[-1])
    one = norm.rmsnorm(on(flat[-1:]), on(w), 1e-6).cpu()
    assert same_bits(one, y.reshape(-1, shape[-1])[-1:])


@pytest.mark.parametrize("n", [1, 1000, 2500])
def test_silu_mul(n):
    gen = torch.Generator().manual_seed(n)
    g, u = torch.randn(n, generator=gen) * 4, torch.randn(n, generator=gen)
    y = activation.silu_mul(on(g), on(u)).cpu()
    assert torch.allclose(y.double(), activation.silu_mul_reference(g, u), rtol=1e-6, atol=1e-7)
    assert same_bits(activation.silu_mul(on(g[-1:]), on(u[-1:])), y[-1:])


def _table(ctx: int, dim: int, interleaved: bool, base: float = 10000.0) -> RopeTable:
    half = dim // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / dim)
    ang = np.arange(ctx, dtype=np.float64)[:, None] * inv[None, :]
    return RopeTable(np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), dim, interleaved)


@pytest.mark.parametrize("interleaved", [True, False], ids=["llama", "neox"])
@pytest.mark.parametrize(("t", "h", "d", "dim"), [(1, 1, 8, 8), (5, 3, 64, 64), (4, 2, 24, 16)])
def test_rope(interleaved, t, h, d, dim):
    table = _table(64, dim, interleaved)
    gen = torch.Generator().manual_seed(t * h)
    x = torch.randn(t, h, d, generator=gen)
    pos = torch.randint(0, 64, (t,), generator=gen, dtype=torch.int32)
    y = rope.rope(on(x), on(pos), table, on(table.cos), on(table.sin)).cpu()
    assert torch.allclose(y.double(), rope.rope_reference(x, pos, table), rtol=1e-5, atol=1e-6)
    if dim < d:
        assert same_bits(y[..., dim:], x[..., dim:])
    one = rope.rope(on(x[-1:]), on(pos[-1:]), table, on(table.cos), on(table.sin))
    assert same_bits(one, y[-1:])


def _paged(lengths: list[int], kvh: int, d: int, bs: int, seed: int):
    """A shuffled paged cache holding sequences of `lengths` tokens, and each sequence's table."""
    gen = torch.Generator().manual_seed(seed)
    need = [math.ceil(n / bs) for n in lengths]
    num_blocks = sum(need) + 2
    order = torch.randperm(num_blocks, generator=gen).tolist()
    tables = np.zeros((len(lengths), max(need)), dtype=np.int32)
    at = 0
    for i, n in enumerate(need):
        tables[i, :n] = order[at : at + n]
        at += n
    k = torch.randn(num_blocks, bs, kvh, d, generator=gen)
    v = torch.randn(num_blocks, bs, kvh, d, generator=gen)
    return k, v, tables


def _meta(tables: np.ndarray, token_seq: list[int], positions: list[int], bs: int) -> AttentionMeta:
    """The step's indices as the engine hands them over (numpy)."""
    return AttentionMeta(
        positions=np.array(positions, dtype=np.int32),
        token_seq=np.array(token_seq, dtype=np.int32),
        block_tables=tables,
        slots=np.zeros(len(positions), dtype=np.int64),  # unused by attention
        block_size=bs,
    )


def _attend(q, k, v, meta) -> torch.Tensor:
    mp = int(meta.positions.max())
    return attention.attention(
        on(q), on(k), on(v), meta, on(meta.positions), on(meta.token_seq), on(meta.block_tables), mp
    ).cpu()


@pytest.mark.parametrize(("h", "kvh", "d"), [(4, 2, 16), (3, 1, 24), (2, 2, 8)])
def test_attention_matches_float64_and_is_invariant(monkeypatch, h, kvh, d):
    monkeypatch.setattr(attention, "SPLIT", 32)  # several splits at small sizes
    bs = 16
    lengths = [70, 5, 33]
    k, v, tables = _paged(lengths, kvh, d, bs, seed=h)
    # a prefill chunk of sequence 0, a decode token of sequence 1, a chunk of sequence 2
    token_seq = [0, 0, 0, 0, 1, 2, 2]
    positions = [0, 31, 32, 69, 4, 20, 32]
    q = torch.randn(len(positions), h, d, generator=torch.Generator().manual_seed(d))
    meta = _meta(tables, token_seq, positions, bs)
    out = _attend(q, k, v, meta)
    ref = attention.attention_reference(q, k, v, meta)
    assert (out.double() - ref).abs().max() < 2e-6
    for i in range(len(positions)):  # each token alone (a decode step) gives the same bits
        alone = _attend(
            q[i : i + 1], k, v, _meta(tables[token_seq[i] : token_seq[i] + 1], [0], [positions[i]], bs)
        )
        assert same_bits(alone, out[i : i + 1]), f"token {i} differs alone"


@pytest.mark.parametrize(("rows", "vocab"), [(1, 7), (3, 300), (2, 4099)])
def test_log_softmax(rows, vocab):
    x = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(vocab)) * 5
    y = logprobs.log_softmax(on(x)).cpu()
    assert y.dtype == torch.float32
    assert (y.double() - logprobs.log_softmax_reference(x)).abs().max() < 2e-6
    assert same_bits(logprobs.log_softmax(on(x[-1:])), y[-1:])


def test_the_gpu_kernels_use_the_c_headers_type_codes() -> None:
    """The Triton kernels write GGML type codes as literals: they must be the C header's."""
    from strata_engine.kernels.triton import dequant

    assert tuple(NATIVE_TYPES.values()) == (
        dequant.F32,
        dequant.Q4_0,
        dequant.Q4_1,
        dequant.Q8_0,
        dequant.Q4_K,
        dequant.Q5_K,
        dequant.Q6_K,
    )
