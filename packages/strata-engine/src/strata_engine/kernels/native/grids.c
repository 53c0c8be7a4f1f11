/* The grid types held as stored (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S: WP_GRID), each 32 of their values
 * decoded to the Q8_0 block the loader once rewrote them as (transcode.py): the scale of the 32
 * and their integers, value = scale * q exactly (gguf-py's values). Every arithmetic reads them
 * through grid_group: the fp32 matmul multiplies out the products, the integer kernels expand a
 * group of rows into Q8_0's packed bytes per call (q8.c's expand_group; on AVX-512 grid_expand
 * below decodes the group's 16 rows together, to the same bytes, and at one to four rows
 * grid_limb_rows decodes each block into the limb steps without storing it), so every arithmetic gives the
 * bits of those Q8_0 blocks, with the file's own 1.56 to 3.44 bits a weight held. */
#include "iq_grids.h"
#include "q8.h"

#define BYTES(v) (0x0101010101010101ull * (v)) /* v in every byte of a word */

/* Words of 8 (IQ3: 4) bytes, one value a byte, every step within its byte (no carry crosses
 * into the next): the grid codes spread a byte each, their values, the signs applied. */

/* The 8 two-bit codes of a grid entry, code k in byte k. */
static inline uint64_t spread2(uint32_t entry) {
    uint64_t x = entry & 0xFFFFu;
    x = (x | x << 24) & 0x000000FF000000FFull;
    x = (x | x << 12) & 0x000F000F000F000Full;
    return (x | x << 6) & BYTES(3);
}

/* The 4 three-bit codes of an IQ3 grid entry, code k in byte k. */
static inline uint64_t spread3(uint32_t entry) {
    uint64_t x = entry & 0xFFFu;
    x = (x | x << 10) & 0x003F003Full;
    return (x | x << 5) & 0x07070707ull;
}

/* 0xFF in byte i where bit i of s is set (s < 256), 0 elsewhere. */
static inline uint64_t sign_mask(uint32_t s) {
    uint64_t bit = (BYTES(s) & 0x8040201008040201ull) + BYTES(0x7F); /* top bit of byte i: bit i of s */
    return ((bit >> 7) & BYTES(1)) * 0xFF;
}

/* The bytes v (1..127 each) negated where m is 0xFF: 255 - v + 1, no carry. */
static inline uint64_t with_signs(uint64_t v, uint64_t m) { return (v ^ m) + (m & BYTES(1)); }

/* The 8 signs of an IQ2_XXS / IQ3_XXS set: 7 stored bits, the eighth their parity (gguf-py's
 * ksigns table). */
static inline uint32_t parity_signs(uint32_t s7) {
    uint32_t p = s7 ^ s7 >> 4;
    p ^= p >> 2, p ^= p >> 1;
    return s7 | (p & 1) << 7;
}

/* The 4 bytes of an IQ3 entry's values (4, 12, .., 52, 62; IQ3_S 1, 3, .., 15), the word's low half. */
static inline uint64_t iq3_values(int wtype, uint32_t entry) {
    uint64_t c = spread3(entry);
    if (wtype == WT_IQ3_S) return (uint32_t)(BYTES(1) + (c << 1));
    return (uint32_t)(BYTES(4) + (c << 3) + (((c + BYTES(1)) & BYTES(8)) >> 2)); /* code 7: 60 + 2 */
}

/* Each grid entry's values as bytes (IQ3: 4, in the low half) and each sign set as its byte mask
 * (IQ2_XXS / IQ3_XXS: 7 bits and their parity; IQ3_S: 8 bits), made from the codes above once,
 * when the library loads: a word of 8 values is then one load, its signs another. */
static uint64_t iq2xxs_bytes[256], iq1s_bytes[2048], signs7[128], signs8[256], iq2xs_bytes[512], iq2s_bytes[1024];
static uint32_t iq3xxs_bytes[256], iq3s_bytes[512];

__attribute__((constructor)) static void grid_bytes(void) {
    for (int i = 0; i < 256; i++) {
        uint64_t c = spread2(iq2xxs_grid[i]);
        iq2xxs_bytes[i] = BYTES(8) + (c << 4) + c + ((c >> 1) & BYTES(1)); /* 8, 25, 43 */
        iq3xxs_bytes[i] = (uint32_t)iq3_values(WT_IQ3_XXS, iq3xxs_grid[i]);
        signs8[i] = sign_mask((uint32_t)i);
    }
    for (int i = 0; i < 512; i++) iq3s_bytes[i] = (uint32_t)iq3_values(WT_IQ3_S, iq3s_grid[i]);
    for (int i = 0; i < 1024; i++) { /* IQ2_XS, IQ2_S: 8, 25, 43 as IQ2_XXS's */
        uint64_t c = spread2(iq2s_grid[i]), x = i < 512 ? spread2(iq2xs_grid[i]) : 0;
        iq2s_bytes[i] = BYTES(8) + (c << 4) + c + ((c >> 1) & BYTES(1));
        if (i < 512) iq2xs_bytes[i] = BYTES(8) + (x << 4) + x + ((x >> 1) & BYTES(1));
    }
    for (int i = 0; i < 2048; i++) iq1s_bytes[i] = spread2(iq1s_grid[i]) << 3; /* 8 code: 0, 8, 16 */
    for (int i = 0; i < 128; i++) signs7[i] = sign_mask(parity_signs((uint32_t)i));
}

/* See internal.h. */
float grid_group(int wtype, const uint8_t *row, int64_t g, int8_t q[32]) {
    const uint8_t *blk = row + (g >> 3) * block_bytes(wtype);
    int j = (int)(g & 7);
    float d = f16_at(blk), scale;
    uint32_t aux;
    uint64_t out[4];
    if (wtype == WT_IQ2_XXS) { /* per 32: 4 grid indices, then a u32 of 4 x 7 sign bits and the scale */
        const uint8_t *qs = blk + 2 + 8 * j;
        memcpy(&aux, qs + 4, 4);
        for (int k = 0; k < 4; k++) out[k] = with_signs(iq2xxs_bytes[qs[k]], signs7[(aux >> (7 * k)) & 127]);
        scale = d * (0.5f + (float)(aux >> 28)) * 0.25f;
    } else if (wtype == WT_IQ3_XXS) { /* qs[64]: 8 indices per 32; then a u32 per 32 as IQ2_XXS's */
        const uint8_t *qs = blk + 2 + 8 * j;
        memcpy(&aux, blk + 66 + 4 * j, 4);
        for (int k = 0; k < 4; k++) {
            uint64_t v = iq3xxs_bytes[qs[2 * k]] | (uint64_t)iq3xxs_bytes[qs[2 * k + 1]] << 32;
            out[k] = with_signs(v, signs7[(aux >> (7 * k)) & 127]);
        }
        scale = d * (0.5f + (float)(aux >> 28)) * 0.5f;
    } else if (wtype == WT_IQ3_S) { /* qs[64] low index bits, qh[8] ninth bits, signs[32], scales[4] nibbles */
        const uint8_t *qs = blk + 2 + 8 * j, *signs = blk + 74 + 4 * j;
        uint32_t qh = blk[66 + j];
        for (int k = 0; k < 4; k++) {
            uint32_t lo = qs[2 * k] | (qh >> (2 * k) & 1) << 8, hi = qs[2 * k + 1] | (qh >> (2 * k + 1) & 1) << 8;
            out[k] = with_signs(iq3s_bytes[lo] | (uint64_t)iq3s_bytes[hi] << 32, signs8[signs[k]]);
        }
        scale = d * (1.0f + 2.0f * (float)((blk[106 + j / 2] >> (4 * (j & 1))) & 15));
    } else { /* IQ1_S: qs[32] low index bits; per 32 a u16: 4 x 3 high bits, the scale, the delta's sign */
        uint16_t qh;
        memcpy(&qh, blk + 34 + 2 * j, 2);
        /* value = dl * (grid +- 1/8): eighths of dl, q = 8 grid +- 1 = 8 code - 8 +- 1; q + 128 in
         * each byte (119 to 137), then its top bit flipped */
        uint64_t offset = qh & 0x8000 ? BYTES(119) : BYTES(121);
        for (int k = 0; k < 4; k++)
            out[k] = (iq1s_bytes[blk[2 + 4 * j + k] | ((qh >> (3 * k)) & 7) << 8] + offset) ^ BYTES(0x80);
        scale = d * (2.0f * (float)((qh >> 12) & 7) + 1.0f) * 0.125f;
    }
    memcpy(q, out, 32);
    /* a zero scale's products are zeros signed by q: the rewrite kept them as q = +-1 (no q is 0) */
    if (scale == 0.0f)
        for (int i = 0; i < 32; i++) q[i] = (int8_t)(q[i] < 0 ? -1 : 1);
    return scale;
}

/* The 8 integers of IQ2_XS / IQ2_S grid entry `entry` (codes 0, 1, 2: 8, 25, 43) with `sign`'s bits. */
static inline void iq2_eight(uint32_t entry, uint32_t sign, int8_t *q) {
    for (int i = 0; i < 8; i++) {
        int c = (int)(entry >> (2 * i)) & 3, g = 8 + 17 * c + (c >> 1);
        q[i] = (int8_t)((sign >> i) & 1 ? -g : g);
    }
}

/* See internal.h. Q3_K (hmask[32], qs[64], scales[12], d f16): q = 2-bit field - 4 unless its hmask
 * bit, sc = its 6-bit scale - 32; IQ1_M (qs[32], qh[16], 4 u16 of 3-bit scales with d's nibbles
 * on top): eighths of d, q = 8 grid +- 1, sc = 2 s + 1; IQ2_XS (d f16, u16[32]: 9-bit index, 7
 * sign bits and their parity; scales[8]) and IQ2_S (d f16, qs[32] index low bytes, signs[32],
 * qh[8] index high bits, scales[8]): eighths of d, q = +-grid, sc = 2 s + 1. */
static inline float kgrid_d(int wtype, const uint8_t *blk) { /* a super-block's d (see kgrid_block) */
    if (wtype == WT_Q3_K) return f16_at(blk + 108);
    if (wtype != WT_IQ1_M) return f16_at(blk) * 0.125f;
    uint16_t w[4];
    memcpy(w, blk + 48, 8);
    uint16_t bits = (uint16_t)((w[0] >> 12) | ((w[1] >> 8) & 0xF0) | ((w[2] >> 4) & 0xF00) | (w[3] & 0xF000));
    uint8_t half[2] = {(uint8_t)bits, (uint8_t)(bits >> 8)};
    return f16_at(half) * 0.125f;
}

static inline void kgrid_scales(int wtype, const uint8_t *blk, int j, int8_t sc[2]) { /* block j's halves' */
    for (int h = 0; h < 2; h++) {
        int i = 2 * j + h; /* the super-block's 16 */
        if (wtype == WT_Q3_K)
            sc[h] = (int8_t)((((blk[96 + (i & 7)] >> (4 * (i >> 3))) & 15) | ((blk[104 + (i & 3)] >> (2 * (i >> 2))) & 3) << 4) - 32);
        else if (wtype == WT_IQ1_M)
            sc[h] = (int8_t)(2 * (((blk[48 + 2 * (i >> 2)] | blk[49 + 2 * (i >> 2)] << 8) >> (3 * (i & 3))) & 7) + 1);
        else
            sc[h] = (int8_t)(2 * ((blk[(wtype == WT_IQ2_XS ? 66 : 74) + j] >> (4 * h)) & 15) + 1);
    }
}

void kgrid_block(int wtype, const uint8_t *row, int64_t b, float *d, int8_t sc[2], int8_t q[32]) {
    const uint8_t *blk = row + (b >> 3) * block_bytes(wtype);
    int j = (int)(b & 7);
    *d = kgrid_d(wtype, blk);
    kgrid_scales(wtype, blk, j, sc);
    if (wtype == WT_Q3_K) {
        for (int k = 0; k < 32; k++) /* value 32 j + k: field j & 3 of qs[32 (j >> 2) + k], bit j of hmask[k] */
            q[k] = (int8_t)(((blk[32 + 32 * (j >> 2) + k] >> (2 * (j & 3))) & 3) - ((blk[k] >> j) & 1 ? 0 : 4));
    } else if (wtype == WT_IQ1_M) {
        for (int k = 0; k < 4; k++) { /* group of 8 g: index qs[g] | 3 bits of qh's nibble, its bit 3 the delta's sign */
            int g = 4 * j + k, nib = (blk[32 + (g >> 1)] >> (4 * (g & 1))) & 15;
            uint32_t entry = iq1s_grid[blk[g] | (nib & 7) << 8];
            for (int i = 0; i < 8; i++) q[8 * k + i] = (int8_t)(8 * ((int)((entry >> (2 * i)) & 3) - 1) + (nib & 8 ? -1 : 1));
        }
    } else { /* IQ2_XS, IQ2_S */
        for (int k = 0; k < 4; k++) {
            int g = 4 * j + k;
            if (wtype == WT_IQ2_XS) {
                uint32_t v = (uint32_t)blk[2 + 2 * g] | (uint32_t)blk[3 + 2 * g] << 8;
                iq2_eight(iq2xs_grid[v & 511], parity_signs(v >> 9), q + 8 * k);
            } else {
                iq2_eight(iq2s_grid[blk[2 + g] | ((blk[66 + g / 4] >> (2 * (g % 4))) & 3) << 8], blk[34 + g], q + 8 * k);
            }
        }
    }
    for (int h = 0; h < 2; h++) /* a zero scale's products are zeros signed by q: kept as q = +-1 */
        if (*d * (float)sc[h] == 0.0f)
            for (int i = 16 * h; i < 16 * h + 16; i++) q[i] = (int8_t)(q[i] < 0 ? -1 : 1);
}

/* A prefetch hint that stays: GCC 12 removes a __builtin_prefetch (or _mm_prefetch) it finds without
 * effect, every one of a helper it does not inline into a large caller (grid_fused_rows had none left,
 * kgrid_fused_rows none once the IQ2 types' steps made it larger). On x86 the hint is an asm
 * statement, which stays; the helpers below are always inlined. */
#if defined(__x86_64__) || defined(__i386__)
static inline __attribute__((always_inline)) void grid_hint(const uint8_t *p) {
    __asm__ volatile("prefetcht0 %0" ::"m"(*(const char *)p));
}
#else
static inline __attribute__((always_inline)) void grid_hint(const uint8_t *p) { __builtin_prefetch(p); }
#endif

/* The 16 rows' super-blocks KGRID_AHEAD after the one at blk asked for: each row is a stream of
 * its own, which the hardware prefetcher left to miss on its first byte (a hint: no value changes). */
#define KGRID_AHEAD 2
static inline void kgrid_prefetch(int t, const uint8_t *blk, int64_t rb) {
    const uint8_t *next = blk + KGRID_AHEAD * block_bytes(t);
    for (int o = 0; o < 16; o++) {
        grid_hint(next + o * rb);
        grid_hint(next + o * rb + 64);
        grid_hint(next + o * rb + block_bytes(t) - 1);
    }
}

/* The next group's bytes (its 16 rows follow this group's), super-block sb's share of them: over a
 * group's super-blocks one stream in order, so that the next group's first super-blocks, which
 * kgrid_prefetch cannot reach, arrive before they are read (a hint: no value changes). Zen 5, 1
 * thread, 1 row, weights from memory: the grid types' steps 1.5-1.8 times as fast with it, as fast as
 * from cache. */
static inline void next_group_prefetch(int t, const uint8_t *grp, int64_t rb, int64_t sb) {
    const uint8_t *ahead = grp + 16 * rb + (sb >> 3) * 16 * block_bytes(t);
    for (int64_t at = 0; at < 16 * block_bytes(t); at += 64) grid_hint(ahead + at);
}

#if defined(STRATA_TARGET_AVX512) || defined(STRATA_TARGET_AVX2)
/* ---- AVX-512 and AVX2, the K-grid types: each super-block's bytes of a group's rows read once,
 * as 32-byte runs of 8 rows transposed (kgrid_raw): vector k of a run holds dword k of each row,
 * what a gather at that dword would give, at a few shuffles a vector instead of a gather's
 * per-lane loads. */

/* Where a type's runs start in its super-block (each within it: bytes at + 0 .. at + 31), and how
 * many: Q3_K hmask, qs, qs, the scales (dwords 5-7 of the run at 76); IQ1_M qs, then qh (dwords
 * 2-5) and the scale words (6-7); IQ2_XS qs, qs, the scales (6-7); IQ2_S qs, signs, qh (4-5) and
 * the scales (6-7). */
static inline int kgrid_run_at(int t, int c) {
    static const int8_t at[4][4] = {{0, 32, 64, 76}, {0, 24, 0, 0}, {2, 34, 42, 0}, {2, 34, 50, 0}};
    return at[t == WT_Q3_K ? 0 : t == WT_IQ1_M ? 1 : t == WT_IQ2_XS ? 2 : 3][c];
}
static inline int kgrid_runs(int t) { return t == WT_Q3_K ? 4 : t == WT_IQ1_M ? 2 : 3; }

/* The 8 dwords at p of each of 8 rows rb apart, transposed: t[k] lane o = dword k of row o. */
static inline void kgrid_raw(const uint8_t *p, int64_t rb, __m256i t[8]) {
    __m256i r[8], u[8];
    for (int o = 0; o < 8; o++) r[o] = _mm256_loadu_si256((const __m256i *)(p + o * rb));
    for (int o = 0; o < 8; o += 2) /* rows o, o + 1 interleaved: dwords 0 1 (4 5), 2 3 (6 7) */
        u[o] = _mm256_unpacklo_epi32(r[o], r[o + 1]), u[o + 1] = _mm256_unpackhi_epi32(r[o], r[o + 1]);
    for (int q = 0; q < 8; q += 4) /* rows q .. q + 3: dword k (k + 4 in the high lane) of each */
        for (int h = 0; h < 2; h++)
            r[q + 2 * h] = _mm256_unpacklo_epi64(u[q + h], u[q + 2 + h]), r[q + 2 * h + 1] = _mm256_unpackhi_epi64(u[q + h], u[q + 2 + h]);
    for (int k = 0; k < 4; k++) /* rows 0-3 and 4-7 of dword k, of dword k + 4 */
        t[k] = _mm256_permute2x128_si256(r[k], r[4 + k], 0x20), t[k + 4] = _mm256_permute2x128_si256(r[k], r[4 + k], 0x31);
}

#endif

#if defined(STRATA_TARGET_AVX512)
/* ---- AVX-512: a group of 16 rows decoded together, a block of 32 at a time ---------------------
 * One vector a quad r of the Q8_0 group (byte 4o + c: value 4r + c of row o, plus 128): the rows'
 * bytes by gathers, the grid entries' value bytes by gathers from the tables above, the signs
 * spread to a byte mask by a shuffle and a bit test, the scales in one vector by the scalar
 * sequence's own operations. The same bytes and scales as grid_group's, without its per-row work. */

/* The mask of bytes whose value is negated in quad r: bit 4 (r & 1) + c of byte r / 2 of each
 * 32-bit lane of s (byte k of lane o: the 8 signs of values 8k .. 8k + 7 of row o). */
static inline __mmask64 quad_signs(__m512i s, int r) {
    __m512i at = _mm512_add_epi8(_mm512_set1_epi32(0x01010101 * (r >> 1)), _mm512_set4_epi32(0x0C0C0C0C, 0x08080808, 0x04040404, 0));
    return _mm512_test_epi8_mask(_mm512_shuffle_epi8(s, at), _mm512_set1_epi32(r & 1 ? (int)0x80402010 : 0x08040201));
}

/* Quad r's Q8_0 bytes: v (values 1..127) negated where m, plus 128; a zero scale's rows (z) keep
 * only the signs, as +-1 (grid_group). */
static inline __m512i quad_bytes(__m512i v, __mmask64 m, __mmask64 z) {
    __m512i c128 = _mm512_set1_epi8((char)0x80);
    __m512i q = _mm512_mask_sub_epi8(_mm512_add_epi8(v, c128), m, c128, v);
    if (z) q = _mm512_mask_blend_epi8(z, q, _mm512_mask_blend_epi8(m, _mm512_set1_epi8((char)129), _mm512_set1_epi8(127)));
    return q;
}

/* The byte mask of the rows whose scale is zero. */
static inline __mmask64 zero_rows(__m512 scale) {
    __mmask16 z = _mm512_cmp_ps_mask(scale, _mm512_setzero_ps(), _CMP_EQ_OQ);
    return z ? _mm512_movepi8_mask(_mm512_maskz_set1_epi32(z, -1)) : 0;
}

static inline __m512i evens(void) { return _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30); }

/* The 8 bytes at p of each of 16 rows (at: rows 0-7's offsets; rows 8-15 half a group further):
 * lane o of lo their bytes 0-3, of hi their bytes 4-7. */
