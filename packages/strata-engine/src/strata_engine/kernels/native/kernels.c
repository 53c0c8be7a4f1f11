/*
 * Strata's CPU kernels: batch-invariant by construction, the same bits on every CPU.
 *
 * Every output element is computed by one fixed sequence of float operations that depends
 * only on that element's own inputs (its activation row, its weight row, its position),
 * never on how many other rows share the call, where the row sits in the batch, how many
 * threads run, or which instruction set the machine has. The kernels are written once
 * against the 16-lane virtual vector of vector.h; compiled for AVX-512, AVX2 + FMA, NEON or
 * plain C they perform the same IEEE operations in the same order. Threads split work by
 * output element, never inside a reduction. No libm function is on the numeric path: e^x
 * and log are vector.h's own fixed sequences (sqrtf and fmaf are exactly rounded by IEEE 754).
 *
 * Weights stay in their GGUF block format (Q4_0, Q4_1, Q8_0) or fp32, and are dequantised
 * just before use with the same arithmetic as gguf-py. At load time each block's fp16 scale
 * (and Q4_1 min) is widened to fp32 in place of the half (an exact conversion):
 *   Q4_0: d f32, qs[16]  (20 bytes)   Q4_1: d f32, m f32, qs[16]  (24)   Q8_0: d f32, qs[32]  (36)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "strata_kernels.h" /* every exported function, type code and struct */

#define WT_LIMBS(t) (((t) >> WT_LIMB_SHIFT) & 3) /* a q8-packed weight's activation limbs (0: q8's rule) */
#define WT_BASE(t) ((t) & 255)                  /* the stored type of a repacked weight */
#include "vector.h"

#define PANEL 16 /* weight rows (outputs) dequantised at a time */
#define FUSED_MAX_ROWS 8
#define FUSED_WR 4 /* weight rows taken together when one or two rows of x run (decode) */
/* Rows sharing each dequantised block in matmul_fused: a speed choice only, sized to the registers. */
#if defined(STRATA_TARGET_AVX512)
#define FUSED_ROWS 8
#else
#define FUSED_ROWS 4
#endif
#define SMALL_WORK 32768 /* below this many elements a call runs on one thread: waking threads costs more */

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


const char *strata_target(void) { return STRATA_TARGET_NAME; }

static inline float f32_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* Scratch memory for a call's temporaries, kept per calling thread from call to call and grown
 * when a call needs more (never shrunk). Freed after every call, a few MB of temporaries went back
 * to the OS (malloc trims the top of its heap), and every layer paid their page faults again:
 * about 15% of a 512-token prefill. One slot per call site, so that nested calls never share. */
enum { SCRATCH_LAYER, SCRATCH_Q8, SCRATCH_UNPACK, SCRATCH_SLOTS };
static void *scratch(int slot, size_t bytes) {
    static _Thread_local void *buf[SCRATCH_SLOTS];
    static _Thread_local size_t cap[SCRATCH_SLOTS];
    if (bytes > cap[slot]) {
        free(buf[slot]);
        size_t grown = bytes + bytes / 4 + 4096; /* room for somewhat larger steps */
        buf[slot] = malloc(grown);
        cap[slot] = buf[slot] ? grown : 0;
    }
    return buf[slot];
}

/* Bytes of one weight row of K values in a given type. */
static int64_t row_bytes(int wtype, int64_t K) {
    switch (wtype) {
    case WT_Q4_0: return K / 32 * 20;
    case WT_Q4_1: return K / 32 * 24;
    case WT_Q8_0: return K / 32 * 36;
    case WT_Q4_K: return K / 256 * 152;
    case WT_Q5_K: return K / 256 * 184;
    case WT_Q6_K: return K / 256 * 276;
    default: return K * 4;
    }
}

#include "kquant_layout.h" /* K-quant blocks rearranged at load */

/*
 * The dot-product sequence every output uses: acc = fma(x[k:k+16], w[k:k+16], acc) for
 * k = 0, 16, 32, ... (the last step zero-padded when K is not a multiple of 16), then
 * vf_hsum. dot_1, dot_block and matmul_fused below all follow it exactly.
 */
