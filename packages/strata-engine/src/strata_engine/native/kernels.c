/*
 * Strata's CPU kernels: batch-invariant by construction.
 *
 * Every output element is computed by one fixed sequence of float operations that depends
 * only on that element's own inputs (its activation row, its weight row, its position),
 * never on how many other rows share the call, where the row sits in the batch, or how
 * many threads run. Threads split work by output element, never inside a reduction.
 * Build with -ffp-contract=off so that the compiler cannot fuse a multiply and an add in
 * one code path and not in another.
 *
 * Weights stay in their GGUF block format (Q4_0, Q4_1, Q8_0) or fp32, and are dequantised
 * into a small fp32 panel just before use, with the same arithmetic as gguf-py.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PANEL 16 /* weight rows (outputs) dequantised at a time */

enum { WT_F32 = 0, WT_Q4_0 = 2, WT_Q4_1 = 3, WT_Q8_0 = 8 };

static inline float f16_to_f32(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* Fixed-order horizontal sum of 16 lanes. */
static inline float hsum16(__m512 v) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}

static inline __m512 load_tail(const float *p, int k, int K) {
    int left = K - k;
    if (left >= 16) return _mm512_loadu_ps(p);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << left) - 1u), p);
}

/* Bytes of one weight row of K values in a given type. */
static int64_t row_bytes(int wtype, int K) {
    switch (wtype) {
    case WT_Q4_0: return (int64_t)(K / 32) * 18;
    case WT_Q4_1: return (int64_t)(K / 32) * 20;
    case WT_Q8_0: return (int64_t)(K / 32) * 34;
    default: return (int64_t)K * 4;
    }
}

/* Dequantise one weight row into dst[K], bit-identical to gguf-py's numpy dequantizer. */
static void dequant_row(int wtype, const uint8_t *src, float *dst, int K) {
    if (wtype == WT_F32) {
        memcpy(dst, src, (size_t)K * 4);
        return;
    }
    const __m512i low4 = _mm512_set1_epi32(15);
    for (int b = 0; b < K / 32; b++) {
        float *o = dst + b * 32;
        if (wtype == WT_Q8_0) {
            const uint8_t *blk = src + b * 34;
            __m512 d = _mm512_set1_ps(f16_to_f32(blk));
            __m128i q0 = _mm_loadu_si128((const __m128i *)(blk + 2));
            __m128i q1 = _mm_loadu_si128((const __m128i *)(blk + 18));
            _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), d));
            _mm512_storeu_ps(o + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), d));
        } else {
            int step = wtype == WT_Q4_0 ? 18 : 20;
            const uint8_t *blk = src + b * step;
            __m512 d = _mm512_set1_ps(f16_to_f32(blk));
            const uint8_t *qs = blk + (wtype == WT_Q4_0 ? 2 : 4);
            __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)qs));
            __m512i lo = _mm512_and_si512(q, low4);
            __m512i hi = _mm512_srli_epi32(q, 4);
            if (wtype == WT_Q4_0) {
                const __m512i eight = _mm512_set1_epi32(8);
                _mm512_storeu_ps(o, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight))));
                _mm512_storeu_ps(o + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight))));
            } else {
                __m512 m = _mm512_set1_ps(f16_to_f32(blk + 2));
                _mm512_storeu_ps(o, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(lo)), m));
                _mm512_storeu_ps(o + 16, _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(hi)), m));
            }
        }
    }
}

/* One output: acc over k in steps of 16 with fma, then the fixed horizontal sum. */
static inline float dot_1x1(const float *x, const float *w, int K) {
    __m512 acc = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 16) acc = _mm512_fmadd_ps(load_tail(x + k, k, K), load_tail(w + k, k, K), acc);
    return hsum16(acc);
}

/* Four rows x four outputs at once; each output sees exactly dot_1x1's sequence. */
static inline void dot_4x4(const float *x, int64_t ldx, const float *w, int K, float *y, int64_t ldy) {
    __m512 a[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) a[i][j] = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 16) {
        __m512 wv[4], xv;
        for (int j = 0; j < 4; j++) wv[j] = load_tail(w + (int64_t)j * K + k, k, K);
        for (int i = 0; i < 4; i++) {
            xv = load_tail(x + i * ldx + k, k, K);
            for (int j = 0; j < 4; j++) a[i][j] = _mm512_fmadd_ps(xv, wv[j], a[i][j]);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) y[i * ldy + j] = hsum16(a[i][j]);
}

/*
 * y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]), W in `wtype` blocks.
 * Parallel over panels of PANEL outputs; each thread dequantises its panel once.
 */
