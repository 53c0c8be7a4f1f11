/*
 * 8-bit activations: the opt-in "native-q8" kernels (q8.c); the weights' packed layout and the
 * integer steps described here are shared with the integer-limb kernels (limb.c).
 *
 * The default kernels compute in fp32 on gguf-py's dequantised weights. This mode instead
 * quantises each activation row to 8 bits per block of 32 (llama.cpp's Q8_0 rule) and takes
 * integer dot products against the weights' own integer quants, as llama.cpp does. It is faster
 * and less exact (docs/performance.md states its accuracy); it is still batch-invariant and
 * gives the same bits on every CPU, because:
 *   - a row is quantised alone, by the scalar sequence of q8_quantize (the same on every target);
 *   - each block's integer sum S = sum_k w_k * x_k is exact (any order, any instruction);
 *   - the float work is a fixed scalar sequence per output, over the blocks in order:
 *       acc = fma(wscale * dx, (float)S, acc)        (Q6_K, Q2_K: once per half of 16, its own scale)
 *       acc = fma(wmin, dx * (float)sum_k x_k, acc)  (types with a min: Q4_1, Q5_1, Q4_K, Q5_K)
 *     and y = acc (+ bias). Q2_K, with a scale and a min per half h of 16, takes per block
 *       acc = fma((d * sc_0) * dx, (float)S_0, acc), then the same for half 1, then
 *       acc = fma(dmin * m_0, -(dx * (float)sum_{k in half 0} x_k), acc), then half 1's
 *     (its quants q in [0, 3], offset 0: |S_h| <= 16 * 3 * 127). Vector lanes hold different
 *     outputs, never parts of one sum.
 *
 * Weights are repacked once at load (strata_q8_pack) into groups of 16 outputs, so that one
 * 64-byte vector holds 4 consecutive quants of 16 outputs (one integer dot-product step for 16
 * outputs at once). Per group and block of 32 inputs:
 *   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the codebook types (IQ4_NL, IQ4_XS, MXFP4): scales f32[16],
 *     mins f32[16] (Q4_1, Q5_1); the first five as the loader holds them (WT_HALF_SCALES) the
 *     file's fp16 fields instead, f16[16] each (q8_scale converts them exactly where read), so
 *     that the packed weight is the file's size (IQ4_NL and MXFP4 held so: f16[16] d, u8[16] e8m0,
 *     made fp32 as the group is looked up; IQ4_XS held so: no scales a block but, before every
 *     8th, its super-block's fields d f16[16], scales_h u16[16], scales_l u32[16] as the file
 *     stores them, each 32's scale d * (ls - 32) computed exactly as the group is looked up); the grid types (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S) are not repacked: a group
 *     is its 16 rows as stored, each call expanding it to Q8_0's layout (expand_group);
 *   K-quants: before every 8th block, the super-block's d f32[16] and dmin f32[16] (Q4_K, Q5_K);
 *     per block the 6-bit scales int8[16] (Q6_K: [16] for each half) and mins int8[16] (Q4_K,
 *     Q5_K); Q2_K (d and dmin widened from the file's fp16) per block its scale-and-min bytes [16]
 *     for each half (the file's: sc | m << 4); the kernel forms d * scale and dmin * min with the
 *     load's own fp32 products (gguf-py's);
 *   quants: 4-bit types 4 x 64 bytes, byte 4o+c of row r = w(o, 4r+c) | w(o, 16+4r+c) << 4 (the
 *           codebook types: their indices, looked up as Q8_0's bytes: lookup_group, or in registers
 *           by limb.c's x86 tiles, limb_cb_group);
 *           Q6_K (6 bits, w + 32): the low nibbles so, then 2 x 64 bytes of high bits: in row h,
 *           bits 2r, 2r+1 of byte 4o+c are the high bits of w(o, 16h+4r+c);
 *           Q2_K (2 bits): 2 x 64 bytes, one a half h: bits 2r, 2r + 1 of byte 4o+c are
 *           w(o, 16h+4r+c) (2.75 bits a weight with its scales and header, the file's 2.625);
 *           Q5_K, Q5_0 and Q5_1 (5 bits; Q5_0: w + 16): the low nibbles so, then 64 bytes of fifth bits:
 *           bit r of byte 4o+c is w(o, 4r+c)'s, bit 4 + r is w(o, 16+4r+c)'s (6 bits a weight
 *           for Q5_0 with its scales, against 9 for the Q8_0 blocks it was once rewritten as);
 *           other types 8 x 64 bytes, byte 4o+c of row r = w(o, 4r+c) + offset, as unsigned bytes.
 * Unsigned weights times signed activations is what the instructions multiply (VNNI vpdpbusd,
 * AVX2 vpmaddubsw); an offset (Q4_0: 8, Q5_0: 16, Q6_K: 32, Q8_0: 128) is taken back exactly as
 * offset * sum_k x_k. So Q5_0, whose value is d * (q - 16), gives the integer sums and the float
 * sequence of the Q8_0 block (d, q - 16) it equals: the same bits as that block.
 */
#ifndef STRATA_Q8_H
#define STRATA_Q8_H

#include "internal.h"

#define Q8_GROUP 16
/* Internal: Q5_0, Q5_1, Q5_K and Q6_K unpacked to one byte per weight, a group at a time, for calls
 * of many rows (see strata_q8_matmul); never stored. */