static inline float dot_1(const float *x, const float *w, int64_t K) {
    vf acc = vf_zero();
    int64_t k = 0;
    for (; k + VL <= K; k += VL) acc = vf_fma(vf_load(x + k), vf_load(w + k), acc);
    if (k < K) acc = vf_fma(vf_load_n(x + k, (int)(K - k)), vf_load_n(w + k, (int)(K - k)), acc);
    return vf_hsum(acc);
}

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
 * K-quants, in the layout kquant_layout.h gives them at load: sub-block b % 8 of super-block b / 8.
 * Q4_K / Q5_K: (d * sc) * q - (dmin * m), q a nibble (+ 16 * its fifth bit for Q5_K);
 * Q6_K: (d * sc) * q for each half of 16, q stored as int8. The same float32 products in the
 * same order as gguf-py, so the same bits.
 */
static inline void dequant_kblock(int wtype, const uint8_t *row, int64_t b, vf *lo, vf *hi) {
    int j = (int)(b & 7);
    if (wtype == WT_Q6_K) {
        const uint8_t *blk = row + (b >> 3) * 276;
        const int8_t *sc = (const int8_t *)(blk + 4), *q = (const int8_t *)(blk + 20 + j * 32);
        float d = f32_at(blk);
        *lo = vf_mul(vf_set1(d * (float)sc[2 * j]), vf_from_i8(q));
        *hi = vf_mul(vf_set1(d * (float)sc[2 * j + 1]), vf_from_i8(q + 16));
        return;
    }
    const uint8_t *blk = row + (b >> 3) * (wtype == WT_Q4_K ? 152 : 184);
    vf scale = vf_set1(f32_at(blk) * (float)blk[8 + j]), min = vf_set1(f32_at(blk + 4) * (float)blk[16 + j]);
#ifdef VF_LUT16
    if (wtype == WT_Q4_K) { /* the 16 possible values, then a lookup: the same operations per value */
        vf_lut16_u4(vf_sub(vf_mul(scale, vf_iota()), min), blk + 24 + j * 16, lo, hi);
        return;
    }
#endif
    vf ql = vf_from_u4(blk + 24 + j * 16, 0), qh = vf_from_u4(blk + 24 + j * 16, 1);
    if (wtype == WT_Q5_K) {
        const uint8_t *h = blk + 152 + j * 4;
        vf sixteen = vf_set1(16.0f);
        ql = vf_add(ql, vf_mul(vf_from_bits16((uint32_t)h[0] | (uint32_t)h[1] << 8), sixteen));
        qh = vf_add(qh, vf_mul(vf_from_bits16((uint32_t)h[2] | (uint32_t)h[3] << 8), sixteen));
    }
    *lo = vf_sub(vf_mul(scale, ql), min);
    *hi = vf_sub(vf_mul(scale, qh), min);
}

