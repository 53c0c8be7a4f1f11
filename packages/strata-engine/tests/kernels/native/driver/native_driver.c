/*
 * Runs every kernel on fixed pseudo-random inputs (odd sizes included) and writes all
 * outputs as raw float32 bytes to stdout. Built for each target (avx512, avx2, portable on
 * x86; neon and portable for AArch64, run under qemu), its output must be byte-identical
 * everywhere: tests/test_native_targets.py compares the digests. `driver q8` writes only the
 * 8-bit-activation kernels' outputs instead (a digest of its own), `driver limb` those of the
 * integer-limb kernels (limb.c) for 3 and 2 limbs, `driver tiles` grouped attention over
 * runs of consecutive tokens, `driver gptoss` attention with sinks (single-head, grouped, token
 * tiles; a 2-byte cache) and the clamped SwiGLU, `driver held` Q5_0, the 4-bit codebook types and
 * the grid types in every arithmetic (exiting 1 where one differs from the Q8_0 blocks of the same values),
 * `driver half` Q4_0 ... Q8_0 held as stored (fp16 scales) against their widened blocks likewise,
 * `driver codebook` IQ4_NL, MXFP4 and IQ4_XS held as stored (fp16 d, e8m0 E; IQ4_XS's
 * super-blocks) against their fp32-scale blocks. Built with the library's C files (native.SOURCES), calling its exported functions.
 */
#include <stdio.h>

#include "internal.h" /* the exported functions, and row_bytes */

static uint64_t state = 0x9E3779B97F4A7C15ULL;

static uint64_t next_u64(void) { /* xorshift64*: the same sequence on every machine */
    state ^= state >> 12;
    state ^= state << 25;
    state ^= state >> 27;
    return state * 0x2545F4914F6CDD1DULL;
}

/* Uniform in [lo, hi): an integer scaled by powers of two, exact on every machine. */
static float uniform(float lo, float hi) {
    return lo + (hi - lo) * ((float)(next_u64() >> 40) * (1.0f / 16777216.0f));
}

static float *floats(int64_t n, float lo, float hi) {
    float *p = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) p[i] = uniform(lo, hi);
    return p;
}

static void emit(const float *p, int64_t n) { fwrite(p, 4, (size_t)n, stdout); }

/* Random blocks of a quantised [N, K] weight in the kernels' layout (fp32 scale, fp32 min). */
static uint8_t *blocks(int wtype, int64_t N, int64_t K) {
    int64_t rb = row_bytes(wtype, K), nb = N * (K / 32);
    uint8_t *w = malloc((size_t)(rb * N));
    int size = (int)(rb / (K / 32)), head = wtype == WT_Q4_1 || wtype == WT_Q5_1 ? 8 : 4;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * size;
        float d = uniform(0.001f, 0.05f), m = uniform(-0.2f, 0.0f);
        memcpy(blk, &d, 4);
        if (wtype == WT_Q4_1 || wtype == WT_Q5_1) memcpy(blk + 4, &m, 4);
        for (int i = head; i < size; i++) blk[i] = (uint8_t)(next_u64() >> 56);
    }
    return w;
}

static void matmuls(void) {
    const int types[] = {WT_Q4_0, WT_Q4_1, WT_Q8_0};
    const int64_t rows[] = {1, 3, 8, 9, 17};
    for (int t = 0; t < 3; t++)
        for (int r = 0; r < 5; r++) {
            int64_t M = rows[r], K = 96, N = 37;
            uint8_t *w = blocks(types[t], N, K);
            float *x = floats(M * K, -1.0f, 1.0f), *bias = floats(N, -0.5f, 0.5f), *y = malloc((size_t)(M * N) * 4);
            strata_matmul(x, M, K, w, types[t], N, r % 2 ? bias : NULL, y, 1);
            emit(y, M * N);
            int64_t ids[3] = {0, 36, 5};
            float *g = malloc((size_t)(3 * K) * 4);
            strata_gather_rows(w, types[t], K, ids, 3, g);
            emit(g, 3 * K);
            free(w), free(x), free(bias), free(y), free(g);
        }
    for (int64_t M = 1; M <= 13; M += 6) { /* fp32 weights, K not a multiple of 16 */
        int64_t K = 45, N = 19;
        float *w = floats(N * K, -1.0f, 1.0f), *x = floats(M * K, -1.0f, 1.0f), *y = malloc((size_t)(M * N) * 4);
        strata_matmul(x, M, K, (const uint8_t *)w, WT_F32, N, NULL, y, 1);
        emit(y, M * N);
        free(w), free(x), free(y);
    }
}

static void elementwise(void) {
    int64_t M = 3, K = 45, n = 1007;
    float *x = floats(M * K, -3.0f, 3.0f), *w = floats(K, 0.5f, 1.5f), *y = malloc((size_t)(M * K) * 4);
    strata_rmsnorm(x, M, K, w, 1e-5f, y, 1);
    emit(y, M * K);
    float *g = floats(n, -20.0f, 20.0f), *u = floats(n, -2.0f, 2.0f), *o = malloc((size_t)n * 4);
    strata_silu_mul(g, u, n, o, 1);
    emit(o, n);
    float *e = floats(n, -100.0f, 100.0f);
    strata_exp(e, n, o);
    emit(o, n);
    int64_t V = 1001;
    float *logits = floats(M * V, -15.0f, 15.0f), *lp = malloc((size_t)(M * V) * 4);
    strata_log_softmax(logits, M, V, lp, 1);
    emit(lp, M * V);
    free(x), free(w), free(y), free(g), free(u), free(o), free(e), free(logits), free(lp);
}