static inline void rows8(const uint8_t *p, __m512i at, int64_t half, __m512i *lo, __m512i *hi) {
    __m512i a = _mm512_i64gather_epi64(at, (const void *)p, 1);
    __m512i b = _mm512_i64gather_epi64(at, (const void *)(p + half), 1);
    *lo = _mm512_permutex2var_epi32(a, evens(), b);
    *hi = _mm512_permutex2var_epi32(a, _mm512_add_epi32(evens(), _mm512_set1_epi32(1)), b);
}

/* Byte k of each lane = the 7 bits (x >> 7k) & 127 and their parity as bit 7 (parity_signs). */
static inline __m512i signs7_bytes(__m512i x) {
    __m512i s = _mm512_ternarylogic_epi32(_mm512_and_si512(x, _mm512_set1_epi32(0x7F)), _mm512_slli_epi32(x, 1),
                                          _mm512_set1_epi32(0x7F00), 0xF8); /* a | (b & c) */
    s = _mm512_ternarylogic_epi32(s, _mm512_slli_epi32(x, 2), _mm512_set1_epi32(0x7F0000), 0xF8);
    s = _mm512_ternarylogic_epi32(s, _mm512_slli_epi32(x, 3), _mm512_set1_epi32(0x7F000000), 0xF8);
    __m512i odd = _mm512_set4_epi32(0x00808000, (int)0x80000080, (int)0x80000080, 0x00808000); /* byte n: 0x80 where n's parity is odd */
    __m512i nib = _mm512_set1_epi8(15);
    __m512i p = _mm512_xor_si512(_mm512_shuffle_epi8(odd, _mm512_and_si512(s, nib)),
                                 _mm512_shuffle_epi8(odd, _mm512_and_si512(_mm512_srli_epi16(s, 4), nib)));
    return _mm512_or_si512(s, p);
}

/* Block j of a grid type's 16 rows decoded (blk: row 0's super-block, the rows rb apart; dv: their
 * fp16 d as fp32): the scales returned, q[r] quad r's Q8_0 bytes, what grid_group gives row by row. */

/* IQ2_XXS: per 32 of a row 4 grid indices and a u32 of 4 x 7 sign bits and the 4-bit scale. */
static inline __attribute__((always_inline)) __m512 iq2xxs16(const uint8_t *blk, int64_t rb, int j, __m512 dv, __m512i q[8]) {
    __m512i at = _mm512_setr_epi64(0, rb, 2 * rb, 3 * rb, 4 * rb, 5 * rb, 6 * rb, 7 * rb), even = evens();
    __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512i idx, aux;
    rows8(blk + 2 + 8 * j, at, 8 * rb, &idx, &aux);
    __m512 sub = _mm512_cvtepi32_ps(_mm512_srli_epi32(aux, 28));
    __m512 scale = _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_add_ps(_mm512_set1_ps(0.5f), sub)), _mm512_set1_ps(0.25f));
    __mmask64 z = zero_rows(scale);
    __m512i s8 = signs7_bytes(aux);
    for (int k = 0; k < 4; k++) {
        __m512i i = _mm512_and_si512(_mm512_srli_epi32(idx, 8 * k), _mm512_set1_epi32(255));
        __m512i a = _mm512_i32gather_epi64(_mm512_castsi512_si256(i), (const void *)iq2xxs_bytes, 8);
        __m512i c = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(i, 1), (const void *)iq2xxs_bytes, 8);
        q[2 * k] = quad_bytes(_mm512_permutex2var_epi32(a, even, c), quad_signs(s8, 2 * k), z);
        q[2 * k + 1] = quad_bytes(_mm512_permutex2var_epi32(a, odd, c), quad_signs(s8, 2 * k + 1), z);
    }
    return scale;
}

static inline __m512i rows16(void) {
    return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}

/* IQ3_S: per 32 of a row 8 low index bytes, a byte of ninth bits, 4 sign bytes, a 4-bit scale. */
static inline __attribute__((always_inline)) __m512 iq3s16(const uint8_t *blk, int64_t rb, int j, __m512 dv, __m512i q[8]) {
    __m512i at = _mm512_setr_epi64(0, rb, 2 * rb, 3 * rb, 4 * rb, 5 * rb, 6 * rb, 7 * rb);
    __m512i at16 = _mm512_mullo_epi32(rows16(), _mm512_set1_epi32((int)rb));
    __m512i idx[2];
    rows8(blk + 2 + 8 * j, at, 8 * rb, &idx[0], &idx[1]);
    __m512i qh = _mm512_i32gather_epi32(at16, (const void *)(blk + 66 + j), 1);
    __m512i signs = _mm512_i32gather_epi32(at16, (const void *)(blk + 74 + 4 * j), 1);
    /* the scale's byte as the top of the 4 ending there (the 4 from it would pass the block's end) */
    __m512i sc = _mm512_i32gather_epi32(at16, (const void *)(blk + 103 + j / 2), 1);
    sc = _mm512_and_si512(_mm512_srli_epi32(sc, 24 + 4 * (j & 1)), _mm512_set1_epi32(15));
    __m512 part = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_cvtepi32_ps(sc)));
    __m512 scale = _mm512_mul_ps(dv, part);
    __mmask64 z = zero_rows(scale);
    for (int r = 0; r < 8; r++) { /* quad r: grid entry r */
        __m512i i = _mm512_and_si512(_mm512_srli_epi32(idx[r >> 2], 8 * (r & 3)), _mm512_set1_epi32(255));
        i = _mm512_or_si512(i, _mm512_and_si512(_mm512_slli_epi32(qh, 8 - r), _mm512_set1_epi32(256)));
        q[r] = quad_bytes(_mm512_i32gather_epi32(i, (const void *)iq3s_bytes, 4), quad_signs(signs, r), z);
    }
    return scale;
}

/* IQ3_XXS: per 32 of a row 8 grid indices, and a u32 of 4 x 7 sign bits and the 4-bit scale. */
static inline __attribute__((always_inline)) __m512 iq3xxs16(const uint8_t *blk, int64_t rb, int j, __m512 dv, __m512i q[8]) {
    __m512i at = _mm512_setr_epi64(0, rb, 2 * rb, 3 * rb, 4 * rb, 5 * rb, 6 * rb, 7 * rb);
    __m512i at16 = _mm512_mullo_epi32(rows16(), _mm512_set1_epi32((int)rb));
    __m512i idx[2];
    rows8(blk + 2 + 8 * j, at, 8 * rb, &idx[0], &idx[1]);
    __m512i aux = _mm512_i32gather_epi32(at16, (const void *)(blk + 66 + 4 * j), 1);
    __m512 sub = _mm512_cvtepi32_ps(_mm512_srli_epi32(aux, 28));
    __m512 scale = _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_add_ps(_mm512_set1_ps(0.5f), sub)), _mm512_set1_ps(0.5f));
    __mmask64 z = zero_rows(scale);
    __m512i s8 = signs7_bytes(aux);
    for (int r = 0; r < 8; r++) { /* quad r: grid entry r */
        __m512i i = _mm512_and_si512(_mm512_srli_epi32(idx[r >> 2], 8 * (r & 3)), _mm512_set1_epi32(255));
        q[r] = quad_bytes(_mm512_i32gather_epi32(i, (const void *)iq3xxs_bytes, 4), quad_signs(s8, r), z);
    }
    return scale;
}

/* IQ1_S: per 32 of a row 4 low index bytes, and a u16 of 4 x 3 high bits, the scale and the
 * delta's sign. Quad bytes: 8 code + 119 or 121, q + 128 (grid_group); no sign bits. */
static inline __attribute__((always_inline)) __m512 iq1s16(const uint8_t *blk, int64_t rb, int j, __m512 dv, __m512i q[8]) {
    __m512i at16 = _mm512_mullo_epi32(rows16(), _mm512_set1_epi32((int)rb));
    __m512i even = evens(), odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    __m512i lo = _mm512_i32gather_epi32(at16, (const void *)(blk + 2 + 4 * j), 1);
    /* the u16 as the top of the 4 bytes ending there (the 4 from it would pass the block's end) */
    __m512i qh = _mm512_srli_epi32(_mm512_i32gather_epi32(at16, (const void *)(blk + 32 + 2 * j), 1), 16);
    __m512i sub = _mm512_and_si512(_mm512_srli_epi32(qh, 12), _mm512_set1_epi32(7));
    __m512 part = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_cvtepi32_ps(sub)), _mm512_set1_ps(1.0f));
    __m512 scale = _mm512_mul_ps(_mm512_mul_ps(dv, part), _mm512_set1_ps(0.125f));
    __mmask64 z = zero_rows(scale);
    __mmask16 minus = _mm512_test_epi32_mask(qh, _mm512_set1_epi32(0x8000));
    __m512i offset = _mm512_mask_blend_epi32(minus, _mm512_set1_epi8(121), _mm512_set1_epi8(119));
    for (int k = 0; k < 4; k++) { /* entry k: quads 2k, 2k + 1 */
        __m512i i = _mm512_and_si512(_mm512_srli_epi32(lo, 8 * k), _mm512_set1_epi32(255));
        i = _mm512_or_si512(i, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 3 * k), _mm512_set1_epi32(7)), 8));
        __m512i a = _mm512_i32gather_epi64(_mm512_castsi512_si256(i), (const void *)iq1s_bytes, 8);
        __m512i c = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(i, 1), (const void *)iq1s_bytes, 8);
        for (int h = 0; h < 2; h++) {
            __m512i v = _mm512_add_epi8(_mm512_permutex2var_epi32(a, h ? odd : even, c), offset);
            if (z) /* a zero scale: +-1 by q's sign (q < 0: the byte below 128) */
                v = _mm512_mask_blend_epi8(z, v, _mm512_mask_blend_epi8(_mm512_cmplt_epu8_mask(v, _mm512_set1_epi8((char)0x80)),
                                                                         _mm512_set1_epi8((char)129), _mm512_set1_epi8(127)));
            q[2 * k + h] = v;
        }
    }
    return scale;
}

/* Block j of type t (a constant), with gathers (see the types' functions above). */
static inline __attribute__((always_inline)) __m512 grid16(int t, const uint8_t *blk, int64_t rb, int j, __m512 dv, __m512i q[8]) {
    return t == WT_IQ2_XXS ? iq2xxs16(blk, rb, j, dv, q)
           : t == WT_IQ3_S ? iq3s16(blk, rb, j, dv, q)
           : t == WT_IQ3_XXS ? iq3xxs16(blk, rb, j, dv, q)
                             : iq1s16(blk, rb, j, dv, q);
}

/* A grid type's group, block by block: the 16 rows' scales and quads stored (q8.h's Q8_0 layout). */
static inline __attribute__((always_inline)) void expand_groups16(int t, const uint8_t *grp, int64_t rb, int64_t nb,
                                                                 uint8_t *dst) {
    float d[16];
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (b >> 3) * block_bytes(t);
        int j = (int)(b & 7);
        if (j == 0)
            for (int o = 0; o < 16; o++) d[o] = f16_at(blk + o * rb);
        __m512i q[8];
        __m512 scale = grid16(t, blk, rb, j, _mm512_loadu_ps(d), q);
        uint8_t *out = dst + q8_block_at(WT_Q8_0, b);
        _mm512_storeu_ps((float *)out, scale);
        for (int r = 0; r < 8; r++) _mm512_storeu_si512((void *)(out + 64 + 64 * r), q[r]);
    }
}

static void expand16(int t, const uint8_t *grp, int64_t rb, int64_t nb, uint8_t *dst) {
    switch (t) { /* a constant type: no tests of it in the loops */
    case WT_IQ2_XXS: expand_groups16(WT_IQ2_XXS, grp, rb, nb, dst); break;
    case WT_IQ3_S: expand_groups16(WT_IQ3_S, grp, rb, nb, dst); break;
    case WT_IQ3_XXS: expand_groups16(WT_IQ3_XXS, grp, rb, nb, dst); break;
    default: expand_groups16(WT_IQ1_S, grp, rb, nb, dst); break;
    }
}

/* ---- AVX-512, the K-grid types: a group of 16 rows decoded together into q8_expanded_type's
 * group (q8.h: each super-block's d f32[16], each block's int8 scales [16] a half, quad r's byte
 * 4o + c = q(o, 4r + c) + offset), the same bytes as q8.c's expand_group makes from kgrid_block
 * row by row. The d a row at a time (one a super-block); the scales and q as 16 rows' vectors,
 * from the super-block's runs (kgrid_raw, rows 0-7 and 8-15 put together), a quad (4 values of
 * each row) at a time; grid entries' value bytes by gathers, the signs as quad_signs' masks. */

/* The 8 dwords at p of each of 16 rows rb apart, transposed: t[k] lane o = dword k of row o (kgrid_raw's
 * for rows 0-7 and 8-15 put together, in one pass: each vector two rows, o and o + 8, until the last
 * step picks each 128-bit lane's 4 rows). Taken by Q3_K's fused steps only (Zen 5, one row: 1.04 times
 * as fast as kgrid_raw's halves; in kgrid_groups16 IQ2_XS 1.02, IQ2_S 1.00, IQ1_M 0.85, so not there). */
static inline void kgrid_raw16(const uint8_t *p, int64_t rb, __m512i t[8]) {
    __m512i r[8], u[8];
    for (int o = 0; o < 8; o++)
        r[o] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(p + o * rb))),
                                  _mm256_loadu_si256((const __m256i *)(p + (o + 8) * rb)), 1);
    for (int o = 0; o < 8; o += 2)
        u[o] = _mm512_unpacklo_epi32(r[o], r[o + 1]), u[o + 1] = _mm512_unpackhi_epi32(r[o], r[o + 1]);
    for (int q = 0; q < 8; q += 4)
        for (int h = 0; h < 2; h++)
            r[q + 2 * h] = _mm512_unpacklo_epi64(u[q + h], u[q + 2 + h]), r[q + 2 * h + 1] = _mm512_unpackhi_epi64(u[q + h], u[q + 2 + h]);
    /* r[k] (k < 4): rows 0-3's dword k, rows 0-3's dword k + 4, rows 8-11's k, 8-11's k + 4; r[4 + k] rows 4-7, 12-15 */
    __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int k = 0; k < 4; k++)
        t[k] = _mm512_permutex2var_epi64(r[k], lo, r[4 + k]), t[k + 4] = _mm512_permutex2var_epi64(r[k], hi, r[4 + k]);
}

/* Quads 2k and 2k + 1 of 16 rows from the 8 value bytes of each row's grid entry (i: the entries'
 * indices, a lane a row; table: their bytes), as two 32-bit lanes a row. */
static inline void entry_quads(const uint64_t *table, __m512i i, __m512i *q0, __m512i *q1) {
    __m512i a = _mm512_i32gather_epi64(_mm512_castsi512_si256(i), (const void *)table, 8);
    __m512i c = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(i, 1), (const void *)table, 8);
    *q0 = _mm512_permutex2var_epi32(a, evens(), c);
    *q1 = _mm512_permutex2var_epi32(a, _mm512_add_epi32(evens(), _mm512_set1_epi32(1)), c);
}

/* entry_quads by scalar loads (no gather): the 16 entries' 8 bytes, rows 0-7 and 8-15 a vector each.
 * The IQ2 types' fused steps (Zen 5, 1 row, cold: 1.14-1.15 times as fast as entry_quads' gathers). */
static inline __attribute__((always_inline)) void entry_quads_free(const uint64_t *table, __m512i i, __m512i *q0, __m512i *q1) {
    uint32_t at[16] __attribute__((aligned(64)));
    _mm512_store_si512((void *)at, i);
    __m256i r[4];
    for (int k = 0; k < 4; k++)
        r[k] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(table + at[4 * k])),
                                                      _mm_loadl_epi64((const __m128i *)(table + at[4 * k + 1])))),
            _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(table + at[4 * k + 2])),
                               _mm_loadl_epi64((const __m128i *)(table + at[4 * k + 3]))), 1);
    __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(r[0]), r[1], 1), c = _mm512_inserti64x4(_mm512_castsi256_si512(r[2]), r[3], 1);
    *q0 = _mm512_permutex2var_epi32(a, evens(), c);
    *q1 = _mm512_permutex2var_epi32(a, _mm512_add_epi32(evens(), _mm512_set1_epi32(1)), c);
}

/* Quad r's bytes stored: q (signed) + offset; rows with a zero d * sc (z) keep q's sign as +-1. */
static inline void kquad_store(uint8_t *qs, int r, __m512i q, __mmask64 z, int off) {
    if (z) q = _mm512_mask_blend_epi8(z, q, _mm512_mask_blend_epi8(_mm512_movepi8_mask(q), _mm512_set1_epi8(1), _mm512_set1_epi8(-1)));
    _mm512_storeu_si512((void *)(qs + 64 * r), _mm512_add_epi8(q, _mm512_set1_epi8((char)off)));
}

/* Half h of block j's scales (kgrid_scales), 16 rows' as int32 lanes, from their runs (as kscales8). */
static inline __m512i kscales16(int t, const __m512i raw[4][8], int j, int h) {
    int i = 2 * j + h; /* the super-block's 16 */
    if (t == WT_Q3_K) { /* low 4 bits: byte 96 + (i & 7), nibble i >> 3; high 2: byte 104 + (i & 3), pair i >> 2 */
        __m512i low = _mm512_srli_epi32(raw[3][5 + ((i & 7) >> 2)], 8 * (i & 3) + 4 * (i >> 3));
        __m512i high = _mm512_srli_epi32(raw[3][7], 8 * (i & 3) + 2 * (i >> 2));
        __m512i sc = _mm512_or_si512(_mm512_and_si512(low, _mm512_set1_epi32(15)), _mm512_slli_epi32(_mm512_and_si512(high, _mm512_set1_epi32(3)), 4));
        return _mm512_sub_epi32(sc, _mm512_set1_epi32(32));
    }
    __m512i s;
    if (t == WT_IQ1_M) /* 3 bits i & 3 of scale word i >> 2 (bytes 48 + 2 (i >> 2)) */
        s = _mm512_srli_epi32(raw[1][6 + (i >> 3)], 16 * ((i >> 2) & 1) + 3 * (i & 3));
    else /* nibble h of byte 66 + j (IQ2_S: 74 + j) */
        s = _mm512_srli_epi32(raw[2][6 + (j >> 2)], 8 * (j & 3) + 4 * h);
    s = _mm512_and_si512(s, _mm512_set1_epi32(t == WT_IQ1_M ? 7 : 15));
    return _mm512_add_epi32(_mm512_add_epi32(s, s), _mm512_set1_epi32(1));
}

/* IQ2_XS, IQ2_S: block j's group k entry index (idx[k], 16 rows) from a super-block's runs, and the
 * groups' sign bits (byte k of a lane: group k's 8 signs). IQ2_XS: a u16 a group (bytes 2 + 8j ..), 9 bits
 * of index and 7 of signs (their parity the eighth: signs7_bytes); IQ2_S: qs[2 + 4j ..] the indices' low
 * bytes, byte 66 + j their high bits (2 a group), signs[34 + 4j ..] a byte a group. */
static inline __attribute__((always_inline)) __m512i iq2_entries16(int t, const __m512i raw[4][8], int j, __m512i idx[4]) {
    if (t == WT_IQ2_XS) {
        __m512i w01 = raw[j >> 2][2 * (j & 3)], w23 = raw[j >> 2][2 * (j & 3) + 1];
        __m512i m9 = _mm512_set1_epi32(511), m7 = _mm512_set1_epi32(127);
        idx[0] = _mm512_and_si512(w01, m9), idx[1] = _mm512_and_si512(_mm512_srli_epi32(w01, 16), m9);
        idx[2] = _mm512_and_si512(w23, m9), idx[3] = _mm512_and_si512(_mm512_srli_epi32(w23, 16), m9);
        __m512i s7 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w01, 9), m7),
                                     _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w01, 25), m7), 7));
        s7 = _mm512_or_si512(s7, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w23, 9), m7), 14));
        s7 = _mm512_or_si512(s7, _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w23, 25), m7), 21));
        return signs7_bytes(s7);
    }
    __m512i lo = raw[0][j], qh = _mm512_srli_epi32(raw[2][4 + (j >> 2)], 8 * (j & 3));
    for (int k = 0; k < 4; k++)
        idx[k] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(lo, 8 * k), _mm512_set1_epi32(255)),
                                 _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(qh, 2 * k), _mm512_set1_epi32(3)), 8));
    return raw[1][j];
}

