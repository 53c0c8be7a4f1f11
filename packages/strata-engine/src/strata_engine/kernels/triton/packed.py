"""Weights repacked for integer dot products (native/q8.c's `strata_q8_pack`), read on the device.

The C code packs each weight once at load; the GPU receives those same bytes, so both devices
read one layout and there is one packer to trust. Per group of 16 outputs and block of 32
inputs (q8.h's top comment is the specification; the sizes below mirror its q8_* helpers):

- scales: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 an fp32 scale per output (and Q4_1's, Q5_1's fp32 min); K-quants, before
  every 8th block, the super-block's fp32 d (and dmin) per output, and per block int8 6-bit
  scales (Q6_K: one per half of 16) and mins (Q2_K: a byte sc | m << 4 per half of 16);
- quants: byte 4o+c of quad row r holds output o's elements 4r+c (low nibble) and 16+4r+c (high
  nibble) for 4-bit types, Q5_K, Q5_1 and Q5_0 (offset 16) add a plane of fifth bits, Q6_K two
  planes of high bit pairs, Q8_0 a byte per weight (w + 128); Q2_K a plane of 2-bit pairs per
  half (unpack2.py).

IQ4_NL, MXFP4 and IQ4_XS are read as the C packer holds them (the file's scale fields, Q4_0's nibble
layout of 4-bit indices; type code | WT_HALF_SCALES), looked up in registers (codebook.py).

The grid types (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S), which the C packer keeps as stored, are read so (`wq` its rows, `wf` the type's grid table,
one per device), each 32 values decoded to their Q8_0 block in registers (grid.py).

IQ2_XS and IQ2_S, which the C packer keeps as stored (each CPU call expands a group), reach the
device as that expansion, made once at load (kgrid.py): Q6_K's scales and header, a byte a weight
(w + 64).

`quants` and `scales` decode one whole block for a set of outputs, each scale once; the kernels
multiply the signed quants (w minus the type's offset), which gives the C code's exact integer
sums without its offset correction. `gather_rows` dequantises rows with strata_q8_dequant_row's
float operations, for a tied LM head whose packed copy also serves as the embedding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl

from strata_engine.kernels.base import LIMB_SHIFT, Q8_PACKED, stored_type
from strata_engine.kernels.host import default_threads
from strata_engine.kernels.native.backend import NativeOps, mode_suffix
from strata_engine.kernels.triton import codebook, grid, kgrid, unpack2
from strata_engine.kernels.triton.codebook import IQ4_NL_H, IQ4_XS_H, MXFP4_H
from strata_engine.kernels.triton.ieee import LAUNCH
from strata_engine.kernels.triton.wtypes import (
    IQ2_S,
    IQ2_XS,
    Q2_K,
    Q4_0,
    Q4_1,
    Q4_K,
    Q5_0,
    Q5_1,
    Q5_K,
    Q6_K,
    Q8_0,
)
from strata_engine.kernels.weight_types import BY_CODE, HALF_SCALES, PACK_KQUANT, READS_Q8, TYPES
from strata_engine.kernels.weights import Weight

# strata_q8_supported's types: the device's integer kernels read each of them (the codebook types
# in the form the loader holds them, the file's scale fields: codebook.py)
CODEBOOK = codebook.HELD
SUPPORTED = (
    *(t.code for t in TYPES.values() if t.reads & READS_Q8 and t.code | HALF_SCALES not in CODEBOOK),
    *CODEBOOK,
)
GRID = grid.HELD  # held as stored by the C packer, decoded on the device (grid.py)
KGRID = (IQ2_XS, IQ2_S)  # held as stored by the C packer, expanded for the device at load (kgrid.py)
GROUP = 16  # outputs per packed group
GATHER_BLOCKS = 8  # blocks of 32 per program when dequantising rows


def kquant(t: int) -> bool:
    """K-quants: super-blocks of 8 blocks, each with its header (the types kquant_pack.c repacks,
    Q2_K, which strata_q8_pack reads as stored: q8_kquant, and the IQ2 types' expansion)."""
    return t in (Q2_K, *KGRID, IQ4_XS_H) or (t in BY_CODE and BY_CODE[t].pack == PACK_KQUANT)


def has_min(t: int) -> bool:
    return t in (Q4_1, Q5_1, Q4_K, Q5_K, Q2_K)


def halves(t: int) -> int:
    """Scales per block: Q6_K, Q2_K and the IQ2 types have one per half of 16."""
    return 2 if t in (Q6_K, Q2_K, *KGRID) else 1


def scale_bytes(t: int) -> int:
    """Bytes of a block's own scales and mins, before its quants (Q2_K: a byte sc | m << 4 a half;
    IQ4_NL the file's f16 d, MXFP4 its e8m0 byte, IQ4_XS none: its super-block's header)."""
    if t in CODEBOOK:
        return 0 if t == IQ4_XS_H else 32 if t == IQ4_NL_H else 16
    return 32 if t == Q2_K else (16 if kquant(t) else 64) * (halves(t) + has_min(t))


def block_bytes(t: int) -> int:
    quants = (
        256
        if t in (Q4_0, Q4_1, Q4_K, *CODEBOOK)
        else 384
        if t == Q6_K
        else 320
        if t in (Q5_K, Q5_0, Q5_1)
        else 512
    )
    if t == Q2_K:  # a plane of 2-bit pairs a half
        quants = 128
    return scale_bytes(t) + quants


def super_bytes(t: int) -> int:
    """Bytes of a K-quant super-block's header (d, and dmin where there are mins; IQ4_XS: d f16,
    scales_h u16, scales_l u32, 16 each), else 0."""
    if t == IQ4_XS_H:
        return 128
    return 64 * (1 + has_min(t)) if kquant(t) else 0


def block_at(t: int, b: int) -> int:
    """Where block b of a group starts (K-quants: after its super-block's header)."""
    if not kquant(t):
        return b * block_bytes(t)
    return (b >> 3) * (super_bytes(t) + 8 * block_bytes(t)) + super_bytes(t) + (b & 7) * block_bytes(t)


def group_bytes(t: int, nb: int) -> int:
    """q8_group_bytes (IQ4_XS: its super-blocks alone, 16 x 136 bytes a 256 inputs; a grid type:
    its 16 rows as stored)."""
    if t in GRID:
        return GROUP * grid.row_bytes(t, 32 * nb)
    return nb // 8 * (super_bytes(t) + 8 * block_bytes(t)) if t == IQ4_XS_H else block_at(t, nb)


def packed_bytes(t: int, n: int, k: int) -> int:
    """strata_q8_packed_bytes: the size of an [n, k] weight once packed."""
    return triton.cdiv(n, GROUP) * group_bytes(t, k // 32)


def layout(t: int) -> dict[str, int]:
    """The layout constants the kernels take (all decided by the type: one binary per type)."""
    return {"WT": t, "KQ": int(kquant(t)), "BB": block_bytes(t), "SB": super_bytes(t), "SCB": scale_bytes(t)}


@dataclass(frozen=True)
class PackedWeight:
    """A weight packed by strata_q8_pack, on the device: `wq` its bytes, `wf` the same as fp32 (a
    grid type: its grid table, grid.py)."""

    wtype: int  # the base type (Q4_0 ... Q6_K; a codebook type's code | WT_HALF_SCALES)
    limbs: int  # 1 (q8's 8-bit rule), 2 or 3: how the activations meet it
    out_features: int
    in_features: int
    group_bytes: int
    wq: torch.Tensor
    wf: torch.Tensor


def packer(limbs: int, threads: int | None = None) -> NativeOps:
    """The C kernels that pack weights at load for `limbs` (1: q8's rule; 2, 3): the GPU then
    receives the bytes the CPU's integer kernels read."""
    if limbs not in (1, 2, 3):
        raise ValueError(f"limbs must be 1 (q8), 2 or 3, not {limbs}")
    return NativeOps(threads or default_threads(), q8=True, limbs=0 if limbs == 1 else limbs)


def arithmetic_name(limbs: int | None) -> str:
    """The ops' name: "triton" and the CPU kernels' mode suffix ("" for the default three limbs,
    "-q8", "-limb2", "-fp32" for None), which provenance.arithmetic maps to the same arithmetic
    as "native-<target><suffix>"."""
    if limbs is None:
        return "triton" + mode_suffix(False, 0)
    return "triton" + mode_suffix(True, 0 if limbs == 1 else limbs)


def limbs_of(kernel_type: int) -> int:
    """The limbs a packed weight's type names (0 there is q8's rule: 1 here)."""
    return (kernel_type >> LIMB_SHIFT) & 3 or 1


def widened_packed(raw: np.ndarray, t: int) -> np.ndarray:
    """The C packing of a weight held with the file's fp16 scales (HALF_SCALES: 16 fp16 scales, and
    mins, a group and block) in the layout the device reads: each field widened to fp32 (exact)."""
    fields = 1 + has_min(t)
    blocks = raw.reshape(-1, block_bytes(t) - 32 * fields)
    out = np.empty((len(blocks), block_bytes(t)), np.uint8)
    out[:, 64 * fields :] = blocks[:, 32 * fields :]
    out[:, : 64 * fields].view(np.float32)[:] = blocks[:, : 32 * fields].copy().view(np.float16)
    return out.reshape(-1)


def from_packed(w: Weight, device: torch.device | str) -> PackedWeight:
    """A weight packed on the CPU (NativeOps(q8=True).pack), its bytes copied to `device` (the
    file's fp16 scales, HALF_SCALES, widened to fp32 first: `widened_packed`)."""
    if not w.kernel_type & Q8_PACKED:
        raise ValueError(f"weight {w.name} is not packed for integer dot products")
    t, raw = stored_type(w.kernel_type), w.raw.reshape(-1)
    if t & HALF_SCALES and t & ~HALF_SCALES in SUPPORTED and not kquant(t & ~HALF_SCALES):
        t &= ~HALF_SCALES
        raw = widened_packed(raw, t)
    if t not in SUPPORTED:
        raise ValueError(f"weight {w.name}: type {t} has no integer kernels")
    if t in KGRID:  # the C packer keeps them as stored: the device reads the groups each call makes
        raw = kgrid.expand(raw, BY_CODE[t].qtype, w.out_features, w.in_features)
    size = packed_bytes(t, w.out_features, w.in_features)
    if raw.size != size:
        raise ValueError(f"weight {w.name}: {raw.size} packed bytes, the layout says {size}")
    wq = torch.from_numpy(raw).to(device=device, dtype=torch.uint8).contiguous()
    gb = group_bytes(t, w.in_features // 32)
    wf = grid.table(t, device) if t in GRID else wq.view(torch.float32)  # a grid type: its table
    return PackedWeight(t, limbs_of(w.kernel_type), w.out_features, w.in_features, gb, wq, wf)


# ---- decoding inside the kernels ------------------------------------------------------------


@triton.jit
def block_offset(b, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr):
    """Where block b starts inside its group (q8_block_at)."""
    if KQ:  # noqa: SIM108 (a constexpr branch: one kernel per type compiles only its line)
        off = (b >> 3) * (SB + 8 * BB) + SB + (b & 7) * BB
    else:
        off = b * BB
    return off


@triton.jit
def head_offset(b, BB: tl.constexpr, SB: tl.constexpr):
    """Where block b's super-block header (d, dmin) starts inside its group (K-quants)."""
    return (b >> 3) * (SB + 8 * BB)


@triton.jit
def quants(wq_ptr, qs, k, o, live, WT: tl.constexpr):
    """Signed integer quants w(o, k) of one block (the stored value minus the type's offset), for
    element indices `k` and outputs `o` (broadcast against each other and `qs`, the byte where
    each output's block quants start); 0 where not `live`."""
    c = k & 3
    if WT == Q2_K:  # two bits a weight, a plane a half (unpack2.py)
        w = unpack2.quants(wq_ptr, qs, k, o, live)
    elif WT == Q8_0 or WT == IQ2_XS or WT == IQ2_S:  # noqa: SIM109 (a byte a weight, w + 128; IQ2: w + 64)
        OFF: tl.constexpr = 128 if WT == Q8_0 else 64
        w = tl.load(wq_ptr + qs + (k >> 2) * 64 + 4 * o + c, mask=live, other=OFF).to(tl.int32) - OFF
    else:  # nibbles: element k in quad row (k mod 16) / 4, the high nibble for k >= 16
        byte = tl.load(wq_ptr + qs + ((k & 15) >> 2) * 64 + 4 * o + c, mask=live, other=0).to(tl.int32)
        w = (byte >> ((k >> 4) * 4)) & 15
        if WT == Q4_0:  # offset 8
            w = w - 8
        elif WT == Q5_K or WT == Q5_0 or WT == Q5_1:  # noqa: SIM109 (constexpr tests)
            # bit r (k < 16) or 4 + r of the plane's byte is the fifth bit; Q5_0: offset 16
            hb = tl.load(wq_ptr + qs + 256 + 4 * o + c, mask=live, other=0).to(tl.int32)
            w = w | (((hb >> ((k >> 4) * 4 + ((k & 15) >> 2))) & 1) << 4)
            if WT == Q5_0:
                w = w - 16
        elif WT == Q6_K:  # half h's plane, bits 2r and 2r + 1; offset 32
            hb = tl.load(wq_ptr + qs + 256 + (k >> 4) * 64 + 4 * o + c, mask=live, other=0).to(tl.int32)
            w = (w | (((hb >> (2 * ((k & 15) >> 2))) & 3) << 4)) - 32
        elif WT == IQ4_NL_H or WT == IQ4_XS_H or WT == MXFP4_H:  # noqa: SIM109 (indices: their codebook's)
            w = codebook.lookup(w, WT).to(tl.int32)
    return w


@triton.jit
def _int8(wq_ptr, at, live):
    byte = tl.load(wq_ptr + at, mask=live, other=0).to(tl.int32)
    return ((byte ^ 128) - 128).to(tl.float32)


@triton.jit
def kscales(wq_ptr, blk, o, live, d, dmin, WT: tl.constexpr):
    """A K-quant block's (scale of half 0, of half 1, min of half 0, of half 1) per output, the C
    code's fp32 values: d * sc and dmin * m, the load's own products (Q6_K: no min; Q4_K, Q5_K:
    one scale and min a block, given for both halves; Q2_K: unpack2.scales)."""
    if WT == Q2_K:
        ws0, ws1, mn, mn1 = unpack2.scales(wq_ptr, blk, o, live, d, dmin)
    else:
        ws0 = d * _int8(wq_ptr, blk + o, live)
        ws1 = ws0
        mn = tl.zeros_like(ws0)
        if WT == Q6_K or WT == IQ2_XS or WT == IQ2_S:  # noqa: SIM109 (a scale a half, no min)
            ws1 = d * _int8(wq_ptr, blk + 16 + o, live)
        else:
            mn = dmin * _int8(wq_ptr, blk + 16 + o, live)
        mn1 = mn
    return ws0, ws1, mn, mn1


@triton.jit
def header(wf_ptr, head, o, live, WT: tl.constexpr):
    """A super-block's header per output, from `head`: K-quants (d, dmin, 0) as fp32 (Q6_K and the
    IQ2 types read d alone: their dmin unused), IQ4_XS (d, scales_l, scales_h: codebook.xs_header)."""
    if WT == IQ4_XS_H:
        d, hx, dmin = codebook.xs_header(wf_ptr, head, o, live)
    else:
        d = tl.load(wf_ptr + head // 4 + o, mask=live, other=0.0)
        dmin = d
        if WT != Q6_K and WT != IQ2_XS and WT != IQ2_S:  # the header's dmin
            dmin = tl.load(wf_ptr + head // 4 + 16 + o, mask=live, other=0.0)
        hx = o & 0
    return d, dmin, hx


@triton.jit
def super_scales(wq_ptr, blk, j, o, live, d, dmin, hx, WT: tl.constexpr):
    """`kscales` of the block at `blk`, block j of its super-block, from `header`'s fields (IQ4_XS:
    its scale d * (ls - 32) for both halves, no min)."""
    if WT == IQ4_XS_H:
        ws0 = codebook.xs_scale(d, hx, dmin, j)
        ws1 = ws0
        mn = tl.zeros_like(ws0)
        mn1 = mn
    else:
        ws0, ws1, mn, mn1 = kscales(wq_ptr, blk, o, live, d, dmin, WT)
    return ws0, ws1, mn, mn1


@triton.jit
def scales(wq_ptr, wf_ptr, blk, head, o, live, WT: tl.constexpr, KQ: tl.constexpr):
    """(scale of half 0, scale of half 1, min of half 0, min of half 1) of one block per output,
    each the C code's one fp32 value: K-quants `kscales`, the others the stored fp32 scale and
    Q4_1's (Q5_1's) min. Unused ones are 0."""
    zero = tl.zeros((blk + o).shape, tl.float32)
    ws1 = zero
    mn = zero
    if KQ:  # (IQ4_XS: block (blk - head - 128) / 256 of its super-block)
        d, dmin, hx = header(wf_ptr, head, o, live, WT)
        ws0, ws1, mn, mn1 = super_scales(
            wq_ptr, blk, ((blk - head - 128) >> 8).to(tl.int32), o, live, d, dmin, hx, WT
        )
    elif WT == IQ4_NL_H or WT == MXFP4_H:  # noqa: SIM109 (the file's field, converted exactly)
        ws0 = codebook.scale(wf_ptr, blk, o, live, WT)
        mn1 = mn
    else:
        ws0 = tl.load(wf_ptr + blk // 4 + o, mask=live, other=0.0)
        if WT == Q4_1 or WT == Q5_1:  # noqa: SIM109 (constexpr tests)
            mn = tl.load(wf_ptr + blk // 4 + 16 + o, mask=live, other=0.0)
        mn1 = mn
    return ws0, ws1, mn, mn1


# ---- rows of a packed weight as fp32 (the tied embedding) -----------------------------------


@triton.jit(do_not_specialize=["nb", "GB"])
def _gather_kernel(
    ids_ptr, wq_ptr, wf_ptr, out_ptr, nb, GB,
    WT: tl.constexpr, KQ: tl.constexpr, BB: tl.constexpr, SB: tl.constexpr, SCB: tl.constexpr,
    BLOCKS: tl.constexpr,
):  # fmt: skip
    t = tl.program_id(0)
    b = tl.program_id(1) * BLOCKS + tl.arange(0, BLOCKS)
    n = tl.load(ids_ptr + t).to(tl.int64)
    o = (n % 16).to(tl.int32)
    live = (b < nb)[:, None]
    blk = (n // 16) * GB + block_offset(b, KQ, BB, SB).to(tl.int64)  # [BLOCKS]
    head = (n // 16) * GB + head_offset(b, BB, SB).to(tl.int64)
    k = tl.arange(0, 32)[None, :]
    if grid.held(WT):  # the row as stored (grid.py): scale * q, Q8_0's
        row = grid.rows(n, GB)
        w = grid.quants(wq_ptr, wf_ptr, row, b[:, None], k, live, WT).to(tl.float32)
        ws0, ws1, mn, mn1 = grid.scales(wq_ptr, row, b[:, None], live, WT)
    else:
        w = quants(wq_ptr, (blk + SCB)[:, None], k, o, live, WT).to(tl.float32)
        ws0, ws1, mn, mn1 = scales(wq_ptr, wf_ptr, blk[:, None], head[:, None], o, live, WT, KQ)
    if WT == Q6_K or WT == IQ2_XS or WT == IQ2_S:  # noqa: SIM109 ((d * sc_h) * q)
        val = tl.where(k < 16, ws0, ws1) * w
    elif WT == Q2_K:  # (d * sc_h) * q - dmin * m_h
        val = tl.where(k < 16, ws0, ws1) * w - tl.where(k < 16, mn, mn1)
    elif WT == Q4_1 or WT == Q5_1:  # noqa: SIM109 (d * q + m)
        val = ws0 * w + mn
    elif KQ:  # (d * sc) * q - dmin * m
        val = ws0 * w - mn
    else:  # d * q (Q4_0: q - 8 as a float, exact; Q5_0: q - 16; Q8_0)
        val = ws0 * w
    tl.store(out_ptr + t.to(tl.int64) * nb * 32 + b[:, None] * 32 + k, val, mask=live)


def gather_rows(ids: torch.Tensor, pw: PackedWeight) -> torch.Tensor:
    """fp32 rows `ids` of a packed weight: strata_q8_dequant_row's values (gguf-py's)."""
    ids = ids.to(device=pw.wq.device, dtype=torch.int64).contiguous()
    nb = pw.in_features // 32
    out = torch.empty(ids.shape[0], pw.in_features, dtype=torch.float32, device=pw.wq.device)
    if ids.shape[0]:
        grid = (ids.shape[0], triton.cdiv(nb, GATHER_BLOCKS))
        _gather_kernel[grid](
            ids,
            pw.wq,
            pw.wf,
            out,
            nb,
            pw.group_bytes,
            **layout(pw.wtype),
            BLOCKS=GATHER_BLOCKS,
            **LAUNCH,
        )
    return out