void strata_matmul(const float *x, int64_t M, int64_t K, const uint8_t *w, int wtype, int64_t N,
                   const float *bias, float *y, int nthreads) {
    int64_t rb = row_bytes(wtype, (int)K);
    int64_t npanels = (N + PANEL - 1) / PANEL;
#pragma omp parallel num_threads(nthreads)
    {
        float *panel = (float *)aligned_alloc(64, (size_t)PANEL * K * 4 + 64);
#pragma omp for schedule(static)
        for (int64_t p = 0; p < npanels; p++) {
            int64_t n0 = p * PANEL;
            int64_t np = N - n0 < PANEL ? N - n0 : PANEL;
            for (int64_t j = 0; j < np; j++) dequant_row(wtype, w + (n0 + j) * rb, panel + j * K, (int)K);
            int64_t m = 0;
            for (; m + 4 <= M; m += 4) {
                int64_t j = 0;
                for (; j + 4 <= np; j += 4) dot_4x4(x + m * K, K, panel + j * K, (int)K, y + m * N + n0 + j, N);
                for (; j < np; j++)
                    for (int i = 0; i < 4; i++) y[(m + i) * N + n0 + j] = dot_1x1(x + (m + i) * K, panel + j * K, (int)K);
            }
            for (; m < M; m++)
                for (int64_t j = 0; j < np; j++) y[m * N + n0 + j] = dot_1x1(x + m * K, panel + j * K, (int)K);
            if (bias)
                for (int64_t mm = 0; mm < M; mm++)
                    for (int64_t j = 0; j < np; j++) y[mm * N + n0 + j] += bias[n0 + j];
        }
        free(panel);
    }
}

/* Gather rows `ids` of a (possibly quantised) table into out[n, K] (embedding lookup). */
void strata_gather_rows(const uint8_t *w, int wtype, int64_t K, const int64_t *ids, int64_t n, float *out) {
    int64_t rb = row_bytes(wtype, (int)K);
    for (int64_t i = 0; i < n; i++) dequant_row(wtype, w + ids[i] * rb, out + i * K, (int)K);
}

/* RMSNorm per row: x * (1 / sqrt(mean(x^2) + eps)) * weight. */
void strata_rmsnorm(const float *x, int64_t M, int64_t K, const float *weight, float eps, float *y, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = x + m * K;
        float ss = dot_1x1(xr, xr, (int)K);
        float r = 1.0f / sqrtf(ss / (float)K + eps);
        for (int64_t k = 0; k < K; k++) y[m * K + k] = (xr[k] * r) * weight[k];
    }
}

/* out = silu(gate) * up, elementwise, scalar libm expf so every element takes one path. */
void strata_silu_mul(const float *gate, const float *up, int64_t n, float *out, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = (g / (1.0f + expf(-g))) * up[i];
    }
}

/*
 * Causal attention for T query tokens against a paged KV cache (KV already written).
 * q: [T, H, D]; caches: [num_blocks, block_size, KVH, D]; token t belongs to the sequence whose
 * block table row is tables[t_seq[t] * max_blocks ...]; it attends to positions 0..pos[t].
 * Each (token, head) is computed alone, in position order: the same bits whether the token
 * comes from a one-shot prefill, a chunk, a prefix-cache continuation or a decode step.
 */
void strata_attention(const float *q, int64_t T, int H, int KVH, int D, const float *kc, const float *vc,
                      int block_size, const int32_t *tables, int max_blocks, const int32_t *t_seq,
                      const int32_t *pos, float scale, float *out, int nthreads) {
    int group = H / KVH;
    int64_t max_ctx = 0;
    for (int64_t t = 0; t < T; t++)
        if (pos[t] + 1 > max_ctx) max_ctx = pos[t] + 1;
#pragma omp parallel num_threads(nthreads)
    {
        float *s = (float *)malloc((size_t)(max_ctx > 0 ? max_ctx : 1) * 4);
        float *acc = (float *)aligned_alloc(64, (size_t)((D + 15) / 16) * 64);
#pragma omp for schedule(static)
        for (int64_t th = 0; th < T * H; th++) {
            int64_t t = th / H;
            int h = (int)(th % H), kvh = h / group;
            const float *qv = q + (t * H + h) * D;
            const int32_t *table = tables + (int64_t)t_seq[t] * max_blocks;
            int n = pos[t] + 1;
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                const float *kr = kc + (((int64_t)table[j / block_size] * block_size + j % block_size) * KVH + kvh) * D;
                s[j] = dot_1x1(qv, kr, D) * scale;
                if (s[j] > mx) mx = s[j];
            }
            float sum = 0.0f;
            for (int j = 0; j < n; j++) {
                s[j] = expf(s[j] - mx);
                sum += s[j];
            }
            float inv = 1.0f / sum;
            for (int d = 0; d < D; d++) acc[d] = 0.0f;
            for (int j = 0; j < n; j++) {
                const float *vr = vc + (((int64_t)table[j / block_size] * block_size + j % block_size) * KVH + kvh) * D;
                __m512 p = _mm512_set1_ps(s[j] * inv);
                for (int d = 0; d < D; d += 16) {
                    __mmask16 mk = D - d >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (D - d)) - 1u);
                    __m512 a = _mm512_maskz_loadu_ps(mk, acc + d);
                    _mm512_mask_storeu_ps(acc + d, mk, _mm512_fmadd_ps(p, _mm512_maskz_loadu_ps(mk, vr + d), a));
                }
            }
            memcpy(out + (t * H + h) * D, acc, (size_t)D * 4);
        }
        free(s);
        free(acc);
    }
}