static inline __attribute__((always_inline)) void kgrid_groups16(int t, const uint8_t *grp, int64_t rb, int64_t nb,
                                                                 uint8_t *dst) {
    int bt = q8_expanded_type(t), off = q8_offset(bt);
    float d[16];
    __m512i raw[4][8]; /* the super-block's runs, 16 rows a vector */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (b >> 3) * block_bytes(t);
        int j = (int)(b & 7);
        uint8_t *out = dst + q8_block_at(bt, b), *qs = out + 32;
        if (j == 0) {
            kgrid_prefetch(t, blk, rb);
            next_group_prefetch(t, grp, rb, b);
            for (int o = 0; o < 16; o++) d[o] = kgrid_d(t, blk + o * rb);
            memcpy(out - q8_super_bytes(bt), d, 64);
            for (int c = 0; c < kgrid_runs(t); c++) {
                __m256i lo[8], hi[8];
                kgrid_raw(blk + kgrid_run_at(t, c), rb, lo);
                kgrid_raw(blk + 8 * rb + kgrid_run_at(t, c), rb, hi);
                for (int k = 0; k < 8; k++) raw[c][k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[k]), hi[k], 1);
            }
        }
        __mmask64 z[2]; /* the byte mask of the rows whose half h has a zero d * sc */
        for (int h = 0; h < 2; h++) {
            __m512i sc = kscales16(t, (const __m512i(*)[8])raw, j, h);
            _mm_storeu_si128((__m128i *)(out + 16 * h), _mm512_cvtepi32_epi8(sc));
            __mmask16 zero = _mm512_cmp_ps_mask(_mm512_mul_ps(_mm512_loadu_ps(d), _mm512_cvtepi32_ps(sc)), _mm512_setzero_ps(), _CMP_EQ_OQ);
            z[h] = zero ? _mm512_movepi8_mask(_mm512_maskz_set1_epi32(zero, -1)) : 0;
        }
        if (t == WT_Q3_K) { /* q = 2-bit field j & 3 of qs[32 (j >> 2) + k] - 4 unless bit j of hmask[k] */
            for (int r = 0; r < 8; r++) {
                __m512i lo = _mm512_srli_epi16(raw[1 + (j >> 2)][r], 2 * (j & 3)), hi = _mm512_srli_epi16(raw[0][r], j);
                __m512i q = _mm512_and_si512(lo, _mm512_set1_epi8(3));
                q = _mm512_add_epi8(q, _mm512_slli_epi16(_mm512_and_si512(hi, _mm512_set1_epi8(1)), 2)); /* 0 or 4: no carry */
                kquad_store(qs, r, _mm512_sub_epi8(q, _mm512_set1_epi8(4)), z[r >> 2], off);
            }
        } else if (t == WT_IQ1_M) { /* group k: index qs[4j + k] | 3 bits of its qh nibble (the u16 at 32 + 2j), bit 3 the delta's sign */
            __m512i lo = raw[0][j], qh = _mm512_srli_epi32(raw[1][2 + (j >> 1)], 16 * (j & 1));
            for (int k = 0; k < 4; k++) {
                __m512i i = _mm512_and_si512(_mm512_srli_epi32(lo, 8 * k), _mm512_set1_epi32(255));
                __m512i nib = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * k), _mm512_set1_epi32(15));
                i = _mm512_or_si512(i, _mm512_slli_epi32(_mm512_and_si512(nib, _mm512_set1_epi32(7)), 8));
                __mmask16 minus = _mm512_test_epi32_mask(nib, _mm512_set1_epi32(8));
                __m512i delta = _mm512_mask_blend_epi32(minus, _mm512_set1_epi8(-7), _mm512_set1_epi8(-9)); /* 8 code - 8 +- 1 */
                __m512i q0, q1;
                entry_quads(iq1s_bytes, i, &q0, &q1);
                kquad_store(qs, 2 * k, _mm512_add_epi8(q0, delta), z[k >> 1], off);
                kquad_store(qs, 2 * k + 1, _mm512_add_epi8(q1, delta), z[k >> 1], off);
            }
        } else { /* IQ2_XS, IQ2_S: group k's entry (8, 25, 43 a value) and its 8 sign bits */
            __m512i idx[4], signs = iq2_entries16(t, raw, j, idx);
            const uint64_t *table = t == WT_IQ2_XS ? iq2xs_bytes : iq2s_bytes;
            for (int k = 0; k < 4; k++) {
                __m512i q[2];
                entry_quads(table, idx[k], &q[0], &q[1]);
                for (int h = 0; h < 2; h++) {
                    int r = 2 * k + h;
                    kquad_store(qs, r, _mm512_mask_sub_epi8(q[h], quad_signs(signs, r), _mm512_setzero_si512(), q[h]), z[r >> 2], off);
                }
            }
        }
    }
}

static void kgrid_expand16(int t, const uint8_t *grp, int64_t rb, int64_t nb, uint8_t *dst) {
    switch (t) { /* a constant type: no tests of it in the loops */
    case WT_Q3_K: kgrid_groups16(WT_Q3_K, grp, rb, nb, dst); break;
    case WT_IQ1_M: kgrid_groups16(WT_IQ1_M, grp, rb, nb, dst); break;
    case WT_IQ2_XS: kgrid_groups16(WT_IQ2_XS, grp, rb, nb, dst); break;
    default: kgrid_groups16(WT_IQ2_S, grp, rb, nb, dst); break;
    }
}

#define KGRID_FUSED 3 /* rows kgrid_fused_rows takes (4: no faster than expand_group's, on Zen 5) */
#ifndef KGRID_IQ2
#define KGRID_IQ2 2 /* rows IQ2_XS and IQ2_S take it for (3: 0.83-0.90 times the expanded group's, Zen 5) */
#endif
/* ---- AVX-512, Q3_K, IQ1_M, IQ2_XS and IQ2_S for few activation rows (decode): each block of a super-block's 16
 * rows decoded in registers straight into its vpdpbusd steps, nothing stored, as AVX2's
 * q3k_fused_block below with the 16 rows in one vector (lane o: row o). Bytes q + c (Q3_K: c = 4,
 * bytes 0..7; IQ1_M: c = 16, q in -9..9; a zero d * sc's rows c +- 1, q's sign), so each limb's sums
 * start at start * c / 32 (start: offset 32's); this target folds limb 1's start into limb 0's
 * (limb.c's LIMB_FOLD_START: start_0 + 256 start_1, both multiples of 32), which that division takes
 * exactly. S = S_2 65536 + S_1 256 + S_0 with the starts is the sum of the limbs times q, exact in
 * int32 (|S| <= 16 * 9 * 128 * 65793 < 2^31; the parts added in wrapping int32 on the way), and
 * acc = fma((d * sc) * s, S, acc) over the halves in order is limb_bytes_rows's float sequence:
 * the same bits as the expanded group's steps. */

/* Half hh of a block: its 4 quads' bytes w (quads 4 hh ..) against M rows' limbs into acc. */
static inline __attribute__((always_inline)) void fused_half(const __m512i w[4], int hh, __m512 ws, int shift, int M,
                                                             const int8_t *const *xq, const int32_t *const *start,
                                                             const float *xs, __m512 *acc) {
    __m512i p[KGRID_FUSED][3];
    for (int i = 0; i < M; i++) {
        const int32_t *st = start[i];
        uint32_t from = ((uint32_t)(st[4 + hh] >> shift) << 16) + ((uint32_t)(st[2 + hh] >> shift) << 8) + (uint32_t)(st[hh] >> shift);
        p[i][0] = _mm512_set1_epi32((int)from), p[i][1] = p[i][2] = _mm512_setzero_si512();
    }
    for (int n = 0; n < 4; n++)
        for (int i = 0; i < M; i++)
#pragma GCC unroll 3
            for (int l = 0; l < 3; l++) /* the row's 4 limb bytes broadcast (vpdpbusd's {1to16} operand) */
                p[i][l] = _mm512_dpbusd_epi32(p[i][l], w[n], _mm512_broadcastd_epi32(_mm_loadu_si32(xq[i] + 32 * l + 4 * (4 * hh + n))));
    for (int i = 0; i < M; i++) {
        __m512i tot = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(p[i][2], 16), _mm512_slli_epi32(p[i][1], 8)), p[i][0]);
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(xs[i])), _mm512_cvtepi32_ps(tot), acc[i]);
    }
}

/* IQ2_XS, IQ2_S: half hh's 4 quads' bytes w = q + 64 (q in -43..43, as expand_group's WT_IQ2_BYTES)
 * against M rows' limbs into acc. Their starts are offset 64's, taken as they are; each limb's sum
 * in a chain of its own and the three combined by limb_values3_from (q8.h: the int32, float-fma or
 * double tier, each the correctly rounded float of the exact S, which one int32 cannot hold here:
 * |S| <= 16 * 43 * 128 * 65793), then limb_bytes_rows's fma: the same bits as the expanded group's. */
static inline __attribute__((always_inline)) void fused_half_wide(const __m512i w[4], int hh, __m512 ws, int M,
                                                                  const int8_t *const *xq, const int32_t *const *start,
                                                                  const float *xs, __m512 *acc) {
    vi s[3 * KGRID_FUSED];
    for (int i = 0; i < M; i++)
        for (int l = 0; l < 3; l++) s[3 * i + l] = _mm512_set1_epi32(start[i][2 * l + hh]);
#pragma GCC unroll 4
    for (int n = 0; n < 4; n++)
        for (int i = 0; i < M; i++)
#pragma GCC unroll 3
            for (int l = 0; l < 3; l++)
                s[3 * i + l] = _mm512_dpbusd_epi32(s[3 * i + l], w[n], _mm512_broadcastd_epi32(_mm_loadu_si32(xq[i] + 32 * l + 4 * (4 * hh + n))));
    vf f[KGRID_FUSED];
    limb_values3_from(s, M, f, 1);
    for (int i = 0; i < M; i++) acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(ws, _mm512_set1_ps(xs[i])), f[i].v, acc[i]);
}

/* Block j of a super-block's 16 rows (raw: its runs, dv: the rows' d) against M rows' limbs. */
static inline __attribute__((always_inline)) void kgrid_fused16(int t, const __m512i raw[4][8], int j, __m512 dv, int M,
                                                                const int8_t *const *xq, const int32_t *const *start,
                                                                const float *xs, __m512 *acc) {
    __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(4);
    __m512i idx[4] = {m3, m3, m3, m3}, signs = m3; /* IQ2_XS, IQ2_S: group k's entry and sign bits */
    if (t == WT_IQ2_XS || t == WT_IQ2_S) signs = iq2_entries16(t, raw, j, idx);
#pragma GCC unroll 2
    for (int hh = 0; hh < 2; hh++) {
        __m512 ws = _mm512_mul_ps(dv, _mm512_cvtepi32_ps(kscales16(t, raw, j, hh))); /* q8_scale's d * sc */
        __mmask16 zero = _mm512_cmp_ps_mask(ws, _mm512_setzero_ps(), _CMP_EQ_OQ);
        __mmask64 z = zero ? _mm512_movepi8_mask(_mm512_maskz_set1_epi32(zero, -1)) : 0; /* rare in real files */
        __m512i w[4] = {m3, m3, m3, m3}; /* each set below (the compiler cannot tell) */
        if (t == WT_Q3_K) {
#pragma GCC unroll 4
            for (int n = 0; n < 4; n++) { /* q + 4 = 2-bit field | 4 times the hmask bit (kgrid_groups16) */
                int r = 4 * hh + n;
                __m512i lo = _mm512_and_si512(_mm512_srli_epi16(raw[1 + (j >> 2)][r], 2 * (j & 3)), m3);
                __m512i hm = j >= 2 ? _mm512_srli_epi16(raw[0][r], j - 2) : _mm512_slli_epi16(raw[0][r], 2 - j);
                __m512i hb = _mm512_and_si512(hm, m4);
                w[n] = _mm512_or_si512(lo, hb);
                if (z) w[n] = _mm512_mask_blend_epi8(z, w[n], _mm512_add_epi8(m3, _mm512_srli_epi16(hb, 1))); /* 3 or 5 */
            }
            fused_half(w, hh, ws, 3, M, xq, start, xs, acc);
        } else if (t == WT_IQ2_XS || t == WT_IQ2_S) { /* groups 2 hh, 2 hh + 1: q + 64 = 64 +- the entry's byte */
            __m512i c64 = _mm512_set1_epi8(64);
#pragma GCC unroll 2
            for (int k = 2 * hh; k < 2 * hh + 2; k++) {
                __m512i q[2];
                entry_quads_free(t == WT_IQ2_XS ? iq2xs_bytes : iq2s_bytes, idx[k], &q[0], &q[1]);
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) {
                    __mmask64 m = quad_signs(signs, 2 * k + h);
                    __m512i v = _mm512_mask_sub_epi8(_mm512_add_epi8(q[h], c64), m, c64, q[h]);
                    if (z) v = _mm512_mask_blend_epi8(z, v, _mm512_mask_blend_epi8(m, _mm512_set1_epi8(65), _mm512_set1_epi8(63)));
                    w[2 * (k & 1) + h] = v;
                }
            }
            fused_half_wide(w, hh, ws, M, xq, start, xs, acc);
        } else { /* IQ1_M: groups 2 hh, 2 hh + 1 (kgrid_groups16): q + 16 = 8 code + 8 +- 1 */
            __m512i lo = raw[0][j], qh = _mm512_srli_epi32(raw[1][2 + (j >> 1)], 16 * (j & 1));
            for (int k = 2 * hh; k < 2 * hh + 2; k++) {
                __m512i i = _mm512_and_si512(_mm512_srli_epi32(lo, 8 * k), _mm512_set1_epi32(255));
                __m512i nib = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * k), _mm512_set1_epi32(15));
                i = _mm512_or_si512(i, _mm512_slli_epi32(_mm512_and_si512(nib, _mm512_set1_epi32(7)), 8));
                __mmask16 minus = _mm512_test_epi32_mask(nib, _mm512_set1_epi32(8));
                __m512i delta = _mm512_mask_blend_epi32(minus, _mm512_set1_epi8(9), _mm512_set1_epi8(7));
                __m512i q0, q1;
                entry_quads(iq1s_bytes, i, &q0, &q1);
                w[2 * (k & 1)] = _mm512_add_epi8(q0, delta), w[2 * (k & 1) + 1] = _mm512_add_epi8(q1, delta);
            }
            if (z) /* 16 +- 1 by q's sign (q < 0: the byte below 16) */
                for (int n = 0; n < 4; n++)
                    w[n] = _mm512_mask_blend_epi8(z, w[n], _mm512_mask_blend_epi8(_mm512_cmplt_epu8_mask(w[n], _mm512_set1_epi8(16)),
                                                                                  _mm512_set1_epi8(17), _mm512_set1_epi8(15)));
            fused_half(w, hh, ws, 1, M, xq, start, xs, acc);
        }
    }
}

/* A group's 16 rows against M (a constant) rows' limbs, a super-block at a time (see kgrid_fused16). */
static inline __attribute__((always_inline)) void kgrid_fused_rows(int t, const uint8_t *grp, int64_t rb, int64_t nb, int M,
                                                                   const int8_t *xq, const int32_t *start, const float *xs,
                                                                   float *y) {
    __m512 acc[KGRID_FUSED];
    for (int i = 0; i < M; i++) acc[i] = _mm512_setzero_ps();
    __m512i raw[4][8];
    for (int64_t sb = 0; sb < nb; sb += 8) {
        const uint8_t *blk = grp + (sb >> 3) * block_bytes(t);
        kgrid_prefetch(t, blk, rb);
        next_group_prefetch(t, grp, rb, sb);
        __m512 dv;
        if (t != WT_IQ1_M) {
            uint16_t h[16]; /* the rows' fp16 d, made fp32 by F16C: kgrid_d's exact values (a d is finite here) */
            for (int o = 0; o < 16; o++) memcpy(h + o, blk + o * rb + (t == WT_Q3_K ? 108 : 0), 2);
            dv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)h));
            if (t != WT_Q3_K) dv = _mm512_mul_ps(dv, _mm512_set1_ps(0.125f)); /* exact: eighths of d */
            for (int c = 0; c < kgrid_runs(t); c++) kgrid_raw16(blk + kgrid_run_at(t, c), rb, raw[c]);
        } else {
            float d[16];
            for (int o = 0; o < 16; o++) d[o] = kgrid_d(t, blk + o * rb);
            dv = _mm512_loadu_ps(d);
            for (int c = 0; c < kgrid_runs(t); c++) {
                __m256i lo[8], hi[8];
                kgrid_raw(blk + kgrid_run_at(t, c), rb, lo);
                kgrid_raw(blk + 8 * rb + kgrid_run_at(t, c), rb, hi);
                for (int k = 0; k < 8; k++) raw[c][k] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[k]), hi[k], 1);
            }
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const int8_t *xr[KGRID_FUSED];
            const int32_t *st[KGRID_FUSED];
            float s[KGRID_FUSED];
            for (int i = 0; i < M; i++)
                xr[i] = xq + (i * nb + sb + j) * 96, st[i] = start + (i * nb + sb + j) * 6, s[i] = xs[i * nb + sb + j];
            kgrid_fused16(t, (const __m512i(*)[8])raw, j, dv, M, xr, st, s, acc);
        }
    }
    for (int i = 0; i < M; i++) _mm512_storeu_ps(y + 16 * i, acc[i]);
}

/* See q8.h: AVX-512's Q3_K up to KGRID_FUSED rows, IQ2_XS and IQ2_S up to KGRID_IQ2, IQ1_M at one (more:
 * expand_group and limb.c's steps). */
int kgrid_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start,
                    const float *xs, float *y) {
    int iq2 = t == WT_IQ2_XS || t == WT_IQ2_S;
    if (!(t == WT_Q3_K && M <= KGRID_FUSED) && !(t == WT_IQ1_M && M == 1) && !(iq2 && M <= KGRID_IQ2))
        return 0; /* IQ1_M: 2 rows no faster */
    int64_t rb = row_bytes(t, 32 * nb);
#define KGRID_FUSED_ROWS(T)                                                                                         \
    switch (M) { /* constants: the rows' chains in registers */                                                    \
    case 1: kgrid_fused_rows(T, grp, rb, nb, 1, xq, start, xs, y); break;                                          \
    case 2: kgrid_fused_rows(T, grp, rb, nb, 2, xq, start, xs, y); break;                                          \
    default: kgrid_fused_rows(T, grp, rb, nb, 3, xq, start, xs, y); break;                                         \
    }
    if (t == WT_Q3_K) {
        KGRID_FUSED_ROWS(WT_Q3_K)
    } else if (t == WT_IQ2_XS) {
        KGRID_FUSED_ROWS(WT_IQ2_XS)
    } else if (t == WT_IQ2_S) {
        KGRID_FUSED_ROWS(WT_IQ2_S)
    } else {
        kgrid_fused_rows(WT_IQ1_M, grp, rb, nb, 1, xq, start, xs, y);
    }
#undef KGRID_FUSED_ROWS
    return 1;
}
#endif

#if defined(STRATA_TARGET_AVX512) || defined(STRATA_TARGET_AVX2)
/* ---- AVX2: as AVX-512's above, in halves of 8 rows (Q8_0's bytes 32h .. 32h + 31 of each quad
 * and scale vector), the sign masks as bytes (0xFF: negated). No gathers: a ymm gather is many
 * uops at a low throughput on AMD's Zen 2-3 (and not free on Intel's client cores), where 8 scalar
 * loads and a few unpacks take the same bytes; a lane's index is read back from a stored vector.
 * The AVX-512 build has it too, for the types whose zmm gathers are slower on its CPU (see
 * strata_grid_gather_free below); its helpers named with an 8 (8 rows) where AVX-512's share a name. */

/* The 4 bytes at p0 .. p7, as the lanes 0 .. 7 of a vector. */
static inline __attribute__((always_inline)) __m256i dwords8(const void *p0, const void *p1, const void *p2, const void *p3, const void *p4, const void *p5,
                              const void *p6, const void *p7) {
    __m128i l[8];
    const void *p[8] = {p0, p1, p2, p3, p4, p5, p6, p7};
    for (int o = 0; o < 8; o++) {
        int32_t v;
        memcpy(&v, p[o], 4);
        l[o] = _mm_cvtsi32_si128(v);
    }
    __m128i lo = _mm_unpacklo_epi64(_mm_unpacklo_epi32(l[0], l[1]), _mm_unpacklo_epi32(l[2], l[3]));
    __m128i hi = _mm_unpacklo_epi64(_mm_unpacklo_epi32(l[4], l[5]), _mm_unpacklo_epi32(l[6], l[7]));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* The 8 bytes at p0 .. p3, as the 64-bit lanes 0 .. 3 of a vector. */
static inline __attribute__((always_inline)) __m256i qwords4(const void *p0, const void *p1, const void *p2, const void *p3) {
    __m128i lo = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)p0), _mm_loadl_epi64((const __m128i *)p1));
    __m128i hi = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)p2), _mm_loadl_epi64((const __m128i *)p3));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* The 8 lanes of i (each >= 0) as scalars, through general registers: on the AMD EPYC the Q8_0
 * decoding (IQ2_XXS, IQ3_S, IQ1_S) ran faster so, the K-grid types' with i stored and read back. */
