/*
 * What the kernel files share and do not export (every file includes it; the library's own
 * interface is strata_kernels.h, which this includes).
 *
 * Strata's CPU kernels are batch-invariant by construction and give the same bits on every CPU.
 * Every output element is computed by one fixed sequence of float operations that depends
 * only on that element's own inputs (its activation row, its weight row, its position),
 * never on how many other rows share the call, where the row sits in the batch, how many
 * threads run, or which instruction set the machine has. The kernels are written once
 * against the 16-lane virtual vector of vector.h; compiled for AVX-512, AVX2 + FMA, NEON or
 * plain C they perform the same IEEE operations in the same order. Threads split work by
 * output element, never inside a reduction. No libm function is on the numeric path: e^x
 * and log are vector.h's own fixed sequences (sqrtf and fmaf are exactly rounded by IEEE 754).
 * Every file is built with -ffp-contract=off (build.py), so no multiply-add is fused unless it
 * is written (vf_fma), within a file or across files.
 *
 * Here: the helpers more than one file uses, inline (row sizes from strata_wtypes, the
 * dot-product sequence, the exact maximum), and the declarations of the few shared functions defined once (the scratch
 * memory), kept out of the library's exports (STRATA_HIDDEN).
 */
#ifndef STRATA_INTERNAL_H
#define STRATA_INTERNAL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strata_kernels.h" /* every exported function, type code and struct */
#include "vector.h"

/* A function shared between the kernel files and not exported by the library. */
#ifndef STRATA_HIDDEN
#define STRATA_HIDDEN __attribute__((visibility("hidden")))
#endif

#define WT_LIMBS(t) (((t) >> WT_LIMB_SHIFT) & 3) /* a q8-packed weight's activation limbs (0: q8's rule) */
#define WT_BASE(t) ((t) & 255)                  /* the stored type of a repacked weight */
#define SMALL_WORK 32768 /* below this many elements a call runs on one thread: waking threads costs more */

/* Every NaN in y[0..n) given NAN's bits, 0x7FC00000; every other value keeps its bits. x86 keeps a
 * NaN operand's payload and makes 0xFFC00000 from finite operands (inf - inf); NVIDIA's arithmetic
 * gives its own canonical NaN: a row's NaN bits would depend on the device. The matmuls and the
 * log-softmax end with this, as the Triton kernels end with ieee.canonical_nan. */
static inline void canonical_nans(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, y + i, 4);
        bits = (bits & 0x7FFFFFFFu) > 0x7F800000u ? 0x7FC00000u : bits;
        memcpy(y + i, &bits, 4);
    }
}

static inline float f32_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* The fp32 value of the IEEE half at p, as numpy's float16 -> float32 (gguf-py): exact for every
 * half (an inf or NaN keeps its sign and payload, none quietened). Integer operations and one
 * exact int -> float conversion, without branches (so loops of it vectorise): a normal half's
 * exponent rebiased (+112; +224 for inf and NaN), a subnormal's m * 2^-24 as (float)m with its
 * exponent lowered by 24 (m < 1024: exact, and normal). No float mode can change it. */
static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t em = h & 0x7FFFu, e = em >> 10, m = em & 0x3FFu, sub;
    float fm = (float)m;
    memcpy(&sub, &fm, 4);
    sub = (sub - (24u << 23)) & -(uint32_t)(m != 0); /* m = 0: +0 */
    uint32_t normal = (em << 13) + ((112u + 112u * (uint32_t)(e == 31)) << 23);
    uint32_t is_sub = -(uint32_t)(e == 0); /* masks, not branches */
    uint32_t bits = (uint32_t)(h & 0x8000u) << 16 | (sub & is_sub) | (normal & ~is_sub);
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* The fp32 value of the bfloat16 at p: its bits are fp32's upper half (gguf-py's `<< 16`). */
static inline float bf16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* Scratch memory for a call's temporaries, kept per calling thread from call to call and grown
 * when a call needs more (never shrunk). Freed after every call, a few MB of temporaries went back
 * to the OS (malloc trims the top of its heap), and every layer paid their page faults again:
 * about 15% of a 512-token prefill. One slot per call site, so that nested calls never share. */
enum { SCRATCH_LAYER, SCRATCH_Q8, SCRATCH_UNPACK, SCRATCH_LOOKUP, SCRATCH_SLOTS };
/* NULL when malloc fails: counted for strata_alloc_failures, and every caller then returns (or
 * skips its part) without computing, so the engine reports the step failed instead of crashing. */
