/* Causal attention over the paged KV cache, and the write of a step's K/V rows into it
 * (internal.h states the contract they keep). */
#include "internal.h"

/* The KV cache's 2-byte types (enum strata_kvtype): each value rounded to nearest even when
 * written, widened exactly when read, by these integer routines alone (no intrinsics), so every
 * target stores and reads the same bits. NaN becomes the quiet NaN torch writes. */
static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static inline uint16_t f32_to_f16(float f) {
    uint32_t u = f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);        /* NaN */
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);       /* rounds past 65504: inf */
    if (a >= 0x38800000u) {                                       /* normal: exponent rebiased */
        uint32_t r = a - 0x38000000u;
        return (uint16_t)(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13));
    }
    uint32_t e = a >> 23;                                         /* subnormal (units of 2^-24) or 0 */
    if (e < 102) return (uint16_t)sign;                           /* at most 2^-25: rounds to 0 */
    uint32_t m = (a & 0x7FFFFFu) | 0x800000u, shift = 126 - e, q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F) return bits_f32(sign | 0x7F800000u | (m << 13));
    if (e) return bits_f32(sign | ((e + 112) << 23) | (m << 13));
    if (!m) return bits_f32(sign);
    for (e = 113; !(m & 0x400u); e--) m <<= 1;                     /* subnormal: normalised */
    return bits_f32(sign | (e << 23) | ((m & 0x3FFu) << 13));
}

/* q8_0 (enum strata_kvtype KV_Q8_0): llama.cpp's block of 32 values, an fp16 scale d then 32
 * int8 q, value d * q. A row is cut into blocks of 32 from its start (a head's D is a multiple
 * of 32, checked at load), so a head's values are whole blocks. Written by ggml's reference rule
 * (gguf-py's Q8_0 quantize, bit for bit): d = amax / 127, q = roundf(x * (1 / d)), d stored as
 * fp16; IEEE operations and roundf only, the same bits on every target. A block with a
 * non-finite value, or whose scale rounds to inf, is stored as a NaN scale and zeros (read as
 * NaN); one whose scale rounds to 0 as zeros. Read: d * q is exact in fp32 (11 by 8 bits). */
#define KV_Q8_BLOCK 34
static void q8_0_block(const float *x, uint8_t *out) {
    float amax = 0.0f;
    int finite = 1;
    for (int i = 0; i < 32; i++) {
        float a = fabsf(x[i]);
        finite &= a <= 3.40282347e38f; /* false for inf and NaN */
        amax = a > amax ? a : amax;
    }
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t d16 = f32_to_f16(d);
    if (!finite || (d16 & 0x7C00u) == 0x7C00u) d16 = 0x7E00u;
    int8_t *q = (int8_t *)(out + 2);
    memcpy(out, &d16, 2);
    for (int i = 0; i < 32; i++) q[i] = d16 == 0 || d16 == 0x7E00u ? 0 : (int8_t)roundf(x[i] * id);
}

/* Positions start .. start+n-1 of KV head kvh of a cache stored as another type than fp32,
 * widened to n fp32 rows of D in dst: the attention then reads them as it reads an fp32 cache
 * (one table entry, one head). */
static void widen_rows(const void *c, int kv_type, const int32_t *table, int start, int n, int block_size,
                       int KVH, int kvh, int D, float *dst) {
    for (int j = 0; j < n; j++) {
        int p = start + j;
        int64_t at = ((int64_t)table[p / block_size] * block_size + p % block_size) * KVH + kvh; /* (slot, head) */
        float *o = dst + (int64_t)j * D;
        if (kv_type == KV_Q8_0) {
            const uint8_t *r = (const uint8_t *)c + at * (D / 32) * KV_Q8_BLOCK;
            for (int b = 0; b < D / 32; b++) {
                uint16_t d16;
                memcpy(&d16, r + b * KV_Q8_BLOCK, 2);
                float d = f16_to_f32(d16);
                const int8_t *q = (const int8_t *)(r + b * KV_Q8_BLOCK + 2);
                for (int i = 0; i < 32; i++) o[32 * b + i] = d * (float)q[i];
            }
            continue;
        }
        const uint16_t *r = (const uint16_t *)c + at * D;
        if (kv_type == KV_BF16)
            for (int d = 0; d < D; d++) o[d] = bits_f32((uint32_t)r[d] << 16);
        else
            for (int d = 0; d < D; d++) o[d] = f16_to_f32(r[d]);
    }
}