static inline __attribute__((always_inline)) void lanes8(__m256i i, uint32_t at[8]) {
    __m128i lo = _mm256_castsi256_si128(i), hi = _mm256_extracti128_si256(i, 1);
    uint64_t q[4] = {(uint64_t)_mm_cvtsi128_si64(lo), (uint64_t)_mm_extract_epi64(lo, 1), (uint64_t)_mm_cvtsi128_si64(hi),
                     (uint64_t)_mm_extract_epi64(hi, 1)};
    for (int k = 0; k < 4; k++) at[2 * k] = (uint32_t)q[k], at[2 * k + 1] = (uint32_t)(q[k] >> 32);
}

/* Lane o: the dword table[i lane o] (what _mm256_i32gather_epi32(table, i, 4) gives). */
static inline __attribute__((always_inline)) __m256i table8(const uint32_t *table, __m256i i) {
    uint32_t at[8];
    lanes8(i, at);
    return dwords8(table + at[0], table + at[1], table + at[2], table + at[3], table + at[4], table + at[5], table + at[6],
                   table + at[7]);
}

/* Byte mask of the values negated in quad r (see AVX-512's quad_signs). */
static inline __attribute__((always_inline)) __m256i quad_signs8(__m256i s, int r) {
    __m256i at = _mm256_add_epi8(_mm256_set1_epi32(0x01010101 * (r >> 1)),
                                 _mm256_setr_epi32(0, 0x04040404, 0x08080808, 0x0C0C0C0C, 0, 0x04040404, 0x08080808, 0x0C0C0C0C));
    __m256i bit = _mm256_set1_epi32(r & 1 ? (int)0x80402010 : 0x08040201);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(s, at), bit), bit);
}

/* Quad r's half: v negated where m, plus 128; rows with a zero scale (z: their 32-bit lanes
 * all ones; zany: some are, rare) +-1 by that sign. */
static inline __m256i quad_bytes8(__m256i v, __m256i m, __m256i z, int zany) {
    __m256i c128 = _mm256_set1_epi8((char)0x80);
    __m256i q = _mm256_blendv_epi8(_mm256_add_epi8(v, c128), _mm256_sub_epi8(c128, v), m);
    if (zany) q = _mm256_blendv_epi8(q, _mm256_blendv_epi8(_mm256_set1_epi8((char)129), _mm256_set1_epi8(127), m), z);
    return q;
}

/* The rows whose scale is zero, as all-ones 32-bit lanes; *zany: whether there are any (one test a block). */
static inline __m256i zero8(__m256 scale, int *zany) {
    __m256i z = _mm256_castps_si256(_mm256_cmp_ps(scale, _mm256_setzero_ps(), _CMP_EQ_OQ));
    *zany = !_mm256_testz_si256(z, z);
    return z;
}

/* The 4 bytes at p of each of 8 rows rb apart. */
static inline __attribute__((always_inline)) __m256i rows4(const uint8_t *p, int64_t rb) {
    return dwords8(p, p + rb, p + 2 * rb, p + 3 * rb, p + 4 * rb, p + 5 * rb, p + 6 * rb, p + 7 * rb);
}

/* Byte k of each lane: (x >> 7k) & 127 with its parity as bit 7 (see AVX-512's signs7_bytes). */
static inline __attribute__((always_inline)) __m256i signs7_bytes8(__m256i x) {
    __m256i s = _mm256_and_si256(x, _mm256_set1_epi32(0x7F));
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(x, 1), _mm256_set1_epi32(0x7F00)));
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(x, 2), _mm256_set1_epi32(0x7F0000)));
    s = _mm256_or_si256(s, _mm256_and_si256(_mm256_slli_epi32(x, 3), _mm256_set1_epi32(0x7F000000)));
    __m256i odd = _mm256_setr_epi32(0x00808000, (int)0x80000080, (int)0x80000080, 0x00808000, 0x00808000, (int)0x80000080,
                                    (int)0x80000080, 0x00808000);
    __m256i nib = _mm256_set1_epi8(15);
    __m256i p = _mm256_xor_si256(_mm256_shuffle_epi8(odd, _mm256_and_si256(s, nib)),
                                 _mm256_shuffle_epi8(odd, _mm256_and_si256(_mm256_srli_epi16(s, 4), nib)));
    return _mm256_or_si256(s, p);
}

static inline __attribute__((always_inline)) __m256i byte_of(__m256i x, int k) { return _mm256_and_si256(_mm256_srli_epi32(x, 8 * k), _mm256_set1_epi32(255)); }

/* Quads 2k and 2k + 1 of 8 rows: the dword halves of the 8 value bytes of each row's grid entry i
 * (table: the entries' bytes), from the entries of rows 0, 1, 4, 5 and 2, 3, 6, 7 (scalar loads),
 * which one in-lane shuffle of the pair puts in order, low dwords and high. */
static inline __attribute__((always_inline)) void entry_quads8(const uint64_t *table, __m256i i, __m256i q[2], int regs) {
    uint32_t at[8] __attribute__((aligned(32)));
    if (regs) /* a constant: the faster way for the caller's mix of work (lanes8) */
        lanes8(i, at);
    else
        _mm256_store_si256((__m256i *)at, i);
    __m256 a = _mm256_castsi256_ps(qwords4(table + at[0], table + at[1], table + at[4], table + at[5]));
    __m256 c = _mm256_castsi256_ps(qwords4(table + at[2], table + at[3], table + at[6], table + at[7]));
    q[0] = _mm256_castps_si256(_mm256_shuffle_ps(a, c, 0x88)), q[1] = _mm256_castps_si256(_mm256_shuffle_ps(a, c, 0xDD));
}

/* Block b of one type's rows 8h .. 8h + 7 decoded (d: the rows' fp16 scales as fp32; IQ2_XXS from
 * its super-block's runs raw, kgrid_raw's): their scales returned, q[r] quad r's Q8_0 bytes. */
static inline __attribute__((always_inline)) __m256 half8(int t, int runs, const uint8_t *grp, int64_t rb, int64_t b, int h,
                                                          const float *d, const __m256i raw[2][8], __m256i q[8]) {
    const uint8_t *blk = grp + (b >> 3) * block_bytes(t) + 8 * h * rb;
    int j = (int)(b & 7);
    __m256 dv = _mm256_loadu_ps(d + 8 * h), scale;
    if (t == WT_IQ2_XXS) { /* per 32: 4 grid indices (dword 2j of the runs), a u32 of 4 x 7 sign bits and the scale (2j + 1) */
        __m256i idx = raw[j >> 2][2 * (j & 3)], aux = raw[j >> 2][2 * (j & 3) + 1], s8 = signs7_bytes8(aux);
        __m256 sub = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_cvtepi32_ps(_mm256_srli_epi32(aux, 28)));
        scale = _mm256_mul_ps(_mm256_mul_ps(dv, sub), _mm256_set1_ps(0.25f));
        int zany;
        __m256i z = zero8(scale, &zany);
        #pragma GCC unroll 8
        for (int k = 0; k < 4; k++) { /* quads 2k, 2k + 1: entry k's halves */
            __m256i v[2];
            entry_quads8(iq2xxs_bytes, byte_of(idx, k), v, 1);
            for (int e = 0; e < 2; e++) q[2 * k + e] = quad_bytes8(v[e], quad_signs8(s8, 2 * k + e), z, zany);
        }
    } else if (t == WT_IQ3_XXS) { /* indices, then a u32 of 4 x 7 sign bits and the scale */
        __m256i aux = rows4(blk + 66 + 4 * j, rb), s8 = signs7_bytes8(aux);
        __m256 sub = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_cvtepi32_ps(_mm256_srli_epi32(aux, 28)));
        scale = _mm256_mul_ps(_mm256_mul_ps(dv, sub), _mm256_set1_ps(0.5f));
        int zany;
        __m256i z = zero8(scale, &zany);
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++) { /* quad r: the entry at index byte 2 + 8j + r of each row, read as a scalar */
            const uint8_t *p = blk + 2 + 8 * j + r;
            const uint32_t *g = iq3xxs_bytes;
            __m256i v = dwords8(g + p[0], g + p[rb], g + p[2 * rb], g + p[3 * rb], g + p[4 * rb], g + p[5 * rb], g + p[6 * rb], g + p[7 * rb]);
            q[r] = quad_bytes8(v, quad_signs8(s8, r), z, zany);
        }
    } else if (t == WT_IQ3_S) {
        __m256i idx[2] = {rows4(blk + 2 + 8 * j, rb), rows4(blk + 6 + 8 * j, rb)};
        __m256i qh = rows4(blk + 66 + j, rb), signs = rows4(blk + 74 + 4 * j, rb);
        /* the scale's byte as the top of the 4 ending there (the 4 from it would pass the block's end) */
        __m256i sc = _mm256_and_si256(_mm256_srli_epi32(rows4(blk + 103 + j / 2, rb), 24 + 4 * (j & 1)), _mm256_set1_epi32(15));
        __m256 part = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_cvtepi32_ps(sc)));
        scale = _mm256_mul_ps(dv, part);
        int zany;
        __m256i z = zero8(scale, &zany);
        #pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m256i i = _mm256_or_si256(byte_of(idx[r >> 2], r & 3), _mm256_and_si256(_mm256_slli_epi32(qh, 8 - r), _mm256_set1_epi32(256)));
            q[r] = quad_bytes8(table8(iq3s_bytes, i), quad_signs8(signs, r), z, zany);
        }
    } else { /* IQ1_S: no sign bits; bytes 8 code + 119 or 121 (grid_group) */
        /* runs (the fused steps): qs's dword j, and the u16 at 34 + 2j (bits 0-15 read) in the run at 18 */
        __m256i lo = runs ? raw[0][j] : rows4(blk + 2 + 4 * j, rb);
        __m256i qh = runs ? _mm256_srli_epi32(raw[1][4 + (j >> 1)], 16 * (j & 1)) : _mm256_srli_epi32(rows4(blk + 32 + 2 * j, rb), 16);
        __m256i sub = _mm256_and_si256(_mm256_srli_epi32(qh, 12), _mm256_set1_epi32(7));
        __m256 part = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_cvtepi32_ps(sub)), _mm256_set1_ps(1.0f));
        scale = _mm256_mul_ps(_mm256_mul_ps(dv, part), _mm256_set1_ps(0.125f));
        int zany;
        __m256i z = zero8(scale, &zany);
        __m256i minus = _mm256_cmpeq_epi32(_mm256_and_si256(qh, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x8000));
        __m256i offset = _mm256_blendv_epi8(_mm256_set1_epi8(121), _mm256_set1_epi8(119), minus);
        #pragma GCC unroll 8
        for (int k = 0; k < 4; k++) { /* quads 2k, 2k + 1: entry k's halves */
            __m256i i = _mm256_or_si256(byte_of(lo, k), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, 3 * k), _mm256_set1_epi32(7)), 8));
            __m256i v[2];
            entry_quads8(iq1s_bytes, i, v, 1);
            for (int e = 0; e < 2; e++) {
                __m256i w = _mm256_add_epi8(v[e], offset); /* q + 128 */
                __m256i neg = _mm256_cmpgt_epi8(_mm256_set1_epi8(0), w); /* as a signed byte below 0: q + 128 >= 128, q >= 0 */
                q[2 * k + e] = zany ? _mm256_blendv_epi8(w, _mm256_blendv_epi8(_mm256_set1_epi8(127), _mm256_set1_epi8((char)129), neg), z) : w;
            }
        }
    }
    return scale;
}

/* Super-block sb's fp16 d of 16 rows as fp32, and each half's runs (kgrid_raw): IQ2_XXS's index and sign
 * words, IQ1_S's (where runs: the fused steps) low index bytes and high bits. */
static inline __attribute__((always_inline)) void grid_superblock8(int t, int runs, const uint8_t *grp, int64_t rb, int64_t sb,
                                                                   float d[16], __m256i raw[2][2][8]) {
    const uint8_t *blk = grp + (sb >> 3) * block_bytes(t);
    for (int o = 0; o < 16; o++) d[o] = f16_at(blk + o * rb);
    for (int h = 0; h < 2 && t == WT_IQ2_XXS; h++)
        for (int c = 0; c < 2; c++) kgrid_raw(blk + 8 * h * rb + 2 + 32 * c, rb, raw[h][c]);
    for (int h = 0; h < 2 && t == WT_IQ1_S && runs; h++)
        for (int c = 0; c < 2; c++) kgrid_raw(blk + 8 * h * rb + 2 + 16 * c, rb, raw[h][c]);
}

static inline __attribute__((always_inline)) void expand_groups(int t, const uint8_t *grp, int64_t rb, int64_t nb,
                                                                uint8_t *dst) {
    float d[16];
    __m256i raw[2][2][8]; /* IQ2_XXS, each half of 8 rows: its super-block's runs (kgrid_raw) */
    for (int64_t b = 0; b < nb; b++) {
        if ((b & 7) == 0) grid_superblock8(t, 0, grp, rb, b, d, raw);
        uint8_t *out = dst + q8_block_at(WT_Q8_0, b);
        for (int h = 0; h < 2; h++) {
            __m256i q[8];
            _mm256_storeu_ps((float *)out + 8 * h, half8(t, 0, grp, rb, b, h, d, (const __m256i(*)[8])raw[h], q));
            for (int r = 0; r < 8; r++) _mm256_storeu_si256((__m256i *)(out + 64 + 64 * r + 32 * h), q[r]);
        }
    }
}

static void expand_avx2(int t, const uint8_t *grp, int64_t rb, int64_t nb, uint8_t *dst) {
    switch (t) { /* a constant type: no tests of it in the loops */
    case WT_IQ2_XXS: expand_groups(WT_IQ2_XXS, grp, rb, nb, dst); break;
    case WT_IQ3_XXS: expand_groups(WT_IQ3_XXS, grp, rb, nb, dst); break;
    case WT_IQ3_S: expand_groups(WT_IQ3_S, grp, rb, nb, dst); break;
    default: expand_groups(WT_IQ1_S, grp, rb, nb, dst); break;
    }
}

/* ---- AVX2, the K-grid types: as AVX-512's kgrid_expand16, in halves of 8 rows (bytes 32 h8 ..
 * 32 h8 + 31 of each quad, scales 8 h8 .. 8 h8 + 7 of each half of 16), from kgrid_raw's runs. */

/* Half hh of block j's scales (kgrid_scales) of 8 rows, as int32 lanes, from their runs. */
static inline __m256i kscales8(int t, const __m256i raw[4][8], int j, int hh) {
    int i = 2 * j + hh;
    if (t == WT_Q3_K) { /* low 4 bits: byte 96 + (i & 7), nibble i >> 3; high 2: byte 104 + (i & 3), pair i >> 2 */
        __m256i low = _mm256_srli_epi32(raw[3][5 + ((i & 7) >> 2)], 8 * (i & 3) + 4 * (i >> 3));
        __m256i high = _mm256_srli_epi32(raw[3][7], 8 * (i & 3) + 2 * (i >> 2));
        __m256i sc = _mm256_or_si256(_mm256_and_si256(low, _mm256_set1_epi32(15)), _mm256_slli_epi32(_mm256_and_si256(high, _mm256_set1_epi32(3)), 4));
        return _mm256_sub_epi32(sc, _mm256_set1_epi32(32));
    }
    __m256i s;
    if (t == WT_IQ1_M) /* 3 bits i & 3 of scale word i >> 2 (bytes 48 + 2 (i >> 2)) */
        s = _mm256_srli_epi32(raw[1][6 + (i >> 3)], 16 * ((i >> 2) & 1) + 3 * (i & 3));
    else /* nibble hh of byte 66 + j (IQ2_S: 74 + j) */
        s = _mm256_srli_epi32(raw[2][6 + (j >> 2)], 8 * (j & 3) + 4 * hh);
    s = _mm256_and_si256(s, _mm256_set1_epi32(t == WT_IQ1_M ? 7 : 15));
    return _mm256_add_epi32(_mm256_add_epi32(s, s), _mm256_set1_epi32(1));
}

/* Quad r's half h8 stored: q (signed) + offset; where some row has a zero d * sc (zany), those
 * rows (z: all-ones lanes) +-1 by q's sign. */
static inline void kquad_store8(uint8_t *qs, int r, int h8, __m256i q, __m256i z, int zany, int off) {
    if (zany) {
        __m256i sign = _mm256_cmpgt_epi8(_mm256_setzero_si256(), q);
        q = _mm256_blendv_epi8(q, _mm256_blendv_epi8(_mm256_set1_epi8(1), _mm256_set1_epi8(-1), sign), z);
    }
    _mm256_storeu_si256((__m256i *)(qs + 64 * r + 32 * h8), _mm256_add_epi8(q, _mm256_set1_epi8((char)off)));
}

/* IQ2_XS, IQ2_S: block j's group k entry index (idx[k], 8 rows) from their runs, and the groups'
 * sign bits (byte k of a lane: group k's 8 signs), as AVX-512's iq2_entries16. IQ2_XS: a u16 a group
 * (bytes 2 + 8j ..), 9 bits of index and 7 of signs (their parity the eighth); IQ2_S: qs[2 + 4j ..]
 * the indices' low bytes, byte 66 + j their high bits (2 a group), signs[34 + 4j ..] a byte a group. */
static inline __attribute__((always_inline)) __m256i iq2_entries8(int t, const __m256i raw[4][8], int j, __m256i idx[4]) {
    if (t == WT_IQ2_XS) {
        __m256i w01 = raw[j >> 2][2 * (j & 3)], w23 = raw[j >> 2][2 * (j & 3) + 1];
        __m256i m9 = _mm256_set1_epi32(511), m7 = _mm256_set1_epi32(127);
        idx[0] = _mm256_and_si256(w01, m9), idx[1] = _mm256_and_si256(_mm256_srli_epi32(w01, 16), m9);
        idx[2] = _mm256_and_si256(w23, m9), idx[3] = _mm256_and_si256(_mm256_srli_epi32(w23, 16), m9);
        __m256i s7 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w01, 9), m7),
                                     _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w01, 25), m7), 7));
        s7 = _mm256_or_si256(s7, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w23, 9), m7), 14));
        s7 = _mm256_or_si256(s7, _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w23, 25), m7), 21));
        return signs7_bytes8(s7);
    }
    __m256i lo = raw[0][j], qh = _mm256_srli_epi32(raw[2][4 + (j >> 2)], 8 * (j & 3));
    for (int k = 0; k < 4; k++)
        idx[k] = _mm256_or_si256(byte_of(lo, k), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, 2 * k), _mm256_set1_epi32(3)), 8));
    return raw[1][j];
}

/* Block j of rows 8 h8 .. 8 h8 + 7 from their super-block's runs (raw; d: their d). */
static inline __attribute__((always_inline)) void kgrid_half(int t, const __m256i raw[4][8], int j, int h8, const float *d,
                                                             uint8_t *out, int off) {
    uint8_t *qs = out + 32;
    __m256i z[2];
    for (int hh = 0; hh < 2; hh++) {
        __m256i sc = kscales8(t, raw, j, hh);
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(sc), _mm256_extracti128_si256(sc, 1)); /* |sc| < 128 */
        _mm_storel_epi64((__m128i *)(out + 16 * hh + 8 * h8), _mm_packs_epi16(w, w));
        z[hh] = _mm256_castps_si256(_mm256_cmp_ps(_mm256_mul_ps(_mm256_loadu_ps(d), _mm256_cvtepi32_ps(sc)), _mm256_setzero_ps(), _CMP_EQ_OQ));
    }
    int zany = !_mm256_testz_si256(_mm256_or_si256(z[0], z[1]), _mm256_set1_epi32(-1)); /* rare: one test a block */
    if (t == WT_Q3_K) { /* q = 2-bit field j & 3 of qs[32 (j >> 2) + k] - 4 unless bit j of hmask[k] */
        for (int r = 0; r < 8; r++) {
            __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw[1 + (j >> 2)][r], 2 * (j & 3)), _mm256_set1_epi8(3));
            /* bit j of each hmask byte moved to its bit 2 (4 where set; the 16-bit shifts' carries between bytes masked off) */
            __m256i hm = j >= 2 ? _mm256_srli_epi16(raw[0][r], j - 2) : _mm256_slli_epi16(raw[0][r], 2 - j);
            __m256i q = _mm256_or_si256(lo, _mm256_and_si256(hm, _mm256_set1_epi8(4)));
            kquad_store8(qs, r, h8, _mm256_sub_epi8(q, _mm256_set1_epi8(4)), z[r >> 2], zany, off);
        }
    } else if (t == WT_IQ1_M) { /* group k: index qs[4j + k] | 3 bits of its qh nibble (the u16 at 32 + 2j), bit 3 the delta's sign */
        __m256i lo = raw[0][j], qh = _mm256_srli_epi32(raw[1][2 + (j >> 1)], 16 * (j & 1));
        for (int k = 0; k < 4; k++) {
            __m256i nib = _mm256_and_si256(_mm256_srli_epi32(qh, 4 * k), _mm256_set1_epi32(15));
            __m256i i = _mm256_or_si256(byte_of(lo, k), _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(7)), 8));
            __m256i minus = _mm256_cmpeq_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(8)), _mm256_set1_epi32(8));
            __m256i delta = _mm256_blendv_epi8(_mm256_set1_epi8(-7), _mm256_set1_epi8(-9), minus);
            __m256i q[2];
            entry_quads8(iq1s_bytes, i, q, 0);
            for (int e = 0; e < 2; e++) kquad_store8(qs, 2 * k + e, h8, _mm256_add_epi8(q[e], delta), z[k >> 1], zany, off);
        }
    } else {
        __m256i idx[4], signs = iq2_entries8(t, raw, j, idx);
        const uint64_t *table = t == WT_IQ2_XS ? iq2xs_bytes : iq2s_bytes;
        for (int k = 0; k < 4; k++) {
            __m256i q[2];
            entry_quads8(table, idx[k], q, 0);
            for (int e = 0; e < 2; e++) {
                __m256i v = q[e];
                kquad_store8(qs, 2 * k + e, h8, _mm256_blendv_epi8(v, _mm256_sub_epi8(_mm256_setzero_si256(), v), quad_signs8(signs, 2 * k + e)), z[k >> 1], zany, off);
            }
        }
    }
}