#define WT_Q5_0_BYTES 112
#define WT_Q5_K_BYTES 113
#define WT_Q6_K_BYTES 114
#define WT_Q5_1_BYTES 115
/* Internal: IQ2_XS and IQ2_S expanded (expand_group) as WT_Q6_K_BYTES's layout with offset 64, not
 * 32: their |q| <= 43 (w + 64 in [21, 107]); never stored. */
#define WT_IQ2_BYTES 116
#define UNPACK_ROWS 16 /* rows from which a call unpacks Q5_0/Q5_K/Q6_K groups once instead of per row tile */

/* A type's predicates below hold for it with or without WT_HALF_SCALES (the WP_WIDEN types and
 * the byte types Q5_0 and Q5_1 unpack to, which keep the bit): only where their scales lie and
 * how wide they are differ (q8_scale_bytes, q8_scale, q8_add_min). */

/* 4-bit quants as Q4_0's (the codebook types: their indices, looked up by lookup_group) */
static inline int q8_nibbles(int t) {
    t = wtype_code(t);
    return t == WT_Q4_0 || t == WT_Q4_1 || t == WT_Q4_K || wtype_codebook(t);
}
static inline int q8_has_min(int t) {
    t = wtype_code(t);
    return t == WT_Q4_1 || t == WT_Q5_1 || t == WT_Q5_1_BYTES || t == WT_Q4_K || t == WT_Q5_K || t == WT_Q5_K_BYTES ||
           t == WT_Q2_K;
}
/* Q2_K: 2-bit quants, a scale and a min per half of 16, both 4-bit (a byte: sc | m << 4) */
static inline int q8_two(int t) { return t == WT_Q2_K; }
static inline int q8_six(int t) { return t == WT_Q6_K || t == WT_Q6_K_BYTES || t == WT_IQ2_BYTES; }
/* 5-bit types held as nibbles plus a plane of fifth bits (see the top) */
static inline int q8_five(int t) {
    t = wtype_code(t);
    return t == WT_Q5_K || t == WT_Q5_0 || t == WT_Q5_1;
}
static inline int q8_halves(int t) { return q8_six(t) || q8_two(t) ? 2 : 1; } /* scales per block */
static inline int q8_offset(int t) {
    t = wtype_code(t);
    if (t == WT_IQ2_BYTES) return 64;
    return t == WT_Q4_0 ? 8 : t == WT_Q5_0 || t == WT_Q5_0_BYTES ? 16 : q8_six(t) ? 32 : t == WT_Q8_0 ? 128 : 0;
}
static inline int q8_kquant(int t) {
    return t == WT_Q4_K || t == WT_Q5_K || t == WT_Q6_K || t == WT_Q5_K_BYTES || t == WT_Q6_K_BYTES ||
           t == WT_IQ2_BYTES || q8_two(t);
}
/* The byte type a call of many rows unpacks a 5- or 6-bit type to (see unpack_group); 0: none. */
static inline int q8_unpacked(int t) {
    int half = t & WT_HALF_SCALES; /* kept: the unpacked group keeps the scales as they are */
    t = wtype_code(t);
    return t == WT_Q5_0   ? WT_Q5_0_BYTES | half
           : t == WT_Q5_1 ? WT_Q5_1_BYTES | half
           : t == WT_Q5_K ? WT_Q5_K_BYTES
           : t == WT_Q6_K ? WT_Q6_K_BYTES
                          : 0;
}

/* The byte types (one byte a weight) that calls make: q8_unpacked's and the IQ2 types' expansion
 * (never stored). */
static inline int q8_bytes(int t) {
    t = wtype_code(t);
    return t == WT_Q5_0_BYTES || t == WT_Q5_1_BYTES || t == WT_Q5_K_BYTES || t == WT_Q6_K_BYTES || t == WT_IQ2_BYTES;
}

/* Bytes of a packed (group, block)'s scales and mins: f32[16] each (WT_HALF_SCALES: the file's
 * f16[16] each, MXFP4's e8m0 u8[16], none for IQ4_XS: q8_super_bytes), int8[16] each for K-quants, Q2_K's scale-and-min bytes [16] for each half. */
static inline int64_t q8_scale_bytes(int t) {
    if (codebook_xs_held(t)) return 0; /* IQ4_XS held: its scales in the super-block's header */
    return q8_two(t) ? 32 : (q8_kquant(t) ? 16 : 16 * scale_width(t)) * (q8_halves(t) + q8_has_min(t));
}

/* Bytes of one packed (group, block): its scales and quants. */
static inline int64_t q8_block_bytes(int t) {
    return q8_scale_bytes(t) +
           (q8_two(t) ? 128 : q8_nibbles(t) ? 256 : t == WT_Q6_K ? 384 : q8_five(t) ? 320 : 512);
}

/* Bytes of a K-quant super-block's header (d, and dmin where there are mins; IQ4_XS held as
 * stored: the file's d f16[16], scales_h u16[16], scales_l u32[16]), 0 otherwise. */
static inline int64_t q8_super_bytes(int t) {
    return q8_kquant(t) ? 64 * (1 + q8_has_min(t)) : codebook_xs_held(t) ? 128 : 0;
}

/* Where block b of a group starts (K-quants, IQ4_XS held: after its super-block's header). */
static inline int64_t q8_block_at(int t, int64_t b) {
    if (!q8_kquant(t) && !codebook_xs_held(t)) return b * q8_block_bytes(t);
    return (b >> 3) * (q8_super_bytes(t) + 8 * q8_block_bytes(t)) + q8_super_bytes(t) + (b & 7) * q8_block_bytes(t);
}