/* A head's scores s[0..n) become its softmax numerators, in place: soft-capped (softcap > 0:
 * softcap * tanh(s / softcap)), then e^(s - max). One sequence for every attention path. With a
 * sink (gpt-oss: a learnt logit of the head, no value; sink = -INFINITY: none) the max also takes
 * the sink, and the return value is its numerator e^(sink - max), which the caller adds to the
 * denominator after the positions' sum; 0 without a sink. */
static inline float softmax_numerators(float *s, int n, float softcap, float sink) {
    if (softcap > 0.0f) {
        vf cap = vf_set1(softcap);
        for (int j = 0; j < n; j += VL) {
            int len = n - j < VL ? n - j : VL;
            vf_store_n(s + j, vf_mul(cap, vf_tanh(vf_div(vf_load_n(s + j, len), cap))), len);
        }
    }
    float m = max_n(s, n); /* a max is exact: taking it after the scores changes no bit */
    if (sink > m) m = sink;
    vf mx = vf_set1(m);
    for (int j = 0; j < n; j += VL) {
        int len = n - j < VL ? n - j : VL;
        vf_store_n(s + j, vf_exp(vf_sub(vf_load_n(s + j, len), mx)), len);
    }
    if (sink == -INFINITY) return 0.0f;
    float e[VL];
    vf_store(e, vf_exp(vf_set1(sink - m)));
    return e[0];
}

/* One (token, head): scores, softmax and the weighted sum of V rows, in position order.
 * Inlined with D constant for the common head sizes, so the V accumulator stays in registers. */