/* Q3_K's 16 scales of 8 rows as 4 vectors of bytes, once a super-block (sg[G]: lane o's byte c the
 * scale 4G + c of row o, kgrid_scales's sc), from the scale bytes' runs. */
static inline void q3k_scales8(const __m256i raw[4][8], __m256i sg[4]) {
    __m256i l0 = raw[3][5], l1 = raw[3][6], h = raw[3][7], m15 = _mm256_set1_epi8(15), m48 = _mm256_set1_epi8(48);
    __m256i low[4] = {_mm256_and_si256(l0, m15), _mm256_and_si256(l1, m15), _mm256_and_si256(_mm256_srli_epi16(l0, 4), m15),
                      _mm256_and_si256(_mm256_srli_epi16(l1, 4), m15)};
    __m256i high[4] = {_mm256_slli_epi16(h, 4), _mm256_slli_epi16(h, 2), h, _mm256_srli_epi16(h, 2)}; /* bits 2G, 2G + 1 to 4, 5 */
    for (int g = 0; g < 4; g++) sg[g] = _mm256_sub_epi8(_mm256_or_si256(low[g], _mm256_and_si256(high[g], m48)), _mm256_set1_epi8(32));
}

/* Whether every one of 16 d is finite and non-zero: then d * sc is zero exactly where sc is
 * (|d| >= 2^-24, |sc| >= 1), which q3k_block tests on the scale bytes. */
static inline int q3k_d_normal(const float *d) {
    __m256 inf = _mm256_set1_ps(INFINITY), absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), bad = _mm256_setzero_ps();
    for (int h8 = 0; h8 < 2; h8++) {
        __m256 a = _mm256_and_ps(_mm256_loadu_ps(d + 8 * h8), absm);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_EQ_OQ), _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)));
    }
    return _mm256_testz_ps(bad, bad);
}

/* The rows of a zero scale in block j of a Q3_K super-block (q3k_block's bytes): q's sign as +-1,
 * + offset (q < 0: its byte below the offset). Rare, and out of line. */
static __attribute__((noinline)) void q3k_zero_rows(const __m256i sg[2][4], int j, uint8_t *out, int off) {
    int c = 2 * (j & 1);
    __m256i zero = _mm256_setzero_si256(), base = _mm256_set1_epi8((char)off);
    for (int h8 = 0; h8 < 2; h8++) {
        __m256i zb = _mm256_cmpeq_epi8(sg[h8][j >> 1], zero);
        for (int r = 0; r < 8; r++) { /* dword o: row o's byte c + (r >> 2) of zb, over its 4 bytes */
            int k = c + (r >> 2);
            __m256i z = _mm256_shuffle_epi8(zb, _mm256_setr_epi8(k, k, k, k, k + 4, k + 4, k + 4, k + 4, k + 8, k + 8, k + 8, k + 8, k + 12,
                                                                 k + 12, k + 12, k + 12, k, k, k, k, k + 4, k + 4, k + 4, k + 4, k + 8,
                                                                 k + 8, k + 8, k + 8, k + 12, k + 12, k + 12, k + 12));
            __m256i *p = (__m256i *)(out + 32 + 64 * r + 32 * h8), u = _mm256_loadu_si256(p);
            __m256i neg = _mm256_cmpgt_epi8(base, u); /* u < off: the bytes are small and positive */
            __m256i pm1 = _mm256_add_epi8(base, _mm256_or_si256(neg, _mm256_set1_epi8(1))); /* off - 1 or off + 1 */
            _mm256_storeu_si256(p, _mm256_blendv_epi8(u, pm1, z));
        }
    }
}

/* Block j (a constant) of a Q3_K super-block's 16 rows whose d are all q3k_d_normal: the scales
 * by byte shuffles of sg, the quads as kgrid_half's, q + offset = (2-bit field | 4 hmask bit) +
 * offset - 4, then a zero scale's rows (rare: one test a block) mended by q3k_zero_rows. */
static inline __attribute__((always_inline)) void q3k_block(const __m256i raw[2][4][8], const __m256i sg[2][4], int j,
                                                            uint8_t *out, int off) {
    int c = 2 * (j & 1); /* scales 2j, 2j + 1: bytes c, c + 1 of sg[j >> 1]'s lanes */
    __m256i pick = _mm256_setr_epi8(c, c + 4, c + 8, c + 12, c + 1, c + 5, c + 9, c + 13, -1, -1, -1, -1, -1, -1, -1, -1, c, c + 4,
                                    c + 8, c + 12, c + 1, c + 5, c + 9, c + 13, -1, -1, -1, -1, -1, -1, -1, -1);
    __m128i half[2];
    __m256i zero = _mm256_setzero_si256(), any = zero;
    for (int h8 = 0; h8 < 2; h8++) { /* [half 0 rows 0-3, half 1 rows 0-3 | half 0 rows 4-7, half 1 rows 4-7] */
        __m256i v = _mm256_shuffle_epi8(sg[h8][j >> 1], pick);
        half[h8] = _mm_unpacklo_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); /* half 0 rows 0-7, half 1 */
        any = _mm256_or_si256(any, _mm256_cmpeq_epi8(v, zero));
    }
    _mm_storeu_si128((__m128i *)out, _mm_unpacklo_epi64(half[0], half[1]));
    _mm_storeu_si128((__m128i *)(out + 16), _mm_unpackhi_epi64(half[0], half[1]));
    __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4), base = _mm256_set1_epi8((char)(off - 4));
    for (int h8 = 0; h8 < 2; h8++)
        for (int r = 0; r < 8; r++) { /* q = 2-bit field + 4 times the hmask bit - 4 (kgrid_half) */
            __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw[h8][1 + (j >> 2)][r], 2 * (j & 3)), m3);
            __m256i hm = j >= 2 ? _mm256_srli_epi16(raw[h8][0][r], j - 2) : _mm256_slli_epi16(raw[h8][0][r], 2 - j);
            __m256i q = _mm256_add_epi8(_mm256_or_si256(lo, _mm256_and_si256(hm, m4)), base);
            _mm256_storeu_si256((__m256i *)(out + 32 + 64 * r + 32 * h8), q);
        }
    if (!_mm256_testz_si256(any, _mm256_setr_epi64x(-1, 0, -1, 0))) q3k_zero_rows(sg, j, out, off); /* the picked 8 bytes a lane */
}

/* Super-block sb of group grp's 16 rows: each row's d and the half's transposed runs (kgrid_raw), with
 * the next group's bytes (the 16 rows follow each other) asked for, a super-block's share a step: one
 * stream in order, ahead of the 16 rows' streams here (a hint: no value changes). */
static inline __attribute__((always_inline)) void kgrid_superblock(int t, const uint8_t *grp, int64_t rb, int64_t sb,
                                                                   float d[16], __m256i raw[2][4][8]) {
    const uint8_t *blk = grp + (sb >> 3) * block_bytes(t);
    next_group_prefetch(t, grp, rb, sb);
    for (int o = 0; o < 16; o++) d[o] = kgrid_d(t, blk + o * rb);
    for (int h8 = 0; h8 < 2; h8++)
        for (int c = 0; c < kgrid_runs(t); c++) kgrid_raw(blk + 8 * h8 * rb + kgrid_run_at(t, c), rb, raw[h8][c]);
}

static inline __attribute__((always_inline)) void kgrid_groups(int t, const uint8_t *grp, int64_t rb, int64_t nb,
                                                               uint8_t *dst) {
    int bt = q8_expanded_type(t), off = q8_offset(bt);
    float d[16];
    __m256i raw[2][4][8]; /* each half of 8 rows: its super-block's runs (kgrid_raw) */
    for (int64_t sb = 0; sb < nb; sb += 8) { /* a super-block's 8 blocks, j a constant in each */
        uint8_t *first = dst + q8_block_at(bt, sb);
        kgrid_superblock(t, grp, rb, sb, d, raw);
        memcpy(first - q8_super_bytes(bt), d, 64);
        if (t == WT_Q3_K) {
            __m256i sg[2][4];
            for (int h8 = 0; h8 < 2; h8++) q3k_scales8((const __m256i(*)[8])raw[h8], sg[h8]);
            if (q3k_d_normal(d)) {
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    q3k_block((const __m256i(*)[4][8])raw, (const __m256i(*)[4])sg, j, first + j * q8_block_bytes(bt), off);
                continue;
            }
        }
        for (int j = 0; j < 8; j++) { /* the other types (and a Q3_K super-block with a zero or non-finite d) */
            uint8_t *out = first + j * q8_block_bytes(bt);
            kgrid_half(t, (const __m256i(*)[8])raw[0], j, 0, d, out, off);
            kgrid_half(t, (const __m256i(*)[8])raw[1], j, 1, d + 8, out, off);
        }
    }
}

#if defined(STRATA_TARGET_AVX2)
/* ---- AVX2 (and AVX-VNNI), Q3_K for few activation rows: a super-block decoded, then its steps at once
 * expand_group decodes a whole group before limb.c's steps load it back: at 2048 inputs 16 rows
 * of 36 KB, past L1, so every step's load came from L2. Here each super-block's 16 rows are
 * decoded (kgrid_groups's q3k_block, or kgrid_half where a d is zero or not finite) into 4.3 KB
 * that the rows' steps then read from L1, and as q + 4 in 0..7 instead of q + 32 (offset 4: the
 * sums start at start / 8, exact as start = -32 times the limb's sum; a zero scale's rows 4 +- 1,
 * q's sign, as with any offset). A half's four vpmaddubsw steps of each limb stay within int16
 * (4 * 2 * 7 * 128 = 7,168), so one chain a limb; the sums S_j are the same exact integers as
 * limb.c's, and |S_2| <= 16 * 4 * 128 = 8,192 < 2^14, so S = S_2 65536 + S_1 256 + S_0 is exact
 * in int32 and its conversion is limb_value3's correctly rounded float. Each half's d * sc is
 * q8_scale's fp32 product and acc = fma((d * sc) * s, f, acc) over the halves in order is
 * limb_bytes_rows's float sequence: the same bits. One row (decode) takes each block's bytes
 * straight from the decoding in registers into its steps instead (q3k_fused_block), nothing
 * stored: the same bytes, so the same bits. */

/* Half hh's three limb chains p (two lanes of 8 outputs each) into acc: S = S_2 65536 + S_1 256 + S_0
 * plus the offset's share (start / 8 of each limb, one constant), exact in int32, then
 * acc = fma((d * sc) * s, S, acc) with ws the half's d * sc: limb_bytes_rows's float sequence. */
static inline __attribute__((always_inline)) void q3k_half_sums(__m256i p[3][2], const int32_t *start, int hh,
                                                                const __m256 ws[2], __m256 vs, __m256 acc[2]) {
    __m256i ones = _mm256_set1_epi16(1);
    __m256i from = _mm256_set1_epi32((start[4 + hh] >> 3) * 65536 + (start[2 + hh] >> 3) * 256 + (start[hh] >> 3));
    for (int h8 = 0; h8 < 2; h8++) {
        __m256i s0 = _mm256_madd_epi16(p[0][h8], ones), s1 = _mm256_madd_epi16(p[1][h8], ones);
        __m256i s2 = _mm256_madd_epi16(p[2][h8], ones);
        __m256i tot = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(s2, 16), _mm256_slli_epi32(s1, 8)),
                                       _mm256_add_epi32(s0, from));
        acc[h8] = _mm256_fmadd_ps(_mm256_mul_ps(ws[h8], vs), _mm256_cvtepi32_ps(tot), acc[h8]);
    }
}

/* Block blk (q3k_block's bytes, offset 4; d: the super-block's 16 d) against one row's limbs. */
static inline __attribute__((always_inline)) void q3k_dot_block(const uint8_t *blk, const float *d, const int8_t *xq,
                                                                const int32_t *start, float xs, __m256 acc[2]) {
    __m256 vs = _mm256_set1_ps(xs);
    for (int hh = 0; hh < 2; hh++) {
        __m256i p[3][2];
#pragma GCC unroll 4
        for (int r = 4 * hh; r < 4 * hh + 4; r++) {
            __m256i w0 = _mm256_loadu_si256((const __m256i *)(blk + 32 + 64 * r));
            __m256i w1 = _mm256_loadu_si256((const __m256i *)(blk + 64 + 64 * r));
#pragma GCC unroll 3
            for (int l = 0; l < 3; l++) {
                int32_t x4;
                memcpy(&x4, xq + 32 * l + 4 * r, 4);
                __m256i xv = _mm256_set1_epi32(x4), m0 = _mm256_maddubs_epi16(w0, xv), m1 = _mm256_maddubs_epi16(w1, xv);
                p[l][0] = r == 4 * hh ? m0 : _mm256_add_epi16(p[l][0], m0);
                p[l][1] = r == 4 * hh ? m1 : _mm256_add_epi16(p[l][1], m1);
            }
        }
        __m256 ws[2]; /* q8_scale's d * sc of rows 8 h8 .. 8 h8 + 7 */
        for (int h8 = 0; h8 < 2; h8++)
            ws[h8] = _mm256_mul_ps(_mm256_loadu_ps(d + 8 * h8),
                                   _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 16 * hh + 8 * h8)))));
        q3k_half_sums(p, start, hh, ws, vs, acc);
    }
}

/* Block j (a constant) of a Q3_K super-block's 16 rows against one row's limbs, decoded in registers
 * (q3k_block's bytes with offset 4, a zero d * sc's rows 4 +- 1) straight into q3k_dot_block's steps. */
static inline __attribute__((always_inline)) void q3k_fused_block(const __m256i raw[2][4][8], const __m256i sg[2][4], int j,
                                                                  const float *d, const int8_t *xq, const int32_t *start,
                                                                  float xs, __m256 acc[2]) {
    int c = 2 * (j & 1); /* scales 2j, 2j + 1: bytes c, c + 1 of sg[j >> 1]'s lanes (q3k_block) */
    __m256i pick = _mm256_setr_epi8(c, c + 4, c + 8, c + 12, c + 1, c + 5, c + 9, c + 13, -1, -1, -1, -1, -1, -1, -1, -1, c, c + 4,
                                    c + 8, c + 12, c + 1, c + 5, c + 9, c + 13, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256 ws[2][2]; /* [half][h8]: d * sc of rows 8 h8 .. 8 h8 + 7 */
    __m256i z[2][2], zor = _mm256_setzero_si256();
    for (int h8 = 0; h8 < 2; h8++) {
        __m256i v = _mm256_shuffle_epi8(sg[h8][j >> 1], pick);
        __m128i b8 = _mm_unpacklo_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); /* half 0 rows 0-7, half 1 */
        for (int hh = 0; hh < 2; hh++) {
            __m256i sc = _mm256_cvtepi8_epi32(hh ? _mm_srli_si128(b8, 8) : b8);
            ws[hh][h8] = _mm256_mul_ps(_mm256_loadu_ps(d + 8 * h8), _mm256_cvtepi32_ps(sc));
            z[hh][h8] = _mm256_castps_si256(_mm256_cmp_ps(ws[hh][h8], _mm256_setzero_ps(), _CMP_EQ_OQ));
            zor = _mm256_or_si256(zor, z[hh][h8]);
        }
    }
    int mend = !_mm256_testz_si256(zor, zor); /* rare in real files: one test a block */
    __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
    __m256 vs = _mm256_set1_ps(xs);
    for (int hh = 0; hh < 2; hh++) {
        __m256i p[3][2];
        for (int l = 0; l < 3; l++) p[l][0] = p[l][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int r = 4 * hh; r < 4 * hh + 4; r++) {
            __m256i w[2];
            for (int h8 = 0; h8 < 2; h8++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw[h8][1 + (j >> 2)][r], 2 * (j & 3)), m3);
                __m256i hm = j >= 2 ? _mm256_srli_epi16(raw[h8][0][r], j - 2) : _mm256_slli_epi16(raw[h8][0][r], 2 - j);
                __m256i hb = _mm256_and_si256(hm, m4);
                w[h8] = _mm256_or_si256(lo, hb);
                if (mend) w[h8] = _mm256_blendv_epi8(w[h8], _mm256_add_epi8(m3, _mm256_srli_epi16(hb, 1)), z[hh][h8]);
            }
            for (int l = 0; l < 3; l++) {
                int32_t x4;
                memcpy(&x4, xq + 32 * l + 4 * r, 4);
                __m256i xv = _mm256_set1_epi32(x4);
                p[l][0] = _mm256_add_epi16(p[l][0], _mm256_maddubs_epi16(w[0], xv));
                p[l][1] = _mm256_add_epi16(p[l][1], _mm256_maddubs_epi16(w[1], xv));
            }
        }
        q3k_half_sums(p, start, hh, ws[hh], vs, acc);
    }
}

/* Q3_K's 1 to KGRID_ROWS rows (kgrid_limb_rows). */
static int q3k_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start,
                         const float *xs, float *y) {
    enum { BLOCK = 32 + 512 }; /* q8_block_bytes(WT_Q6_K_BYTES): the scales, the quads */
    int64_t rb = row_bytes(t, 32 * nb);
    __m256 acc[KGRID_ROWS][2];
    for (int64_t i = 0; i < M; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    float d[16];
    __m256i raw[2][4][8];
    _Alignas(32) uint8_t out[8 * BLOCK];
    for (int64_t sb = 0; sb < nb; sb += 8) {
        kgrid_superblock(WT_Q3_K, grp, rb, sb, d, raw);
        __m256i sg[2][4];
        for (int h8 = 0; h8 < 2; h8++) q3k_scales8((const __m256i(*)[8])raw[h8], sg[h8]);
        if (M == 1) { /* one row: each block decoded in registers straight into its steps, nothing stored */
            const int8_t *xr = xq + sb * 96;
            const int32_t *st = start + sb * 6;
#define Q3K_FUSED(j) q3k_fused_block((const __m256i(*)[4][8])raw, (const __m256i(*)[4])sg, j, d, xr + 96 * j, st + 6 * j, xs[sb + j], acc[0])
            Q3K_FUSED(0), Q3K_FUSED(1), Q3K_FUSED(2), Q3K_FUSED(3), Q3K_FUSED(4), Q3K_FUSED(5), Q3K_FUSED(6), Q3K_FUSED(7);
#undef Q3K_FUSED
            continue;
        }
        if (q3k_d_normal(d)) {
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) q3k_block((const __m256i(*)[4][8])raw, (const __m256i(*)[4])sg, j, out + j * BLOCK, 4);
        } else {
            for (int j = 0; j < 8; j++) {
                kgrid_half(t, (const __m256i(*)[8])raw[0], j, 0, d, out + j * BLOCK, 4);
                kgrid_half(t, (const __m256i(*)[8])raw[1], j, 1, d + 8, out + j * BLOCK, 4);
            }
        }
        for (int64_t i = 0; i < M; i++) {
            const int8_t *xr = xq + (i * nb + sb) * 96;
            const int32_t *st = start + (i * nb + sb) * 6;
            const float *s = xs + i * nb + sb;
            for (int j = 0; j < 8; j++) q3k_dot_block(out + j * BLOCK, d, xr + 96 * j, st + 6 * j, s[j], acc[i]);
        }
    }
    for (int64_t i = 0; i < M; i++) _mm256_storeu_ps(y + 16 * i, acc[i][0]), _mm256_storeu_ps(y + 16 * i + 8, acc[i][1]);
    return 1;
}
#endif

