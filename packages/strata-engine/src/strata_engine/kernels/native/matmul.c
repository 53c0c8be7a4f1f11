/*
 * The fp32 matmul on weights as they are stored, and the embedding gather (internal.h states the
 * contract every kernel keeps).
 *
 * Weights stay in their GGUF block format (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K), fp32, fp16 or bf16,
 * and are dequantised just before use with the same arithmetic as gguf-py. The loader holds
 * Q4_0 ... Q8_0 as the file stores them (WT_HALF_SCALES): each block's leading fp16 scale (and
 * Q4_1 / Q5_1 min) is converted to fp32 where it is read (scale_field: exact); the same blocks
 * with those fields widened to fp32 in place of the halves (the type's code alone, the GPU's
 * layout) give the same values:
 *   Q4_0: d, qs[16]   Q4_1: d, m, qs[16]   Q5_0: d, qh u32, qs[16]   Q5_1: d, m, qh u32, qs[16]
 *   Q8_0: d, qs[32]   (d, m: f16 as stored, or f32 widened; sizes: strata_wtypes)
 * IQ4_NL, IQ4_XS, MXFP4: a scale, 16 bytes of codebook indices a block of 32 (internal.h): as the
 * file stores them (WT_HALF_SCALES: IQ4_NL's fp16 d, MXFP4's e8m0 E, IQ4_XS's super-block of 256,
 * fp16 d and a 6-bit scale a 32; codebook_group_scale computes the fp32 scale exactly where read),
 * or the scale widened to fp32 (the type's code alone: transcode.codebook_blocks, the GPU's).
 * IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S, Q3_K, IQ1_M: as stored, each 32 values decoded by grids.c.
 * F16, BF16, Q2_K, IQ2_XS and IQ2_S are read as stored (the IQ2 grids: iq_grids.h); Q4_K, Q5_K,
 * Q6_K are rearranged at load (kquant_pack.c). A weight repacked for integer activations
 * goes to q8.c or limb.c.
 */
#include "internal.h"
#include "iq_grids.h"

#define PANEL 16 /* weight rows (outputs) dequantised at a time */
#define FUSED_MAX_ROWS 8
#define FUSED_WR 4 /* weight rows taken together when one or two rows of x run (decode) */
/* Rows sharing each dequantised block in matmul_fused: a speed choice only, sized to the registers. */
#if defined(STRATA_TARGET_AVX512)
#define FUSED_ROWS 8
#else
#define FUSED_ROWS 4
#endif

/* Register blocking of the many-rows matmul: a speed choice only (each output's sequence of
 * operations is the same for any blocking), sized to each target's register file. */
#ifndef MR
#if defined(STRATA_TARGET_AVX512)
#define MR 4
#define NR 4
#elif defined(STRATA_TARGET_AVX2) /* 12 accumulators + 4 weight registers of 16 */
#define MR 3
#define NR 2
#else
#define MR 2
#define NR 2
#endif
#endif