static void attention_and_rope(void) {
    int T = 5, H = 4, KVH = 2, D = 40, bs = 4, nblocks = 6, max_blocks = 3, ctx = 12, rot = 32;
    float *q = floats((int64_t)T * H * D, -1.0f, 1.0f), *out = malloc((size_t)T * H * D * 4);
    float *kc = floats((int64_t)nblocks * bs * KVH * D, -1.0f, 1.0f), *vc = floats((int64_t)nblocks * bs * KVH * D, -1.0f, 1.0f);
    int32_t tables[6] = {4, 0, 2, 1, 5, 3}, t_seq[5] = {0, 0, 1, 1, 1}, pos[5] = {3, 9, 0, 6, 11};
    strata_attention(q, T, H, KVH, D, kc, vc, 0, bs, tables, max_blocks, t_seq, pos, 0.158113883f, 0.0f, 0, out, 1);
    emit(out, (int64_t)T * H * D);
    float *cos_t = floats((int64_t)ctx * rot / 2, -1.0f, 1.0f), *sin_t = floats((int64_t)ctx * rot / 2, -1.0f, 1.0f);
    for (int interleaved = 0; interleaved < 2; interleaved++) {
        memcpy(out, q, (size_t)T * H * D * 4);
        strata_rope(out, T, H, D, rot, pos, cos_t, sin_t, interleaved);
        emit(out, (int64_t)T * H * D);
    }
    free(q), free(out), free(kc), free(vc), free(cos_t), free(sin_t);
}

/* The Gemma kernels (after everything above, so the earlier output bytes stay as they were). */
static void gemma(void) {
    int64_t n = 1007;
    float *g = floats(n, -12.0f, 12.0f), *u = floats(n, -2.0f, 2.0f), *o = malloc((size_t)n * 4);
    strata_gelu_mul(g, u, n, o, 1);
    emit(o, n);
    float *x = floats(n, -200.0f, 200.0f);
    strata_softcap(x, n, 30.0f, o);
    emit(o, n);
    strata_softcap(g, n, 1.0f, o); /* tanh itself */
    emit(o, n);
    int T = 5, H = 4, KVH = 2, D = 40, bs = 4, nblocks = 6, max_blocks = 3;
    float *q = floats((int64_t)T * H * D, -3.0f, 3.0f), *out = malloc((size_t)T * H * D * 4);
    float *kc = floats((int64_t)nblocks * bs * KVH * D, -3.0f, 3.0f), *vc = floats((int64_t)nblocks * bs * KVH * D, -1.0f, 1.0f);
    int32_t tables[6] = {4, 0, 2, 1, 5, 3}, t_seq[5] = {0, 0, 1, 1, 1}, pos[5] = {3, 9, 0, 6, 11};
    const int windows[3] = {1, 4, 7};
    for (int w = 0; w < 3; w++) {
        strata_attention(q, T, H, KVH, D, kc, vc, 0, bs, tables, max_blocks, t_seq, pos, 0.158113883f, 0.0f, windows[w], out, 1);
        emit(out, (int64_t)T * H * D);
    }
    strata_attention(q, T, H, KVH, D, kc, vc, 0, bs, tables, max_blocks, t_seq, pos, 0.25f, 2.5f, 0, out, 1);
    emit(out, (int64_t)T * H * D);
    strata_attention(q, T, H, KVH, D, kc, vc, 0, bs, tables, max_blocks, t_seq, pos, 0.25f, 2.5f, 5, out, 1);
    emit(out, (int64_t)T * H * D);
    free(g), free(u), free(o), free(x), free(q), free(out), free(kc), free(vc);
}

/* K-quants in the kernels' layout (kquants.py): random scales, mins and quants. */
static uint8_t *kquant_blocks(int wtype, int64_t N, int64_t K) {
    int64_t sb = N * K / 256, size = row_bytes(wtype, 256);
    uint8_t *w = malloc((size_t)(sb * size));
    for (int64_t i = 0; i < sb * size; i++) w[i] = (uint8_t)(next_u64() >> 56);
    for (int64_t b = 0; b < sb; b++) {
        uint8_t *blk = w + b * size;
        float d = uniform(0.0005f, 0.005f), dmin = uniform(0.001f, 0.01f);
        memcpy(blk, &d, 4);
        if (wtype == WT_Q6_K) {
            for (int i = 0; i < 256; i++) blk[20 + i] = (uint8_t)(int8_t)((int)(blk[20 + i] & 63) - 32);
        } else {
            memcpy(blk + 4, &dmin, 4);
            for (int i = 8; i < 24; i++) blk[i] &= 63; /* six-bit scales and mins */
        }
    }
    return w;
}

/* Q2_K blocks as stored (84 bytes: scales, quants, d and dmin f16): random bytes, d and dmin
 * random halves near 2^-10. */
static uint8_t *q2k_blocks(int64_t N, int64_t K) {
    int64_t sb = N * K / 256;
    uint8_t *w = malloc((size_t)(sb * 84));
    for (int64_t i = 0; i < sb * 84; i++) w[i] = (uint8_t)(next_u64() >> 56);
    for (int64_t b = 0; b < sb; b++) {
        w[b * 84 + 81] = (uint8_t)(0x14 | (w[b * 84 + 81] & 3)); /* exponent field 5: [2^-10, 2^-9) */
        w[b * 84 + 83] = (uint8_t)(0x14 | (w[b * 84 + 83] & 3));
    }
    return w;
}

static void kquants(void) {
    const int types[] = {WT_Q4_K, WT_Q5_K, WT_Q6_K};
    for (int t = 0; t < 3; t++) {
        int64_t K = 512, N = 19;
        uint8_t *w = kquant_blocks(types[t], N, K);
        for (int64_t M = 1; M <= 10; M += 4) { /* 1 and 5: fused path; 9: panels */
            float *x = floats(M * K, -1.0f, 1.0f), *y = malloc((size_t)(M * N) * 4);
            strata_matmul(x, M, K, w, types[t], N, NULL, y, 1);
            emit(y, M * N);
            free(x), free(y);
        }
        int64_t ids[2] = {18, 3};
        float *g = malloc((size_t)(2 * K) * 4);
        strata_gather_rows(w, types[t], K, ids, 2, g);
        emit(g, 2 * K);
        free(w), free(g);
    }
}