/* Dequantise 32 weights of block b of a quantised row (gguf-py's values, bit for bit). */
static inline void dequant_block(int wtype, const uint8_t *row, int64_t b, vf *lo, vf *hi) {
    if (wtype >= WT_Q4_K) {
        dequant_kblock(wtype, row, b, lo, hi);
    } else if (wtype == WT_Q8_0) {
        const uint8_t *blk = row + b * 36;
        vf d = vf_set1(f32_at(blk));
        *lo = vf_mul(vf_from_i8((const int8_t *)(blk + 4)), d);
        *hi = vf_mul(vf_from_i8((const int8_t *)(blk + 20)), d);
    } else if (wtype == WT_Q4_0) {
        const uint8_t *blk = row + b * 20;
        vf d = vf_set1(f32_at(blk)), eight = vf_set1(8.0f);
#ifdef VF_LUT16
        vf_lut16_u4(vf_mul(d, vf_sub(vf_iota(), eight)), blk + 4, lo, hi);
        return;
#endif
        *lo = vf_mul(d, vf_sub(vf_from_u4(blk + 4, 0), eight)); /* (q - 8) is exact in float */
        *hi = vf_mul(d, vf_sub(vf_from_u4(blk + 4, 1), eight));
    } else { /* Q4_1: d * q + m, two roundings, as numpy does */
        const uint8_t *blk = row + b * 24;
        vf d = vf_set1(f32_at(blk)), m = vf_set1(f32_at(blk + 4));
#ifdef VF_LUT16
        vf_lut16_u4(vf_add(vf_mul(d, vf_iota()), m), blk + 8, lo, hi);
        return;
#endif
        *lo = vf_add(vf_mul(d, vf_from_u4(blk + 8, 0)), m);
        *hi = vf_add(vf_mul(d, vf_from_u4(blk + 8, 1)), m);
    }
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
 * past the weight's end is harmless: it never faults). */
static inline __attribute__((always_inline)) void fused_rows(const float *x, int64_t K, const uint8_t *row,
                                                             int64_t rb, int wr, int wtype, int64_t nb, int rows,
                                                             float *y, int64_t ldy) {
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
            dequant_block(wtype, row + r * rb, b, &lo, &hi);
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

/* Few rows (decode): dequantise each block in registers and use it at once, no panel. One or two
 * rows take FUSED_WR weight rows at a time (see fused_rows). */
static void matmul_fused(const float *x, int64_t M, int64_t K, const uint8_t *w, int wtype, int64_t N,
                         float *y, int nthreads) {
    int64_t rb = row_bytes(wtype, K), nb = K / 32;
    int wr = M <= 2 ? FUSED_WR : 1;
    int64_t steps = (N + wr - 1) / wr;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t s = 0; s < steps; s++) {
        int64_t n = s * wr;
        const uint8_t *row = w + n * rb;
        if (n + wr > N) { /* the last few weight rows, one at a time */
            for (; n < N; n++, row += rb)
                for (int64_t m = 0; m < M; m++) fused_rows(x + m * K, K, row, rb, 1, wtype, nb, 1, y + m * N + n, N);
            continue;
        }
        if (wr > 1) {
            if (M == 1) fused_rows(x, K, row, rb, FUSED_WR, wtype, nb, 1, y + n, N);
            else fused_rows(x, K, row, rb, FUSED_WR, wtype, nb, 2, y + n, N);
            continue;
        }
        for (int64_t m0 = 0; m0 < M; m0 += FUSED_ROWS) {
            int rows = M - m0 < FUSED_ROWS ? (int)(M - m0) : FUSED_ROWS;
            const float *xm = x + m0 * K;
            float *ym = y + m0 * N + n;
            switch (rows) {
#define FUSED_CASE(R) case R: fused_rows(xm, K, row, rb, 1, wtype, nb, R, ym, N); break;
                FUSED_CASE(1) FUSED_CASE(2) FUSED_CASE(3) FUSED_CASE(4)
#if FUSED_ROWS >= 8
                FUSED_CASE(5) FUSED_CASE(6) FUSED_CASE(7) FUSED_CASE(8)
#endif
#undef FUSED_CASE
            }
        }
    }
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
            float *panel = wtype == WT_F32 ? NULL : (float *)malloc((size_t)PANEL * K * 4);
#pragma omp for schedule(static)
            for (int64_t p = 0; p < npanels; p++) {
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

/* RMSNorm per row: (x * (1 / sqrt(mean(x^2) + eps))) * weight. */
void strata_rmsnorm(const float *x, int64_t M, int64_t K, const float *weight, float eps, float *y, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (M * K >= SMALL_WORK)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        float *yr = y + m * K;
        vf r = vf_set1(1.0f / sqrtf(dot_1(xr, xr, K) / (float)K + eps));
        for (int64_t k = 0; k < K; k += VL) {
            int n = K - k < VL ? (int)(K - k) : VL;
            vf_store_n(yr + k, vf_mul(vf_mul(vf_load_n(xr + k, n), r), vf_load_n(weight + k, n)), n);
        }
    }
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

/* A head's scores s[0..n) become its softmax numerators, in place: soft-capped (softcap > 0:
 * softcap * tanh(s / softcap)), then e^(s - max). One sequence for every attention path. */
static inline void softmax_numerators(float *s, int n, float softcap) {
    if (softcap > 0.0f) {
        vf cap = vf_set1(softcap);
        for (int j = 0; j < n; j += VL) {
            int len = n - j < VL ? n - j : VL;
            vf_store_n(s + j, vf_mul(cap, vf_tanh(vf_div(vf_load_n(s + j, len), cap))), len);
        }
    }
    vf mx = vf_set1(max_n(s, n)); /* a max is exact: taking it after the scores changes no bit */
    for (int j = 0; j < n; j += VL) {
        int len = n - j < VL ? n - j : VL;
        vf_store_n(s + j, vf_exp(vf_sub(vf_load_n(s + j, len), mx)), len);
    }
}

/* One (token, head): scores, softmax and the weighted sum of V rows, in position order.
 * Inlined with D constant for the common head sizes, so the V accumulator stays in registers. */
static inline __attribute__((always_inline)) void attend_one(
    const float *qv, const int32_t *table, int start, int n, int D, const float *kc, const float *vc,
    int block_size, int KVH, int kvh, float scale, float softcap, float *s, float *acc, float *o) {
    for (int j = 0; j < n; j++) {
        int p = start + j;
        const float *kr = kc + (((int64_t)table[p / block_size] * block_size + p % block_size) * KVH + kvh) * D;
        s[j] = dot_1(qv, kr, D) * scale;
    }
    softmax_numerators(s, n, softcap);
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += s[j];
    float inv = 1.0f / sum;
    if (D % VL == 0 && D <= 8 * VL) { /* acc[c] = fma(p_j, v_j[c], acc[c]) over j, in registers */
        vf a[8];
        for (int c = 0; c < D / VL; c++) a[c] = vf_zero();
        for (int j = 0; j < n; j++) {
            int jp = start + j;
            const float *vr = vc + (((int64_t)table[jp / block_size] * block_size + jp % block_size) * KVH + kvh) * D;
            vf p = vf_set1(s[j] * inv);
            for (int c = 0; c < D / VL; c++) a[c] = vf_fma(p, vf_load(vr + c * VL), a[c]);
        }
        for (int c = 0; c < D / VL; c++) vf_store(o + c * VL, a[c]);
        return;
    }
    memset(acc, 0, (size_t)D * 4); /* the same sequence, the accumulator in memory */
    for (int j = 0; j < n; j++) {
        int jp = start + j;
        const float *vr = vc + (((int64_t)table[jp / block_size] * block_size + jp % block_size) * KVH + kvh) * D;
        vf p = vf_set1(s[j] * inv);
        for (int d = 0; d < D; d += VL) {
            int len = D - d < VL ? D - d : VL;
            vf_store_n(acc + d, vf_fma(p, vf_load_n(vr + d, len), vf_load_n(acc + d, len)), len);
        }
    }
    memcpy(o, acc, (size_t)D * 4);
}


/* The G query heads h0 .. h0+G-1 of one token that share one KV head (grouped-query attention),
 * D a multiple of 16, at most 8 * VL: each head's scores, softmax and weighted V sum are exactly
 * attend_one's sequence (same operations, same order), with the heads interleaved so that each
 * K and V row is loaded once for all of them, ATT_POS positions' scores are reduced together
 * (four: vf_hsum4) and the heads' sums run side by side. G * D <= 4 * 64 keeps the V
 * accumulators in registers (on AVX-512). */
#define GROUP_MAX 4
/* Positions whose scores attend_group takes at a time: a speed choice only (each score is one dot_1
 * sequence either way), sized to the registers: 32 vectors on AVX-512, 8 where a vector is 2 or 4
 * registers (AVX2, NEON), where more positions only spill. */
#if defined(STRATA_TARGET_AVX512)
#define ATT_POS 4
#else
#define ATT_POS 1
#endif
static inline __attribute__((always_inline)) void attend_group(
    const float *qv, int G, const int32_t *table, int start, int n, int D, const float *kc, const float *vc,
    int block_size, int KVH, int kvh, float scale, float softcap, float *s, int64_t s_stride, float *o,
    int64_t o_stride) {
    int C = D / VL;
    int j = 0;
    vf qr[GROUP_MAX * 4]; /* the heads' queries (G * D <= 256), loaded once: in registers where they fit */
    for (int i = 0; i < G * C; i++) qr[i] = vf_load(qv + i * VL);
    for (; j + ATT_POS <= n; j += ATT_POS) { /* ATT_POS positions at a time, each K vector loaded once for all heads */
        const float *kr[ATT_POS];
        for (int u = 0; u < ATT_POS; u++) {
            int p = start + j + u;
            kr[u] = kc + (((int64_t)table[p / block_size] * block_size + p % block_size) * KVH + kvh) * D;
        }
        vf acc[GROUP_MAX][ATT_POS]; /* acc[g][u]: head g's dot product with position j + u, over c in order */
        for (int g = 0; g < G; g++)
            for (int u = 0; u < ATT_POS; u++) acc[g][u] = vf_zero();
        for (int c = 0; c < C; c++) {
            vf k[ATT_POS];
            for (int u = 0; u < ATT_POS; u++) k[u] = vf_load(kr[u] + c * VL);
            for (int g = 0; g < G; g++)
                for (int u = 0; u < ATT_POS; u++) acc[g][u] = vf_fma(qr[g * C + c], k[u], acc[g][u]);
        }
        for (int g = 0; g < G; g++) {
#if ATT_POS == 4
            float d4[4];
            vf_hsum4(acc[g][0], acc[g][1], acc[g][2], acc[g][3], d4);
            for (int u = 0; u < 4; u++) s[g * s_stride + j + u] = d4[u] * scale;
#else
            for (int u = 0; u < ATT_POS; u++) s[g * s_stride + j + u] = vf_hsum(acc[g][u]) * scale;
#endif
        }
    }
    for (; j < n; j++) {
        int p = start + j;
        const float *kr = kc + (((int64_t)table[p / block_size] * block_size + p % block_size) * KVH + kvh) * D;
        for (int g = 0; g < G; g++) s[g * s_stride + j] = dot_1(qv + g * D, kr, D) * scale;
    }
    float inv[GROUP_MAX];
    for (int g = 0; g < G; g++) softmax_numerators(s + g * s_stride, n, softcap);
    float sum[GROUP_MAX] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; i++) /* each head's sum in position order; the heads side by side */
        for (int g = 0; g < G; g++) sum[g] += s[g * s_stride + i];
    for (int g = 0; g < G; g++) inv[g] = 1.0f / sum[g];
    vf a[GROUP_MAX * 4];
    for (int i = 0; i < G * C; i++) a[i] = vf_zero();
    for (int i = 0; i < n; i++) {
        int jp = start + i;
        const float *vr = vc + (((int64_t)table[jp / block_size] * block_size + jp % block_size) * KVH + kvh) * D;
        vf p[GROUP_MAX];
        for (int g = 0; g < G; g++) p[g] = vf_set1(s[g * s_stride + i] * inv[g]);
        for (int c = 0; c < C; c++) {
            vf v = vf_load(vr + c * VL);
            for (int g = 0; g < G; g++) a[g * C + c] = vf_fma(p[g], v, a[g * C + c]);
        }
    }
    for (int g = 0; g < G; g++)
        for (int c = 0; c < C; c++) vf_store(o + g * o_stride + c * VL, a[g * C + c]);
}

/*
 * Causal attention for T query tokens against a paged KV cache (KV already written).
 * q: [T, H, D]; caches: [num_blocks, block_size, KVH, D]; token t belongs to the sequence whose
 * block table row is tables[t_seq[t] * max_blocks ...]; it attends to positions 0..pos[t], or with
 * window > 0 (sliding-window layers) to max(0, pos[t] - window + 1)..pos[t]. Each score is
 * dot(q, k) * scale, then with softcap > 0 (Gemma 2) softcap * tanh(score / softcap).
 * Each (token, head) is computed alone, in position order: the same bits whether the token
 * comes from a one-shot prefill, a chunk, a prefix-cache continuation or a decode step.
 * window = 0 and softcap = 0 run exactly the sequence of full causal attention.
 */
void strata_attention(const float *q, int64_t T, int H, int KVH, int D, const float *kc, const float *vc,
                      int block_size, const int32_t *tables, int max_blocks, const int32_t *t_seq,
                      const int32_t *pos, float scale, float softcap, int window, float *out, int nthreads) {
    int group = H / KVH;
    int64_t max_ctx = 1;
    for (int64_t t = 0; t < T; t++)
        if (pos[t] + 1 > max_ctx) max_ctx = pos[t] + 1;
    /* Heads of one KV group together (attend_group) where the shapes allow and there is work
     * enough for every thread; each head alone otherwise. The same bits either way. */
    int G = 1;
    if (D % VL == 0 && group > 1 && T * KVH >= 2 * nthreads)
        for (int g = GROUP_MAX; g > 1; g--)
            if (group % g == 0 && g * D <= GROUP_MAX * 64) {
                G = g;
                break;
            }
#pragma omp parallel num_threads(nthreads) if (T * H * max_ctx * D >= SMALL_WORK)
    {
        float *s = (float *)malloc((size_t)max_ctx * 4 * G);
        float *acc = (float *)malloc((size_t)(D + VL) * 4);
        /* dynamic: a causal token's work grows with its position, so equal static shares of the
         * tokens left one thread with three quarters of a prefill's attention */
        if (G > 1) {
#pragma omp for schedule(dynamic, 2)
            for (int64_t tg = 0; tg < T * (H / G); tg++) {
                int64_t t = tg / (H / G);
                int h0 = (int)(tg % (H / G)) * G;
                const int32_t *table = tables + (int64_t)t_seq[t] * max_blocks;
                int start = window > 0 && pos[t] + 1 > window ? pos[t] + 1 - window : 0;
                int n = pos[t] + 1 - start;
                const float *qv = q + (t * H + h0) * D;
                float *o = out + (t * H + h0) * D;
                /* constant head counts and sizes, so that the accumulators stay in registers */
#define GROUP_CASE(GC, DC) \
    attend_group(qv, GC, table, start, n, DC, kc, vc, block_size, KVH, h0 / group, scale, softcap, s, max_ctx, o, D)
                if (D == 64 && G == 2) GROUP_CASE(2, 64);
                else if (D == 64 && G == 3) GROUP_CASE(3, 64);
                else if (D == 64 && G == 4) GROUP_CASE(4, 64);
                else if (D == 128 && G == 2) GROUP_CASE(2, 128);
                else GROUP_CASE(G, D);
#undef GROUP_CASE
            }
        }
#pragma omp for schedule(dynamic, 2)
        for (int64_t th = 0; th < (G > 1 ? 0 : T * H); th++) {
            int64_t t = th / H;
            int h = (int)(th % H), kvh = h / group;
            const float *qv = q + (t * H + h) * D;
            const int32_t *table = tables + (int64_t)t_seq[t] * max_blocks;
            int start = window > 0 && pos[t] + 1 > window ? pos[t] + 1 - window : 0;
            int n = pos[t] + 1 - start; /* s[j]: position start + j */
            float *o = out + (t * H + h) * D;
            if (D == 64)
                attend_one(qv, table, start, n, 64, kc, vc, block_size, KVH, kvh, scale, softcap, s, acc, o);
            else if (D == 128)
                attend_one(qv, table, start, n, 128, kc, vc, block_size, KVH, kvh, scale, softcap, s, acc, o);
            else
                attend_one(qv, table, start, n, D, kc, vc, block_size, KVH, kvh, scale, softcap, s, acc, o);
        }
        free(s);
        free(acc);
    }
}

/*
 * RoPE in place on x[T, H, D] (first `rot` dims). cos/sin: [ctx, rot/2] tables per absolute
 * position. interleaved=1 pairs (2i, 2i+1) (llama GGUFs); 0 pairs (i, i+rot/2) (NeoX/qwen).
 * Each element is a*c - b*s or a*s + b*c with separately rounded products.
 */
void strata_rope(float *x, int64_t T, int H, int D, int rot, const int32_t *pos, const float *cos_t,
                 const float *sin_t, int interleaved) {
    int half = rot / 2;
    for (int64_t t = 0; t < T; t++) {
        const float *c = cos_t + (int64_t)pos[t] * half, *s = sin_t + (int64_t)pos[t] * half;
        for (int h = 0; h < H; h++) {
            float *v = x + (t * H + h) * D;
            for (int i = 0; i < half; i++) {
                int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
                float a = v[ia], b = v[ib];
                float ac = a * c[i], bs = b * s[i], as = a * s[i], bc = b * c[i];
                v[ia] = ac - bs;
                v[ib] = as + bc;
            }
        }
    }
}

/* Write the step's K/V rows [T, KVH, D] into their cache slots (before attention reads them). */
void strata_kv_write(const float *k, const float *v, int64_t T, int64_t row_floats, const int64_t *slots,
                     float *kc, float *vc, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T * row_floats >= SMALL_WORK)
    for (int64_t t = 0; t < T; t++) {
        memcpy(kc + slots[t] * row_floats, k + t * row_floats, (size_t)row_floats * 4);
        memcpy(vc + slots[t] * row_floats, v + t * row_floats, (size_t)row_floats * 4);
    }
}

/*
 * The logprob tail: out[m, :] = (x[m, :] - max) - log(sum(e^(x - max))) for each row, over the
 * full vocabulary. The sum runs over 16-lane chunks in order with Kahan compensation in every
 * lane (so its error does not grow with the vocabulary), then the lanes in double in lane
 * order; log in double.
 */
void strata_log_softmax(const float *x, int64_t M, int64_t N, float *out, int nthreads) { /* out may be x */
#pragma omp parallel for num_threads(nthreads) schedule(static) if (M > 1)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * N;
        float *yr = out + m * N;
        float mx = max_n(xr, N);
        vf vmx = vf_set1(mx), acc = vf_zero(), comp = vf_zero();
        for (int64_t i = 0; i < N; i += VL) {
            int len = N - i < VL ? (int)(N - i) : VL;
            vf e = vf_exp(vf_sub(vf_load_n(xr + i, len), vmx));
            if (len < VL) { /* padded lanes hold e^(0 - mx): keep them out of the sum */
                float buf[VL] = {0};
                vf_store_n(buf, e, len);
                e = vf_load(buf);
            }
            vf y = vf_sub(e, comp), t = vf_add(acc, y);
            comp = vf_sub(vf_sub(t, acc), y);
            acc = t;
        }
        float sums[VL], comps[VL];
        vf_store(sums, acc);
        vf_store(comps, comp);
        double total = 0.0;
        for (int l = 0; l < VL; l++) total += (double)sums[l] - (double)comps[l];
        vf lse = vf_set1((float)log_d(total));
        for (int64_t i = 0; i < N; i += VL) {
            int len = N - i < VL ? (int)(N - i) : VL;
            vf_store_n(yr + i, vf_sub(vf_sub(vf_load_n(xr + i, len), vmx), lse), len);
        }
    }
}