STRATA_HIDDEN void *scratch(int slot, size_t bytes); /* common.c */
STRATA_HIDDEN void *kernel_malloc(size_t bytes);     /* common.c: malloc, a NULL counted the same way */

/* Up to LIMB_MANY weights of one limb-packed type that share an input, read in one parallel region
 * (layer.c's q/k/v and gate/up); strata_limb_matmul is the one-weight case. */
#define LIMB_MANY 4
STRATA_HIDDEN void limb_matmul_many(const float *x, int64_t M, int64_t K, int n, const uint8_t *const *packed, int wtype,
                                    const int64_t *N, const float *const *bias, float *const *y, int nthreads,
                                    int limbs); /* limb.c */

/* strata_wtypes' rows (a code past its end has none). */
#define WTYPE_CODES ((int)(sizeof strata_wtypes / sizeof strata_wtypes[0]))

/* A type with its fp16 scale fields as stored (WT_HALF_SCALES on a WP_WIDEN type), and its code
 * without that bit (the table's row). */
static inline int wtype_half(int wtype) { return (wtype & WT_HALF_SCALES) != 0; }
static inline int wtype_code(int wtype) { return wtype & ~WT_HALF_SCALES; }

/* Bytes of one block of a type in the kernels' layout (strata_wtypes; WT_HALF_SCALES: as stored). */
static inline int64_t block_bytes(int wtype) {
    const strata_wtype_row *r = &strata_wtypes[wtype_code(wtype)];
    return wtype_half(wtype) ? r->stored_bytes : r->kernel_bytes;
}

/* Bytes of 32 values of a type whose blocks are whole groups of 32 (IQ4_XS: 8 of its 160). */
static inline int64_t group32_bytes(int wtype) {
    return block_bytes(wtype) * 32 / strata_wtypes[wtype_code(wtype)].values;
}

/* Bytes of a WP_WIDEN block's scale fields before its quants: 4 a field widened, 2 as stored
 * (WT_HALF_SCALES), and the fp32 value of field i (d, then Q4_1's and Q5_1's min m). */
static inline int scale_head(int wtype) {
    return strata_wtypes[wtype_code(wtype)].scale_fields * (wtype_half(wtype) ? 2 : 4);
}
static inline float scale_field(int wtype, const uint8_t *blk, int i) {
    return wtype_half(wtype) ? f16_at(blk + 2 * i) : f32_at(blk + 4 * i);
}

/* 16 consecutive fp16 values at p as fp32, each f16_at's exact value: F16C's vcvtph2ps where
 * the target has it (vector.h; exact for every finite half, subnormals included; a NaN keeps its
 * sign and payload but comes out quiet, which no output shows: every NaN a kernel returns is
 * canonical_nans's), f16_at lane by lane elsewhere. */
#ifndef VF_FROM_F16
static inline vf vf_from_f16(const uint8_t *p) {
    float t[VL];
    for (int i = 0; i < VL; i++) t[i] = f16_at(p + 2 * i);
    return vf_load(t);
}
#endif

/* The 4-bit codebook types (WP_CODEBOOK: a scale and 16 bytes of indices a block of 32, index k
 * low nibble of byte k, index 16 + k its high nibble) and their codebooks, gguf-py's:
 * value = scale * codebook[index], the product of the Q8_0 block (scale, codebook[index]) they
 * were once rewritten as. The scale an fp32 (the widened layout, transcode.codebook_blocks: the
 * type's code alone, the GPU's), or (WT_HALF_SCALES: the file's own block) IQ4_NL's fp16 d or
 * MXFP4's e8m0 byte E, converted exactly where read (codebook_scale). */
static inline int wtype_codebook(int wtype) {
    wtype = wtype_code(wtype);
    return wtype == WT_IQ4_NL || wtype == WT_IQ4_XS || wtype == WT_MXFP4;
}
static inline const int8_t *codebook_of(int wtype) {
    static const int8_t iq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    static const int8_t mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}; /* e2m1, doubled */
    return wtype_code(wtype) == WT_MXFP4 ? mxfp4 : iq4;
}
/* Bytes of one codebook block's scale as held: 4 (fp32), 2 (IQ4_NL's fp16 d), 1 (MXFP4's E). */
static inline int codebook_head(int wtype) { return !wtype_half(wtype) ? 4 : wtype_code(wtype) == WT_MXFP4 ? 1 : 2; }
/* MXFP4's scale from its e8m0 byte E, halved (its codebook holds twice e2m1's values): 2^(E - 128)
 * by its bits, gguf-py's e8m0_to_fp32_half (ggml's ggml_e8m0_to_fp32_half): E < 2 the subnormals
 * 2^-128 and 2^-127, E = 255 2^127 (every E finite). */