static inline __attribute__((always_inline)) void attend_one(
    const float *qv, const int32_t *table, int start, int n, int D, const float *kc, const float *vc,
    int block_size, int KVH, int kvh, float scale, float softcap, float sink, float *s, float *acc, float *o) {
    for (int j = 0; j < n; j++) {
        int p = start + j;
        const float *kr = kc + (((int64_t)table[p / block_size] * block_size + p % block_size) * KVH + kvh) * D;
        s[j] = dot_1(qv, kr, D) * scale;
    }
    float sink_e = softmax_numerators(s, n, softcap, sink);
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += s[j];
    sum += sink_e; /* the sink's share, after the positions (0 without one: no bit changes) */
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


/* A tile: NT consecutive tokens of one sequence (positions n0 - 1 .. n0 + NT - 2 relative to a
 * shared start, so token i attends to n0 + i positions) times the G query heads h0 .. h0+G-1
 * that share one KV head (grouped-query attention); D a multiple of 16, at most 16 * VL. Each
 * (token, head) row gets exactly attend_one's sequence: every score one fma chain over the D / VL
 * vectors from zero, then vf_hsum (vf_hsum4 gives the same bits), times scale; the same softmax
 * and sum in position order; each output element one fma chain over the positions in order.
 * Only the interleaving differs: each K and V vector is loaded once for all NT * G rows, where
 * attention would otherwise stream every row of the KV head from L2 once per token. */
#define GROUP_MAX 4
#define ROWS_MAX 8 /* NT * G */
/* Positions ahead whose K and V rows are fetched: a position's rows lie KVH * D floats apart
 * (4 KiB on the 1.7B shape), a stride the hardware prefetcher does not follow. */
#define PREFETCH 8
/* Score accumulators a tile may keep (rows x positions at a time) and V accumulators (rows x
 * vectors of D at a time): a speed choice only, sized to the registers: 32 vectors on AVX-512,
 * 8 where a vector is 2 or 4 registers (AVX2, NEON), where more only spill. */
#if defined(STRATA_TARGET_AVX512)
#define ACC_REGS 16
#define ATT_POS 4
#define TILE_ROWS 8 /* tokens x heads of a whole tile */
#else
#define ACC_REGS 4
#define ATT_POS 1
#define TILE_ROWS 4
#endif
_Static_assert(TILE_ROWS >= GROUP_MAX, "a tile holds at least one token of the largest head group");
static inline __attribute__((always_inline)) void attend_tile(
    const float *qv, int64_t q_stride, int NT, int G, const int32_t *table, int start, int n0, int D,
    const float *kc, const float *vc, int block_size, int KVH, int kvh, float scale, float softcap,
    const float *sinks, float *s, int64_t s_stride, int64_t *rows, float *o) {
    const int C = D / VL, R = NT * G; /* row r = i * G + g: token i, head g */
    int PB = ATT_POS; /* positions whose scores are taken at a time */
    while (PB > 1 && R * PB > ACC_REGS) PB /= 2;
    int CP = C; /* vectors of D accumulated at a time (a split of D changes no element's sequence) */
    while (CP % 2 == 0 && R * CP > ACC_REGS) CP /= 2;
    const int nl = n0 + NT - 1; /* positions of the tile's last token */
#define QROW(r) (qv + (r) / G * q_stride + (r) % G * D)
#define SROW(r) (s + (r) * s_stride)
#define KVROW(base, j) ((base) + rows[j]) /* position start + j's K or V row */
    for (int j = 0, b = start / block_size, off = start % block_size; j < nl; j++) { /* no division per load */
        rows[j] = (((int64_t)table[b] * block_size + off) * KVH + kvh) * D;
        if (++off == block_size) {
            off = 0;
            b++;
        }
    }
    int j = 0;
    for (; j + PB <= n0; j += PB) { /* positions every token attends to, PB at a time */
        const float *kr[ATT_POS];
        for (int u = 0; u < PB; u++) kr[u] = KVROW(kc, j + u);
        for (int u = 0; u < PB && j + u + PREFETCH < nl; u++) /* a vector is a 64-byte line */
            for (int c = 0; c < C; c++) __builtin_prefetch(KVROW(kc, j + u + PREFETCH) + c * VL);
        vf acc[ROWS_MAX][ATT_POS]; /* acc[r][u]: row r's dot product with position j + u, over c in order */
        for (int r = 0; r < R; r++)
            for (int u = 0; u < PB; u++) acc[r][u] = vf_zero();
        for (int c = 0; c < C; c++) {
            vf k[ATT_POS];
            for (int u = 0; u < PB; u++) k[u] = vf_load(kr[u] + c * VL);
            for (int r = 0; r < R; r++) {
                vf qc = vf_load(QROW(r) + c * VL);
                for (int u = 0; u < PB; u++) acc[r][u] = vf_fma(qc, k[u], acc[r][u]);
            }
        }
        for (int r = 0; r < R; r++) {
            if (PB == 4) {
                float d4[4];
                vf_hsum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], d4);
                for (int u = 0; u < 4; u++) SROW(r)[j + u] = d4[u] * scale;
            } else {
                for (int u = 0; u < PB; u++) SROW(r)[j + u] = vf_hsum(acc[r][u]) * scale;
            }
        }
    }
    for (; j < nl; j++) { /* the shared positions left, then the later tokens' own */
        const float *kr = KVROW(kc, j);
        for (int r = 0; r < R; r++)
            if (j < n0 + r / G) SROW(r)[j] = dot_1(QROW(r), kr, D) * scale;
    }
    for (int r = 0; r < R; r++) { /* each row's softmax and sum in position order, then p_j = s_j / sum */
        int n = n0 + r / G;
        float sink_e = softmax_numerators(SROW(r), n, softcap, sinks ? sinks[r % G] : -INFINITY);
        float sum = 0.0f;
        for (int i = 0; i < n; i++) sum += SROW(r)[i];
        sum += sink_e; /* as attend_one */
        vf inv = vf_set1(1.0f / sum);
        for (int i = 0; i < n; i += VL) { /* s_j * inv: the one rounding attend_one's p takes */
            int len = n - i < VL ? n - i : VL;
            vf_store_n(SROW(r) + i, vf_mul(vf_load_n(SROW(r) + i, len), inv), len);
        }
    }
    for (int c0 = 0; c0 < C; c0 += CP) { /* D in parts: each part's V vectors stream once for all rows */
        vf a[ROWS_MAX * 8];
        for (int i = 0; i < R * CP; i++) a[i] = vf_zero();
        for (int i = 0; i < n0; i++) {
            const float *vr = KVROW(vc, i) + c0 * VL;
            if (i + PREFETCH < nl)
                for (int c = 0; c < CP; c++) __builtin_prefetch(KVROW(vc, i + PREFETCH) + (c0 + c) * VL);
            for (int r = 0; r < R; r++) {
                vf p = vf_set1(SROW(r)[i]);
                for (int c = 0; c < CP; c++) a[r * CP + c] = vf_fma(p, vf_load(vr + c * VL), a[r * CP + c]);
            }
        }
        for (int i = n0; i < nl; i++) { /* the later tokens' own positions, after the shared ones */
            const float *vr = KVROW(vc, i) + c0 * VL;
            for (int r = 0; r < R; r++) {
                if (i >= n0 + r / G) continue;
                vf p = vf_set1(SROW(r)[i]);
                for (int c = 0; c < CP; c++) a[r * CP + c] = vf_fma(p, vf_load(vr + c * VL), a[r * CP + c]);
            }
        }
        for (int r = 0; r < R; r++)
            for (int c = 0; c < CP; c++) vf_store(o + r / G * q_stride + r % G * D + (c0 + c) * VL, a[r * CP + c]);
    }