/* `driver q8`: the 8-bit-activation kernels (q8.c), pack + matmul for every type they take,
 * N odd (a partial group of 16 outputs), every row-tile remainder; only these outputs. Blocks of
 * very different magnitudes, a zero block, and a block whose maximum times 127 / maximum rounds
 * above 127 in fp32 (7.296825: 127.00001), which must still quantise to 127. */
static void q8_type(int type) {
    const int64_t rows[] = {1, 3, 9, 17};
    int64_t K = 512, N = 37;
    uint8_t *w = type == WT_Q2_K ? q2k_blocks(N, K) : type >= WT_Q4_K ? kquant_blocks(type, N, K) : blocks(type, N, K);
    uint8_t *packed = malloc((size_t)strata_q8_packed_bytes(type, N, K));
    strata_q8_pack(type, w, N, K, packed, 1);
    float *bias = floats(N, -0.5f, 0.5f);
    for (int r = 0; r < 4; r++) {
        int64_t M = rows[r];
        float *x = floats(M * K, -1.0f, 1.0f), *y = malloc((size_t)(M * N) * 4);
        for (int64_t b = 0; b < M * K / 32; b++) {
            float scale = b % 5 == 1 ? 40.0f : b % 5 == 3 ? 0.001f : 1.0f;
            for (int i = 0; i < 32; i++) x[b * 32 + i] *= scale;
        }
        memset(x + 32, 0, 32 * 4);
        x[64] = 7.296825f;
        strata_matmul(x, M, K, packed, type | WT_Q8_PACKED, N, r % 2 ? bias : NULL, y, 1);
        emit(y, M * N);
        free(x), free(y);
    }
    free(w), free(packed), free(bias);
}

static void q8(void) { /* Q5_1 and Q2_K last: the earlier types' output as it was */
    const int types[] = {WT_Q4_0, WT_Q4_1, WT_Q8_0, WT_Q4_K, WT_Q5_K, WT_Q6_K, WT_Q5_1, WT_Q2_K};
    for (int t = 0; t < 8; t++) q8_type(types[t]);
}

/* `driver limb`: the integer-limb kernels (limb.c) with 3 and 2 limbs on q8's packed weights, every
 * type, every row-tile remainder, 2 threads for the many-row calls; blocks of very different
 * magnitudes, a zero block, a block with a NaN, a tiny block (flushed to zero), and blocks of
 * the largest limbs (+127 everywhere; -128, -128, +127) so that the int16 partial sums meet their
 * bounds. */
static void limb_type(int limbs, int type) {
    const int64_t rows[] = {1, 2, 3, 4, 5, 9, 17};
    int64_t K = 512, N = 37;
    uint8_t *w = type == WT_Q2_K ? q2k_blocks(N, K) : type >= WT_Q4_K ? kquant_blocks(type, N, K) : blocks(type, N, K);
    uint8_t *packed = malloc((size_t)strata_q8_packed_bytes(type, N, K));
    strata_q8_pack(type, w, N, K, packed, 1);
    float *bias = floats(N, -0.5f, 0.5f);
    for (int r = 0; r < 7; r++) {
        int64_t M = rows[r];
        float *x = floats(M * K, -1.0f, 1.0f), *y = malloc((size_t)(M * N) * 4);
        for (int64_t b = 0; b < M * K / 32; b++) {
            float scale = b % 5 == 1 ? 40.0f : b % 5 == 3 ? 0.001f : 1.0f;
            for (int i = 0; i < 32; i++) x[b * 32 + i] *= scale;
        }
        memset(x + 32, 0, 32 * 4);
        for (int i = 0; i < 32; i++) {
            x[64 + i] = (limbs == 3 ? 8355711.0f : 32639.0f) * 0x1p-20f; /* every limb +127 */
            x[96 + i] = limbs == 3 ? 8290176.0f * 0x1p-18f : 32384.0f * 0x1p-10f; /* -128, (-128,) 127 */
            x[128 + i] *= 1e-33f;
        }
        if (M > 2) x[K + 200] = NAN;
        strata_matmul(x, M, K, packed, type | WT_Q8_PACKED | limbs << 9, N, r % 2 ? bias : NULL, y, M > 4 ? 2 : 1);
        emit(y, M * N);
        free(x), free(y);
    }
    free(w), free(packed), free(bias);
}

static void limb(void) { /* Q5_1 and Q2_K after the rest: the earlier types' output as it was */
    const int types[] = {WT_Q4_0, WT_Q4_1, WT_Q8_0, WT_Q4_K, WT_Q5_K, WT_Q6_K};
    for (int limbs = 3; limbs >= 2; limbs--)
        for (int t = 0; t < 6; t++) limb_type(limbs, types[t]);
    for (int limbs = 3; limbs >= 2; limbs--) {
        limb_type(limbs, WT_Q5_1);
        limb_type(limbs, WT_Q2_K);
    }
}

/* Grouped attention over runs of consecutive tokens (attention.c's token tiles): two sequences in
 * runs of odd lengths (one run going on from the other's last position, so a tile may straddle
 * them), head sizes 128 and 64 with 2 and 4 query heads per KV head, plain, windowed, soft-capped. */
static void tiles(void) {
    int T = 23, bs = 4, nblocks = 16, max_blocks = 8;
    int32_t tables[16], t_seq[23], pos[23];
    for (int i = 0; i < 16; i++) tables[i] = (i * 5 + 3) % 16; /* a permutation of the blocks */
    for (int t = 0; t < T; t++) { /* sequence 0: positions 0..10, sequence 1: 11..19, sequence 0: 11..13 */
        t_seq[t] = t >= 11 && t < 20;
        pos[t] = t < 20 ? t : t - 9;
    }
    const int shapes[2][3] = {{8, 4, 128}, {8, 2, 64}}; /* H, KVH, D */
    for (int sh = 0; sh < 2; sh++) {
        int H = shapes[sh][0], KVH = shapes[sh][1], D = shapes[sh][2];
        float *q = floats((int64_t)T * H * D, -2.0f, 2.0f), *out = malloc((size_t)T * H * D * 4);
        float *kc = floats((int64_t)nblocks * bs * KVH * D, -2.0f, 2.0f);
        float *vc = floats((int64_t)nblocks * bs * KVH * D, -2.0f, 2.0f);
        const int windows[3] = {0, 7, 0};
        for (int w = 0; w < 3; w++) {
            strata_attention(q, T, H, KVH, D, kc, vc, 0, bs, tables, max_blocks, t_seq, pos, 0.125f, w == 2 ? 2.5f : 0.0f,
                             windows[w], out, 1);
            emit(out, (int64_t)T * H * D);
        }
        free(q), free(out), free(kc), free(vc);
    }
}