#if defined(STRATA_TARGET_AVX2)
/* ---- AVX-VNNI's four K-grid types and AVX2's IQ1_M for one to KGRID_FUSED8 activation rows (AVX2: one):
 * each block of a super-block's 16 rows decoded in registers, 8 rows a vector (kgrid_half's bytes as q + c:
 * IQ1_M c = 16, bytes 7..25; IQ2 c = 64, 21..107; Q3_K c = 4, 0..7; a zero d * sc's rows c +- 1 by q's
 * sign), straight into each row's limb steps, nothing stored. The starts (offset 32's; IQ2 offset 64's,
 * taken as they are) are -offset times each limb's sum, so c's are start * c / offset exactly. AVX-VNNI's
 * vpdpbusd sums into int32 at once; AVX2's vpmaddubsw pairs stay in int16 over a half's 4 steps
 * (4 * 2 * 25 * 128 = 25,600) and are widened once (vpmaddwd). IQ1_M, Q3_K: |S| <= 16 * 9 * 128 * 65793
 * < 2^31, so S_2 65536 + S_1 256 + S_0 (wrapping on the way) is the exact S in int32; IQ2's S (up to
 * 16 * 43 * 128 * 65793) by kgrid_value8, its correctly rounded float either way. acc = fma((d * sc) * s,
 * f, acc) over the halves in order is limb_bytes_rows's float sequence: the same bits as the expanded
 * group's steps. */
#define KGRID_FUSED8 4 /* rows kgrid_fused8 takes */

static inline __attribute__((always_inline)) int kgrid_c8(int t) { return t == WT_Q3_K ? 4 : t == WT_IQ1_M ? 16 : 64; }

/* IQ2_XS's and IQ2_S's entries as iq2xs_bytes' and iq2s_bytes' plus 64 a byte (their q + 64 where positive;
 * 128 minus it, 64 - q, where negative): one subtraction and a blend a quad for the signs. */
static uint64_t iq2xs_w64[512], iq2s_w64[1024];

__attribute__((constructor)) static void kgrid_w64(void) {
    for (int i = 0; i < 1024; i++) { /* 8, 25, 43 + 64: no carry between bytes */
        uint64_t c = spread2(iq2s_grid[i]), x = i < 512 ? spread2(iq2xs_grid[i]) : 0;
        iq2s_w64[i] = BYTES(72) + (c << 4) + c + ((c >> 1) & BYTES(1));
        if (i < 512) iq2xs_w64[i] = BYTES(72) + (x << 4) + x + ((x >> 1) & BYTES(1));
    }
}

/* Half hh of block j, 8 rows (raw: their runs; idx, signs: IQ2's, iq2_entries8; z: the rows whose d * sc
 * is zero, zany: whether any, rare): its 4 quads' bytes q + kgrid_c8(t) in w. */
static inline __attribute__((always_inline)) void kgrid_quads8(int t, const __m256i raw[4][8], int j, int hh, const __m256i idx[4],
                                                               __m256i signs, __m256i z, int zany, __m256i w[4]) {
    if (t == WT_Q3_K) { /* 2-bit field | 4 times the hmask bit (q3k_fused_block) */
        __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
#pragma GCC unroll 4
        for (int n = 0; n < 4; n++) {
            int r = 4 * hh + n;
            __m256i lo = _mm256_and_si256(_mm256_srli_epi16(raw[1 + (j >> 2)][r], 2 * (j & 3)), m3);
            __m256i hm = j >= 2 ? _mm256_srli_epi16(raw[0][r], j - 2) : _mm256_slli_epi16(raw[0][r], 2 - j);
            __m256i hb = _mm256_and_si256(hm, m4);
            w[n] = _mm256_or_si256(lo, hb);
            if (zany) w[n] = _mm256_blendv_epi8(w[n], _mm256_add_epi8(m3, _mm256_srli_epi16(hb, 1)), z); /* 3 or 5 */
        }
    } else if (t == WT_IQ1_M) { /* groups 2 hh, 2 hh + 1: 8 code + 8 +- 1 (kgrid_half's q + 16) */
        __m256i lo = raw[0][j], qh = _mm256_srli_epi32(raw[1][2 + (j >> 1)], 16 * (j & 1));
#pragma GCC unroll 2
        for (int k = 2 * hh; k < 2 * hh + 2; k++) {
            __m256i nib = _mm256_and_si256(_mm256_srli_epi32(qh, 4 * k), _mm256_set1_epi32(15));
            __m256i i = _mm256_or_si256(byte_of(lo, k), _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(7)), 8));
            __m256i minus = _mm256_cmpeq_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(8)), _mm256_set1_epi32(8));
            __m256i delta = _mm256_blendv_epi8(_mm256_set1_epi8(9), _mm256_set1_epi8(7), minus);
            __m256i v[2];
            entry_quads8(iq1s_bytes, i, v, 0);
            w[2 * (k & 1)] = _mm256_add_epi8(v[0], delta), w[2 * (k & 1) + 1] = _mm256_add_epi8(v[1], delta);
        }
        if (zany) /* 16 +- 1 by q's sign (q < 0: the byte below 16) */
            for (int n = 0; n < 4; n++) {
                __m256i neg = _mm256_cmpgt_epi8(_mm256_set1_epi8(16), w[n]);
                w[n] = _mm256_blendv_epi8(w[n], _mm256_blendv_epi8(_mm256_set1_epi8(17), _mm256_set1_epi8(15), neg), z);
            }
    } else { /* IQ2_XS, IQ2_S: groups 2 hh, 2 hh + 1: 64 +- the entry's byte */
        __m256i c128 = _mm256_set1_epi8((char)128);
#pragma GCC unroll 2
        for (int k = 2 * hh; k < 2 * hh + 2; k++) {
            __m256i v[2];
            entry_quads8(t == WT_IQ2_XS ? iq2xs_w64 : iq2s_w64, idx[k], v, 0);
#pragma GCC unroll 2
            for (int e = 0; e < 2; e++) {
                __m256i m = quad_signs8(signs, 2 * k + e);
                __m256i q = _mm256_blendv_epi8(v[e], _mm256_sub_epi8(c128, v[e]), m);
                if (zany) q = _mm256_blendv_epi8(q, _mm256_blendv_epi8(_mm256_set1_epi8(65), _mm256_set1_epi8(63), m), z);
                w[2 * (k & 1) + e] = q;
            }
        }
    }
}

/* The correctly rounded float of S = s2 65536 + s1 256 + s0 (IQ2's exact limb sums, |S| < 2^33): where
 * every A = s2 256 + (L >> 8) (L = s1 256 + s0, |L| < 2^26) is below 2^24 in size, fma(A, 256, L & 255),
 * both conversions exact and one rounding; else S in double (exact), rounded once (limb_f8's). */
static inline __attribute__((always_inline)) __m256 kgrid_value8(__m256i s0, __m256i s1, __m256i s2) {
    __m256i l = _mm256_add_epi32(_mm256_slli_epi32(s1, 8), s0);
    __m256i a = _mm256_add_epi32(_mm256_slli_epi32(s2, 8), _mm256_srai_epi32(l, 8));
    if (_mm256_testz_si256(_mm256_add_epi32(a, _mm256_set1_epi32(1 << 24)), _mm256_set1_epi32(-(1 << 25))))
        return _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), _mm256_set1_ps(256.0f), _mm256_cvtepi32_ps(_mm256_and_si256(l, _mm256_set1_epi32(255))));
    return limb_f8(s2, l);
}

/* Half hh's 4 quads' bytes w (8 rows) against one row's limbs xq (start: its block's starts): the float of
 * the exact S of each of the 8 outputs. */
static inline __attribute__((always_inline)) __m256 kgrid_steps8(int t, const __m256i w[4], int hh, const int8_t *xq,
                                                                 const int32_t *start) {
    int wide = t == WT_IQ2_XS || t == WT_IQ2_S; /* IQ2: starts as they are, each limb's own */
    __m256i p[3];
    for (int l = 0; l < 3; l++) p[l] = wide ? _mm256_set1_epi32(start[2 * l + hh]) : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int n = 0; n < 4; n++)
#pragma GCC unroll 3
        for (int l = 0; l < 3; l++) {
            int32_t x4;
            memcpy(&x4, xq + 32 * l + 4 * (4 * hh + n), 4);
            __m256i xv = _mm256_set1_epi32(x4);
#if defined(STRATA_AVX_VNNI)
            p[l] = _mm256_dpbusd_avx_epi32(p[l], w[n], xv);
#else /* IQ1_M (kgrid_limb_rows): int16 pairs over the half's 4 steps */
            __m256i m = _mm256_maddubs_epi16(w[n], xv);
            p[l] = n == 0 ? m : _mm256_add_epi16(p[l], m);
#endif
        }
#if !defined(STRATA_AVX_VNNI)
    for (int l = 0; l < 3; l++) p[l] = _mm256_madd_epi16(p[l], _mm256_set1_epi16(1));
#endif
    if (wide) return kgrid_value8(p[0], p[1], p[2]);
    int sh = t == WT_Q3_K ? 3 : 1; /* offset 32's starts times c / 32 */
    uint32_t from = ((uint32_t)(start[4 + hh] >> sh) << 16) + ((uint32_t)(start[2 + hh] >> sh) << 8) + (uint32_t)(start[hh] >> sh);
    __m256i tot = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(p[2], 16), _mm256_slli_epi32(p[1], 8)),
                                   _mm256_add_epi32(p[0], _mm256_set1_epi32((int)from)));
    return _mm256_cvtepi32_ps(tot);
}

/* A group's 16 rows against M (a constant) rows' limbs, a super-block at a time, its blocks decoded in
 * registers (see above); y[16 i + o]: row i's output o. */
static inline __attribute__((always_inline)) void kgrid_fused8(int t, const uint8_t *grp, int64_t rb, int64_t nb, int M,
                                                               const int8_t *xq, const int32_t *start, const float *xs, float *y) {
    __m256 acc[KGRID_FUSED8][2];
    for (int i = 0; i < M; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    float d[16];
    __m256i raw[2][4][8];
    for (int64_t sb = 0; sb < nb; sb += 8) {
        kgrid_prefetch(t, grp + (sb >> 3) * block_bytes(t), rb);
        kgrid_superblock(t, grp, rb, sb, d, raw);
#pragma GCC unroll 1
        for (int j = 0; j < 8; j++)
#pragma GCC unroll 2
            for (int h8 = 0; h8 < 2; h8++) {
                const __m256i(*rw)[8] = (const __m256i(*)[8])raw[h8];
                __m256 dv = _mm256_loadu_ps(d + 8 * h8);
                __m256i idx[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
                __m256i signs = idx[0];
                if (t == WT_IQ2_XS || t == WT_IQ2_S) signs = iq2_entries8(t, rw, j, idx);
#pragma GCC unroll 2
                for (int hh = 0; hh < 2; hh++) {
                    __m256 ws = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(kscales8(t, rw, j, hh))); /* q8_scale's d * sc */
                    __m256i z = _mm256_castps_si256(_mm256_cmp_ps(ws, _mm256_setzero_ps(), _CMP_EQ_OQ));
                    __m256i w[4] = {z, z, z, z}; /* each set by kgrid_quads8 (the compiler cannot tell) */
                    kgrid_quads8(t, rw, j, hh, idx, signs, z, !_mm256_testz_si256(z, z), w);
                    for (int i = 0; i < M; i++) {
                        int64_t b = i * nb + sb + j;
                        __m256 f = kgrid_steps8(t, w, hh, xq + 96 * b, start + 6 * b);
                        acc[i][h8] = _mm256_fmadd_ps(_mm256_mul_ps(ws, _mm256_set1_ps(xs[b])), f, acc[i][h8]);
                    }
                }
            }
    }
    for (int i = 0; i < M; i++) _mm256_storeu_ps(y + 16 * i, acc[i][0]), _mm256_storeu_ps(y + 16 * i + 8, acc[i][1]);
}

/* kgrid_fused8 for type T (a constant) at M rows (M a constant in each). */
#define KGRID_FUSED8_ROWS(T)                                                                                        \
    switch (M) {                                                                                                    \
    case 1: kgrid_fused8(T, grp, rb, nb, 1, xq, start, xs, y); break;                                               \
    case 2: kgrid_fused8(T, grp, rb, nb, 2, xq, start, xs, y); break;                                               \
    case 3: kgrid_fused8(T, grp, rb, nb, 3, xq, start, xs, y); break;                                               \
    default: kgrid_fused8(T, grp, rb, nb, 4, xq, start, xs, y); break;                                              \
    }

/* See q8.h. AVX2: Q3_K up to KGRID_ROWS rows (q3k_limb_rows), IQ1_M at one row (kgrid_fused8); IQ2_XS and
 * IQ2_S none (Zen 5, 1 thread, weights from memory: kgrid_fused8 ran 0.82-0.85 times expand_group's steps
 * at 1 to 4 rows, IQ1_M 1.03 at one, 0.93 at two: each IQ2 step widened to int32 at once, and the decoding
 * the same either way). AVX-VNNI: the four types up to KGRID_FUSED8 rows (1.02-1.30 times; more rows:
 * expand_group and limb.c's steps), but Q3_K at one row and at 5 to KGRID_ROWS by q3k_limb_rows as on AVX2
 * (1.06 and 1.28 times kgrid_fused8's and expand_group's). */
int kgrid_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start,
                    const float *xs, float *y) {
    int64_t rb = row_bytes(t, 32 * nb);
#if !defined(STRATA_AVX_VNNI)
    if (t == WT_Q3_K) return M <= KGRID_ROWS ? q3k_limb_rows(t, grp, nb, M, xq, start, xs, y) : 0;
    if (t != WT_IQ1_M || M != 1) return 0;
    kgrid_fused8(WT_IQ1_M, grp, rb, nb, 1, xq, start, xs, y);
#else
    if (t == WT_Q3_K && (M == 1 || M > KGRID_FUSED8)) return M <= KGRID_ROWS ? q3k_limb_rows(t, grp, nb, M, xq, start, xs, y) : 0;
    if (M > KGRID_FUSED8) return 0;
    if (t == WT_IQ1_M) {
        KGRID_FUSED8_ROWS(WT_IQ1_M)
    } else if (t == WT_IQ2_XS) {
        KGRID_FUSED8_ROWS(WT_IQ2_XS)
    } else if (t == WT_IQ2_S) {
        KGRID_FUSED8_ROWS(WT_IQ2_S)
    } else {
        KGRID_FUSED8_ROWS(WT_Q3_K)
    }
#endif
    return 1;
}
#undef KGRID_FUSED8_ROWS
#endif

static void kgrid_expand_avx2(int t, const uint8_t *grp, int64_t rb, int64_t nb, uint8_t *dst) {
    switch (t) { /* a constant type: no tests of it in the loops */
    case WT_Q3_K: kgrid_groups(WT_Q3_K, grp, rb, nb, dst); break;
    case WT_IQ1_M: kgrid_groups(WT_IQ1_M, grp, rb, nb, dst); break;
    case WT_IQ2_XS: kgrid_groups(WT_IQ2_XS, grp, rb, nb, dst); break;
    default: kgrid_groups(WT_IQ2_S, grp, rb, nb, dst); break;
    }
}
#endif

#if !defined(STRATA_TARGET_AVX512) && !defined(STRATA_TARGET_AVX2)
int kgrid_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start,
                    const float *xs, float *y) {
    (void)t, (void)grp, (void)nb, (void)M, (void)xq, (void)start, (void)xs, (void)y;
    return 0; /* the other targets: expand_group and limb.c's steps */
}
#endif

#if defined(STRATA_TARGET_AVX512)
/* Which types the AVX-512 build decodes without gathers (the AVX2 sequence above, the same bytes):
 * bit t for weight type t. The rule, set once when the library loads: on AMD's CPUs (Zen 4 and 5,
 * AMD's AVX-512 ones) the types measured faster so on Zen 5 (bench_kgrid.py --paths, one thread,
 * the two ways taking turns; at 1 and 8 rows, where decoding is most of a call: IQ3_XXS 1.20-1.21
 * and 1.10 times, IQ2_XXS 1.16-1.17 and 1.08, IQ1_S 1.13 and 1.07, IQ2_S 1.02-1.04 and 1.01, Q3_K
 * 1.02 at 8 rows (1 to 3: kgrid_limb_rows either way); at 512 rows all within the noise), the
 * gathers kept for IQ3_S (0.87-0.88 times without), IQ2_XS (0.93-0.94) and IQ1_M (0.96-0.99); on
 * the other CPUs none (Intel's zmm gathers are fast where its Gather Data Sampling microcode leaves
 * them so; not measured here). Either way gives the same bytes, so the same bits. */
#define GATHER_FREE_AMD (1 << WT_Q3_K | 1 << WT_IQ2_S | 1 << WT_IQ2_XXS | 1 << WT_IQ3_XXS | 1 << WT_IQ1_S)
static int gather_free_default, gather_free;
static int cpu_vbmi; /* the CPU has AVX512_VBMI (grid_vbmi_tables, below) */
#define GRID_NO_VBMI 30 /* strata_grid_gather_free's mask bit 30: without VBMI, each type's way as its bit says */
/* Whether IQ2_XXS, IQ3_XXS and IQ3_S take the VBMI steps now (grid_limb_rows; the -3 query). */
static inline int grid_vbmi_on(void) { return cpu_vbmi && !(gather_free >> GRID_NO_VBMI & 1); }

__attribute__((constructor)) static void gather_choice(void) {
    __builtin_cpu_init();
    gather_free_default = __builtin_cpu_is("amd") ? GATHER_FREE_AMD : 0;
    gather_free = gather_free_default;
}

/* See strata_kernels.h. */
int strata_grid_gather_free(int mask) {
    if (mask == -3) return grid_vbmi_on();
    if (mask >= 0) gather_free = mask;
    else if (mask == -2) gather_free = gather_free_default;
    return gather_free;
}
#else
int strata_grid_gather_free(int mask) {
    (void)mask;
    return -1; /* one way a type in this build */
}
#endif

#if defined(STRATA_TARGET_AVX512)
/* ---- AVX-512, the grid types for few activation rows (decode) --------------------------------
 * expand_group decodes a group's 16 rows whole (at 2048 inputs 36 KB, past L1) before limb.c's
 * steps load it back. Here each block of the 16 rows is decoded in registers (with gathers or without,
 * as strata_grid_gather_free picks for the type: grid16, IQ3_S's iq3s16_runs; half8's halves put
 * together, IQ3_XXS's iq3xxs16_free) straight
 * into its vpdpbusd steps, nothing stored: the same Q8_0 bytes (q + 128, a zero scale's rows +-1),
 * so the same integer sums S_j with limb_group_rows's starts (offset 128; limb 1's folded into limb
 * 0's or not, as the row holds it), S = S_2 65536 + S_1 256 + S_0 formed by q8.h's limb_values3
 * (the correctly rounded float of the exact S), and acc = fma(scale * s, f, acc) over the blocks in order: limb_group_rows's float
 * sequence, the same bits. */
#define GRID_FUSED 4 /* rows grid_fused_rows takes */
_Static_assert(GRID_FUSED <= LIMB_ROWS, "limb_values3_from's arrays hold LIMB_ROWS rows");

/* A block's 16 rows' quads q and scales against M rows' limbs into acc. */
static inline __attribute__((always_inline)) void grid_dot16(int t, const __m512i q[8], __m512 scale, int M, const int8_t *const *xq,
                                                             const int32_t *const *start, const float *xs, __m512 *acc) {
    __m512i s[GRID_FUSED][3];
    for (int i = 0; i < M; i++)
        for (int l = 0; l < 3; l++) s[i][l] = _mm512_set1_epi32(start[i][2 * l]);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
#pragma GCC unroll 4
        for (int i = 0; i < M; i++)
#pragma GCC unroll 3
            for (int l = 0; l < 3; l++) /* the row's 4 limb bytes broadcast (vpdpbusd's {1to16} operand) */
                s[i][l] = _mm512_dpbusd_epi32(s[i][l], q[r], _mm512_broadcastd_epi32(_mm_loadu_si32(xq[i] + 32 * l + 4 * r)));
    vf f[GRID_FUSED]; /* IQ2_XXS, IQ3_XXS (values up to 43, 62): |S_2| passes 2^14 too often for the int32 test to pay */
    limb_values3_from(&s[0][0], M, f, t == WT_IQ3_S || t == WT_IQ1_S);
    for (int i = 0; i < M; i++)
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(scale, _mm512_set1_ps(xs[i])), f[i].v, acc[i]);
}

/* IQ3_XXS's block j of 16 rows (iq3xxs16's bytes) without a gather: each entry by a scalar load at its
 * index byte (dwords8's, 8 rows a half), the sign words too (rows4). On Zen 5 a zmm gather costs far
 * more than its 16 loads: a gather for some quads, or for the sign words, made the block slower. */