/* MR rows x NR outputs at once; each output sees exactly dot_1's sequence. */
static inline void dot_block(const float *x, int64_t ldx, const float *w, int64_t K, float *y, int64_t ldy) {
    vf acc[MR][NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) acc[i][j] = vf_zero();
    int64_t k = 0;
    for (; k + VL <= K; k += VL) {
        vf wv[NR];
        for (int j = 0; j < NR; j++) wv[j] = vf_load(w + j * K + k);
        for (int i = 0; i < MR; i++) {
            vf xv = vf_load(x + i * ldx + k);
            for (int j = 0; j < NR; j++) acc[i][j] = vf_fma(xv, wv[j], acc[i][j]);
        }
    }
    if (k < K) {
        int n = (int)(K - k);
        vf wv[NR];
        for (int j = 0; j < NR; j++) wv[j] = vf_load_n(w + j * K + k, n);
        for (int i = 0; i < MR; i++) {
            vf xv = vf_load_n(x + i * ldx + k, n);
            for (int j = 0; j < NR; j++) acc[i][j] = vf_fma(xv, wv[j], acc[i][j]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) y[i * ldy + j] = vf_hsum(acc[i][j]);
}

/*
 * K-quants, in the layout kquant_pack.c gives them at load: sub-block b % 8 of super-block b / 8.
 * Q4_K / Q5_K: (d * sc) * q - (dmin * m), q a nibble (+ 16 * its fifth bit for Q5_K);
 * Q6_K: (d * sc) * q for each half of 16, q stored as int8. The same float32 products in the
 * same order as gguf-py, so the same bits.
 */
static inline void dequant_kblock(int wtype, const uint8_t *row, int64_t b, vf *lo, vf *hi) {
    int j = (int)(b & 7);
    if (wtype == WT_Q6_K) {
        const uint8_t *blk = row + (b >> 3) * block_bytes(WT_Q6_K);
        const int8_t *sc = (const int8_t *)(blk + 4), *q = (const int8_t *)(blk + 20 + j * 32);
        float d = f32_at(blk);
        *lo = vf_mul(vf_set1(d * (float)sc[2 * j]), vf_from_i8(q));
        *hi = vf_mul(vf_set1(d * (float)sc[2 * j + 1]), vf_from_i8(q + 16));
        return;
    }
    const uint8_t *blk = row + (b >> 3) * block_bytes(wtype);
    vf scale = vf_set1(f32_at(blk) * (float)blk[8 + j]), min = vf_set1(f32_at(blk + 4) * (float)blk[16 + j]);
#ifdef VF_LUT16
    if (wtype == WT_Q4_K) { /* the 16 possible values, then a lookup: the same operations per value */
        vf_lut16_u4(vf_sub(vf_mul(scale, vf_iota()), min), blk + 24 + j * 16, lo, hi);
        return;
    }
#endif
    vf ql = vf_from_u4(blk + 24 + j * 16, 0), qh = vf_from_u4(blk + 24 + j * 16, 1);
    if (wtype == WT_Q5_K) {
        const uint8_t *h = blk + block_bytes(WT_Q4_K) + j * 4; /* after Q4_K's layout */
        vf sixteen = vf_set1(16.0f);
        ql = vf_add(ql, vf_mul(vf_from_bits16((uint32_t)h[0] | (uint32_t)h[1] << 8), sixteen));
        qh = vf_add(qh, vf_mul(vf_from_bits16((uint32_t)h[2] | (uint32_t)h[3] << 8), sixteen));
    }
    *lo = vf_sub(vf_mul(scale, ql), min);
    *hi = vf_sub(vf_mul(scale, qh), min);
}

/*
 * IQ2_XS, IQ2_S as stored (256 values; d f16 first): each group of 8 values is a grid entry
 * (iq_grids.h) with a sign byte, each 16 values a 4-bit scale s: gguf-py's
 * (((d * (0.5 + s)) * 0.25) * grid) * sign, sign +1.0 or -1.0. IQ2_XS: qs u16[32] (grid index: 9
 * bits; sign byte: llama.cpp's ksigns of the other 7 bits, those bits and their parity), scales[8];
 * IQ2_S: qs[32] (the index's low 8 bits), signs[32], qh[8] (its 2 high bits), scales[8].
 */
static inline void dequant_iq2(int wtype, const uint8_t *row, int64_t b, vf *lo, vf *hi) {
    float g[32], sg[32];
    int j = (int)(b & 7);
    const uint8_t *blk = row + (b >> 3) * block_bytes(wtype), *scales = blk + (wtype == WT_IQ2_XS ? 66 : 74);
    for (int k = 0; k < 4; k++) {
        int at = 4 * j + k; /* the group of 8 in the super-block */
        uint32_t grid, sign;
        if (wtype == WT_IQ2_XS) {
            uint32_t q = (uint32_t)blk[2 + 2 * at] | (uint32_t)blk[3 + 2 * at] << 8;
            grid = iq2xs_grid[q & 511];
            sign = q >> 9 | (uint32_t)(__builtin_popcount(q >> 9) & 1) << 7;
        } else {
            grid = iq2s_grid[blk[2 + at] | ((blk[66 + at / 4] >> (2 * (at % 4))) & 3) << 8];
            sign = blk[34 + at];
        }
        for (int i = 0; i < 8; i++) { /* integers, then exact conversions: a loop that vectorises */
            int c = (int)(grid >> (2 * i)) & 3;
            g[8 * k + i] = (float)(8 + 17 * c + (c >> 1)); /* 0, 1, 2 -> 8, 25, 43 */
            sg[8 * k + i] = (float)(1 - 2 * (int)((sign >> i) & 1));
        }
    }
    float d = f16_at(blk);
    vf db_lo = vf_set1(d * (0.5f + (float)(scales[j] & 15)) * 0.25f);
    vf db_hi = vf_set1(d * (0.5f + (float)(scales[j] >> 4)) * 0.25f);
    *lo = vf_mul(vf_mul(db_lo, vf_load(g)), vf_load(sg));
    *hi = vf_mul(vf_mul(db_hi, vf_load(g + 16)), vf_load(sg + 16));
}

/*
 * The types unpacked a value at a time into memory, then loaded as two vectors: F16 and BF16
 * (each value widened by its bits alone: internal.h; on x86 in registers instead, dequant_halves), Q2_K as stored (256 values: scales[16],
 * qs[64], d f16, dmin f16): sub-block j of 32 is 2-bit field j % 4 of bytes 32 (j / 4) .. +31,
 * each half of 16 with its own scale byte sc: (d * (sc & 15)) * q - (dmin * (sc >> 4)), gguf-py's
 * float32 operations in its order.
 */
static inline void dequant_scalar(int wtype, const uint8_t *row, int64_t b, vf *lo, vf *hi) {
    float t[32];
    if (wtype == WT_IQ2_XS || wtype == WT_IQ2_S) {
        dequant_iq2(wtype, row, b, lo, hi);
        return;
    }
    if (wtype == WT_Q2_K) {
        int j = (int)(b & 7), shift = 2 * (j & 3);
        const uint8_t *blk = row + (b >> 3) * block_bytes(WT_Q2_K), *qs = blk + 16 + (j >> 2) * 32;
        for (int i = 0; i < 32; i++) t[i] = (float)((qs[i] >> shift) & 3);
        float d = f16_at(blk + 80), dmin = f16_at(blk + 82);
        uint8_t s0 = blk[2 * j], s1 = blk[2 * j + 1];
        *lo = vf_sub(vf_mul(vf_set1(d * (float)(s0 & 15)), vf_load(t)), vf_set1(dmin * (float)(s0 >> 4)));
        *hi = vf_sub(vf_mul(vf_set1(d * (float)(s1 & 15)), vf_load(t + 16)), vf_set1(dmin * (float)(s1 >> 4)));
        return;
    }
    const uint8_t *p = row + b * 64; /* 32 values of 2 bytes */
    if (wtype == WT_F16)
        for (int i = 0; i < 32; i++) t[i] = f16_at(p + 2 * i);
    else
        for (int i = 0; i < 32; i++) t[i] = bf16_at(p + 2 * i);
    *lo = vf_load(t);
    *hi = vf_load(t + 16);
}

/* F16 and BF16 widened in registers where the target can (vector.h's VF_HALVES: the same values);
 * an F16 block holding a NaN goes dequant_scalar's way, which keeps its payload. */
static inline __attribute__((always_inline)) void dequant_halves(int wtype, const uint8_t *row, int64_t b, vf *lo,
                                                                 vf *hi) {
#ifdef VF_HALVES
    const uint8_t *p = row + b * 64;
    if (wtype == WT_BF16) {
        *lo = vf_from_bf16(p);
        *hi = vf_from_bf16(p + 32);
        return;
    }
    *lo = vf_from_f16(p);
    *hi = vf_from_f16(p + 32);
    if (!vf_any_nan(vf_add(*lo, *hi)))
        return;
#endif
    dequant_scalar(wtype, row, b, lo, hi);
}

/* 32 weights of a WP_WIDEN block at blk (its scale fields widened, or as stored: scale_head's
 * bytes, then the quants). */
static inline void dequant_widen(int wtype, const uint8_t *blk, vf *lo, vf *hi) {
    int c = wtype_code(wtype), at = scale_head(wtype); /* where the quants (Q5_0, Q5_1: qh) start */
    vf d = vf_set1(scale_field(wtype, blk, 0));
    if (c == WT_Q5_0) { /* d * (q - 16), q = nibble | 16 * bit i of qh: one rounding, as numpy
                         * (q - 16 is exact in float: the Q8_0 block it equals, the same product) */
        vf sixteen = vf_set1(16.0f);
        uint32_t qh;
        memcpy(&qh, blk + at, 4);
        vf ql = vf_add(vf_from_u4(blk + at + 4, 0), vf_mul(vf_from_bits16(qh & 0xFFFFu), sixteen)); /* exact */
        vf qu = vf_add(vf_from_u4(blk + at + 4, 1), vf_mul(vf_from_bits16(qh >> 16), sixteen));
        *lo = vf_mul(vf_sub(ql, sixteen), d);
        *hi = vf_mul(vf_sub(qu, sixteen), d);
    } else if (c == WT_Q5_1) { /* d * (q | 16 * bit i of qh) + m, two roundings, as numpy */
        vf m = vf_set1(scale_field(wtype, blk, 1)), sixteen = vf_set1(16.0f);
        uint32_t qh;
        memcpy(&qh, blk + at, 4);
        vf ql = vf_add(vf_from_u4(blk + at + 4, 0), vf_mul(vf_from_bits16(qh & 0xFFFFu), sixteen)); /* exact */
        vf qu = vf_add(vf_from_u4(blk + at + 4, 1), vf_mul(vf_from_bits16(qh >> 16), sixteen));
        *lo = vf_add(vf_mul(d, ql), m);
        *hi = vf_add(vf_mul(d, qu), m);
    } else if (c == WT_Q8_0) {
        *lo = vf_mul(vf_from_i8((const int8_t *)(blk + at)), d);
        *hi = vf_mul(vf_from_i8((const int8_t *)(blk + at + 16)), d);
    } else if (c == WT_Q4_0) {
        vf eight = vf_set1(8.0f);
#ifdef VF_LUT16
        vf_lut16_u4(vf_mul(d, vf_sub(vf_iota(), eight)), blk + at, lo, hi);
        return;
#endif
        *lo = vf_mul(d, vf_sub(vf_from_u4(blk + at, 0), eight)); /* (q - 8) is exact in float */
        *hi = vf_mul(d, vf_sub(vf_from_u4(blk + at, 1), eight));
    } else { /* Q4_1: d * q + m, two roundings, as numpy does */
        vf m = vf_set1(scale_field(wtype, blk, 1));
#ifdef VF_LUT16
        vf_lut16_u4(vf_add(vf_mul(d, vf_iota()), m), blk + at, lo, hi);
        return;
#endif
        *lo = vf_add(vf_mul(d, vf_from_u4(blk + at, 0)), m);
        *hi = vf_add(vf_mul(d, vf_from_u4(blk + at, 1)), m);
    }
}

/* Dequantise 32 weights of block b of a quantised row (gguf-py's values, bit for bit). Inlined
 * where the type is a constant (fused_typed), so that the other types' branches fold away;
 * dequant_block is the same as a call. */
static inline __attribute__((always_inline)) void dequant_block_inline(int wtype, const uint8_t *row, int64_t b,
                                                                       vf *lo, vf *hi) {
    if (wtype == WT_Q4_K || wtype == WT_Q5_K || wtype == WT_Q6_K) {
        dequant_kblock(wtype, row, b, lo, hi);
    } else if (wtype == WT_F16 || wtype == WT_BF16) {
        dequant_halves(wtype, row, b, lo, hi);
    } else if (wtype == WT_Q2_K || wtype == WT_IQ2_XS || wtype == WT_IQ2_S) {
        dequant_scalar(wtype, row, b, lo, hi);
    } else if (wtype_kgrid(wtype)) { /* Q3_K, IQ1_M: (d * sc) * q, the Q6_K-shaped block's products (grids.c) */
        int8_t q[32], sc[2];
        float d;
        kgrid_block(wtype, row, b, &d, sc, q);
        *lo = vf_mul(vf_set1(d * (float)sc[0]), vf_from_i8(q));
        *hi = vf_mul(vf_set1(d * (float)sc[1]), vf_from_i8(q + 16));
    } else if (wtype_grid(wtype)) { /* scale * q: the Q8_0 block's product (grids.c) */
        int8_t q[32];
        vf d = vf_set1(grid_group(wtype, row, b, q));
        *lo = vf_mul(vf_from_i8(q), d);
        *hi = vf_mul(vf_from_i8(q + 16), d);
    } else if (wtype_codebook(wtype)) { /* scale * codebook[index]: the Q8_0 block's product (internal.h) */
        const uint8_t *qs = codebook_qs(wtype, row, b); /* IQ4_XS held: its super-block's group b % 8 */
        const int8_t *cb = codebook_of(wtype);
        vf d = vf_set1(codebook_group_scale(wtype, row, b)); /* fp32, or from the file's fields: exact */
#ifdef VF_LUT16
        vf_lut16_u4(vf_mul(vf_from_i8(cb), d), qs, lo, hi); /* the 16 products, then a lookup */
        return;
#endif
        int8_t q[32];
        for (int i = 0; i < 16; i++) q[i] = cb[qs[i] & 15], q[16 + i] = cb[qs[i] >> 4];
        *lo = vf_mul(vf_from_i8(q), d);
        *hi = vf_mul(vf_from_i8(q + 16), d);
    } else { /* the WP_WIDEN types: d (and m) fp32 fields, or (WT_HALF_SCALES) the file's fp16 ones,
              * each converted exactly where read (scale_field): the same values either way */
        dequant_widen(wtype, row + b * block_bytes(wtype), lo, hi);
    }
}

static __attribute__((noinline)) void dequant_block(int wtype, const uint8_t *row, int64_t b, vf *lo, vf *hi) {
    dequant_block_inline(wtype, row, b, lo, hi);
}

/* Dequantise one weight row into dst[K]. */
static void dequant_row(int wtype, const uint8_t *src, float *dst, int64_t K) {
    if (wtype == WT_F32) {
        memcpy(dst, src, (size_t)K * 4);
        return;
    }
    for (int64_t b = 0; b < K / 32; b++) {
        vf lo, hi;
        dequant_block(wtype, src, b, &lo, &hi);
        vf_store(dst + b * 32, lo);
        vf_store(dst + b * 32 + 16, hi);
    }
}

/* `rows` rows of x against `wr` consecutive weight rows: each block dequantised once, in registers,
 * and used by every row (inlined with constant `rows` and `wr`, so that the accumulators stay in
 * registers). Each output is its own chain of FMAs in block order, exactly dot_1's sequence; the
 * wr weight rows give the core wr independent chains to overlap, where one output alone waits
 * on its FMA latency (one row: decode). wr rows read side by side are wr short streams, which the
 * hardware prefetcher misses, so the next wr rows are prefetched while these run (a prefetch
 * past the weight's end is harmless: it never faults). `typed`: wtype is a constant, and each block's
 * widening is inlined into the loop (fused_typed). */
static inline __attribute__((always_inline)) void fused_rows(const float *x, int64_t K, const uint8_t *row,
                                                             int64_t rb, int wr, int wtype, int typed, int64_t nb,
                                                             int rows, float *y, int64_t ldy) {
    vf acc[FUSED_ROWS][FUSED_WR];
    for (int i = 0; i < rows; i++)
        for (int r = 0; r < wr; r++) acc[i][r] = vf_zero();
    const uint8_t *next = row + wr * rb; /* the next weight rows, prefetched (see above) */
    int64_t ahead = wr * rb / nb + 64;
    for (int64_t b = 0; b < nb; b++) {
        if (wr > 1)
            for (int64_t l = 0; l < ahead; l += 64) __builtin_prefetch(next + b * (ahead - 64) + l);
#pragma GCC unroll 4 /* unrolled, so that acc[i][r] is a register, not a stack slot */
        for (int r = 0; r < wr; r++) {
            vf lo, hi;
            if (typed) dequant_block_inline(wtype, row + r * rb, b, &lo, &hi);
            else dequant_block(wtype, row + r * rb, b, &lo, &hi);
            for (int i = 0; i < rows; i++) {
                const float *xr = x + i * K + b * 32;
                acc[i][r] = vf_fma(vf_load(xr), lo, acc[i][r]);
                acc[i][r] = vf_fma(vf_load(xr + 16), hi, acc[i][r]);
            }
        }
    }
    for (int i = 0; i < rows; i++)
        for (int r = 0; r < wr; r++) y[i * ldy + r] = vf_hsum(acc[i][r]);
}

/* One step of matmul_fused: weight rows n .. n + wr - 1 against every row of x. */
static inline __attribute__((always_inline)) void fused_step(const float *x, int64_t M, int64_t K,
                                                             const uint8_t *w, int64_t rb, int wtype, int typed,
                                                             int64_t nb, int wr, int64_t n, int64_t N, float *y) {
    const uint8_t *row = w + n * rb;
    if (n + wr > N) { /* the last few weight rows, one at a time */
        for (; n < N; n++, row += rb)
            for (int64_t m = 0; m < M; m++)
                fused_rows(x + m * K, K, row, rb, 1, wtype, typed, nb, 1, y + m * N + n, N);
        return;
    }
    if (wr > 1) {
        if (M == 1) fused_rows(x, K, row, rb, FUSED_WR, wtype, typed, nb, 1, y + n, N);
        else fused_rows(x, K, row, rb, FUSED_WR, wtype, typed, nb, 2, y + n, N);
        return;
    }
    for (int64_t m0 = 0; m0 < M; m0 += FUSED_ROWS) {
        int rows = M - m0 < FUSED_ROWS ? (int)(M - m0) : FUSED_ROWS;
        const float *xm = x + m0 * K;
        float *ym = y + m0 * N + n;
        switch (rows) {
#define FUSED_CASE(R) case R: fused_rows(xm, K, row, rb, 1, wtype, typed, nb, R, ym, N); break;
            FUSED_CASE(1) FUSED_CASE(2) FUSED_CASE(3) FUSED_CASE(4)
#if FUSED_ROWS >= 8
            FUSED_CASE(5) FUSED_CASE(6) FUSED_CASE(7) FUSED_CASE(8)
#endif
#undef FUSED_CASE
        }
    }
}

/* A step with the type a constant for F16 and BF16 (which every arithmetic reads through this
 * loop: a 16-bit file's decode is this loop) and the K-quants (native-fp32's usual files): the
 * block's widening inlined into the FMA loop, where a call a block cost as much as the block's
 * loads (one F16 6144 x 2048 weight at one row, AVX2: 2.34 -> 1.04 ms). The same operations in the
 * same order as the call, so the same bits. The other types call dequant_block. */
static void fused_typed(const float *x, int64_t M, int64_t K, const uint8_t *w, int64_t rb, int wtype, int64_t nb,
                        int wr, int64_t n, int64_t N, float *y) {
    switch (wtype) {
#define FUSED_TYPED(T) case T: fused_step(x, M, K, w, rb, T, 1, nb, wr, n, N, y); break;
        FUSED_TYPED(WT_F16) FUSED_TYPED(WT_BF16) FUSED_TYPED(WT_Q4_K) FUSED_TYPED(WT_Q5_K) FUSED_TYPED(WT_Q6_K)
#undef FUSED_TYPED
    default: fused_step(x, M, K, w, rb, wtype, 0, nb, wr, n, N, y);
    }
}

/* Few rows (decode): dequantise each block in registers and use it at once, no panel. One or two
 * rows take FUSED_WR weight rows at a time (see fused_rows). */
static void matmul_fused(const float *x, int64_t M, int64_t K, const uint8_t *w, int wtype, int64_t N,
                         float *y, int nthreads) {
    int64_t rb = row_bytes(wtype, K), nb = K / 32;
    int wr = M <= 2 ? FUSED_WR : 1;
    int64_t steps = (N + wr - 1) / wr;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t s = 0; s < steps; s++) fused_typed(x, M, K, w, rb, wtype, nb, wr, s * wr, N, y);
}

/*
 * y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]), W in `wtype` blocks.
 * Few rows: fused dequantise-and-dot. More rows: parallel over panels of PANEL outputs,
 * each dequantised once into fp32 and reused by every row. Both give the same bits.
 */
void strata_matmul(const float *x, int64_t M, int64_t K, const uint8_t *w, int wtype, int64_t N,
                   const float *bias, float *y, int nthreads) {
    if (wtype & WT_Q8_PACKED) {
        if (WT_LIMBS(wtype)) strata_limb_matmul(x, M, K, w, WT_BASE(wtype), N, bias, y, nthreads, WT_LIMBS(wtype));
        else strata_q8_matmul(x, M, K, w, wtype & ~WT_Q8_PACKED, N, bias, y, nthreads);
        return;
    }
    int64_t rb = row_bytes(wtype, K);
    if (wtype != WT_F32 && M <= FUSED_MAX_ROWS) {
        matmul_fused(x, M, K, w, wtype, N, y, nthreads);
    } else {
        int64_t npanels = (N + PANEL - 1) / PANEL;
#pragma omp parallel num_threads(nthreads)
        {
            float *panel = wtype == WT_F32 ? NULL : (float *)kernel_malloc((size_t)PANEL * K * 4);
#pragma omp for schedule(static)
            for (int64_t p = 0; p < npanels; p++) {
                if (wtype != WT_F32 && !panel) continue; /* out of memory (counted): this share skipped */
                int64_t n0 = p * PANEL;
                int64_t np = N - n0 < PANEL ? N - n0 : PANEL;
                const float *pw;
                if (wtype == WT_F32) {
                    pw = (const float *)(w + n0 * rb);
                } else {
                    for (int64_t j = 0; j < np; j++) dequant_row(wtype, w + (n0 + j) * rb, panel + j * K, K);
                    pw = panel;
                }
                int64_t m = 0;
                for (; m + MR <= M; m += MR) {
                    int64_t j = 0;
                    for (; j + NR <= np; j += NR) dot_block(x + m * K, K, pw + j * K, K, y + m * N + n0 + j, N);
                    for (; j < np; j++)
                        for (int i = 0; i < MR; i++) y[(m + i) * N + n0 + j] = dot_1(x + (m + i) * K, pw + j * K, K);
                }
                for (; m < M; m++)
                    for (int64_t j = 0; j < np; j++) y[m * N + n0 + j] = dot_1(x + m * K, pw + j * K, K);
            }
            free(panel);
        }
    }
    if (bias)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) y[m * N + n] += bias[n];
    canonical_nans(y, M * N);
}

/* Gather rows `ids` of a (possibly quantised) table into out[n, K] (embedding lookup). */
void strata_gather_rows(const uint8_t *w, int wtype, int64_t K, const int64_t *ids, int64_t n, float *out) {
    if (wtype & WT_Q8_PACKED) { /* a tied LM head's packed copy, standing in for the embedding */
        for (int64_t i = 0; i < n; i++) strata_q8_dequant_row(WT_BASE(wtype), w, K, ids[i], out + i * K);
        return;
    }
    int64_t rb = row_bytes(wtype, K);
    for (int64_t i = 0; i < n; i++) dequant_row(wtype, w + ids[i] * rb, out + i * K, K);
}