/* gpt-oss: attention with a sink logit per head, single-head (D 40) and grouped with token tiles
 * (D 64 and 128), plain, windowed and over a bf16 cache; then the clamped SwiGLU over values on
 * both sides of its limits. */
static void gptoss(void) {
    int T = 23, bs = 4, nblocks = 16, max_blocks = 8;
    int32_t tables[16], t_seq[23], pos[23];
    for (int i = 0; i < 16; i++) tables[i] = (i * 5 + 3) % 16;
    for (int t = 0; t < T; t++) {
        t_seq[t] = t >= 11 && t < 20;
        pos[t] = t < 20 ? t : t - 9;
    }
    const int shapes[3][3] = {{4, 2, 40}, {8, 4, 128}, {8, 2, 64}}; /* H, KVH, D */
    for (int sh = 0; sh < 3; sh++) {
        int H = shapes[sh][0], KVH = shapes[sh][1], D = shapes[sh][2];
        int64_t cache = (int64_t)nblocks * bs * KVH * D;
        float *q = floats((int64_t)T * H * D, -2.0f, 2.0f), *out = malloc((size_t)T * H * D * 4);
        float *kc = floats(cache, -2.0f, 2.0f), *vc = floats(cache, -2.0f, 2.0f), *sinks = floats(H, -4.0f, 4.0f);
        const int windows[2] = {0, 7};
        for (int w = 0; w < 2; w++) {
            strata_attention_sinks(q, T, H, KVH, D, kc, vc, 0, bs, tables, max_blocks, t_seq, pos, 0.125f, 0.0f,
                                   windows[w], sinks, out, 1);
            emit(out, (int64_t)T * H * D);
        }
        uint16_t *kb = malloc((size_t)cache * 2), *vb = malloc((size_t)cache * 2);
        int64_t *slots = malloc((size_t)nblocks * bs * 8);
        for (int64_t i = 0; i < nblocks * bs; i++) slots[i] = i;
        strata_kv_write(kc, vc, nblocks * bs, (int64_t)KVH * D, slots, kb, vb, 1, 1);
        strata_attention_sinks(q, T, H, KVH, D, kb, vb, 1, bs, tables, max_blocks, t_seq, pos, 0.125f, 0.0f, 7, sinks,
                               out, 1);
        emit(out, (int64_t)T * H * D);
        free(q), free(out), free(kc), free(vc), free(sinks), free(kb), free(vb), free(slots);
    }
    int64_t n = 1007;
    float *g = floats(n, -12.0f, 12.0f), *u = floats(n, -12.0f, 12.0f), *o = malloc((size_t)n * 4);
    strata_swiglu_oai(g, u, n, 1.702f, 7.0f, o, 1);
    emit(o, n);
    free(g), free(u), free(o);
}

/* Attention over a paged cache of type `types[i]` (kv_type: 1 bf16, 2 fp16, 3 q8_0) written by
 * strata_kv_write, for each shape {H, KVH, D} in turn (in tiles, one head at a time): plain,
 * windowed and soft-capped; each shape's q, k, v drawn once for its types. */
static void kv_attention(const int shapes[2][3], const int *types, int ntypes) {
    int T = 23, bs = 4, nblocks = 16, max_blocks = 8;
    int32_t tables[16], t_seq[23], pos[23];
    int64_t slots[64];
    for (int i = 0; i < 16; i++) tables[i] = (i * 5 + 3) % 16;
    for (int t = 0; t < T; t++) {
        t_seq[t] = t >= 11 && t < 20;
        pos[t] = t < 20 ? t : t - 9;
    }
    for (int sh = 0; sh < 2; sh++) {
        int H = shapes[sh][0], KVH = shapes[sh][1], D = shapes[sh][2];
        int64_t row = (int64_t)KVH * D, values = nblocks * bs * row;
        float *q = floats(T * H * D, -2.0f, 2.0f), *out = malloc((size_t)T * H * D * 4);
        float *k = floats(values, -4.0f, 4.0f), *v = floats(values, -2.0f, 2.0f);
        uint8_t *kc = malloc((size_t)values * 2), *vc = malloc((size_t)values * 2); /* 2 bytes a value at most */
        for (int i = 0; i < 64; i++) slots[i] = (int64_t)tables[i / bs % 16] * bs + i % bs;
        for (int i = 0; i < ntypes; i++) {
            strata_kv_write(k, v, 64, row, slots, kc, vc, types[i], 1);
            for (int w = 0; w < 3; w++) {
                strata_attention(q, T, H, KVH, D, kc, vc, types[i], bs, tables, max_blocks, t_seq, pos, 0.125f,
                                 w == 2 ? 2.5f : 0.0f, w == 1 ? 7 : 0, out, 1);
                emit(out, (int64_t)T * H * D);
            }
        }
        free(q), free(out), free(k), free(v), free(kc), free(vc);
    }
}

/* The KV cache stored as bf16 and fp16 (kv_type 1, 2): values of every magnitude (subnormal to
 * overflow, NaN, ties) rounded by strata_kv_write, then grouped and single-head attention over a
 * cache so written, plain, windowed and soft-capped. */