/* A group's bytes (the grid and K-grid types: its 16 rows as stored, see expand_group). */
static inline int64_t q8_group_bytes(int t, int64_t nb) {
    if (codebook_xs_held(t)) return nb / 8 * (q8_super_bytes(t) + 8 * q8_block_bytes(t)); /* 16 x 136 a 256 */
    return wtype_grid(t) || wtype_kgrid(t) ? Q8_GROUP * row_bytes(t, 32 * nb) : q8_block_at(t, nb);
}

/* Types each call expands, a group at a time, into a group of the same values (expand_group), and
 * the type of that group: Q8_0's, or (the K-grid types) one byte a weight with a scale a 16. */
static inline int q8_expanded(int t) { return wtype_codebook(t) || wtype_grid(t) || wtype_kgrid(t); }
static inline int q8_expanded_type(int t) {
    return !wtype_kgrid(t) ? WT_Q8_0 : t == WT_IQ2_XS || t == WT_IQ2_S ? WT_IQ2_BYTES : WT_Q6_K_BYTES;
}

/* Where a packed block's quants start: after its scales (and mins), see the top. */
static inline const uint8_t *q8_quants(int t, const uint8_t *blk) { return blk + q8_scale_bytes(t); }

/* q[k] = x[k] * id rounded to the nearest integer (ties to even) where that is within +-127 (it
 * always is: |x| <= amax, id = 127 / amax, though x * id may round to just above 127), else 0
 * (NaN); s[h] = the sum of q over half h. Per target below; every target computes the same. */
static inline void q8_round_block(const float *x, float id, int8_t *q, int32_t s[2]);

/* |S_2| below which S fits int32 (limb_values3); rows a limb tile takes at most. */
#define LIMB_FAST (1 << 14)
#define LIMB_ROWS 4

/* ---- the integer step, per target: acc[o] += sum_c w[4o + c] * x4[c] for 16 outputs o ------- */
#if defined(STRATA_TARGET_AVX512)
typedef __m512i vq; /* 64 unsigned weight bytes */
typedef __m512i vi; /* 16 int32 lanes */
static inline vi vi_zero(void) { return _mm512_setzero_si512(); }
static inline vq vq_load(const uint8_t *p) { return _mm512_loadu_si512((const void *)p); }
static inline void vq_store(uint8_t *p, vq v) { _mm512_storeu_si512((void *)p, v); }
static inline vq vq_lo(vq v) { return _mm512_and_si512(v, _mm512_set1_epi8(15)); }
static inline vq vq_hi(vq v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(15)); }
static inline vq vq_pair(vq v, int r) { return _mm512_and_si512(_mm512_srli_epi16(v, 2 * r), _mm512_set1_epi8(3)); }
static inline vi vi_dot4(vi acc, vq w, const int8_t *x) {
    /* x's 4 bytes broadcast by the step's own memory operand: one fused instruction, where the
     * intrinsics' separate broadcast load costs the front end an instruction a step */
    __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*(const int32_t *)x));
    return acc;
}
static inline vi vi_sub_n(vi a, int32_t n) { return _mm512_sub_epi32(a, _mm512_set1_epi32(n)); }
static inline vi vi_set1(int32_t n) { return _mm512_set1_epi32(n); }
/* vi_dot4 on x's 4 bytes already broadcast (vi_splat4), so one broadcast feeds several weights' steps. */
static inline vi vi_splat4(const int8_t *x) {
    int32_t v;
    memcpy(&v, x, 4);
    return vi_set1(v);
}
static inline vi vi_dot4_splat(vi acc, vq w, vi x) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(w), "v"(x));
    return acc;
}
/* nib | ((hb shifted left by `shift`, right where negative) & mask), per byte: the high bits of
 * Q5_K/Q6_K put above their nibbles (the 16-bit shifts' carries between bytes fall outside mask) */
static inline vq vq_bits(vq nib, vq hb, int shift, int mask) {
    __m512i h = shift >= 0 ? _mm512_slli_epi16(hb, shift) : _mm512_srli_epi16(hb, -shift);
    return _mm512_ternarylogic_epi32(nib, h, _mm512_set1_epi8((char)mask), 0xF8); /* nib | (h & mask) */
}
static inline vi vi_add(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline vq vq_lut(vq nib, const uint8_t table[16]) { /* table[nib] per byte (nib < 16) */
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)table)), nib);
}
static inline vf vf_from_vi(vi a) { return (vf){_mm512_cvtepi32_ps(a)}; }
/* ---- the exact float of a block's three limb sums S = S_2 65536 + S_1 256 + S_0 (limb.c's top; grids.c's fused steps) */
/* a << 8 and a << 16 in every int32 lane as byte shuffles, exact where the result fits in int32
 * (|S_1| < 2^21; |S_2| < LIMB_FAST where it is shifted). vpshufb runs on port 5: shifts would take
 * port 0, which every vpdpbusd needs. */
