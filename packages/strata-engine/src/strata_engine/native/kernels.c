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
 * just before use with the same arithmetic as gguf-py. At load time each block's fp16 scale
 * (and Q4_1 min) is widened to fp32 in place of the half (an exact conversion), so the hot
 * loop broadcasts a float instead of converting a half:
 *   Q4_0: d f32, qs[16]  (20 bytes)   Q4_1: d f32, m f32, qs[16]  (24)   Q8_0: d f32, qs[32]  (36)
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define PANEL 16 /* weight rows (outputs) dequantised at a time */

enum { WT_F32 = 0, WT_Q4_0 = 2, WT_Q4_1 = 3, WT_Q8_0 = 8 };

static inline float f32_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
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
    case WT_Q4_0: return (int64_t)(K / 32) * 20;
    case WT_Q4_1: return (int64_t)(K / 32) * 24;
    case WT_Q8_0: return (int64_t)(K / 32) * 36;
    default: return (int64_t)K * 4;
    }
}

/*
 * The dot-product sequence every output uses: acc = fma(x[k:k+16], w[k:k+16], acc) for
 * k = 0, 16, 32, ... (the last step masked when K is not a multiple of 16), then hsum16.
 * dot_1x1, dot_4x4 and the fused small-batch path below all follow it exactly.
 */
static inline float dot_1x1(const float *x, const float *w, int K) {
    __m512 acc = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(x + k), _mm512_loadu_ps(w + k), acc);
    if (k < K) acc = _mm512_fmadd_ps(load_tail(x + k, k, K), load_tail(w + k, k, K), acc);
    return hsum16(acc);
}

/* Four rows x four outputs at once; each output sees exactly dot_1x1's sequence. */
static inline void dot_4x4(const float *x, int64_t ldx, const float *w, int K, float *y, int64_t ldy) {
    __m512 a00 = _mm512_setzero_ps(), a01 = a00, a02 = a00, a03 = a00, a10 = a00, a11 = a00, a12 = a00,
           a13 = a00, a20 = a00, a21 = a00, a22 = a00, a23 = a00, a30 = a00, a31 = a00, a32 = a00, a33 = a00;
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
    const float *w0 = w, *w1 = w + K, *w2 = w + 2 * K, *w3 = w + 3 * K;
    int k = 0;
#define STEP(LOAD)                                                                                        \
    {                                                                                                     \
        __m512 v0 = LOAD(w0), v1 = LOAD(w1), v2 = LOAD(w2), v3 = LOAD(w3), xv;                            \
        xv = LOAD(x0); a00 = _mm512_fmadd_ps(xv, v0, a00); a01 = _mm512_fmadd_ps(xv, v1, a01);            \
        a02 = _mm512_fmadd_ps(xv, v2, a02); a03 = _mm512_fmadd_ps(xv, v3, a03);                           \
        xv = LOAD(x1); a10 = _mm512_fmadd_ps(xv, v0, a10); a11 = _mm512_fmadd_ps(xv, v1, a11);            \
        a12 = _mm512_fmadd_ps(xv, v2, a12); a13 = _mm512_fmadd_ps(xv, v3, a13);                           \
        xv = LOAD(x2); a20 = _mm512_fmadd_ps(xv, v0, a20); a21 = _mm512_fmadd_ps(xv, v1, a21);            \
        a22 = _mm512_fmadd_ps(xv, v2, a22); a23 = _mm512_fmadd_ps(xv, v3, a23);                           \
        xv = LOAD(x3); a30 = _mm512_fmadd_ps(xv, v0, a30); a31 = _mm512_fmadd_ps(xv, v1, a31);            \
        a32 = _mm512_fmadd_ps(xv, v2, a32); a33 = _mm512_fmadd_ps(xv, v3, a33);                           \
    }
#define FULL(p) _mm512_loadu_ps((p) + k)
#define TAIL(p) load_tail((p) + k, k, K)
    for (; k + 16 <= K; k += 16) STEP(FULL)
    if (k < K) STEP(TAIL)
#undef FULL
#undef TAIL
#undef STEP
    y[0] = hsum16(a00); y[1] = hsum16(a01); y[2] = hsum16(a02); y[3] = hsum16(a03);
    y += ldy; y[0] = hsum16(a10); y[1] = hsum16(a11); y[2] = hsum16(a12); y[3] = hsum16(a13);
    y += ldy; y[0] = hsum16(a20); y[1] = hsum16(a21); y[2] = hsum16(a22); y[3] = hsum16(a23);
    y += ldy; y[0] = hsum16(a30); y[1] = hsum16(a31); y[2] = hsum16(a32); y[3] = hsum16(a33);
}