static void kvcache(void) {
    int64_t n = 4096;
    float *x = floats(n, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) { /* magnitudes 2^-30 .. 2^20 */
        float m = 1.0f;
        for (int e = (int)(i % 51); e > 0; e--) m *= 2.0f;
        x[i] = x[i] * m / 1073741824.0f;
    }
    const uint32_t special[8] = {0x7F800000u, 0xFF800001u, 0x477FF000u, 0x477FEFFFu, 0x33000000u, 0x33000001u, 0x387FFFFFu, 0x80000000u};
    memcpy(x, special, sizeof special);
    int64_t slot = 0;
    uint16_t *kb = malloc((size_t)n * 2), *vb = malloc((size_t)n * 2);
    for (int type = 1; type <= 2; type++) {
        strata_kv_write(x, x, 1, n, &slot, kb, vb, type, 1);
        fwrite(kb, 2, (size_t)n, stdout);
    }
    free(x), free(kb), free(vb);
    const int shapes[2][3] = {{8, 2, 64}, {4, 4, 40}}, types[2] = {1, 2};
    kv_attention(shapes, types, 2);
}

/* The KV cache stored as q8_0 (kv_type 3): blocks of 32 values, each block of one magnitude
 * (2^-30 .. 2^20, past fp16's largest scale), with inf, NaN, ties and -0, written by
 * strata_kv_write; then grouped and single-head attention over a cache so written, plain,
 * windowed and soft-capped. */
static void kvq8(void) {
    int64_t n = 4096, bytes = n / 32 * 34;
    float *x = floats(n, -1.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) {
        float m = 1.0f;
        for (int e = (int)(i / 32 % 51); e > 0; e--) m *= 2.0f;
        x[i] = x[i] * m / 1073741824.0f;
    }
    const uint32_t special[4] = {0x7F800000u, 0x80000000u, 0x7FC00001u, 0x3F000000u};
    for (int b = 0; b < 4; b++) memcpy(x + 32 * (b + 1) + 7, special + b, 4); /* one in each of 4 blocks */
    for (int i = 0; i < 32; i++) x[160 + i] = (float)i - 15.5f, x[192 + i] = -0.0f;
    int64_t slot = 0;
    uint8_t *kb = malloc((size_t)bytes), *vb = malloc((size_t)bytes);
    strata_kv_write(x, x, 1, n, &slot, kb, vb, 3, 1);
    fwrite(kb, 1, (size_t)bytes, stdout);
    free(x), free(kb), free(vb);
    const int shapes[2][3] = {{8, 2, 64}, {4, 4, 96}}, types[1] = {3};
    kv_attention(shapes, types, 1);
}

/* The DeltaNet recurrence (strata_delta_rule): two sequences of 5 and 9 tokens on 3 heads, head
 * sizes 16 and 7 (the halving tree's appended zero), a snapshot copied mid-chunk; the outputs and
 * the states after. */
static void delta(void) {
    const int sizes[2] = {16, 7}, HV = 3, T = 14;
    for (int c = 0; c < 2; c++) {
        int D = sizes[c];
        int64_t dd = (int64_t)D * D;
        float *states = floats(4 * HV * dd, -1.0f, 1.0f), *out = malloc((size_t)T * HV * D * 4);
        float *q = floats(T * HV * D, -1.0f, 1.0f), *k = floats(T * HV * D, -0.5f, 0.5f);
        float *v = floats(T * HV * D, -2.0f, 2.0f), *decay = floats(T * HV, 0.2f, 1.0f), *beta = floats(T * HV, 0.0f, 1.0f);
        const int32_t slots[2] = {2, 0}, starts[2] = {0, 5}, counts[2] = {5, 9};
        const int32_t cap_row[1] = {1}, cap_after[1] = {4}, cap_slot[1] = {3};
        strata_delta_rule(states, slots, 2, starts, counts, q, k, v, decay, beta, HV, D, 0.25f, out, cap_row, cap_after,
                          cap_slot, 1, 2);
        emit(out, (int64_t)T * HV * D);
        emit(states, 4 * HV * dd);
        free(states), free(out), free(q), free(k), free(v), free(decay), free(beta);
    }
}

/* One [N, K] product (or, with M = 0, rows N-1 .. 0 of the table gathered) on a weight of type t
 * and on the Q8_0 weight of its values, in arithmetic `mode` (0: fp32, 1: q8, 2 and 3: limbs); the
 * first result is written out, and must be the Q8_0 one bit for bit. */
static int held_same_as(int t, int rt, const uint8_t *w5, const uint8_t *w8, int64_t N, int64_t K, int mode,
                        const float *x, int64_t M, const float *bias) {
    int64_t n = M ? M * N : N * K;
    float *y5 = malloc((size_t)n * 4), *y8 = malloc((size_t)n * 4);
    uint8_t *p5 = malloc((size_t)strata_q8_packed_bytes(t, N, K)), *p8 = malloc((size_t)strata_q8_packed_bytes(rt, N, K));
    int64_t *ids = malloc((size_t)N * 8);
    for (int64_t i = 0; i < N; i++) ids[i] = N - 1 - i;
    int flags = mode ? WT_Q8_PACKED | (mode > 1 ? mode << WT_LIMB_SHIFT : 0) : 0;
    if (mode) strata_q8_pack(t, w5, N, K, p5, 1), strata_q8_pack(rt, w8, N, K, p8, 1);
    const uint8_t *a = mode ? p5 : w5, *b = mode ? p8 : w8;
    if (M) {
        strata_matmul(x, M, K, a, t | flags, N, bias, y5, M > 4 ? 2 : 1);
        strata_matmul(x, M, K, b, rt | flags, N, bias, y8, M > 4 ? 2 : 1);
    } else {
        strata_gather_rows(a, t | flags, K, ids, N, y5);
        strata_gather_rows(b, rt | flags, K, ids, N, y8);
    }
    int same = memcmp(y5, y8, (size_t)n * 4) == 0;
    if (!same) fprintf(stderr, "held type %d: mode %d, %lld rows: not the type %d bits\n", t, mode, (long long)M, rt);
    emit(y5, n);
    free(y5), free(y8), free(p5), free(p8), free(ids);
    return same;
}

static int held_same(int t, const uint8_t *w5, const uint8_t *w8, int64_t N, int64_t K, int mode, const float *x,
                     int64_t M, const float *bias) {
    return held_same_as(t, WT_Q8_0, w5, w8, N, K, mode, x, M, bias);
}