static inline __attribute__((always_inline)) __m512 iq3xxs16_free(const uint8_t *blk, int64_t rb, int j, __m512 dv, __m512i q[8]) {
    __m512i aux = _mm512_inserti64x4(_mm512_castsi256_si512(rows4(blk + 66 + 4 * j, rb)), rows4(blk + 66 + 4 * j + 8 * rb, rb), 1);
    __m512 sub = _mm512_cvtepi32_ps(_mm512_srli_epi32(aux, 28));
    __m512 scale = _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_add_ps(_mm512_set1_ps(0.5f), sub)), _mm512_set1_ps(0.5f));
    __mmask64 z = zero_rows(scale);
    __m512i s8 = signs7_bytes(aux);
    const uint32_t *g = iq3xxs_bytes;
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) { /* quad r: grid entry r */
        const uint8_t *p = blk + 2 + 8 * j + r, *p8 = p + 8 * rb;
        __m256i lo = dwords8(g + p[0], g + p[rb], g + p[2 * rb], g + p[3 * rb], g + p[4 * rb], g + p[5 * rb], g + p[6 * rb], g + p[7 * rb]);
        __m256i hi = dwords8(g + p8[0], g + p8[rb], g + p8[2 * rb], g + p8[3 * rb], g + p8[4 * rb], g + p8[5 * rb], g + p8[6 * rb],
                             g + p8[7 * rb]);
        q[r] = quad_bytes(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), quad_signs(s8, r), z);
    }
    return scale;
}

/* IQ3_S's block j of 16 rows with gathers only into its grid (iq3s16's bytes): the index, ninth-bit
 * and sign bytes from its super-block's runs (kgrid_raw16: runs at 2, 34, 66 and 74, read once a
 * super-block), the scale nibbles from sc (lane o: bytes 106-109 of row o), where iq3s16 took five
 * gathers a block for them. */
static inline __attribute__((always_inline)) __m512 iq3s16_runs(const __m512i raw[4][8], __m512i sc, int j, __m512 dv,
                                                                __m512i q[8]) {
    __m512i idx[2] = {raw[j >> 2][2 * (j & 3)], raw[j >> 2][2 * (j & 3) + 1]};
    __m512i qh = _mm512_srli_epi32(raw[2][j >> 2], 8 * (j & 3)), signs = raw[3][j];
    sc = _mm512_and_si512(_mm512_srli_epi32(sc, 8 * (j / 2) + 4 * (j & 1)), _mm512_set1_epi32(15));
    __m512 part = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_cvtepi32_ps(sc)));
    __m512 scale = _mm512_mul_ps(dv, part);
    __mmask64 z = zero_rows(scale);
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++) { /* quad r: grid entry r */
        __m512i i = _mm512_and_si512(_mm512_srli_epi32(idx[r >> 2], 8 * (r & 3)), _mm512_set1_epi32(255));
        i = _mm512_or_si512(i, _mm512_and_si512(_mm512_slli_epi32(qh, 8 - r), _mm512_set1_epi32(256)));
        q[r] = quad_bytes(_mm512_i32gather_epi32(i, (const void *)iq3s_bytes, 4), quad_signs(signs, r), z);
    }
    return scale;
}

/* ---- AVX-512 with VBMI (a CPU with it: cpu_vbmi, set below; AMD's Zen 4 and 5, Intel's since Ice Lake):
 * IQ2_XXS's, IQ3_XXS's and IQ3_S's blocks of 16 rows decoded in registers, without a gather or a
 * scalar load, in their one-to-four-row steps whichever way their bit picks (unless mask bit 30): the
 * grid's codes looked up by byte permutes (vpermi2b) from tables of their low bytes and high bits,
 * their 2- or 3-bit fields picked out by vpmultishiftqb and mapped to their values by vpermb:
 * iq2xxs16's, iq3xxs16's, iq3s16's bytes, so the same bits. Zen 5, 1 thread, 1 row, weights from
 * memory: 1.9 to 2.6 times as fast as the plain gather-free way (IQ3_S: the gathers). */
static uint8_t iq3xxs_lo[256] __attribute__((aligned(64))), iq3xxs_hi[256] __attribute__((aligned(64)));
static uint8_t iq2xxs_lo[256] __attribute__((aligned(64))), iq2xxs_hi[256] __attribute__((aligned(64)));
static uint8_t iq3s_lo[512] __attribute__((aligned(64))), iq3s_hi[512] __attribute__((aligned(64)));

__attribute__((constructor)) static void grid_vbmi_tables(void) {
    __builtin_cpu_init();
    cpu_vbmi = __builtin_cpu_supports("avx512vbmi");
    for (int i = 0; i < 256; i++) {
        iq3xxs_lo[i] = (uint8_t)iq3xxs_grid[i], iq3xxs_hi[i] = (uint8_t)(iq3xxs_grid[i] >> 8 & 15);
        iq2xxs_lo[i] = (uint8_t)iq2xxs_grid[i], iq2xxs_hi[i] = (uint8_t)(iq2xxs_grid[i] >> 8);
    }
    for (int i = 0; i < 512; i++) iq3s_lo[i] = (uint8_t)iq3s_grid[i], iq3s_hi[i] = (uint8_t)(iq3s_grid[i] >> 8 & 15);
}

#define GRID_VBMI_FN __attribute__((target("avx512vbmi"))) /* on these functions only (GCC and clang alike) */
/* The tables and controls, loaded once a group. */
typedef struct {
    __m512i lo[8], hi[8], pick[2], field[4], values, row, bit; /* IQ3_S: 8 tables each; row, bit: its ninth bits' */
} vbmi_consts;

/* Type t's (IQ3_XXS, IQ2_XXS) tables; field[e] (IQ2_XXS: [2 e + h]) picks quad 2 p + e's (2 p + h's) fields. */
static inline __attribute__((always_inline)) GRID_VBMI_FN void vbmi_setup(int t, vbmi_consts *c) {
    const uint8_t *lo = t == WT_IQ3_XXS ? iq3xxs_lo : t == WT_IQ3_S ? iq3s_lo : iq2xxs_lo;
    const uint8_t *hi = t == WT_IQ3_XXS ? iq3xxs_hi : t == WT_IQ3_S ? iq3s_hi : iq2xxs_hi;
    for (int k = 0; k < (t == WT_IQ3_S ? 8 : 4); k++)
        c->lo[k] = _mm512_load_si512((const void *)(lo + 64 * k)), c->hi[k] = _mm512_load_si512((const void *)(hi + 64 * k));
    uint8_t pick[2][64], field[4][64], values[64], row[64], bit[64];
    for (int b = 0; b < 64; b++) { /* byte b = 8 q + 2 w + s: row 2 q + (w >> 1), entry e + (w & 1), its low byte (s 0) or high */
        int q = b >> 3, w = (b >> 1) & 3;
        for (int e = 0; e < 2; e++) pick[e][b] = (uint8_t)(4 * (2 * q + (w >> 1)) + 2 * e + (w & 1));
        row[b] = (uint8_t)(4 * (2 * q + (w >> 1))), bit[b] = (uint8_t)(1 << (w & 1)); /* the row's qh byte, the entry's bit */
        int o = (b >> 2) & 1, k = b & 3; /* quad byte 4 o + k of the qword: row 2 q + o's value k, at bit 3 k of its word */
        for (int f = 0; f < 4; f++) /* IQ2_XXS: entry f >> 1's values 4 (f & 1) + k, 2 bits each */
            field[f][b] = (uint8_t)(t != WT_IQ2_XXS ? 16 * (2 * o + (f & 1)) + 3 * k : 16 * (2 * o + (f >> 1)) + 8 * (f & 1) + 2 * k);
        int v = b & (t != WT_IQ2_XXS ? 7 : 3);
        values[b] = (uint8_t)(t == WT_IQ3_XXS ? 4 + 8 * v + (v == 7 ? 2 : 0) /* iq3_values' 4, 12, .., 52, 62 */
                              : t == WT_IQ3_S ? 1 + 2 * v                     /* IQ3_S's 1, 3, .., 15 */
                                              : 8 + 17 * v + (v >> 1));     /* iq2xxs_bytes' 8, 25, 43 */
    }
    for (int e = 0; e < 2; e++) c->pick[e] = _mm512_loadu_si512(pick[e]);
    for (int f = 0; f < 4; f++) c->field[f] = _mm512_loadu_si512(field[f]);
    c->row = _mm512_loadu_si512(row), c->bit = _mm512_loadu_si512(bit);
    c->values = _mm512_loadu_si512(values);
}

/* Entries 2p, 2p + 1 of x's (a lane a row: 4 index bytes) 16 rows: their codes as words, pick's layout. */
static inline __attribute__((always_inline)) GRID_VBMI_FN __m512i vbmi_codes(const vbmi_consts *c, __m512i x, int p) {
    const __mmask64 odd = 0xAAAAAAAAAAAAAAAAull;
    __m512i at = _mm512_permutexvar_epi8(c->pick[p & 1], x);
    __mmask64 top = _mm512_movepi8_mask(at); /* indices 128-255 */
    __m512i lo = _mm512_mask_blend_epi8(odd, _mm512_permutex2var_epi8(c->lo[0], at, c->lo[1]),
                                        _mm512_permutex2var_epi8(c->hi[0], at, c->hi[1]));
    __m512i hi = _mm512_mask_blend_epi8(odd, _mm512_permutex2var_epi8(c->lo[2], at, c->lo[3]),
                                        _mm512_permutex2var_epi8(c->hi[2], at, c->hi[3]));
    return _mm512_mask_blend_epi8(top, lo, hi);
}

/* IQ2_XXS's block j of 16 rows from its super-block's runs (kgrid_raw16 at 2 and 34: run[j >> 2]'s
 * dword 2 (j & 3) the index bytes, the next the sign-and-scale word): iq2xxs16's bytes and scales. */
static inline __attribute__((always_inline)) GRID_VBMI_FN __m512 iq2xxs16_vbmi(const vbmi_consts *c, const __m512i run[2][8], int j, __m512 dv,
                                                                  __m512i q[8]) {
    __m512i x = run[j >> 2][2 * (j & 3)], aux = run[j >> 2][2 * (j & 3) + 1];
    __m512 sub = _mm512_cvtepi32_ps(_mm512_srli_epi32(aux, 28));
    __m512 scale = _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_add_ps(_mm512_set1_ps(0.5f), sub)), _mm512_set1_ps(0.25f));
    __mmask64 z = zero_rows(scale);
    __m512i s8 = signs7_bytes(aux);
#pragma GCC unroll 2
    for (int p = 0; p < 2; p++) {
        __m512i code = vbmi_codes(c, x, p);
#pragma GCC unroll 4
        for (int f = 0; f < 4; f++) { /* quad 4p + f: entry 2p + (f >> 1)'s half f & 1 */
            __m512i v = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(c->field[f], code), c->values);
            q[4 * p + f] = quad_bytes(v, quad_signs(s8, 4 * p + f), z);
        }
    }
    return scale;
}

/* IQ3_S's block j of 16 rows from iq3s16_runs's runs and sc: its bytes and scales, the 512 entries'
 * codes from 4 pairs of tables, picked by each index's bit 7 and its ninth bit (qh). */
static inline __attribute__((always_inline)) GRID_VBMI_FN __m512 iq3s16_vbmi(const vbmi_consts *c, const __m512i raw[4][8], __m512i sc, int j,
                                                                            __m512 dv, __m512i q[8]) {
    sc = _mm512_and_si512(_mm512_srli_epi32(sc, 8 * (j / 2) + 4 * (j & 1)), _mm512_set1_epi32(15));
    __m512 part = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(_mm512_set1_ps(2.0f), _mm512_cvtepi32_ps(sc)));
    __m512 scale = _mm512_mul_ps(dv, part);
    __mmask64 z = zero_rows(scale);
    __m512i qh = _mm512_permutexvar_epi8(c->row, _mm512_srli_epi32(raw[2][j >> 2], 8 * (j & 3))), signs = raw[3][j];
    const __mmask64 odd = 0xAAAAAAAAAAAAAAAAull;
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) { /* entries 2p, 2p + 1 */
        __m512i at = _mm512_permutexvar_epi8(c->pick[p & 1], raw[j >> 2][2 * (j & 3) + (p >> 1)]);
        __mmask64 top = _mm512_movepi8_mask(at), ninth = _mm512_test_epi8_mask(_mm512_srli_epi16(qh, 2 * p), c->bit);
        __m512i v[4];
        for (int k = 0; k < 4; k++) /* entries 128 k .. 128 k + 127 */
            v[k] = _mm512_mask_blend_epi8(odd, _mm512_permutex2var_epi8(c->lo[2 * k], at, c->lo[2 * k + 1]),
                                          _mm512_permutex2var_epi8(c->hi[2 * k], at, c->hi[2 * k + 1]));
        __m512i code = _mm512_mask_blend_epi8(top, _mm512_mask_blend_epi8(ninth, v[0], v[2]), _mm512_mask_blend_epi8(ninth, v[1], v[3]));
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {
            __m512i w = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(c->field[e], code), c->values);
            q[2 * p + e] = quad_bytes(w, quad_signs(signs, 2 * p + e), z);
        }
    }
    return scale;
}

/* IQ3_XXS's block j of 16 rows from its super-block's runs (kgrid_raw16: idx[k] the index dwords
 * 0-7 (k 0) and 8-15 (k 1), aux the sign-and-scale words): the scales returned, q[r] iq3xxs16's. */
static inline __attribute__((always_inline)) GRID_VBMI_FN __m512 iq3xxs16_vbmi(const vbmi_consts *c, const __m512i idx[2][8], const __m512i aux8[8],
                                                                   int j, __m512 dv, __m512i q[8]) {
    __m512i aux = aux8[j];
    __m512 sub = _mm512_cvtepi32_ps(_mm512_srli_epi32(aux, 28));
    __m512 scale = _mm512_mul_ps(_mm512_mul_ps(dv, _mm512_add_ps(_mm512_set1_ps(0.5f), sub)), _mm512_set1_ps(0.5f));
    __mmask64 z = zero_rows(scale);
    __m512i s8 = signs7_bytes(aux);
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) { /* entries 2p, 2p + 1 */
        __m512i code = vbmi_codes(c, idx[j >> 2][2 * (j & 3) + (p >> 1)], p);
#pragma GCC unroll 2
        for (int e = 0; e < 2; e++) {
            __m512i v = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(c->field[e], code), c->values);
            q[2 * p + e] = quad_bytes(v, quad_signs(s8, 2 * p + e), z);
        }
    }
    return scale;
}

/* grid_fused_rows's steps for IQ3_XXS or IQ2_XXS with their VBMI decoding (t and M constants). */
static inline __attribute__((always_inline)) GRID_VBMI_FN void grid_vbmi_rows(int t, const uint8_t *grp, int64_t rb, int64_t nb, int M,
                                                                 const int8_t *xq, const int32_t *start, const float *xs, float *y) {
    vbmi_consts c;
    vbmi_setup(t, &c);
    __m512 acc[GRID_FUSED];
    for (int i = 0; i < M; i++) acc[i] = _mm512_setzero_ps();
    float d[16];
    __m512i idx[2][8], aux[8], runs[4][8], sc = _mm512_setzero_si512();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (b >> 3) * block_bytes(t);
        int j = (int)(b & 7);
        if (j == 0) {
            next_group_prefetch(t, grp, rb, b);
            for (int o = 0; o < 16; o++) d[o] = f16_at(blk + o * rb);
            if (t == WT_IQ3_S) {
                static const int at[4] = {2, 34, 66, 74};
                for (int k = 0; k < 4; k++) kgrid_raw16(blk + at[k], rb, runs[k]);
                sc = _mm512_inserti64x4(_mm512_castsi256_si512(rows4(blk + 106, rb)), rows4(blk + 106 + 8 * rb, rb), 1);
            } else {
                kgrid_raw16(blk + 2, rb, idx[0]);
                kgrid_raw16(blk + 34, rb, idx[1]);
                if (t == WT_IQ3_XXS) kgrid_raw16(blk + 66, rb, aux);
            }
        }
        __m512i q[8];
        __m512 scale = t == WT_IQ3_XXS ? iq3xxs16_vbmi(&c, (const __m512i(*)[8])idx, aux, j, _mm512_loadu_ps(d), q)
                       : t == WT_IQ3_S ? iq3s16_vbmi(&c, (const __m512i(*)[8])runs, sc, j, _mm512_loadu_ps(d), q)
                                       : iq2xxs16_vbmi(&c, (const __m512i(*)[8])idx, j, _mm512_loadu_ps(d), q);
        const int8_t *xr[GRID_FUSED];
        const int32_t *st[GRID_FUSED];
        float s[GRID_FUSED];
        for (int i = 0; i < M; i++) xr[i] = xq + (i * nb + b) * 96, st[i] = start + (i * nb + b) * 6, s[i] = xs[i * nb + b];
        grid_dot16(t, q, scale, M, xr, st, s, acc);
    }
    for (int i = 0; i < M; i++) _mm512_storeu_ps(y + 16 * i, acc[i]);
}

static inline __attribute__((always_inline)) GRID_VBMI_FN void grid_vbmi_rows_of(int t, const uint8_t *grp, int64_t rb, int64_t nb, int64_t M,
                                                                    const int8_t *xq, const int32_t *start, const float *xs, float *y) {
    switch (M) { /* constants: the rows' chains in registers */
    case 1: grid_vbmi_rows(t, grp, rb, nb, 1, xq, start, xs, y); break;
    case 2: grid_vbmi_rows(t, grp, rb, nb, 2, xq, start, xs, y); break;
    case 3: grid_vbmi_rows(t, grp, rb, nb, 3, xq, start, xs, y); break;
    default: grid_vbmi_rows(t, grp, rb, nb, 4, xq, start, xs, y); break;
    }
}

static GRID_VBMI_FN void grid_vbmi_type(int t, const uint8_t *grp, int64_t rb, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start,
                           const float *xs, float *y) {
    if (t == WT_IQ3_XXS) grid_vbmi_rows_of(WT_IQ3_XXS, grp, rb, nb, M, xq, start, xs, y);
    else if (t == WT_IQ3_S) grid_vbmi_rows_of(WT_IQ3_S, grp, rb, nb, M, xq, start, xs, y);
    else grid_vbmi_rows_of(WT_IQ2_XXS, grp, rb, nb, M, xq, start, xs, y);
}

/* A grid type's group (t, free and M constants; free: half8's gather-free decoding) against M rows'
 * limbs xq [M][nb][3][32], starts [M][nb][3][2] and scales xs [M][nb]: y[16 i + o]. */
static inline __attribute__((always_inline)) void grid_fused_rows(int t, int free, const uint8_t *grp, int64_t rb, int64_t nb,
                                                                  int M, const int8_t *xq, const int32_t *start, const float *xs,
                                                                  float *y) {
    __m512 acc[GRID_FUSED];
    for (int i = 0; i < M; i++) acc[i] = _mm512_setzero_ps();
    float d[16];
    __m256i raw[2][2][8]; /* IQ2_XXS without gathers: each half's runs (grid_superblock8) */
    __m512i runs[4][8], sc = _mm512_setzero_si512(); /* IQ3_S with gathers: iq3s16_runs's */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + (b >> 3) * block_bytes(t);
        int j = (int)(b & 7);
        if (j == 0) {
            next_group_prefetch(t, grp, rb, b);
            if (free) grid_superblock8(t, 1, grp, rb, b, d, raw);
            else
                for (int o = 0; o < 16; o++) d[o] = f16_at(blk + o * rb);
            if (!free && t == WT_IQ3_S) {
                static const int at[4] = {2, 34, 66, 74};
                for (int c = 0; c < 4; c++) kgrid_raw16(blk + at[c], rb, runs[c]);
                sc = _mm512_inserti64x4(_mm512_castsi256_si512(rows4(blk + 106, rb)), rows4(blk + 106 + 8 * rb, rb), 1);
            }
        }
        __m512i q[8];
        __m512 scale;
        if (free && t == WT_IQ3_XXS) {
            scale = iq3xxs16_free(blk, rb, j, _mm512_loadu_ps(d), q);
        } else if (free) { /* rows 0-7 and 8-15 as half8's, put together */
            __m256i lo[8], hi[8];
            __m256 a = half8(t, 1, grp, rb, b, 0, d, (const __m256i(*)[8])raw[0], lo);
            __m256 c = half8(t, 1, grp, rb, b, 1, d, (const __m256i(*)[8])raw[1], hi);
            scale = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_castps256_ps512(a)), _mm256_castps_pd(c), 1));
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) q[r] = _mm512_inserti64x4(_mm512_castsi256_si512(lo[r]), hi[r], 1);
        } else if (t == WT_IQ3_S) {
            scale = iq3s16_runs((const __m512i(*)[8])runs, sc, j, _mm512_loadu_ps(d), q);
        } else {
            scale = grid16(t, blk, rb, j, _mm512_loadu_ps(d), q);
        }
        const int8_t *xr[GRID_FUSED];
        const int32_t *st[GRID_FUSED];
        float s[GRID_FUSED];
        for (int i = 0; i < M; i++) xr[i] = xq + (i * nb + b) * 96, st[i] = start + (i * nb + b) * 6, s[i] = xs[i * nb + b];
        grid_dot16(t, q, scale, M, xr, st, s, acc);
    }
    for (int i = 0; i < M; i++) _mm512_storeu_ps(y + 16 * i, acc[i]);
}