static inline vi limb_shl8(vi a) {
    return _mm512_shuffle_epi8(a, _mm512_broadcast_i32x4(_mm_setr_epi32(0x02010080, 0x06050480, 0x0a090880, 0x0e0d0c80)));
}
static inline vi limb_shl16(vi a) {
    return _mm512_shuffle_epi8(a, _mm512_broadcast_i32x4(_mm_setr_epi32(0x01008080, 0x05048080, 0x09088080, 0x0d0c8080)));
}
static inline vi limb_low(vi s0, vi s1) { return _mm512_add_epi32(limb_shl8(s1), s0); }
static inline __m256 limb_f8(__m256i s2, __m256i low) {
    __m512d v = _mm512_fmadd_pd(_mm512_cvtepi32_pd(s2), _mm512_set1_pd(65536.0), _mm512_cvtepi32_pd(low));
    return _mm512_cvtpd_ps(v); /* exact sum, one rounding */
}
static inline vf limb_value3_wide(vi s0, vi s1, vi s2) { /* S in double: any |S_2| */
    vi low = limb_low(s0, s1);
    __m256 a = limb_f8(_mm512_castsi512_si256(s2), _mm512_castsi512_si256(low));
    __m256 b = limb_f8(_mm512_extracti64x4_epi64(s2, 1), _mm512_extracti64x4_epi64(low, 1));
    return (vf){_mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)), _mm256_castps_pd(b), 1))};
}
/* f[i] for the rows of a tile (s: rows x 3 limbs): one test of every row's S_2 for the int32 path.
 * Always inlined: called out of line (GCC 12 chose so), its s[] lived in memory and every
 * accumulator of a 4-row tile was stored to the stack after each step (12 stores a 12 vpdpbusd). */
/* try_fast 0 (a constant): skip the int32 test, for weights whose |S_2| passes 2^14 too often for it
 * to pay (a mispredicted branch a block: grids.c's IQ2_XXS and IQ3_XXS). */
static inline __attribute__((always_inline)) void limb_values3_from(const vi *s, int rows, vf *f, int try_fast) {
    __m512i any = _mm512_setzero_si512();
    for (int i = 0; try_fast && i < rows; i++) any = _mm512_or_si512(any, _mm512_add_epi32(s[3 * i + 2], _mm512_set1_epi32(LIMB_FAST)));
    if (try_fast && !_mm512_test_epi32_mask(any, _mm512_set1_epi32(-2 * LIMB_FAST))) { /* |S_2| < 2^14 in every lane */
        for (int i = 0; i < rows; i++)
            f[i] = (vf){_mm512_cvtepi32_ps(_mm512_add_epi32(limb_shl16(s[3 * i + 2]), limb_low(s[3 * i], s[3 * i + 1])))};
        return;
    }
    /* Weights near 128 in size (Q8_0's and the codebook and grid types' values) often put |S_2| past
     * 2^14. Then S = A * 256 + (L & 255), A = S_2 * 256 + (L >> 8) in int32 (exact: L = S_1 * 256 + S_0,
     * |L| < 2^30, and |S_2| <= 32 * 255 * 128 < 2^20), and where |A| < 2^24 in every lane (|S_2| up to
     * about 2^16), fma((float)A, 256, (float)(L & 255)) rounds the exact S once, both conversions
     * exact; past that, S in double. */
    vi a[LIMB_ROWS], lo[LIMB_ROWS];
    any = _mm512_setzero_si512();
    for (int i = 0; i < rows; i++) {
        vi l = limb_low(s[3 * i], s[3 * i + 1]);
        lo[i] = _mm512_and_si512(l, _mm512_set1_epi32(255));
        a[i] = _mm512_add_epi32(limb_shl8(s[3 * i + 2]), _mm512_srai_epi32(l, 8));
        any = _mm512_or_si512(any, _mm512_add_epi32(a[i], _mm512_set1_epi32(1 << 24)));
    }
    if (!_mm512_test_epi32_mask(any, _mm512_set1_epi32(-(1 << 25)))) /* |A| < 2^24 in every lane */
        for (int i = 0; i < rows; i++)
            f[i] = (vf){_mm512_fmadd_ps(_mm512_cvtepi32_ps(a[i]), _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(lo[i]))};
    else
        for (int i = 0; i < rows; i++) f[i] = limb_value3_wide(s[3 * i], s[3 * i + 1], s[3 * i + 2]);
}
static inline __attribute__((always_inline)) void limb_values3(const vi *s, int rows, vf *f) { limb_values3_from(s, rows, f, 1); }
static inline void q8_round_block(const float *x, float id, int8_t *q, int32_t s[2]) {
    for (int h = 0; h < 2; h++) {
        __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * h), _mm512_set1_ps(id)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __mmask16 ok = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(127.0f), _CMP_LE_OQ);
        __m512i r = _mm512_maskz_cvttps_epi32(ok, v); /* v is integral: exact */
        _mm_storeu_si128((__m128i *)(q + 16 * h), _mm512_cvtepi32_epi8(r));
        s[h] = _mm512_reduce_add_epi32(r);
    }
}
#define Q8_MR 8
#elif defined(STRATA_TARGET_AVX2)
typedef struct { __m256i lo, hi; } vq; /* outputs 0-7, 8-15 */
typedef struct { __m256i lo, hi; } vi;
static inline vi vi_zero(void) { return (vi){_mm256_setzero_si256(), _mm256_setzero_si256()}; }
static inline vq vq_load(const uint8_t *p) {
    return (vq){_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)(p + 32))};
}
static inline void vq_store(uint8_t *p, vq v) {
    _mm256_storeu_si256((__m256i *)p, v.lo), _mm256_storeu_si256((__m256i *)(p + 32), v.hi);
}
static inline vq vq_lo(vq v) {
    __m256i m = _mm256_set1_epi8(15);
    return (vq){_mm256_and_si256(v.lo, m), _mm256_and_si256(v.hi, m)};
}
static inline vq vq_hi(vq v) {
    __m256i m = _mm256_set1_epi8(15);
    return (vq){_mm256_and_si256(_mm256_srli_epi16(v.lo, 4), m), _mm256_and_si256(_mm256_srli_epi16(v.hi, 4), m)};
}
static inline vq vq_pair(vq v, int r) { /* bits 2r, 2r + 1 of every byte */
    __m256i m = _mm256_set1_epi8(3);
    return (vq){_mm256_and_si256(_mm256_srli_epi16(v.lo, 2 * r), m), _mm256_and_si256(_mm256_srli_epi16(v.hi, 2 * r), m)};
}
/* vpmaddubsw adds two u8 * s8 products into a saturating int16: exact while w <= 128 (|x| <= 127);
 * Q8_0's bytes (w + 128, up to 255) are split into w' = byte - 128 (signed) by the sign trick. */