/* A grid type's [N, K] blocks as stored (w) and the Q8_0 blocks grids.c decodes them to (w8):
 * fp16 d at its extremes (+-0, the smallest subnormals, +-the largest) and small, every other
 * byte random, all zero or all one. */
static void grid_blocks(int t, int64_t N, int64_t K, uint8_t *w, uint8_t *w8) {
    const uint16_t extremes[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF};
    int64_t size = strata_wtypes[t].stored_bytes, blocks = N * K / 256;
    for (int64_t s = 0; s < blocks; s++) {
        uint8_t *blk = w + s * size;
        for (int64_t i = 2; i < size; i++) blk[i] = s % 11 == 4 ? 0 : s % 11 == 6 ? 255 : (uint8_t)(next_u64() >> 56);
        uint16_t d = s < 6 ? extremes[s] : s % 7 == 3 ? extremes[s % 6] : (uint16_t)(0x1800 + (next_u64() >> 54));
        memcpy(blk, &d, 2);
    }
    for (int64_t b = 0; b < N * K / 32; b++) {
        int8_t q[32];
        float scale = grid_group(t, w + b / (K / 32) * row_bytes(t, K), b % (K / 32), q);
        memcpy(w8 + b * 36, &scale, 4), memcpy(w8 + b * 36 + 4, q, 32);
    }
}

/* `driver held`: Q5_0 (d f32, qh, qs) against the Q8_0 blocks of its values (d, q - 16), the
 * codebook types (IQ4_NL, IQ4_XS, MXFP4: scale f32, 16 bytes of indices) against theirs
 * (scale, codebook[index]) and the grid types (IQ2_XXS, IQ3_XXS, IQ3_S, IQ1_S, as stored)
 * against theirs (grid_blocks), in every arithmetic, every row-tile remainder; scales at fp16's
 * extremes (the largest, the smallest subnormal, +-0) and blocks of all-zero and all-one quant
 * bits everywhere; activations as `driver limb`'s (a zero block, the largest limbs, a tiny
 * block, a NaN). */
static int held(int t) {
    const float scales[] = {65504.0f, 0x1p-24f, 0.0f, -0.0f, -65504.0f};
    const int64_t rows[] = {1, 2, 3, 4, 5, 9, 17};
    int64_t K = 512, N = 37, nb = N * K / 32;
    int bb = t == WT_Q5_0 ? 24 : 20; /* bytes a block of 32 (the codebook types: 20) */
    uint8_t *w5 = malloc((size_t)(N * row_bytes(t, K))), *w8 = malloc((size_t)(nb * 36));
    if (wtype_grid(t)) grid_blocks(t, N, K, w5, w8);
    for (int64_t b = 0; b < nb && !wtype_grid(t); b++) {
        uint8_t *q5 = w5 + b * bb, *q8 = w8 + b * 36;
        float d = b < 5 ? scales[b] : b % 7 == 3 ? scales[b % 5] : uniform(-0.05f, 0.05f);
        memcpy(q5, &d, 4), memcpy(q8, &d, 4);
        for (int i = 4; i < bb; i++) q5[i] = b % 11 == 4 ? 0 : b % 11 == 6 ? 255 : (uint8_t)(next_u64() >> 56);
        uint32_t qh;
        memcpy(&qh, q5 + 4, 4);
        for (int k = 0; k < 32; k++) { /* Q5_0's q: nibble k (low, then high) and bit k of qh */
            int nib = q5[bb - 16 + (k & 15)] >> (k >> 4 << 2) & 15, q = nib | (int)((qh >> k) & 1u) << 4;
            q8[4 + k] = (uint8_t)(t == WT_Q5_0 ? (int8_t)(q - 16) : codebook_of(t)[nib]);
        }
    }
    float *bias = floats(N, -0.5f, 0.5f);
    int ok = 1;
    for (int mode = 0; mode < 4; mode++) {
        ok &= held_same(t, w5, w8, N, K, mode, NULL, 0, NULL);
        for (int r = 0; r < 7; r++) {
            int64_t M = rows[r];
            float *x = floats(M * K, -1.0f, 1.0f);
            for (int64_t b = 0; b < M * K / 32; b++) {
                float scale = b % 5 == 1 ? 40.0f : b % 5 == 3 ? 0.001f : 1.0f;
                for (int i = 0; i < 32; i++) x[b * 32 + i] *= scale;
            }
            memset(x + 32, 0, 32 * 4);
            for (int i = 0; i < 32; i++) {
                x[64 + i] = 8355711.0f * 0x1p-20f, x[96 + i] = 32639.0f * 0x1p-10f; /* the largest limbs */
                x[128 + i] *= 1e-33f;
            }
            if (M > 2) x[K + 200] = NAN;
            ok &= held_same(t, w5, w8, N, K, mode, x, M, r % 2 ? bias : NULL);
            free(x);
        }
    }
    free(w5), free(w8), free(bias);
    return ok ? 0 : 1;
}

/* A K-grid type's [N, K] blocks as stored (w; d at fp16's extremes as grid_blocks', every other
 * byte random, all zero or all one) and the Q6_K blocks, in the kernels' layout (d f32, int8
 * scales, int8 q), of the values grids.c decodes them to (w6; IQ2_XS and IQ2_S: their own, whose
 * q pass Q6_K's 6 bits: w6 is then the held blocks again). */