#undef QROW
#undef SROW
#undef KVROW
}

/*
 * Causal attention for T query tokens against a paged KV cache (KV already written).
 * q: [T, H, D]; caches: [num_blocks, block_size, KVH, D]; token t belongs to the sequence whose
 * block table row is tables[t_seq[t] * max_blocks ...]; it attends to positions 0..pos[t], or with
 * window > 0 (sliding-window layers) to max(0, pos[t] - window + 1)..pos[t]. Each score is
 * dot(q, k) * scale, then with softcap > 0 (Gemma 2) softcap * tanh(score / softcap).
 * Each (token, head) is computed alone, in position order: the same bits whether the token
 * comes from a one-shot prefill, a chunk, a prefix-cache continuation or a decode step.
 * window = 0 and softcap = 0 run exactly the sequence of full causal attention. sinks (gpt-oss),
 * NULL or [H]: per head an extra logit in the softmax's max and denominator (softmax_numerators).
 * kv_type (enum strata_kvtype): a 2-byte or q8_0 cache's rows of a (tile of) token(s) are widened to fp32
 * first (widen_rows), then read by the same code, so every operation after the read is fp32's.
 */
void strata_attention_sinks(const float *q, int64_t T, int H, int KVH, int D, const void *kc, const void *vc,
                            int kv_type, int block_size, const int32_t *tables, int max_blocks, const int32_t *t_seq,
                            const int32_t *pos, float scale, float softcap, int window, const float *sinks,
                            float *out, int nthreads) {
    static const int32_t one_block[1] = {0}; /* the widened rows' table: all in "block" 0 */
    int group = H / KVH;
    int64_t max_ctx = 1;
    for (int64_t t = 0; t < T; t++)
        if (pos[t] + 1 > max_ctx) max_ctx = pos[t] + 1;
    /* Heads of one KV group together (attend_tile) where the shapes allow and there is work
     * enough for every thread; each head alone otherwise. The same bits either way. D = 256 (the
     * hybrid qwen35 models' full-attention heads) groups every head of its KV group: alone, each
     * (token, head) streamed a long prompt's K and V rows from L3 (a 2,048-token prefill's
     * attention took 4 times as long). */
    int G = 1;
    if (D % VL == 0 && D <= 16 * VL && group > 1 && T * KVH >= 2 * nthreads)
        for (int g = GROUP_MAX; g > 1; g--)
            if (group % g == 0 && (g * D <= GROUP_MAX * 64 || D == 16 * VL)) {
                G = g;
                break;
            }
    /* and NT consecutive tokens of a sequence together, where the tiles still give every thread
     * work enough (a tile is one item) */
    int NT = G > 1 && (T + TILE_ROWS / G - 1) / (TILE_ROWS / G) * (H / G) >= 2 * nthreads ? TILE_ROWS / G : 1;
    int64_t tiles = (T + NT - 1) / NT;
#pragma omp parallel num_threads(nthreads) if (T * H * max_ctx * D >= SMALL_WORK)
    {
        float *s = (float *)kernel_malloc((size_t)max_ctx * 4 * G * NT);
        float *acc = (float *)kernel_malloc((size_t)(D + VL) * 4);
        int64_t *rows = (int64_t *)kernel_malloc((size_t)max_ctx * 8);
        size_t wide = kv_type == KV_F32 ? 1 : (size_t)max_ctx * D * 4; /* widened K and V rows */
        float *wk = (float *)kernel_malloc(wide), *wv = (float *)kernel_malloc(wide);
        int ok = s && acc && rows && wk && wv; /* else out of memory (counted): this thread's share is skipped */
        /* dynamic: a causal token's work grows with its position, so equal static shares of the
         * tokens left one thread with three quarters of a prefill's attention. Heads outer, tokens
         * inner: the tokens a thread takes one after another read the same KV head's rows, which
         * then stay in its cache (all heads' rows of a long prompt do not). */
        if (G > 1) {
#pragma omp for schedule(dynamic, 2)
            for (int64_t tg = 0; tg < tiles * (H / G); tg++) {
                if (!ok) continue;
                int64_t t0 = tg % tiles * NT, t1 = t0 + NT < T ? t0 + NT : T;
                int h0 = (int)(tg / tiles) * G;
                /* a whole tile: consecutive positions of one sequence, all from the same start */
                int whole = NT > 1 && t1 - t0 == NT;
                for (int64_t t = t0 + 1; t < t1 && whole; t++)
                    whole = t_seq[t] == t_seq[t0] && pos[t] == pos[t - 1] + 1 && (window == 0 || pos[t] < window);
                for (int64_t t = t0; t < t1; t += whole ? NT : 1) {
                    const int32_t *table = tables + (int64_t)t_seq[t] * max_blocks;
                    int start = window > 0 && pos[t] + 1 > window ? pos[t] + 1 - window : 0;
                    int n = pos[t] + 1 - start;
                    const float *qv = q + (t * H + h0) * D;
                    float *o = out + (t * H + h0) * D;
                    const float *kf = (const float *)kc, *vf_ = (const float *)vc;
                    const int32_t *tb = table;
                    int st = start, bsz = block_size, kvhs = KVH, kvh = h0 / group;
                    if (kv_type != KV_F32) { /* this tile's positions, widened */
                        int nl = n + (whole ? NT : 1) - 1;
                        widen_rows(kc, kv_type, table, start, nl, block_size, KVH, kvh, D, wk);
                        widen_rows(vc, kv_type, table, start, nl, block_size, KVH, kvh, D, wv);
                        kf = wk, vf_ = wv, tb = one_block, st = 0, bsz = (int)max_ctx, kvhs = 1, kvh = 0;
                    }
                    /* constant tile, head counts and sizes, so that the accumulators stay in registers */
#define TILE_CASE(NC, GC, DC)                                                                                    \
    attend_tile(qv, (int64_t)H * D, NC, GC, tb, st, n, DC, kf, vf_, bsz, kvhs, kvh, scale, softcap,           \
                sinks ? sinks + h0 : NULL, s, max_ctx, rows, o)
#define GROUP_CASE(GC, DC)                    \
    if (whole) TILE_CASE(TILE_ROWS / GC, GC, DC); \
    else TILE_CASE(1, GC, DC)
                    if (D == 64 && G == 2) GROUP_CASE(2, 64);
                    else if (D == 64 && G == 3) GROUP_CASE(3, 64);
                    else if (D == 64 && G == 4) GROUP_CASE(4, 64);
                    else if (D == 128 && G == 2) GROUP_CASE(2, 128);
                    else if (D == 256 && G == 4) GROUP_CASE(4, 256);
                    else if (D == 256 && G == 2) GROUP_CASE(2, 256);
                    else TILE_CASE(whole ? NT : 1, G, D);
#undef GROUP_CASE
#undef TILE_CASE
                }
            }
        }
#pragma omp for schedule(dynamic, 2)
        for (int64_t th = 0; th < (G > 1 ? 0 : T * H); th++) {
            if (!ok) continue;
            int64_t t = th % T;
            int h = (int)(th / T), kvh = h / group;
            const float *qv = q + (t * H + h) * D;
            const int32_t *table = tables + (int64_t)t_seq[t] * max_blocks;
            int start = window > 0 && pos[t] + 1 > window ? pos[t] + 1 - window : 0;
            int n = pos[t] + 1 - start; /* s[j]: position start + j */
            float *o = out + (t * H + h) * D;
            const float *kf = (const float *)kc, *vf_ = (const float *)vc;
            int bsz = block_size, kvhs = KVH;
            if (kv_type != KV_F32) { /* this head's positions, widened */
                widen_rows(kc, kv_type, table, start, n, block_size, KVH, kvh, D, wk);
                widen_rows(vc, kv_type, table, start, n, block_size, KVH, kvh, D, wv);
                kf = wk, vf_ = wv, table = one_block, start = 0, bsz = (int)max_ctx, kvhs = 1, kvh = 0;
            }
            float sink = sinks ? sinks[h] : -INFINITY;
            if (D == 64)
                attend_one(qv, table, start, n, 64, kf, vf_, bsz, kvhs, kvh, scale, softcap, sink, s, acc, o);
            else if (D == 128)
                attend_one(qv, table, start, n, 128, kf, vf_, bsz, kvhs, kvh, scale, softcap, sink, s, acc, o);
            else
                attend_one(qv, table, start, n, D, kf, vf_, bsz, kvhs, kvh, scale, softcap, sink, s, acc, o);
        }
        free(s);
        free(acc);
        free(rows);
        free(wk);
        free(wv);
    }
}