/* e^x elementwise (exposed for tests: the accuracy of vf_exp against float64). */
void strata_exp(const float *x, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i += VL) {
        int len = n - i < VL ? (int)(n - i) : VL;
        vf_store_n(out + i, vf_exp(vf_load_n(x + i, len)), len);
    }
}

/* silu(g) = g / (1 + e^-g) */
static inline vf silu(vf g) { return vf_div(g, vf_add(vf_set1(1.0f), vf_exp(vf_sub(vf_set1(0.0f), g)))); }

/*
 * GELU's tanh approximation (Gemma's GeGLU): gelu(g) = g/2 (1 + tanh(u)),
 * u = sqrt(2/pi) (g + 0.044715 g^3), evaluated as the identical g / (1 + e^(-2u)) (no
 * cancellation near g = 0, no libm): one fixed sequence per element.
 */
static inline vf gelu_tanh(vf g) {
    vf inner = vf_fma(vf_mul(g, g), vf_set1(0.044715f), vf_set1(1.0f)); /* 1 + 0.044715 g^2 */
    vf z = vf_mul(vf_mul(g, inner), vf_set1(-1.5957691216057308f));    /* -2u = -2 sqrt(2/pi) g (...) */
    return vf_div(g, vf_add(vf_set1(1.0f), vf_exp(z)));
}