/* One type (a constant) either way, M rows. */
static inline __attribute__((always_inline)) void grid_fused_type(int t, int free, const uint8_t *grp, int64_t rb, int64_t nb,
                                                                  int64_t M, const int8_t *xq, const int32_t *start,
                                                                  const float *xs, float *y) {
#define GRID_ROWS(F)                                                                                                   \
    switch (M) { /* constants: the rows' chains in registers */                                                       \
    case 1: grid_fused_rows(t, F, grp, rb, nb, 1, xq, start, xs, y); break;                                           \
    case 2: grid_fused_rows(t, F, grp, rb, nb, 2, xq, start, xs, y); break;                                           \
    case 3: grid_fused_rows(t, F, grp, rb, nb, 3, xq, start, xs, y); break;                                           \
    default: grid_fused_rows(t, F, grp, rb, nb, 4, xq, start, xs, y); break;                                          \
    }
    if (free) {
        GRID_ROWS(1)
    } else {
        GRID_ROWS(0)
    }
#undef GRID_ROWS
}

/* See internal.h. */
int grid_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start, const float *xs,
                   float *y) {
    if (!wtype_grid(t) || M > GRID_FUSED) return 0;
    int64_t rb = row_bytes(t, 32 * nb);
    int free = gather_free >> t & 1;
    if (t != WT_IQ1_S && grid_vbmi_on()) { /* either way's bit: VBMI's */
        grid_vbmi_type(t, grp, rb, nb, M, xq, start, xs, y);
        return 1;
    }
    switch (t) { /* a constant type */
    case WT_IQ2_XXS: grid_fused_type(WT_IQ2_XXS, free, grp, rb, nb, M, xq, start, xs, y); break;
    case WT_IQ3_XXS: grid_fused_type(WT_IQ3_XXS, free, grp, rb, nb, M, xq, start, xs, y); break;
    case WT_IQ3_S: grid_fused_type(WT_IQ3_S, free, grp, rb, nb, M, xq, start, xs, y); break;
    default: grid_fused_type(WT_IQ1_S, free, grp, rb, nb, M, xq, start, xs, y); break;
    }
    return 1;
}
#elif defined(STRATA_TARGET_AVX2)
/* ---- AVX2 and AVX-VNNI, the grid types for few activation rows (decode) ---------------------
 * expand_group decodes a group's 16 rows whole (at 2048 inputs 16 x 2048 bytes, past L1) before
 * limb.c's steps load it back, and AVX2's steps take Q8_0's bytes (up to 255) only by int16 steps
 * on wide limbs. Here each block's 16 rows are decoded in registers, a half of 8 rows at a time
 * (grid8_half: half8's decoding, with each super-block's sign words and fields transposed once,
 * the grid entries by scalar loads: on Zen 5 a ymm vpgatherdd of 8 dwords took 2.6 times as long as
 * 8 scalar loads and 7 unpacks), straight into the limbs' steps, nothing stored. AVX-VNNI: vpdpbusd
 * takes Q8_0's bytes q + 128 as they are, from the starts limb.c set for offset 128. AVX2:
 * vpmaddubsw's int16 pair sums take the bytes q + off with a smaller offset: off = 16 for IQ3_S and
 * IQ1_S (|q| <= 15 and 9: bytes up to 31, a chain of 4 steps within int16, 4 * 2 * 31 * 128 =
 * 31,744), IQ3_XXS's even values halved, q / 2 + 32 (up to 63: chains of 2, 32,256; S_j is twice
 * its sums), 64 for IQ2_XXS (|q| <= 43: bytes up to 107, each step's pair sums widened at once);
 * the sums start at start * off / 128 (start = -128 times the limb's sum: exact). A zero scale's
 * rows keep grid_group's +-1 (halved too: only the sign of such a row's S reaches its output, as
 * fma(0 * s, f, acc)'s zero). Either way S_j = sum_k q_k l_j,k are the same exact integers as
 * limb.c's, S is formed exactly (int32 where |S_2| < 2^14 in every lane, else double) and
 * converted once (limb_value3's correctly rounded float), and acc = fma(scale * s, f, acc) over
 * the blocks in order: limb_group_rows's float sequence, the same bits. Zen 5, 1 thread, 1 row,
 * weights from memory: 1.6 (IQ2_XXS) to 2.2 times expand_group's speed on avx2, 2.1 to 2.8 on
 * avxvnni (bench_kgrid.py --builds). */
#define GRID_FUSED8 4 /* rows grid_rows8 takes */

#if defined(STRATA_AVX_VNNI)
static inline int grid8_offset(int t) { (void)t; return 128; }
#else
static inline int grid8_offset(int t) { return t == WT_IQ3_S || t == WT_IQ1_S ? 16 : t == WT_IQ3_XXS ? 32 : 64; }
/* Steps a chain of int16 sums takes: 4 * 2 * 31 * 128 = 31,744, 2 * 2 * 63 * 128 = 32,256, 2 * 126 * 128 = 32,256. */
static inline int grid8_chain(int t) { return grid8_offset(t) == 16 ? 4 : grid8_offset(t) == 32 ? 2 : 1; }
#endif
#if !defined(STRATA_AVX_VNNI)
/* AVX2: the values halved where they are all even (IQ3_XXS: 4 .. 62), so that its bytes q / 2 + 32
 * (1 .. 63) take chains of 2 steps; each S_j is then twice its sums (grid_dot8). */
static uint32_t iq3xxs_halves[256];
__attribute__((constructor)) static void grid8_halves(void) {
    for (int i = 0; i < 256; i++) iq3xxs_halves[i] = (iq3xxs_bytes[i] >> 1) & 0x7F7F7F7Fu;
}
#endif

/* Quad bytes off + v or off - v where m, a zero scale's rows (z, where zany) off +- 1 by that sign
 * (grid_group's +-1; halved, +-1 too: only the sign of such a row's S reaches its output, which
 * fma((0 * s), f, acc) adds as a zero of f's sign). */
static inline __attribute__((always_inline)) __m256i grid8_bytes(__m256i v, __m256i m, __m256i z, int zany, int off) {
    __m256i c = _mm256_set1_epi8((char)off);
    __m256i q = _mm256_blendv_epi8(_mm256_add_epi8(c, v), _mm256_sub_epi8(c, v), m);
    if (zany) q = _mm256_blendv_epi8(q, _mm256_blendv_epi8(_mm256_set1_epi8((char)(off + 1)), _mm256_set1_epi8((char)(off - 1)), m), z);
    return q;
}

/* A super-block's fields of each half of 8 rows, transposed once (kgrid_raw; read by grid8_half):
 * IQ3_XXS's sign words (the run at 66), IQ3_S's index bytes (at 2 and 34), ninth bits (66) and sign
 * bytes (74), and its scale nibbles (sc: bytes 106-109), where a block's rows4 took 15 uops a field. */
static inline __attribute__((always_inline)) void grid8_runs(int t, const uint8_t *blk, int64_t rb, __m256i runs[2][4][8],
                                                             __m256i sc[2]) {
    static const int at[4] = {2, 34, 66, 74};
    for (int h = 0; h < 2; h++) {
        const uint8_t *p = blk + 8 * h * rb;
        if (t == WT_IQ3_XXS) kgrid_raw(p + 66, rb, runs[h][0]);
        if (t == WT_IQ3_S) {
            for (int c = 0; c < 4; c++) kgrid_raw(p + at[c], rb, runs[h][c]);
            sc[h] = rows4(p + 106, rb);
        }
    }
}

/* Block b's rows 8h .. 8h + 7 (half8's decoding) as the bytes grid8_offset(t) + q (AVX2's IQ3_XXS: + q / 2);
 * IQ2_XXS's sign words and IQ1_S's fields from raw, IQ3_XXS's sign words and IQ3_S's fields from runs and
 * sc (grid8_runs), each read once a super-block; the grid indices as scalars at their bytes (IQ2_XXS,
 * IQ3_XXS) or from a vector (IQ3_S, IQ1_S: lanes8), whichever measured faster (Zen 5, 1 row). */
static inline __attribute__((always_inline)) __m256 grid8_half(int t, const uint8_t *grp, int64_t rb, int64_t b, int h,
                                                               const float *d, const __m256i raw[2][8], const __m256i runs[4][8],
                                                               __m256i sc, __m256i q[8]) {
    const uint8_t *blk = grp + (b >> 3) * block_bytes(t) + 8 * h * rb;
    int j = (int)(b & 7), off = grid8_offset(t);
    __m256 dv = _mm256_loadu_ps(d + 8 * h), scale;
    int zany;
    __m256i z;
    if (t == WT_IQ2_XXS) {
        __m256i aux = raw[j >> 2][2 * (j & 3) + 1], s8 = signs7_bytes8(aux);
        __m256 sub = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_cvtepi32_ps(_mm256_srli_epi32(aux, 28)));
        scale = _mm256_mul_ps(_mm256_mul_ps(dv, sub), _mm256_set1_ps(0.25f));
        z = zero8(scale, &zany);
        const uint64_t *g = iq2xxs_bytes;
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) { /* quads 2k, 2k + 1: entry k's halves, read at its index byte */
            const uint8_t *p = blk + 2 + 8 * j + k;
            __m256 a = _mm256_castsi256_ps(qwords4(g + p[0], g + p[rb], g + p[4 * rb], g + p[5 * rb]));
            __m256 c = _mm256_castsi256_ps(qwords4(g + p[2 * rb], g + p[3 * rb], g + p[6 * rb], g + p[7 * rb]));
            q[2 * k] = grid8_bytes(_mm256_castps_si256(_mm256_shuffle_ps(a, c, 0x88)), quad_signs8(s8, 2 * k), z, zany, off);
            q[2 * k + 1] = grid8_bytes(_mm256_castps_si256(_mm256_shuffle_ps(a, c, 0xDD)), quad_signs8(s8, 2 * k + 1), z, zany, off);
        }
    } else if (t == WT_IQ3_XXS) {
        __m256i aux = runs[0][j], s8 = signs7_bytes8(aux);
        __m256 sub = _mm256_add_ps(_mm256_set1_ps(0.5f), _mm256_cvtepi32_ps(_mm256_srli_epi32(aux, 28)));
        scale = _mm256_mul_ps(_mm256_mul_ps(dv, sub), _mm256_set1_ps(0.5f));
        z = zero8(scale, &zany);
#if defined(STRATA_AVX_VNNI)
        const uint32_t *g = iq3xxs_bytes;
#else
        const uint32_t *g = iq3xxs_halves;
#endif
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            const uint8_t *p = blk + 2 + 8 * j + r;
            __m256i v = dwords8(g + p[0], g + p[rb], g + p[2 * rb], g + p[3 * rb], g + p[4 * rb], g + p[5 * rb], g + p[6 * rb], g + p[7 * rb]);
            q[r] = grid8_bytes(v, quad_signs8(s8, r), z, zany, off);
        }
    } else if (t == WT_IQ3_S) {
        __m256i idx[2] = {runs[j >> 2][2 * (j & 3)], runs[j >> 2][2 * (j & 3) + 1]};
        __m256i qh = _mm256_srli_epi32(runs[2][j >> 2], 8 * (j & 3)), signs = runs[3][j];
        sc = _mm256_and_si256(_mm256_srli_epi32(sc, 8 * (j / 2) + 4 * (j & 1)), _mm256_set1_epi32(15));
        __m256 part = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_cvtepi32_ps(sc)));
        scale = _mm256_mul_ps(dv, part);
        z = zero8(scale, &zany);
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m256i i = _mm256_or_si256(byte_of(idx[r >> 2], r & 3), _mm256_and_si256(_mm256_slli_epi32(qh, 8 - r), _mm256_set1_epi32(256)));
            q[r] = grid8_bytes(table8(iq3s_bytes, i), quad_signs8(signs, r), z, zany, off);
        }
    } else { /* IQ1_S: 8 code + 7 or 9 (q + 16), from the runs */
        __m256i lo = raw[0][j], qh = _mm256_srli_epi32(raw[1][4 + (j >> 1)], 16 * (j & 1));
        __m256i sub = _mm256_and_si256(_mm256_srli_epi32(qh, 12), _mm256_set1_epi32(7));
        __m256 part = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_cvtepi32_ps(sub)), _mm256_set1_ps(1.0f));
        scale = _mm256_mul_ps(_mm256_mul_ps(dv, part), _mm256_set1_ps(0.125f));
        z = zero8(scale, &zany);
        __m256i minus = _mm256_cmpeq_epi32(_mm256_and_si256(qh, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x8000));
        __m256i offset = _mm256_blendv_epi8(_mm256_set1_epi8((char)(off - 7)), _mm256_set1_epi8((char)(off - 9)), minus);
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i i = _mm256_or_si256(byte_of(lo, k), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(qh, 3 * k), _mm256_set1_epi32(7)), 8));
            __m256i v[2];
            entry_quads8(iq1s_bytes, i, v, 1);
            for (int e = 0; e < 2; e++) {
                __m256i w = _mm256_add_epi8(v[e], offset); /* q + off, q never 0 */
                __m256i neg = _mm256_cmpgt_epi8(_mm256_setzero_si256(), _mm256_sub_epi8(w, _mm256_set1_epi8((char)off))); /* q < 0 */
                q[2 * k + e] = zany ? _mm256_blendv_epi8(w, _mm256_blendv_epi8(_mm256_set1_epi8((char)(off + 1)), _mm256_set1_epi8((char)(off - 1)), neg), z) : w;
            }
        }
    }
    return scale;
}

/* The correctly rounded float of S = S_2 65536 + S_1 256 + S_0 (each |S_j| < 2^18); try_fast: first
 * the int32 sum where every lane's |S_2| < 2^14 (IQ2_XXS, IQ3_XXS, values up to 43 and 62: passed too
 * often for the test to pay, as grid_dot16 found). */
static inline __m256 grid8_value(__m256i s0, __m256i s1, __m256i s2, int try_fast) {
    __m256i low = _mm256_add_epi32(_mm256_slli_epi32(s1, 8), s0); /* |L| < 2^27 */
    return try_fast ? limb_f8_any(s2, low) : limb_f8(s2, low);
}

/* One row's exact S of 8 outputs from their quads w (bytes q + grid8_offset(t)) and its limbs x
 * (3 x 32 bytes), from the starts st (offset 128's). */
static inline __attribute__((always_inline)) __m256 grid_dot8(int t, const __m256i w[8], const int8_t *x, const int32_t *st) {
    __m256i s[3];
#pragma GCC unroll 3
    for (int l = 0; l < 3; l++) {
        s[l] = _mm256_set1_epi32(st[2 * l] / (128 / grid8_offset(t))); /* a multiple of 128: exact */
#if defined(STRATA_AVX_VNNI)
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            int32_t x4;
            memcpy(&x4, x + 32 * l + 4 * r, 4);
            s[l] = _mm256_dpbusd_avx_epi32(s[l], w[r], _mm256_set1_epi32(x4));
        }
#else
        __m256i ones = _mm256_set1_epi16(1), p = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) { /* chains of grid8_chain(t) steps in int16, each widened into s */
            int32_t x4;
            memcpy(&x4, x + 32 * l + 4 * r, 4);
            __m256i m = _mm256_maddubs_epi16(w[r], _mm256_set1_epi32(x4));
            p = r % grid8_chain(t) ? _mm256_add_epi16(p, m) : m;
            if (r % grid8_chain(t) == grid8_chain(t) - 1) s[l] = _mm256_add_epi32(s[l], _mm256_madd_epi16(p, ones));
        }
        if (grid8_offset(t) == 32) s[l] = _mm256_slli_epi32(s[l], 1); /* the halved values' sums, twice */
#endif
    }
    return grid8_value(s[0], s[1], s[2], t == WT_IQ3_S || t == WT_IQ1_S);
}

/* A grid type's group (t and M constants) against M rows' limbs xq [M][nb][3][32], starts
 * [M][nb][3][2] and scales xs [M][nb]: y[16 i + o]. */
static inline __attribute__((always_inline)) void grid_rows8(int t, const uint8_t *grp, int64_t rb, int64_t nb, int M,
                                                             const int8_t *xq, const int32_t *start, const float *xs, float *y) {
    __m256 acc[GRID_FUSED8][2];
    for (int i = 0; i < M; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    float d[16];
    __m256i raw[2][2][8]; /* IQ2_XXS, IQ1_S: each half's runs (grid_superblock8) */
    __m256i runs[2][4][8], sc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()}; /* IQ3_XXS, IQ3_S: grid8_runs */
    for (int64_t b = 0; b < nb; b++) {
        if ((b & 7) == 0) {
            next_group_prefetch(t, grp, rb, b);
            grid_superblock8(t, 1, grp, rb, b, d, raw);
            grid8_runs(t, grp + (b >> 3) * block_bytes(t), rb, runs, sc);
        }
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i w[8];
            __m256 scale = grid8_half(t, grp, rb, b, h, d, (const __m256i(*)[8])raw[h], (const __m256i(*)[8])runs[h], sc[h], w);
            for (int i = 0; i < M; i++) {
                __m256 f = grid_dot8(t, w, xq + (i * nb + b) * 96, start + (i * nb + b) * 6);
                acc[i][h] = _mm256_fmadd_ps(_mm256_mul_ps(scale, _mm256_set1_ps(xs[i * nb + b])), f, acc[i][h]);
            }
        }
    }
    for (int i = 0; i < M; i++) _mm256_storeu_ps(y + 16 * i, acc[i][0]), _mm256_storeu_ps(y + 16 * i + 8, acc[i][1]);
}

/* One type (a constant), M rows (constants: the rows' chains in registers). */
static inline __attribute__((always_inline)) void grid_type8(int t, const uint8_t *grp, int64_t rb, int64_t nb, int64_t M,
                                                             const int8_t *xq, const int32_t *start, const float *xs, float *y) {
    switch (M) {
    case 1: grid_rows8(t, grp, rb, nb, 1, xq, start, xs, y); break;
    case 2: grid_rows8(t, grp, rb, nb, 2, xq, start, xs, y); break;
    case 3: grid_rows8(t, grp, rb, nb, 3, xq, start, xs, y); break;
    default: grid_rows8(t, grp, rb, nb, 4, xq, start, xs, y); break;
    }
}

/* See internal.h. */
int grid_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start, const float *xs,
                   float *y) {
    if (!wtype_grid(t) || M > GRID_FUSED8) return 0;
    int64_t rb = row_bytes(t, 32 * nb);
    switch (t) { /* a constant type */
    case WT_IQ2_XXS: grid_type8(WT_IQ2_XXS, grp, rb, nb, M, xq, start, xs, y); break;
    case WT_IQ3_XXS: grid_type8(WT_IQ3_XXS, grp, rb, nb, M, xq, start, xs, y); break;
    case WT_IQ3_S: grid_type8(WT_IQ3_S, grp, rb, nb, M, xq, start, xs, y); break;
    default: grid_type8(WT_IQ1_S, grp, rb, nb, M, xq, start, xs, y); break;
    }
    return 1;
}
#else
int grid_limb_rows(int t, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq, const int32_t *start, const float *xs,
                   float *y) {
    (void)t, (void)grp, (void)nb, (void)M, (void)xq, (void)start, (void)xs, (void)y;
    return 0; /* the other targets: expand_group and limb.c's steps */
}
#endif

/* See internal.h. */
int grid_expand(int wtype, const uint8_t *grp, int64_t nb, uint8_t *dst) {
#if defined(STRATA_TARGET_AVX512)
    int64_t rb = row_bytes(wtype, 32 * nb);
    if (wtype >= 0 && wtype < 32 && (gather_free >> wtype & 1)) {
        if (wtype_kgrid(wtype)) {
            kgrid_expand_avx2(wtype, grp, rb, nb, dst);
            return 1;
        }
        if (wtype_grid(wtype)) {
            expand_avx2(wtype, grp, rb, nb, dst);
            return 1;
        }
    }
    if (wtype_kgrid(wtype)) {
        kgrid_expand16(wtype, grp, rb, nb, dst);
        return 1;
    }
    if (wtype_grid(wtype)) {
        expand16(wtype, grp, rb, nb, dst);
        return 1;
    }
#elif defined(STRATA_TARGET_AVX2)
    if (wtype_kgrid(wtype)) {
        kgrid_expand_avx2(wtype, grp, row_bytes(wtype, 32 * nb), nb, dst);
        return 1;
    }
    if (wtype_grid(wtype)) {
        expand_avx2(wtype, grp, row_bytes(wtype, 32 * nb), nb, dst);
        return 1;
    }
#endif
    (void)wtype, (void)grp, (void)nb, (void)dst;
    return 0;
}