/* Attention without sinks: every family but gpt-oss. */
void strata_attention(const float *q, int64_t T, int H, int KVH, int D, const void *kc, const void *vc, int kv_type,
                      int block_size, const int32_t *tables, int max_blocks, const int32_t *t_seq,
                      const int32_t *pos, float scale, float softcap, int window, float *out, int nthreads) {
    strata_attention_sinks(q, T, H, KVH, D, kc, vc, kv_type, block_size, tables, max_blocks, t_seq, pos, scale,
                           softcap, window, NULL, out, nthreads);
}

/* Write the step's K/V rows [T, KVH, D] into their cache slots (before attention reads them):
 * copied (fp32), or each value rounded to the cache's 2-byte type, or each block of 32 to q8_0
 * (a position's stored bits depend on its own K/V alone). */
void strata_kv_write(const float *k, const float *v, int64_t T, int64_t row_floats, const int64_t *slots,
                     void *kc, void *vc, int kv_type, int nthreads) {
#pragma omp parallel for num_threads(nthreads) schedule(static) if (T * row_floats >= SMALL_WORK)
    for (int64_t t = 0; t < T; t++) {
        const float *ki = k + t * row_floats, *vi = v + t * row_floats;
        if (kv_type == KV_F32) {
            memcpy((float *)kc + slots[t] * row_floats, ki, (size_t)row_floats * 4);
            memcpy((float *)vc + slots[t] * row_floats, vi, (size_t)row_floats * 4);
            continue;
        }
        if (kv_type == KV_Q8_0) {
            int64_t blocks = row_floats / 32;
            uint8_t *ko = (uint8_t *)kc + slots[t] * blocks * KV_Q8_BLOCK, *vo = (uint8_t *)vc + slots[t] * blocks * KV_Q8_BLOCK;
            for (int64_t b = 0; b < blocks; b++) {
                q8_0_block(ki + 32 * b, ko + b * KV_Q8_BLOCK);
                q8_0_block(vi + 32 * b, vo + b * KV_Q8_BLOCK);
            }
            continue;
        }
        uint16_t *ko = (uint16_t *)kc + slots[t] * row_floats, *vo = (uint16_t *)vc + slots[t] * row_floats;
        for (int64_t i = 0; i < row_floats; i++) {
            ko[i] = kv_type == KV_BF16 ? f32_to_bf16(ki[i]) : f32_to_f16(ki[i]);
            vo[i] = kv_type == KV_BF16 ? f32_to_bf16(vi[i]) : f32_to_f16(vi[i]);
        }
    }
}