static inline float e8m0_half_at(const uint8_t *p) {
    uint32_t e = *p, bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}
/* A codebook block's scale at p (codebook_head's bytes) as fp32, each conversion exact. */
static inline float codebook_scale(int wtype, const uint8_t *p) {
    if (!wtype_half(wtype)) return f32_at(p);
    return wtype_code(wtype) == WT_MXFP4 ? e8m0_half_at(p) : f16_at(p);
}
/* IQ4_XS held as the file stores it (WT_HALF_SCALES): super-blocks of 256 values, 136 bytes each
 * (fp16 d, u16 scales_h, 4 bytes scales_l, 128 bytes of indices, group j's 16 at 8 + 16 j); group
 * j's scale d * (ls - 32), ls its 6-bit scale (the low nibble j % 2 of scales_l[j / 2], bits 2j and
 * 2j + 1 of scales_h above it): gguf-py's product (an fp16 times an integer of at most 6 bits: exact
 * in fp32; d = -0 or ls = 32 the zero of that product's sign, an inf d times 0 a NaN). */
static inline int codebook_xs_held(int wtype) { return wtype == (WT_IQ4_XS | WT_HALF_SCALES); }
/* ls of group j from scales_l read as a little-endian u32 (its nibble j) and scales_h (bits 2j, 2j + 1). */
static inline int iq4_xs_ls(uint32_t scales_l, uint32_t scales_h, int j) {
    return (int)(((scales_l >> (4 * j)) & 15) | ((scales_h >> (2 * j)) & 3) << 4);
}
static inline float iq4_xs_scale(const uint8_t *sblk, int j) {
    uint32_t h = (uint32_t)sblk[2] | (uint32_t)sblk[3] << 8;
    uint32_t l = (uint32_t)sblk[4] | (uint32_t)sblk[5] << 8 | (uint32_t)sblk[6] << 16 | (uint32_t)sblk[7] << 24;
    return f16_at(sblk) * (float)(iq4_xs_ls(l, h, j) - 32);
}
/* Group b (32 values) of a codebook row: where its 16 index bytes start, and its scale as fp32. */
static inline const uint8_t *codebook_qs(int wtype, const uint8_t *row, int64_t b) {
    if (codebook_xs_held(wtype)) return row + (b >> 3) * block_bytes(wtype) + 8 + 16 * (b & 7);
    return row + b * group32_bytes(wtype) + codebook_head(wtype);
}
static inline float codebook_group_scale(int wtype, const uint8_t *row, int64_t b) {
    if (codebook_xs_held(wtype)) return iq4_xs_scale(row + (b >> 3) * block_bytes(wtype), (int)(b & 7));
    return codebook_scale(wtype, row + b * group32_bytes(wtype));
}
/* Bytes of one scale field as held (a codebook type's scale, a WP_WIDEN type's d and m): 4
 * widened to fp32, else as the file stores it (q8.c's packed groups keep that width). */
static inline int scale_width(int wtype) {
    return wtype_codebook(wtype) ? codebook_head(wtype) : wtype_half(wtype) ? 2 : 4;
}

/* The grid types (WP_GRID: held as stored, grids.c). grid_group: the 32 values g of a row as the
 * Q8_0 block the loader once rewrote them as: returns its fp32 scale, q[32] its integers (value =
 * scale * q, gguf-py's bit for bit; a zero scale with q = +-1, the signs of its zeros). */
static inline int wtype_grid(int wtype) {
    return wtype == WT_IQ2_XXS || wtype == WT_IQ3_XXS || wtype == WT_IQ3_S || wtype == WT_IQ1_S;
}
STRATA_HIDDEN float grid_group(int wtype, const uint8_t *row, int64_t g, int8_t q[32]); /* grids.c */
/* A group of 16 rows (nb blocks of 32 each) decoded at once into the Q8_0 group of its values
 * (q8.h's layout, as q8.c's expand_group makes row by row from grid_group): the same bytes,
 * where the target and type have such a path; returns 0 where they have none. */