static inline __m256i dot4_8(__m256i acc, __m256i w, __m256i x, int offset128) {
    __m256i p;
    if (offset128) {
        __m256i s = _mm256_xor_si256(w, _mm256_set1_epi8((char)0x80)); /* the signed weight */
        p = _mm256_maddubs_epi16(_mm256_abs_epi8(s), _mm256_sign_epi8(x, s));
    } else {
        p = _mm256_maddubs_epi16(w, x);
    }
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
#if defined(STRATA_AVX_VNNI)
/* AVX-VNNI (Intel from Alder Lake on, without AVX-512): vpdpbusd on 256-bit registers sums four
 * u8 * s8 products into each int32 at once, exact for every byte (Q8_0's 255 too), as on avx512:
 * no int16 partial sums, no sign trick. The same integer sums, so the same bits. */
static inline vi vi_dot4(vi acc, vq w, const int8_t *x) {
    int32_t x4;
    memcpy(&x4, x, 4);
    __m256i xv = _mm256_set1_epi32(x4);
    return (vi){_mm256_dpbusd_avx_epi32(acc.lo, w.lo, xv), _mm256_dpbusd_avx_epi32(acc.hi, w.hi, xv)};
}
#else
static inline vi vi_dot4(vi acc, vq w, const int8_t *x) {
    int32_t x4;
    memcpy(&x4, x, 4);
    __m256i xv = _mm256_set1_epi32(x4);
    return (vi){dot4_8(acc.lo, w.lo, xv, 0), dot4_8(acc.hi, w.hi, xv, 0)};
}
/* Partial sums kept in int16 (vpmaddubsw's own lanes) over several steps, widened to int32 once
 * (vpmaddwd): exact while no int16 sum can pass 32,767 in magnitude. A step adds at most
 * 2 * wmax * 127: 3,810 for nibbles (0-15), 7,874 for Q5_K and Q5_0 (0-31), 16,002 for Q6_K (0-63), so
 * q8_group_rows keeps at most 8, 4 and 2 steps in one int16 sum respectively; 27,178 for the
 * expanded IQ2 bytes (21-107; limbs down to -128: 27,392), one step (q8_int16_steps). */
typedef struct { __m256i lo, hi; } vh;
static inline vh vh_zero(void) { return (vh){_mm256_setzero_si256(), _mm256_setzero_si256()}; }
static inline vh vh_dot4(vh acc, vq w, const int8_t *x) {
    int32_t x4;
    memcpy(&x4, x, 4);
    __m256i xv = _mm256_set1_epi32(x4);
    vh r = {_mm256_add_epi16(acc.lo, _mm256_maddubs_epi16(w.lo, xv)),
            _mm256_add_epi16(acc.hi, _mm256_maddubs_epi16(w.hi, xv))};
    /* the sum stays a chain in registers: reassociated into a tree, the products wait on the stack */
    __asm__("" : "+x"(r.lo), "+x"(r.hi));
    return r;
}
static inline vh vh_add(vh a, vh b) { return (vh){_mm256_add_epi16(a.lo, b.lo), _mm256_add_epi16(a.hi, b.hi)}; }
static inline vi vi_add_vh(vi acc, vh h) {
    __m256i one = _mm256_set1_epi16(1);
    return (vi){_mm256_add_epi32(acc.lo, _mm256_madd_epi16(h.lo, one)),
                _mm256_add_epi32(acc.hi, _mm256_madd_epi16(h.hi, one))};
}
static inline vi vi_dot4_signed(vi acc, vq w, const int8_t *x) {
    int32_t x4;
    memcpy(&x4, x, 4);
    __m256i xv = _mm256_set1_epi32(x4);
    return (vi){dot4_8(acc.lo, w.lo, xv, 1), dot4_8(acc.hi, w.hi, xv, 1)};
}
static inline int q8_int16_steps(int t) { return t == WT_IQ2_BYTES ? 1 : 2; } /* steps an int16 sum of a byte type takes */
#define Q8_INT16_SUMS 1 /* vh: int16 partial sums (vpmaddubsw), widened into the block's sums after */
#define Q8_SIGNED_DOT 1
#define Q8_NIBBLE_CHAINS 1 /* an int16 add's latency is a cycle: one chain of 8 steps, fewer registers */
#endif
/* The correctly rounded float of S = s2 65536 + low (exact limb sums, |low| < 2^27): S in double
 * (exact), rounded once; limb_f8_any first tries the int32 sum where every lane's |s2| < LIMB_FAST.
 * limb.c's limb_value3 and grids.c's AVX2 steps. */
static inline __m256 limb_f8(__m256i s2, __m256i low) {
    __m256d big = _mm256_set1_pd(65536.0);
    __m256d a = _mm256_fmadd_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(s2)), big, _mm256_cvtepi32_pd(_mm256_castsi256_si128(low)));
    __m256d b = _mm256_fmadd_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(s2, 1)), big,
                                _mm256_cvtepi32_pd(_mm256_extracti128_si256(low, 1)));
    return _mm256_set_m128(_mm256_cvtpd_ps(b), _mm256_cvtpd_ps(a));
}
static inline __m256 limb_f8_any(__m256i s2, __m256i low) {
    __m256i out = _mm256_add_epi32(s2, _mm256_set1_epi32(LIMB_FAST));
    if (_mm256_testz_si256(out, _mm256_set1_epi32(-2 * LIMB_FAST))) /* |S_2| < 2^14 in every lane */
        return _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(s2, 16), low));
    return limb_f8(s2, low);
}
static inline __m256i bits_8(__m256i nib, __m256i hb, int shift, int mask) {
    __m256i h = shift >= 0 ? _mm256_slli_epi16(hb, shift) : _mm256_srli_epi16(hb, -shift);
    return _mm256_or_si256(nib, _mm256_and_si256(h, _mm256_set1_epi8((char)mask)));
}
static inline vq vq_bits(vq nib, vq hb, int shift, int mask) {
    return (vq){bits_8(nib.lo, hb.lo, shift, mask), bits_8(nib.hi, hb.hi, shift, mask)};
}
static inline vi vi_sub_n(vi a, int32_t n) {
    __m256i v = _mm256_set1_epi32(n);
    return (vi){_mm256_sub_epi32(a.lo, v), _mm256_sub_epi32(a.hi, v)};
}
static inline vi vi_set1(int32_t n) { return (vi){_mm256_set1_epi32(n), _mm256_set1_epi32(n)}; }
static inline vq vq_lut(vq nib, const uint8_t table[16]) { /* table[nib] per byte (nib < 16) */
    __m256i t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)table));
    return (vq){_mm256_shuffle_epi8(t, nib.lo), _mm256_shuffle_epi8(t, nib.hi)};
}
static inline vi vi_add(vi a, vi b) { return (vi){_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)}; }
static inline vf vf_from_vi(vi a) { return (vf){_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
static inline int32_t hsum8_epi32(__m256i a) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1))));
}
/* 32 int32 values in [-128, 127] (r[0] the first 8) stored as 32 int8s, in order */
static inline void i8_store32(int8_t *q, const __m256i r[4]) {
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)); /* undo the lane interleave */
    _mm256_storeu_si256((__m256i *)q, b);
}
static inline void q8_round_block(const float *x, float id, int8_t *q, int32_t s[2]) {
    __m256i r[4];
    __m256 sign = _mm256_set1_ps(-0.0f), lim = _mm256_set1_ps(127.0f);
    for (int j = 0; j < 4; j++) {
        __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), _mm256_set1_ps(id)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 ok = _mm256_cmp_ps(_mm256_andnot_ps(sign, v), lim, _CMP_LE_OQ);
        r[j] = _mm256_and_si256(_mm256_cvttps_epi32(v), _mm256_castps_si256(ok)); /* v integral: exact */
    }
    s[0] = hsum8_epi32(_mm256_add_epi32(r[0], r[1]));
    s[1] = hsum8_epi32(_mm256_add_epi32(r[2], r[3]));
    i8_store32(q, r);
}
#define Q8_MR 4
#define Q8_MR_WIDE 3 /* Q5_K, Q5_0 and the unpacked bytes: their steps hold more registers */
#else /* NEON and portable C: plain integer loops (exact, like every target) */
typedef struct { uint8_t b[64]; } vq;
typedef struct { int32_t l[16]; } vi;
static inline vi vi_zero(void) { vi r; memset(&r, 0, sizeof r); return r; }
static inline vq vq_load(const uint8_t *p) { vq r; memcpy(r.b, p, 64); return r; }
static inline void vq_store(uint8_t *p, vq v) { memcpy(p, v.b, 64); }
static inline vq vq_lo(vq v) { for (int i = 0; i < 64; i++) v.b[i] &= 15; return v; }
static inline vq vq_pair(vq v, int r) { for (int i = 0; i < 64; i++) v.b[i] = (uint8_t)((v.b[i] >> (2 * r)) & 3); return v; }
static inline vq vq_hi(vq v) { for (int i = 0; i < 64; i++) v.b[i] >>= 4; return v; }
static inline vi vi_dot4(vi acc, vq w, const int8_t *x) {
    for (int o = 0; o < 16; o++)
        for (int c = 0; c < 4; c++) acc.l[o] += (int32_t)w.b[4 * o + c] * (int32_t)x[c];
    return acc;
}
static inline vq vq_bits(vq nib, vq hb, int shift, int mask) {
    for (int i = 0; i < 64; i++) nib.b[i] |= (uint8_t)((shift >= 0 ? hb.b[i] << shift : hb.b[i] >> -shift) & mask);
    return nib;
}
static inline vi vi_sub_n(vi a, int32_t n) { for (int o = 0; o < 16; o++) a.l[o] -= n; return a; }
static inline vi vi_set1(int32_t n) { vi r; for (int o = 0; o < 16; o++) r.l[o] = n; return r; }
static inline vq vq_lut(vq nib, const uint8_t table[16]) { for (int i = 0; i < 64; i++) nib.b[i] = table[nib.b[i]]; return nib; }
static inline vi vi_add(vi a, vi b) { for (int o = 0; o < 16; o++) a.l[o] += b.l[o]; return a; }
static inline vf vf_from_vi(vi a) {
    float f[16];
    for (int o = 0; o < 16; o++) f[o] = (float)a.l[o];
    return vf_load(f);
}
static inline void q8_round_block(const float *x, float id, int8_t *q, int32_t s[2]) {
    s[0] = s[1] = 0;
    for (int k = 0; k < 32; k++) {
        float v = x[k] * id, r = (v + 12582912.0f) - 12582912.0f; /* 1.5 * 2^23: to nearest even */
        int n = r >= -127.0f && r <= 127.0f ? (int)r : 0;
        q[k] = (int8_t)n;
        s[k >> 4] += n;
    }
}
#define Q8_MR 4
#endif