static void kgrid_blocks(int t, int64_t N, int64_t K, uint8_t *w, uint8_t *w6) {
    const uint16_t extremes[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x7BFF, 0xFBFF};
    int64_t size = strata_wtypes[t].stored_bytes, blocks = N * K / 256;
    for (int64_t s = 0; s < blocks; s++) {
        uint8_t *blk = w + s * size;
        for (int64_t i = 0; i < size; i++) blk[i] = s % 11 == 4 ? 0 : s % 11 == 6 ? 255 : (uint8_t)(next_u64() >> 56);
        uint16_t d = s < 6 ? extremes[s] : s % 7 == 3 ? extremes[s % 6] : (uint16_t)(0x1800 + (next_u64() >> 54));
        if (t == WT_Q3_K) memcpy(blk + 108, &d, 2);
        else if (t != WT_IQ1_M) memcpy(blk, &d, 2);
        else /* IQ1_M: d's nibbles on top of its four scale words */
            for (int k = 0; k < 4; k++) blk[49 + 2 * k] = (uint8_t)((blk[49 + 2 * k] & 0x0F) | ((d >> (4 * k)) & 15) << 4);
    }
    if (t == WT_IQ2_XS || t == WT_IQ2_S) {
        memcpy(w6, w, (size_t)(blocks * size));
        return;
    }
    for (int64_t b = 0; b < N * K / 32; b++) {
        int8_t q[32], sc[2];
        float d;
        kgrid_block(t, w + b / (K / 32) * row_bytes(t, K), b % (K / 32), &d, sc, q);
        uint8_t *blk = w6 + b / 8 * 276;
        int j = (int)(b % 8);
        memcpy(blk, &d, 4), memcpy(blk + 4 + 2 * j, sc, 2), memcpy(blk + 20 + 32 * j, q, 32);
    }
}

static int held_every_mode(int t, int rt, const uint8_t *ws, const uint8_t *ww, int64_t N, int64_t K);

/* `driver held` for a K-grid type: Q3_K and IQ1_M against the Q6_K blocks of their values (the
 * rewrite they were once held as), IQ2_XS and IQ2_S against themselves (their bits, by the
 * digest); `held`'s activations and row counts. */
static int held_kgrid(int t) {
    int64_t K = 512, N = 37;
    int rt = t == WT_IQ2_XS || t == WT_IQ2_S ? t : WT_Q6_K;
    uint8_t *w = malloc((size_t)(N * row_bytes(t, K))), *w6 = malloc((size_t)(N * row_bytes(rt, K)));
    kgrid_blocks(t, N, K, w, w6);
    int ok = held_every_mode(t, rt, w, w6, N, K);
    free(w), free(w6);
    return ok ? 0 : 1;
}

/* `driver half`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 as the file stores them (WT_HALF_SCALES: fp16 d and
 * m, converted where read) against the same blocks with those fields widened to fp32 (the type's
 * code alone), in every arithmetic, every row-tile remainder, and the rows gathered (the driver
 * fails where one output differs); every other block's fields at fp16's finite extremes (+-0,
 * the smallest and largest subnormals, the smallest normal, +-the largest), the others small,
 * quant bytes random, all zero or all one; `held`'s activations. */
static int half(int t) {
    const uint16_t extremes[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x7BFF, 0xFBFF};
    int64_t K = 512, N = 37, nb = N * K / 32;
    int f = strata_wtypes[t].scale_fields, sb = strata_wtypes[t].stored_bytes, kb = strata_wtypes[t].kernel_bytes;
    uint8_t *ws = malloc((size_t)(nb * sb)), *ww = malloc((size_t)(nb * kb));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *s = ws + b * sb, *w = ww + b * kb;
        for (int i = 2 * f; i < sb; i++) s[i] = b % 11 == 4 ? 0 : b % 11 == 6 ? 255 : (uint8_t)(next_u64() >> 56);
        for (int j = 0; j < f; j++) {
            uint16_t h = b % 2 == 0 ? extremes[(b / 2 + 3 * j) % 8] : (uint16_t)(0x1800 + (next_u64() >> 54));
            if (b % 4 == 3) h ^= 0x8000; /* negative small scales and mins too */
            float v = f16_at((const uint8_t *)&h);
            memcpy(s + 2 * j, &h, 2), memcpy(w + 4 * j, &v, 4);
        }
        memcpy(w + 4 * f, s + 2 * f, (size_t)(sb - 2 * f));
    }
    int ok = held_every_mode(t | WT_HALF_SCALES, t, ws, ww, N, K);
    free(ws), free(ww);
    return ok ? 0 : 1;
}

/* The held weight ws of type t against ww of type rt ([N, K] each) in every arithmetic, every
 * row-tile remainder, and the rows gathered: `held`'s activations (some blocks scaled up and down,
 * one zero, the largest limbs, tiny values, a NaN). 1 where every output is the same. */
static int held_every_mode(int t, int rt, const uint8_t *ws, const uint8_t *ww, int64_t N, int64_t K) {
    const int64_t rows[] = {1, 2, 3, 4, 5, 9, 17};
    float *bias = floats(N, -0.5f, 0.5f);
    int ok = 1;
    for (int mode = 0; mode < 4; mode++) {
        ok &= held_same_as(t, rt, ws, ww, N, K, mode, NULL, 0, NULL);
        for (int r = 0; r < 7; r++) {
            int64_t M = rows[r];
            float *x = floats(M * K, -1.0f, 1.0f);
            for (int64_t b = 0; b < M * K / 32; b++) {
                float scale = b % 5 == 1 ? 40.0f : b % 5 == 3 ? 0.001f : 1.0f;
                for (int i = 0; i < 32; i++) x[b * 32 + i] *= scale;
            }
            memset(x + 32, 0, 32 * 4);
            for (int i = 0; i < 32; i++) {
                x[64 + i] = 8355711.0f * 0x1p-20f, x[96 + i] = 32639.0f * 0x1p-10f; /* the largest limbs */
                x[128 + i] *= 1e-33f;
            }
            if (M > 2) x[K + 200] = NAN;
            ok &= held_same_as(t, rt, ws, ww, N, K, mode, x, M, r % 2 ? bias : NULL);
            free(x);
        }
    }
    free(bias);
    return ok;
}

/* `driver codebook`: IQ4_NL and MXFP4 as the file stores them (WT_HALF_SCALES: IQ4_NL's fp16 d,
 * MXFP4's e8m0 byte E, each converted where read) against the same blocks with the scale widened
 * to fp32 (the type's code alone: transcode.codebook_blocks' layout; E as ldexpf(1, E - 128), the
 * halved scale of the doubled codebook), as `half` does (the driver fails where one output
 * differs); every other block's scale at its extremes (fp16: +-0, the smallest and largest
 * subnormals, the smallest normal, +-the largest, +-inf, a quiet and a signalling NaN; E: 0, 1, 2,
 * 127, 128, 254, 255), the others ordinary, indices random, all zero or all one. */