/* Dequantise 32 weights of block b of a quantised row into two registers (gguf-py's values). */
static inline void dequant_block(int wtype, const uint8_t *row, int b, __m512 *lo, __m512 *hi) {
    if (wtype == WT_Q8_0) {
        const uint8_t *blk = row + b * 36;
        __m512 d = _mm512_set1_ps(f32_at(blk));
        *lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 4)))), d);
        *hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 20)))), d);
        return;
    }
    const __m512i low4 = _mm512_set1_epi32(15);
    const uint8_t *blk = row + b * (wtype == WT_Q4_0 ? 20 : 24);
    __m512 d = _mm512_set1_ps(f32_at(blk));
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + (wtype == WT_Q4_0 ? 4 : 8))));
    __m512i ql = _mm512_and_si512(q, low4), qh = _mm512_srli_epi32(q, 4);
    if (wtype == WT_Q4_0) {
        const __m512i eight = _mm512_set1_epi32(8);
        *lo = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ql, eight)));
        *hi = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(qh, eight)));
    } else {
        __m512 m = _mm512_set1_ps(f32_at(blk + 4));
        *lo = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(ql)), m);
        *hi = _mm512_add_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(qh)), m);
    }
}

/* Dequantise one weight row into dst[K], bit-identical to gguf-py's numpy dequantizer. */
static void dequant_row(int wtype, const uint8_t *src, float *dst, int K) {
    if (wtype == WT_F32) {
        memcpy(dst, src, (size_t)K * 4);
        return;
    }
    for (int b = 0; b < K / 32; b++) {
        __m512 lo, hi;
        dequant_block(wtype, src, b, &lo, &hi);
        _mm512_storeu_ps(dst + b * 32, lo);
        _mm512_storeu_ps(dst + b * 32 + 16, hi);
    }
}

/* Few rows (decode): dequantise each block in registers and use it at once, no panel. */
static void matmul_fused(const float *x, int64_t M, int64_t K, const uint8_t *w, int wtype, int64_t N,
                         float *y, int nthreads) {
    int64_t rb = row_bytes(wtype, (int)K);
    int nb = (int)(K / 32);
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const uint8_t *row = w + n * rb;
        for (int64_t m0 = 0; m0 < M; m0 += 4) {
            int rows = M - m0 < 4 ? (int)(M - m0) : 4;
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
            for (int b = 0; b < nb; b++) {
                __m512 lo, hi;
                dequant_block(wtype, row, b, &lo, &hi);
                for (int i = 0; i < rows; i++) {
                    const float *xr = x + (m0 + i) * K + b * 32;
                    acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xr), lo, acc[i]);
                    acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + 16), hi, acc[i]);
                }
            }
            for (int i = 0; i < rows; i++) y[(m0 + i) * N + n] = hsum16(acc[i]);
        }
    }
}

#define FUSED_MAX_ROWS 8

/*
 * y[M, N] = x[M, K] @ W[N, K]^T (+ bias[N]), W in `wtype` blocks.
 * Few rows: fused dequantise-and-dot. More rows: parallel over panels of PANEL outputs,
 * each dequantised once into fp32 and reused by every row. Both give the same bits.
 */
void strata_matmul(const float *x, int64_t M, int64_t K, const uint8_t *w, int wtype, int64_t N,
                   const float *bias, float *y, int nthreads) {
    int64_t rb = row_bytes(wtype, (int)K);
    if (wtype != WT_F32 && M <= FUSED_MAX_ROWS) {
        matmul_fused(x, M, K, w, wtype, N, y, nthreads);
    } else {
        int64_t npanels = (N + PANEL - 1) / PANEL;
#pragma omp parallel num_threads(nthreads)
        {
            float *panel = wtype == WT_F32 ? NULL : (float *)aligned_alloc(64, (size_t)PANEL * K * 4 + 64);
#pragma omp for schedule(static)
            for (int64_t p = 0; p < npanels; p++) {
                int64_t n0 = p * PANEL;
                int64_t np = N - n0 < PANEL ? N - n0 : PANEL;
                const float *pw;
                if (wtype == WT_F32) {
                    pw = (const float *)(w + n0 * rb);
                } else {
                    for (int64_t j = 0; j < np; j++) dequant_row(wtype, w + (n0 + j) * rb, panel + j * K, (int)K);
                    pw = panel;
                }
                int64_t m = 0;
                for (; m + 4 <= M; m += 4) {
                    int64_t j = 0;
                    for (; j + 4 <= np; j += 4) dot_4x4(x + m * K, K, pw + j * K, (int)K, y + m * N + n0 + j, N);
                    for (; j < np; j++)
                        for (int i = 0; i < 4; i++) y[(m + i) * N + n0 + j] = dot_1x1(x + (m + i) * K, pw + j * K, (int)K);
                }
                for (; m < M; m++)
                    for (int64_t j = 0; j < np; j++) y[m * N + n0 + j] = dot_1x1(x + m * K, pw + j * K, (int)K);
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
                     float *kc, float *vc) {
    for (int64_t t = 0; t < T; t++) {
        memcpy(kc + slots[t] * row_floats, k + t * row_floats, (size_t)row_floats * 4);
        memcpy(vc + slots[t] * row_floats, v + t * row_floats, (size_t)row_floats * 4);
    }
}