#ifndef Q8_MR_WIDE
#define Q8_MR_WIDE Q8_MR
#endif
/* Rows a tile of type t takes: a speed choice only (each row's sums are its own), sized to the
 * registers its steps leave. */
static inline int q8_tile_rows(int t) {
    return q8_five(t) || q8_bytes(t) ? Q8_MR_WIDE : Q8_MR;
}
#ifndef Q8_NIBBLE_CHAINS /* chains a row's 4-bit block is summed in (VNNI: two, to overlap its latency) */
#define Q8_NIBBLE_CHAINS 2
#endif
#ifndef Q8_SIGNED_DOT /* targets whose dot step takes the unsigned byte as it is: offset taken back */
#define vi_dot4_signed vi_dot4
#endif
#ifndef Q8_INT16_SUMS /* targets whose dot step sums into int32 at once: no int16 partial sums */
typedef vi vh;
#define vh_zero vi_zero
#define vh_dot4 vi_dot4
#define vh_add vi_add
#define vi_add_vh vi_add
#endif

/* Q5_K, Q5_0, Q6_K: quad row R's high bits (from its plane) put above its nibbles (see the top) */
static inline vq q8_high(int t, vq nib, vq plane, int R) {
    int r = R & 3;
    return t == WT_Q6_K ? vq_bits(nib, plane, 4 - 2 * r, 0x30) : vq_bits(nib, plane, 4 - r - 4 * (R >> 2), 0x10);
}