static int codebook(int t) {
    const uint16_t extremes[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400,
                                 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01};
    const uint8_t exps[] = {0, 1, 2, 127, 128, 254, 255};
    int64_t K = 512, N = 37, nb = N * K / 32;
    int head = t == WT_MXFP4 ? 1 : 2, sb = strata_wtypes[t].stored_bytes, kb = strata_wtypes[t].kernel_bytes;
    uint8_t *ws = malloc((size_t)(nb * sb)), *ww = malloc((size_t)(nb * kb));
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *s = ws + b * sb, *w = ww + b * kb;
        for (int i = head; i < sb; i++) s[i] = b % 11 == 4 ? 0 : b % 11 == 6 ? 255 : (uint8_t)(next_u64() >> 56);
        float v;
        if (t == WT_MXFP4) {
            s[0] = b % 2 == 0 ? exps[(b / 2) % 7] : (uint8_t)(120 + (next_u64() >> 61));
            v = ldexpf(1.0f, (int)s[0] - 128);
        } else {
            uint16_t h = b % 2 == 0 ? extremes[(b / 2) % 12] : (uint16_t)(0x1800 + (next_u64() >> 54));
            if (b % 4 == 3) h ^= 0x8000;
            v = f16_at((const uint8_t *)&h);
            memcpy(s, &h, 2);
        }
        memcpy(w, &v, 4), memcpy(w + 4, s + head, 16);
    }
    int ok = held_every_mode(t | WT_HALF_SCALES, t, ws, ww, N, K);
    free(ws), free(ww);
    return ok ? 0 : 1;
}

/* `driver codebook`, IQ4_XS: its super-blocks as the file stores them (WT_HALF_SCALES: fp16 d,
 * scales_h, scales_l, the indices, each 32's scale d * (ls - 32) computed where read) against the
 * 20-byte blocks of the same values (each scale d * (ls - 32) in double, then made fp32: exact),
 * as `codebook` does; every other super-block's d at codebook's extremes, the others ordinary,
 * its eight 6-bit scales ls running through 0 .. 63 (8 a super-block), its indices random, all
 * zero or all one. */
static int codebook_xs(void) {
    const uint16_t extremes[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400,
                                 0x7BFF, 0xFBFF, 0x7C00, 0xFC00, 0x7E00, 0x7C01};
    int64_t K = 512, N = 37, ns = N * K / 256;
    int sb = strata_wtypes[WT_IQ4_XS].stored_bytes, kb = strata_wtypes[WT_IQ4_XS].kernel_bytes / 8;
    uint8_t *ws = malloc((size_t)(ns * sb)), *ww = malloc((size_t)(ns * 8 * kb));
    for (int64_t s = 0; s < ns; s++) {
        uint8_t *blk = ws + s * sb;
        uint16_t h = s % 2 == 0 ? extremes[(s / 2) % 12] : (uint16_t)(0x1800 + (next_u64() >> 54));
        if (s % 4 == 3) h ^= 0x8000;
        memcpy(blk, &h, 2);
        memset(blk + 2, 0, 6);
        for (int j = 0; j < 8; j++) { /* ls = 8 s + j (mod 64): low nibble j of scales_l, high bits 2j of scales_h */
            int ls = (int)((8 * s + j) % 64);
            blk[4 + j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
            blk[2 + j / 4] |= (uint8_t)((ls >> 4) << (2 * (j % 4)));
        }
        for (int i = 8; i < sb; i++) blk[i] = s % 11 == 4 ? 0 : s % 11 == 6 ? 255 : (uint8_t)(next_u64() >> 56);
        double d = (double)f16_at(blk);
        for (int j = 0; j < 8; j++) {
            int ls = (int)((8 * s + j) % 64);
            float v = (float)(d * (double)(ls - 32));
            uint8_t *w = ww + (s * 8 + j) * kb;
            memcpy(w, &v, 4), memcpy(w + 4, blk + 8 + 16 * j, 16);
        }
    }
    int ok = held_every_mode(WT_IQ4_XS | WT_HALF_SCALES, WT_IQ4_XS, ws, ww, N, K);
    free(ws), free(ww);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "delta") == 0) {
        delta();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "kvq8") == 0) {
        kvq8();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "held") == 0) { /* in this order: the digest's */
        const int types[] = {WT_Q5_0, WT_IQ4_NL, WT_IQ4_XS, WT_MXFP4, WT_IQ2_XXS, WT_IQ3_XXS, WT_IQ3_S, WT_IQ1_S};
        int failed = 0;
        for (int i = 0; i < 8; i++) failed |= held(types[i]);
        const int kgrid[] = {WT_Q3_K, WT_IQ1_M, WT_IQ2_XS, WT_IQ2_S}; /* at the end: the digest before them is kept */
        for (int i = 0; i < 4; i++) failed |= held_kgrid(kgrid[i]);
        return failed;
    }
    if (argc > 1 && strcmp(argv[1], "half") == 0) {
        const int types[] = {WT_Q4_0, WT_Q4_1, WT_Q5_0, WT_Q5_1, WT_Q8_0};
        int failed = 0;
        for (int i = 0; i < 5; i++) failed |= half(types[i]);
        return failed;
    }
    if (argc > 1 && strcmp(argv[1], "codebook") == 0) {
        return codebook(WT_IQ4_NL) | codebook(WT_MXFP4) | codebook_xs();
    }
    if (argc > 1 && strcmp(argv[1], "kvcache") == 0) {
        kvcache();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "q8") == 0) {
        q8();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "limb") == 0) {
        limb();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "tiles") == 0) {
        tiles();
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "gptoss") == 0) {
        gptoss();
        return 0;
    }
    matmuls();
    elementwise();
    attention_and_rope();
    gemma();
    kquants();
    return 0;
}
