/* Causal attention over the paged KV cache, and the write of a step's K/V rows into it
 * (internal.h states the contract they keep). */
#include "internal.h"

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
         * tokens left one thread with three quarters of a prefill's attention. Heads outer, tokens
         * inner: the tokens a thread takes one after another read the same KV head's rows, which
         * then stay in its cache (all heads' rows of a long prompt do not). */
        if (G > 1) {
#pragma omp for schedule(dynamic, 2)
            for (int64_t tg = 0; tg < T * (H / G); tg++) {
                int64_t t = tg % T;
                int h0 = (int)(tg / T) * G;
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
            int64_t t = th % T;
            int h = (int)(th / T), kvh = h / group;
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

/* Write the step's K/V rows [T, KVH, D] into their cache slots (before attention reads them). */
void strata_kv_write(const float *k, const float *v, int64_t T, int64_t row_floats, const int64_t *slots,
                     float *kc, float *vc, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T * row_floats >= SMALL_WORK)
    for (int64_t t = 0; t < T; t++) {
        memcpy(kc + slots[t] * row_floats, k + t * row_floats, (size_t)row_floats * 4);
        memcpy(vc + slots[t] * row_floats, v + t * row_floats, (size_t)row_floats * 4);
    }
}