/* Quad row R of a packed block: elements 4R .. 4R+3 of the group's 16 outputs, as the unsigned
 * bytes the dot step multiplies (see the top). The one place that knows where each type keeps
 * them: 4-bit types in the low (R < 4) or high nibbles, Q5_K, Q5_0 and Q6_K in nibbles plus a
 * plane of high bits, the byte types (and the unpacked Q5_K/Q6_K) a byte a weight. */
static inline vq q8_row(int t, const uint8_t *qs, int R) {
    if (q8_two(t)) return vq_pair(vq_load(qs + 64 * (R >> 2)), R & 3);
    if (!q8_nibbles(t) && !q8_five(t) && t != WT_Q6_K) return vq_load(qs + 64 * R);
    vq v = vq_load(qs + 64 * (R & 3)), nib = R >> 2 ? vq_hi(v) : vq_lo(v);
    if (q8_nibbles(t)) return nib;
    return q8_high(t, nib, vq_load(qs + 256 + (t == WT_Q6_K ? 64 * (R >> 2) : 0)), R);
}

/* A group's blocks, and the next group, lie one after another: a kernel walking them asks for the
 * bytes Q8_AHEAD ahead of each block it starts (a prefetch past the weight's end is harmless: it
 * never faults). The hardware prefetcher alone left one-row calls streaming weights from memory
 * at under half the memory's bandwidth. A hint only: it changes no value. */
#define Q8_AHEAD 4096
static inline void q8_prefetch_from(int t, const uint8_t *blk, int64_t ahead) { /* block blk's bytes, `ahead` on */
    for (int64_t l = 0; l < q8_block_bytes(t); l += 64) __builtin_prefetch(blk + ahead + l);
}
static inline void q8_prefetch_ahead(int t, const uint8_t *blk) { q8_prefetch_from(t, blk, Q8_AHEAD); }

/* Half h's scale of a packed block, per output: the stored fp32 scale (WT_HALF_SCALES: its fp16
 * value, vf_from_f16's exact conversion), or for K-quants d * sc, the
 * load's own fp32 product (as dequant_kblock and gguf-py form it). Shared by the q8 and limb kernels. */
static inline vf q8_scale(int t, const uint8_t *blk, const float *head, int h) {
    if (q8_two(t)) return vf_mul(vf_load(head), vf_from_u4(blk + 16 * h, 0));
    if (q8_kquant(t)) return vf_mul(vf_load(head), vf_from_i8((const int8_t *)blk + 16 * h));
    return wtype_half(t) ? vf_from_f16(blk) : vf_load((const float *)blk); /* fp16: converted exactly */
}

/* A K-quant block's 16 mins dmin * m (the super-block's dmin at head + 16, m the int8 at byte 16). */
static inline vf q8_kquant_min(const uint8_t *blk, const float *head) {
    return vf_mul(vf_load(head + 16), vf_from_i8((const int8_t *)blk + 16));
}