STRATA_HIDDEN int grid_expand(int wtype, const uint8_t *grp, int64_t nb, uint8_t *dst); /* grids.c */
/* Rows 0 .. M (M <= 4) of the three-limb arithmetic against a grid type's group grp, each block of its
 * 16 rows decoded in registers straight into its steps: y[16 i + o] = row i's accumulator of output o
 * (before any bias), from the rows' limbs xq [M][nb][3][32], their starts [M][nb][3][2] (Q8_0's
 * offset 128) and scales xs [M][nb]; the bits of limb.c's steps on the expanded group. Returns 0
 * (nothing written) where the target has no such steps (portable C, NEON) or M is past them. */
STRATA_HIDDEN int grid_limb_rows(int wtype, const uint8_t *grp, int64_t nb, int64_t M, const int8_t *xq,
                                 const int32_t *start, const float *xs, float *y); /* grids.c */
/* The K-grid types (WP_GRID too: held as stored, grids.c): each 16 values' scale a small integer
 * sc times the super-block's d, its values small integers q: value = (d * sc) * q exactly, the
 * products of the Q6_K-shaped block (d f32, int8 sc a 16, int8 q) every arithmetic reads them as
 * (Q3_K, IQ1_M: the Q6_K blocks transcode.to_q6_k once rewrote them as). kgrid_block: block b of
 * 32 of a row as d, sc[2] (its halves') and q[32] (a zero d * sc with q = +-1, as the rewrite). */
static inline int wtype_kgrid(int wtype) {
    return wtype == WT_IQ2_XS || wtype == WT_IQ2_S || wtype == WT_Q3_K || wtype == WT_IQ1_M;
}
STRATA_HIDDEN void kgrid_block(int wtype, const uint8_t *row, int64_t b, float *d, int8_t sc[2], int8_t q[32]); /* grids.c */

/* Whether the arithmetic `reads` (enum strata_wreads) reads a stored type. */
static inline int wtype_reads(int wtype, int reads) {
    int code = wtype_code(wtype);
    if (wtype_half(wtype) && (code >= WTYPE_CODES || (strata_wtypes[code].pack != WP_WIDEN &&
                                                      code != WT_IQ4_NL && code != WT_IQ4_XS && code != WT_MXFP4)))
        return 0; /* held as stored: the WP_WIDEN types and the codebook types */
    return code >= 0 && code < WTYPE_CODES && (strata_wtypes[code].reads & reads) == reads;
}

/* Bytes of one weight row of K values in a given type, in the kernels' layout (a type without a
 * row: K fp32 values). */
static inline int64_t row_bytes(int wtype, int64_t K) {
    int code = wtype_code(wtype);
    if (code < 0 || code >= WTYPE_CODES || strata_wtypes[code].values == 0) return K * 4;
    return K / strata_wtypes[code].values * block_bytes(wtype);
}

/*
 * The dot-product sequence every output uses: acc = fma(x[k:k+16], w[k:k+16], acc) for
 * k = 0, 16, 32, ... (the last step zero-padded when K is not a multiple of 16), then
 * vf_hsum. dot_1, matmul.c's dot_block and matmul_fused, and attention.c's scores all follow it
 * exactly.
 */
static inline float dot_1(const float *x, const float *w, int64_t K) {
    vf acc = vf_zero();
    int64_t k = 0;
    for (; k + VL <= K; k += VL) acc = vf_fma(vf_load(x + k), vf_load(w + k), acc);
    if (k < K) acc = vf_fma(vf_load_n(x + k, (int)(K - k)), vf_load_n(w + k, (int)(K - k)), acc);
    return vf_hsum(acc);
}

/* The largest of p[0..n) (at least -inf; a NaN never wins a comparison), exactly what a scalar
 * scan `if (p[i] > mx) mx = p[i]` returns: lane-wise maxima, then the lanes (a max is exact:
 * any order gives the same value), and the scan itself when that value is a zero, where the
 * scan's answer (+0 or -0: whichever comes first) depends on the order. */
static inline float max_n(const float *p, int64_t n) {
    vf m = vf_set1(-INFINITY);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) m = vf_max(vf_load(p + i), m);
    float lanes[VL], mx = -INFINITY;
    vf_store(lanes, m);
    for (int l = 0; l < VL; l++)
        if (lanes[l] > mx) mx = lanes[l];
    for (; i < n; i++)
        if (p[i] > mx) mx = p[i];
    if (mx == 0.0f) {
        mx = -INFINITY;
        for (i = 0; i < n; i++)
            if (p[i] > mx) mx = p[i];
    }
    return mx;
}

#endif