/* out = act(gate) * up, elementwise; act is SiLU (SwiGLU) or GELU-tanh (GeGLU). */
static void gated_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads, int gelu) {
    int64_t chunks = (n + VL - 1) / VL;
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n >= SMALL_WORK)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t i = c * VL;
        int len = n - i < VL ? (int)(n - i) : VL;
        vf g = vf_load_n(gate + i, len);
        vf_store_n(out + i, vf_mul(gelu ? gelu_tanh(g) : silu(g), vf_load_n(up + i, len)), len);
    }
}

void strata_silu_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads) {
    gated_mul(gate, up, n, out, nthreads, 0);
}

void strata_gelu_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads) {
    gated_mul(gate, up, n, out, nthreads, 1);
}

/* Logit soft-capping (Gemma 2): out = cap * tanh(x / cap), elementwise (x / cap correctly rounded). */
void strata_softcap(const float *x, int64_t n, float cap, float *out) {
    vf c = vf_set1(cap);
    for (int64_t i = 0; i < n; i += VL) {
        int len = n - i < VL ? (int)(n - i) : VL;
        vf_store_n(out + i, vf_mul(c, vf_tanh(vf_div(vf_load_n(x + i, len), c))), len);
    }
}

/*
 * One dense transformer layer in one call (decode and prefill alike): the same kernels in the
 * same order as model.py's layer loop, so the same bits, without a Python round trip per
 * operation. The weights and switches of a layer are described once at load (strata_layer_desc in
 * strata_kernels.h); each call passes the step's tokens and attention metadata.
 */