/* A block's min term (types with a min: Q4_1, Q5_1, Q4_K, Q5_K; Q2_K: one a half) added to each of
 * `rows` accumulators; `dsum` is the first row's s * (sum of its block's activations) (Q2_K: the
 * pair of its halves' sums), the next rows `stride` apart.
 * K-quants: fma(-(dmin * m), dsum, acc) as fnma(dmin * m, dsum, acc) = -(dmin * m * dsum) + acc
 * rounded once, the same exact value (one instruction with dsum's broadcast from memory, where
 * fma(dmin * m, -dsum, acc) took a load, a sign flip and a broadcast a row). Shared by the q8 and
 * limb kernels, whose per-block sequences end alike. */
static inline __attribute__((always_inline)) void q8_add_min(int t, const uint8_t *blk, const float *head,
                                                            const float *dsum, int64_t stride, int rows, vf *acc) {
    if (!q8_has_min(t)) return;
    if (q8_two(t)) { /* each half's min, in order: fma(dmin * m_h, -dsum_h, acc) */
        for (int h = 0; h < 2; h++) {
            vf mn = vf_mul(vf_load(head + 16), vf_from_u4(blk + 16 * h, 1));
            for (int i = 0; i < rows; i++) acc[i] = vf_fnma(mn, vf_set1(dsum[i * stride + h]), acc[i]);
        }
    } else if (q8_kquant(t)) {
        vf mn = q8_kquant_min(blk, head);
        for (int i = 0; i < rows; i++) acc[i] = vf_fnma(mn, vf_set1(dsum[i * stride]), acc[i]);
    } else {
        vf mn = wtype_half(t) ? vf_from_f16(blk + 32) : vf_load((const float *)blk + 16);
        for (int i = 0; i < rows; i++) acc[i] = vf_fma(mn, vf_set1(dsum[i * stride]), acc[i]);
    }
}

/* A tile's results: rows m0 .. m0+rows of group g's 16 outputs (outs of them in the last group)
 * (+ bias) into y[M, N], a whole group stored as one vector (a copy loop became a libc call).
 * Shared by the q8 and limb kernels. */
static inline void q8_store_rows(const vf *acc, int rows, int64_t m0, int64_t g, int outs, const float *bias, float *y,
                                 int64_t N) {
    for (int i = 0; i < rows; i++) {
        float *yr = y + (m0 + i) * N + g * Q8_GROUP;
        vf v = bias && outs == Q8_GROUP ? vf_add(acc[i], vf_load(bias + g * Q8_GROUP)) : acc[i];
        if (outs == Q8_GROUP) {
            vf_store(yr, v);
        } else {
            float out[16];
            vf_store(out, v);
            for (int o = 0; o < outs; o++) yr[o] = bias ? out[o] + bias[g * Q8_GROUP + o] : out[o];
        }
    }
}

/* One group of a Q5_0, Q5_K or Q6_K weight unpacked to one byte per weight (q8_unpacked; Q4_K, for
 * the limbs, as Q5_K):
 * the same header and scales, and byte 4o+c of row r = w(o, 4r+c) + offset. Many rows then share
 * the unpacking. */
STRATA_HIDDEN void unpack_group(int t, const uint8_t *grp, int64_t nb, uint8_t *dst); /* q8.c */

/* One group of a q8_expanded type as the Q8_0 group of the same values: each block's scale and
 * byte 4o+c of row r = q + 128 (a codebook type's: codebook[index] + 128, one byte shuffle a row;
 * a grid type's, packed as its 16 rows as stored: grids.c's grid_group); a K-grid type's as
 * q8_expanded_type's group: each super-block's d, each block's int8 scales a half, q + offset
 * (grids.c's kgrid_block: Q3_K and IQ1_M give the bytes their Q6_K rewrite unpacks to). Every call expands its
 * groups so (but the codebook types in limb.c's x86 tiles, looked up in registers: limb_cb_group): the integer steps, and so the bits, are then Q8_0's, with 5 bits a weight held
 * instead of 9 (the grid types: the file's own 1.56 to 3.44). */
STRATA_HIDDEN void expand_group(int t, const uint8_t *grp, int64_t nb, uint8_t *dst); /* q8.c */

/* Rows 0 .. M of the default (three-limb) arithmetic against group grp of a K-grid type, each
 * super-block decoded once for them all and its steps run at once, not after expand_group's whole
 * group: y[16 i + o] = row i's accumulator of output o (before any bias), from the rows' limbs xq
 * [M][nb][3][32], their sums' starts [M][nb][3][2] (offset 32) and block scales xs [M][nb], by the
 * same integer sums and float sequence as limb.c's steps on the expanded bytes (the same bits).
 * Returns 0 where the target has no such step, or M is past its rows (then nothing is written):
 * AVX2's Q3_K, up to 8 rows, and IQ1_M, 1 row; AVX-VNNI's Q3_K, up to 8 rows, IQ1_M, IQ2_XS and IQ2_S,
 * up to 4; AVX-512's Q3_K, up to 3 rows, IQ2_XS and IQ2_S, up to 2, and IQ1_M, 1 row. */
#define KGRID_ROWS 8 /* rows kgrid_limb_rows takes (more: limb.c's steps on the expanded group) */
STRATA_HIDDEN int kgrid_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start,
                                  const float *xs, float *y); /* grids.c */

#endif