void strata_layer(const strata_layer_desc *L, float *x, int64_t T, const int32_t *pos, const int32_t *t_seq,
                  const int32_t *tables, int max_blocks, int block_size, const int64_t *slots, float *kc,
                  float *vc, int nthreads) {
    int64_t H = L->hidden, q_dim = L->n_heads * L->head_dim, kv_dim = L->n_kv_heads * L->head_dim;
    int64_t wide = L->ffn > q_dim ? L->ffn : q_dim;
    /* the layer's temporaries: one scratch block, each part a whole number of 16-float vectors */
    int64_t sizes[7] = {T * H, T * q_dim, T * kv_dim, T * kv_dim, T * wide, T * L->ffn, T * L->ffn}, total = 0;
    for (int i = 0; i < 7; i++) sizes[i] = (sizes[i] + 15) / 16 * 16, total += sizes[i];
    float *parts[7], *at = (float *)scratch(SCRATCH_LAYER, (size_t)total * 4);
    for (int i = 0; i < 7; i++) parts[i] = at, at += sizes[i];
    float *h = parts[0], *q = parts[1], *k = parts[2], *v = parts[3], *a = parts[4], *g = parts[5], *u = parts[6];
    int nh = (int)L->n_heads, nkv = (int)L->n_kv_heads, d = (int)L->head_dim;

    strata_rmsnorm(x, T, H, L->attn_norm, L->eps, h, nthreads);
    strata_matmul(h, T, H, L->wq, L->tq, q_dim, L->bq, q, nthreads);
    strata_matmul(h, T, H, L->wk, L->tk, kv_dim, L->bk, k, nthreads);
    strata_matmul(h, T, H, L->wv, L->tv, kv_dim, L->bv, v, nthreads);
    if (L->q_norm && L->k_norm) { /* per head, in place (a row is read whole before it is written) */
        strata_rmsnorm(q, T * nh, d, L->q_norm, L->eps, q, nthreads);
        strata_rmsnorm(k, T * nkv, d, L->k_norm, L->eps, k, nthreads);
    }
    strata_rope(q, T, nh, d, L->rope_dim, pos, L->rope_cos, L->rope_sin, L->rope_interleaved);
    strata_rope(k, T, nkv, d, L->rope_dim, pos, L->rope_cos, L->rope_sin, L->rope_interleaved);
    strata_kv_write(k, v, T, kv_dim, slots, kc, vc, nthreads);
    strata_attention(q, T, nh, nkv, d, kc, vc, block_size, tables, max_blocks, t_seq, pos, L->scale, L->softcap,
                     L->window, a, nthreads);
    strata_matmul(a, T, q_dim, L->wo, L->to, H, NULL, h, nthreads);
    if (L->post_attn_norm) strata_rmsnorm(h, T, H, L->post_attn_norm, L->eps, h, nthreads);
    for (int64_t i = 0; i < T * H; i++) x[i] = x[i] + h[i];

    strata_rmsnorm(x, T, H, L->ffn_norm, L->eps, h, nthreads);
    strata_matmul(h, T, H, L->w_gate, L->t_gate, L->ffn, NULL, g, nthreads);
    strata_matmul(h, T, H, L->w_up, L->t_up, L->ffn, NULL, u, nthreads);
    gated_mul(g, u, T * L->ffn, a, nthreads, L->gelu);
    strata_matmul(a, T, L->ffn, L->w_down, L->t_down, H, NULL, h, nthreads);
    if (L->post_ffn_norm) strata_rmsnorm(h, T, H, L->post_ffn_norm, L->eps, h, nthreads);
    for (int64_t i = 0; i < T * H; i++) x[i] = x[i] + h[i];
}

#include "q8.h" /* the opt-in 8-bit-activation kernels */
#include "limb.h" /* activations as exact integer limbs, on q8's packed weights */
#include "fpmode.h" /* the IEEE default modes, set around each step */
