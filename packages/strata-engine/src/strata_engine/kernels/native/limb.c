/*
 * Exact activations as integer limbs: the "native-limb3" (and "native-limb2") kernels, on q8.h's
 * packed weights and integer steps.
 *
 * q8 rounds each block of 32 activations to 8 bits. Here each block becomes one power-of-two
 * scale s and k signed int8 limbs per element (k = 2 or 3):
 *     x = s * X,   X = l_{k-1} 256^{k-1} + ... + l_1 256 + l_0,   every l_j in [-128, 127],
 * with X = round-half-even(x / s) and s = 2^e the smallest power of two for which the block's
 * largest |X| is at most XMAX_k = 127 (256^k - 1) / 255 (8,355,711 for k = 3: every X then has
 * k balanced base-256 digits). s / 2 < amax / 2^(8k-2), so the block's largest element keeps
 * 8k - 1 significant bits (k = 3: 23, against fp32's 24) and every other element is held to
 * the same absolute step s / 2 (x / s is exact: s is a power of two). A block whose largest
 * |x| is below 2^-100 (subnormal-scale activations) is taken as zero; one with a NaN or an
 * infinity gets s = NaN, so its outputs are NaN as the fp32 path's would be.
 *
 * Per output and block (Q6_K: per half of 16) the weights' integer quants w (the q8 packing)
 * are multiplied with each limb's plane by the same integer steps as q8's:
 *     S_j = sum_k w_k * l_j,k   (int32, exact: |S_j| <= 32 * 255 * 128 < 2^21 before the offset
 *                                is taken back, which the AVX2 int16 partial sums respect, see
 *                                test_limb.py's extremes)
 *     L = S_1 * 256 + S_0       (int32, exact: |L| < 2^29)
 *     S = S_2 * 65536 + L       (k = 3: formed in double, exact: |S| < 2^37 < 2^53)
 * so S = sum_k w_k X_k exactly, on every target, in any order. Q8_0 on AVX2 (whose byte step
 * cannot take its weights) reaches the same S by int16 steps on two 12-bit limbs instead (see
 * limb_wide_rows). The float work per output is
 * then q8's fixed sequence over the blocks in order, with f = (float)S (one correctly rounded
 * conversion of the exact sum):
 *     acc = fma(wscale * s, f, acc)             (Q6_K, Q2_K: once per half, its own scale)
 *     acc = fma(wmin, s * (float)sum_k X_k, acc)   (types with a min: Q4_1, Q5_1, Q4_K, Q5_K;
 *                                                   Q2_K: after both halves' scales, each half's
 *                                                   min on that half's sum, as q8.h states)
 * and y = acc (+ bias). wscale * s is exact (s is a power of two), so each block adds its exact
 * product rounded twice (the conversion, the fma): at least as close to the exact dot product
 * as the fp32 kernels, whose per-element fmas round once per weight.
 */
#include "q8.h" /* q8's packed weights and integer steps, and the helpers every kernel file shares */

/* q8_prefetch_ahead's hint, LIMB_AHEAD bytes ahead of each block a tile starts. AVX2 (not AVX-VNNI): 8192, not
 * Q8_AHEAD's 4096 (Zen 5, 1 thread, weights from memory, one row: Q5_K 1.07 times, Q6_K 1.04, Q4_K
 * 1.04, the rest 1.00-1.07; at 4096 the weights came late where a block's steps run fast). A hint
 * only: it changes no value. */
#ifndef LIMB_AHEAD
#if defined(STRATA_TARGET_AVX2) && !defined(STRATA_AVX_VNNI) /* AVX-VNNI: Q4_K 0.8 times at 8192 (one measure) */
#define LIMB_AHEAD 8192
#else
#define LIMB_AHEAD Q8_AHEAD
#endif
#endif
static inline void limb_prefetch(int t, const uint8_t *blk) { q8_prefetch_from(t, blk, LIMB_AHEAD); }

#define LIMB_SHIFT 9 /* a q8-packed weight's type: bits 9-10 hold its limbs (0: q8's 8-bit rule) */
#define LIMB_MIN_EXP (-100) /* blocks whose largest |x| is below 2^-100 are zero */
#define LIMB_ROUND 6755399441055744.0 /* 1.5 * 2^52: (v + LIMB_ROUND) - LIMB_ROUND is v to nearest even */

static inline int32_t limb_xmax(int limbs) { return limbs == 3 ? 8355711 : 32639; } /* 127 (256^k - 1) / 255 */

typedef struct {
    int8_t *q;     /* [M, nb, limbs, 32]: limb j of element k of block b */
    float *s;      /* [M, nb]: the block's scale (0: a zero block, NaN: a NaN or infinity in it) */
    float *dsum;   /* [M, nb, 2]: s * (float)(sum of the block's X), or (Q2_K) of each half's X */
    int32_t *start; /* [M, nb, limbs, 2]: where limb j's integer sums start, so that they end with the
                     * weights' offset taken back: -offset * the limb's sum over half h (types with
                     * one scale a block: slot 0, over the block) */
    int16_t *wide; /* AVX2, Q8_0: [M, nb, planes, 32], X as int16 limbs (see limb_wide_block) */
} limb_rows;

static inline float limb_pow2(int e) { /* 2^e as a float, -126 <= e <= 127 */
    uint32_t bits = (uint32_t)(e + 127) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline double limb_pow2d(int e) { /* 2^e as a double, -1022 <= e <= 1023 */
    uint64_t bits = (uint64_t)(e + 1023) << 52;
    double d;
    memcpy(&d, &bits, 8);
    return d;
}

/* limb_top_bits: the largest |x| of a block of 32 as its float bits (for floats that are not NaN
 * the bits' integer order is the values' order; NaN and the infinities are the bits from
 * 0x7f800000 up), so every target finds the same.
 * limb_digits: X = x * 2^ish rounded to the nearest integer (ties to even) for the 32 elements of a block
 * (|X| <= XMAX: |X| < 2^23), split into `limbs` balanced base-256 digits l = X mod 256 in
 * [-128, 127], X = (X - l) / 256 (exact: a multiple of 256) for the next; sums[2j + h] = limb j's
 * sum over half h; returns the sum of X. The product x * 2^ish is exact wherever it is at least
 * 2^-126 (a power of two times a float); below that it rounds to 0 in float and double alike, so
 * the vector steps give the scalar sequence's integers. */
#if defined(STRATA_TARGET_AVX512)
static inline uint32_t limb_top_bits(const float *x) {
    __m512i m = _mm512_set1_epi32(0x7fffffff);
    __m512i a = _mm512_and_si512(_mm512_loadu_si512((const void *)x), m), b = _mm512_and_si512(_mm512_loadu_si512((const void *)(x + 16)), m);
    return _mm512_reduce_max_epu32(_mm512_max_epu32(a, b));
}
static inline int32_t limb_digits(const float *x, int ish, int limbs, int8_t *q, int32_t *sums) {
    __m512i total = _mm512_setzero_si512(), m255 = _mm512_set1_epi32(255), m128 = _mm512_set1_epi32(128);
    for (int h = 0; h < 2; h++) {
        __m512 v = _mm512_mul_ps(_mm512_loadu_ps(x + 16 * h), _mm512_set1_ps(limb_pow2(ish)));
        __m512i X = _mm512_cvtps_epi32(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        total = _mm512_add_epi32(total, X);
        for (int j = 0; j < limbs; j++) {
            __m512i l = _mm512_sub_epi32(_mm512_xor_si512(_mm512_and_si512(X, m255), m128), m128);
            _mm_storeu_si128((__m128i *)(q + 32 * j + 16 * h), _mm512_cvtepi32_epi8(l));
            sums[2 * j + h] = _mm512_reduce_add_epi32(l);
            X = _mm512_srai_epi32(_mm512_sub_epi32(X, l), 8);
        }
    }
    return _mm512_reduce_add_epi32(total);
}
#elif defined(STRATA_TARGET_AVX2)
static inline uint32_t limb_top_bits(const float *x) {
    __m256i m = _mm256_set1_epi32(0x7fffffff), top = _mm256_setzero_si256();
    for (int i = 0; i < 4; i++) top = _mm256_max_epu32(top, _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + 8 * i)), m));
    __m128i t = _mm_max_epu32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1));
    t = _mm_max_epu32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
    return (uint32_t)_mm_cvtsi128_si32(_mm_max_epu32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1))));
}
static inline int32_t limb_digits(const float *x, int ish, int limbs, int8_t *q, int32_t *sums) {
    __m256i X[4], m255 = _mm256_set1_epi32(255), m128 = _mm256_set1_epi32(128);
    for (int i = 0; i < 4; i++) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), _mm256_set1_ps(limb_pow2(ish)));
        X[i] = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    int32_t total = hsum8_epi32(_mm256_add_epi32(_mm256_add_epi32(X[0], X[1]), _mm256_add_epi32(X[2], X[3])));
    for (int j = 0; j < limbs; j++) {
        __m256i l[4];
        for (int i = 0; i < 4; i++) {
            l[i] = _mm256_sub_epi32(_mm256_xor_si256(_mm256_and_si256(X[i], m255), m128), m128);
            X[i] = _mm256_srai_epi32(_mm256_sub_epi32(X[i], l[i]), 8);
        }
        sums[2 * j] = hsum8_epi32(_mm256_add_epi32(l[0], l[1]));
        sums[2 * j + 1] = hsum8_epi32(_mm256_add_epi32(l[2], l[3]));
        i8_store32(q + 32 * j, l);
    }
    return total;
}
#else
static inline uint32_t limb_top_bits(const float *x) {
    uint32_t top = 0;
    for (int k = 0; k < 32; k++) {
        uint32_t b;
        memcpy(&b, x + k, 4);
        b &= 0x7fffffffu;
        top = b > top ? b : top;
    }
    return top;
}
static inline int32_t limb_digits(const float *x, int ish, int limbs, int8_t *q, int32_t *sums) {
    double id = limb_pow2d(ish);
    int32_t total = 0;
    memset(sums, 0, sizeof(int32_t) * (size_t)(2 * limbs));
    for (int k = 0; k < 32; k++) {
        int32_t X = (int32_t)(((double)x[k] * id + LIMB_ROUND) - LIMB_ROUND);
        total += X;
        for (int j = 0; j < limbs; j++) {
            int32_t l = ((X & 255) ^ 128) - 128;
            q[32 * j + k] = (int8_t)l;
            sums[2 * j + (k >> 4)] += l;
            X = (X - l) / 256;
        }
    }
    return total;
}
#endif

/* AVX-512: limb 1's start folded into limb 0's (L = S_1 * 256 + S_0 the same exact value, every
 * partial sum within int32), so that Q6_K's tiles (limb_q6k_rows) start a row's sums from 2
 * broadcasts a half, not 3. The other readers of the starts on this target take the folded form
 * too: the other types' tiles start limb 1 from the 0 it now holds, grids.c's fused Q3_K / IQ1_M
 * steps read it as it is, and AMX takes none. */
#if defined(STRATA_TARGET_AVX512)
#define LIMB_FOLD_START 1
#else
#define LIMB_FOLD_START 0
#endif

/* One block of 32 into limbs (see the top): the scale from the block's largest |x| by scalar
 * integer and double steps, then the digits (the rounding is exact: |x / s| < 2^23, x / s exact). */
static void limb_quantize_block(const float *x, int limbs, int off, int halves, int two, int8_t *q, int32_t *start,
                                float *s, float *dsum) {
    uint32_t bits = limb_top_bits(x);
    int bad = bits >= 0x7f800000u; /* NaN or an infinity */
    float amax;
    memcpy(&amax, &bits, 4);
    int e = (int)(bits >> 23) - 127; /* floor(log2(amax)) for a normal amax */
    if (bad || amax == 0.0f || e < LIMB_MIN_EXP) { /* NaN: the one (positive, quiet) NaN every target */
        memset(q, 0, (size_t)(32 * limbs));          /* then propagates; dsum 0 adds no second NaN */
        memset(start, 0, sizeof(int32_t) * (size_t)(2 * limbs));
        *s = bad ? NAN : 0.0f;
        dsum[0] = dsum[1] = 0.0f;
        return;
    }
    int sh = e - (8 * limbs - 2); /* s = 2^sh: amax / s in [2^(8k-2), 2^(8k-1)) */
    if (((double)amax * limb_pow2d(-sh) + LIMB_ROUND) - LIMB_ROUND > (double)limb_xmax(limbs)) sh++;
    int32_t total = limb_digits(x, -sh, limbs, q, start), half[2] = {0, 0};
    for (int j = 0; j < limbs; j++) /* each half's sum of X from its limbs' (exact: |sum| < 2^27) */
        for (int h = 0; h < 2; h++) half[h] += start[2 * j + h] * (1 << (8 * j));
    for (int j = 0; j < limbs; j++) { /* |offset * sum| <= 128 * 32 * 128: exact in int32 */
        if (halves == 1) start[2 * j] += start[2 * j + 1];
        start[2 * j] *= -off, start[2 * j + 1] *= -off;
    }
    if (LIMB_FOLD_START) /* limb 1's start in limb 0's: L = S_1 * 256 + S_0 takes it the same */
        for (int h = 0; h < 2; h++) start[h] += start[2 + h] * 256, start[2 + h] = 0;
    *s = limb_pow2(sh);
    dsum[0] = *s * (float)(two ? half[0] : total);
    dsum[1] = *s * (float)half[1];
}

/* x into limbs for weights of type t (its offset and scales a block set where the sums start). */
static void limb_quantize(const float *x, int64_t M, int64_t K, int limbs, int t, limb_rows *r, int nthreads) {
    int64_t nb = K / 32;
    int off = q8_offset(t), halves = q8_halves(t), two = q8_two(t);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (M * K >= SMALL_WORK)
    for (int64_t i = 0; i < M * nb; i++)
        limb_quantize_block(x + i * 32, limbs, off, halves, two, r->q + i * limbs * 32, r->start + i * limbs * 2,
                            r->s + i, r->dsum + 2 * i);
}

/* ---- per target: the exact per-output value of a block's limb sums (see the top) -------------
 * Where |S_2| < LIMB_FAST = 2^14 in every lane of a vector (AVX-512: of every row of a tile; the
 * common case), S = S_2 * 65536 + L fits in int32 (|S| < 2^30 + 2^29 + 2^21) and one int32-to-float
 * conversion rounds it once; other vectors form S in double (AVX-512 first tries A below). Each
 * gives the one correctly rounded float of the exact S, so which path a vector takes changes no bit. */
#if defined(STRATA_TARGET_AVX512) /* limb_values3 and its helpers: q8.h */
#define LIMB_VR 8 /* virtual rows (rows x limbs) a tile holds */
/* Rows from which a call unpacks Q4_K to bytes as Q5_K is (the same header and scales): its
 * tiles then take no nibble shifts, which share port 0 with vpdpbusd. Fewer rows do not repay
 * the unpacking. */
#define LIMB_UNPACK_Q4_K 64
/* Rows from which a call of three limbs unpacks Q6_K (UNPACK_ROWS alone: from 6). Below, its
 * packed tiles (limb_q6k_rows, 4 rows) ran 1.13-1.59 times as fast at 6 to 12 rows (Zen 5); from
 * 16 rows (AMX_MIN_ROWS: AMX's calls) unchanged. */
#define LIMB_UNPACK_Q6_K 16
/* Rows from which a call takes Q8_0 and the types expanded to bytes (grid, K-grid, codebook) two
 * groups a tile (limb_pair_bytes): past decode's 1 to 8 rows (KGRID_ROWS), which keep their tiles. */
#define LIMB_PAIR_ROWS 9
#define LIMB_PAIR_CB_ROWS 12 /* the codebook types held: at 9 rows MXFP4 ran 0.92 times limb_cb_group's speed, at 12 1.02 */
#define LIMB_VR_LARGE 12 /* the 4-bit types' and the unpacked Q6_K's: one int32 chain a virtual row */
#elif defined(STRATA_TARGET_AVX2)
static inline vi limb_low(vi s0, vi s1) {
    return (vi){_mm256_add_epi32(_mm256_slli_epi32(s1.lo, 8), s0.lo), _mm256_add_epi32(_mm256_slli_epi32(s1.hi, 8), s0.hi)};
}
static inline vf limb_value3(vi s0, vi s1, vi s2) {
    vi low = limb_low(s0, s1);
    return (vf){limb_f8_any(s2.lo, low.lo), limb_f8_any(s2.hi, low.hi)};
}

/* ---- AVX2, Q8_0: int16 weights times int16 limbs ---------------------------------------------
 * Q8_0's stored bytes (w + 128, up to 255) times an int8 limb (down to -128) overflow vpmaddubsw's
 * int16 pair sums. vpmaddwd multiplies int16 pairs into int32 instead, so the signed weight w
 * (|w| <= 128) is widened to int16 and each block's X is taken once per call as int16 "wide limbs"
 * (limb_widen): X itself for k = 2 (|X| <= 32,639), and for k = 3 hi = (X + 2048) >> 12 and
 * lo = X - 4096 hi (|hi| <= 2,040, lo in [-2048, 2047]). A block's sums S_hi and S_lo (at most
 * 32 * 128 * 2048 = 2^23 in magnitude) are exact in int32 and in float, so S = S_hi * 4096 + S_lo
 * takes no int32 or double combine (limb_wide_value). Two limbs instead of three int8 ones, no
 * nibble split and no offset to take back; test_limb.py checks the sums at these bounds. */
#ifndef STRATA_AVX_VNNI /* AVX-VNNI's vpdpbusd takes Q8_0's bytes as they are (q8.h) */
#define LIMB_WIDE 1
#endif
#define LIMB_WIDE_VR 2 /* virtual rows (rows x wide limbs) a tile holds: 4 accumulators each */
static inline int limb_wide_planes(int limbs) { return limbs == 3 ? 2 : 1; }

/* A block's 32 X (from its int8 limbs) as its wide limbs: planes[32 p + k], p = 0 the high one. */
static inline void limb_wide_block(const int8_t *q, int limbs, int16_t *planes) {
    for (int k = 0; k < 32; k++) {
        int32_t X = limbs == 3 ? q[64 + k] * 65536 + q[32 + k] * 256 + q[k] : q[32 + k] * 256 + q[k];
        int32_t hi = (X + 2048) >> 12; /* arithmetic: floor((X + 2048) / 4096) */
        if (limbs == 3) planes[k] = (int16_t)hi, planes[32 + k] = (int16_t)(X - 4096 * hi);
        else planes[k] = (int16_t)X;
    }
}

/* Every block's wide limbs, once per call (not per group of outputs). */
static void limb_widen(int64_t blocks, int limbs, limb_rows *r, int nthreads) {
    int planes = limb_wide_planes(limbs);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (blocks * 32 >= SMALL_WORK)
    for (int64_t i = 0; i < blocks; i++) limb_wide_block(r->q + i * limbs * 32, limbs, r->wide + i * planes * 32);
}

/* 16 bytes of a quad row (4 outputs x 4 elements) as the signed weights w = byte - 128, int16 */
static inline __m256i limb_wide_w(const uint8_t *p) {
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)p)), _mm256_set1_epi16(128));
}

/* 4 consecutive int16 limbs in every 64-bit lane: vpmaddwd against limb_wide_w's 4 outputs then
 * gives, per output o, the pair sums of elements (0, 1) and (2, 3) in lanes 2o and 2o + 1. */
static inline __m256i limb_wide_x(const int16_t *x) {
    int64_t x4;
    memcpy(&x4, x, 8);
    return _mm256_set1_epi64x(x4);
}

/* acc + the pair sums of w times x. The empty asm keeps each accumulator one chain in a register:
 * left free, the compiler reassociates a block's sums into trees whose products wait on the stack
 * (as q8.h's vh_dot4). */
static inline __m256i limb_wide_madd(__m256i acc, __m256i w, __m256i x) {
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(w, x));
    __asm__("" : "+x"(acc));
    return acc;
}

/* Outputs 0-7 from the pair sums of outputs 0-3 (a) and 4-7 (b): vphaddd gives the 128-bit lanes
 * (0 1 4 5 | 2 3 6 7), and the 64-bit permute puts them in order. */
static inline __m256i limb_wide_sum8(__m256i a, __m256i b) {
    return _mm256_permute4x64_epi64(_mm256_hadd_epi32(a, b), _MM_SHUFFLE(3, 1, 2, 0));
}

/* The float of S = hi * 4096 + lo, 8 outputs: (float)hi and (float)lo are exact (|hi|, |lo| <= 2^23)
 * and so is their product by 4096, so the fma rounds the exact S once: the correctly rounded
 * float every other target's int32 or double combine gives, without a test or a branch. */
static inline __m256 limb_wide_value(__m256i hi, __m256i lo) {
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_set1_ps(4096.0f), _mm256_cvtepi32_ps(lo));
}

/* A block's start on the wide limbs: each virtual row's (row, plane) activations xp[u], its sums s[u] zeroed. */
static inline __attribute__((always_inline)) void limb_wide_block_start(const limb_rows *xr, int planes, int64_t m0, int vr,
                                                                        int64_t nb, int64_t b, const int16_t **xp,
                                                                        __m256i (*s)[4]) {
    for (int u = 0; u < vr; u++) xp[u] = xr->wide + (((m0 + u / planes) * nb + b) * planes + u % planes) * 32;
    for (int u = 0; u < vr; u++)
        for (int g = 0; g < 4; g++) s[u][g] = _mm256_setzero_si256();
}

/* A block's end on the wide limbs: each row's S from its planes' sums (limb_wide_value), then the
 * float sequence at the top with the block's 16 scales ws. */
static inline __attribute__((always_inline)) void limb_wide_block_end(__m256i (*s)[4], vf ws, const limb_rows *xr, int planes,
                                                                      int64_t m0, int rows, int64_t nb, int64_t b, vf *acc) {
    for (int i = 0; i < rows; i++) {
        __m256i (*S)[4] = s + i * planes;
        __m256i hi0 = limb_wide_sum8(S[0][0], S[0][1]), hi1 = limb_wide_sum8(S[0][2], S[0][3]);
        vf f;
        if (planes == 2) {
            __m256i lo0 = limb_wide_sum8(S[1][0], S[1][1]), lo1 = limb_wide_sum8(S[1][2], S[1][3]);
            f = (vf){limb_wide_value(hi0, lo0), limb_wide_value(hi1, lo1)};
        } else {
            f = (vf){_mm256_cvtepi32_ps(hi0), _mm256_cvtepi32_ps(hi1)};
        }
        acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i) * nb + b])), f, acc[i]);
    }
}

/* One group's weights as limb_wide_w's int16s, 512 a block, for calls of many rows: their tiles
 * then load them as they are instead of widening each again (in the calling thread's scratch). */
static const int16_t *limb_wide_unpack(int t, const uint8_t *grp, int64_t nb) {
    int16_t *w16 = (int16_t *)scratch(SCRATCH_UNPACK, (size_t)nb * 1024);
    if (!w16) return NULL; /* out of memory: counted */
    for (int64_t b = 0; b < nb; b++)
        for (int i = 0; i < 32; i++)
            _mm256_storeu_si256((__m256i *)(w16 + b * 512 + 16 * i), limb_wide_w(q8_quants(t, grp + q8_block_at(t, b)) + 16 * i));
    return w16;
}

/* Rows m0 .. m0+rows of one group of 16 Q8_0 outputs (t: WT_Q8_0, or with WT_HALF_SCALES): each
 * block's wide sums, then the float sequence at the top (as limb_group_rows). The weights from the
 * packed bytes, or (w16 not NULL) from limb_wide_unpack's int16s. */
static inline __attribute__((always_inline)) void limb_wide_rows(int t, const uint8_t *grp, const int16_t *w16, int64_t nb,
                                                                 const limb_rows *xr, int planes, int64_t m0, int rows,
                                                                 vf *acc) {
    int vr = rows * planes;
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(t, b), *qs = q8_quants(t, blk);
        if (!w16) limb_prefetch(t, blk);
        const int16_t *xp[LIMB_WIDE_VR];
        __m256i s[LIMB_WIDE_VR][4];
        limb_wide_block_start(xr, planes, m0, vr, nb, b, xp, s);
        for (int r = 0; r < 8; r++) {
            __m256i xv[LIMB_WIDE_VR];
            for (int u = 0; u < vr; u++) xv[u] = limb_wide_x(xp[u] + 4 * r);
            for (int g = 0; g < 4; g++) { /* outputs 4g .. 4g + 3 */
                __m256i w = w16 ? _mm256_loadu_si256((const __m256i *)(w16 + b * 512 + 64 * r + 16 * g))
                                : limb_wide_w(qs + 64 * r + 16 * g);
                for (int u = 0; u < vr; u++) s[u][g] = limb_wide_madd(s[u][g], w, xv[u]);
            }
        }
        limb_wide_block_end(s, q8_scale(t, blk, NULL, 0), xr, planes, m0, rows, nb, b, acc);
    }
}

/* One row tile of Q8_0 with constant wide limbs and rows: the compiler keeps it in registers. */
static inline __attribute__((always_inline)) void limb_wide_tile_t(int t, const uint8_t *grp, const int16_t *w16,
                                                                   int64_t nb, const limb_rows *xr, int limbs,
                                                                   int64_t m0, int rows, vf *acc) {
    if (w16) {
        if (limbs == 3) limb_wide_rows(t, grp, w16, nb, xr, 2, m0, 1, acc);
        else if (rows == 2) limb_wide_rows(t, grp, w16, nb, xr, 1, m0, 2, acc);
        else limb_wide_rows(t, grp, w16, nb, xr, 1, m0, 1, acc);
    } else {
        if (limbs == 3) limb_wide_rows(t, grp, NULL, nb, xr, 2, m0, 1, acc);
        else if (rows == 2) limb_wide_rows(t, grp, NULL, nb, xr, 1, m0, 2, acc);
        else limb_wide_rows(t, grp, NULL, nb, xr, 1, m0, 1, acc);
    }
}
static void limb_wide_tile(int t, const uint8_t *grp, const int16_t *w16, int64_t nb, const limb_rows *xr, int limbs,
                           int64_t m0, int rows, vf *acc) {
    if (wtype_half(t)) limb_wide_tile_t(WT_Q8_0 | WT_HALF_SCALES, grp, w16, nb, xr, limbs, m0, rows, acc);
    else limb_wide_tile_t(WT_Q8_0, grp, w16, nb, xr, limbs, m0, rows, acc);
}

/* ---- AVX2, Q6_K for many rows: int16 weights times the wide limbs ----------------------------
 * On bytes, Q6_K's 6-bit weights (up to 63 with the offset) times an int8 limb allow int16 chains
 * of only 2 steps (2 * 63 * 128 a step), so a block of one row took 48 vpmaddubsw, 24 vpmaddwd to
 * widen the chains, 24 broadcasts and the three limbs' combination and test twice (a scale per
 * half). Here a call of many rows takes Q6_K as Q8_0 above: X as limb_widen's two int16 wide limbs
 * (hi in [-2040, 2040], lo in [-2048, 2047]; k = 2: X itself, |X| <= 32,639) and the signed weight
 * w = q - 32 in [-32, 31] as int16, one vpmaddwd a pair of elements for 8 outputs. Per half of 16
 * and output (the half's scale is its own):
 *     |S_hi|, |S_lo| <= 16 * 32 * 2048 = 2^20 (k = 2: |S| <= 16 * 32 * 32,639 = 16,711,168 < 2^24)
 * exact in int32 and in float, with no offset to take back, so limb_wide_value's one fma gives the
 * correctly rounded float of the exact S = S_hi * 4096 + S_lo (k = 2: one conversion) that every
 * other path gives, then the half's fma of the sequence at the top: the same bits, with no limb
 * combination, test or branch. A block of one row is 64 vpmaddwd, 64 vpaddd and 32 broadcasts;
 * a tile of LIMB_SIX_ROWS rows shares each weight load. The weights are widened, and each half's
 * scale d * sc formed (the same fp32 product q8_scale forms), once a group (limb_six_unpack);
 * test_limb.py checks the sums at these bounds.
 * Q5_K for many rows takes the same steps (limb_six_rows' `five`): its weight w = q in [0, 31] (no
 * offset), one scale and one min a block of 32, so each row's chains run all 16 pairs and the
 * sequence comes once a block, then q8_add_min's fma(dmin * m, -dsum, acc) (dmin * m formed once a
 * group, as the scale). Per block and output
 *     |S_hi|, |S_lo| <= 32 * 31 * 2048 = 2,031,616 < 2^21 (k = 2: |S| <= 32 * 31 * 32,639 < 2^25)
 * exact in int32 and in float: limb_wide_value's fma (k = 2: the conversion) rounds the exact S
 * once, as the bytes' int32 or double combine does: the same bits, with no int16 chains to widen,
 * no limb combination and no test; three rows a tile (LIMB_FIVE_ROWS: 1.12 times the bytes, two rows
 * 0.99-1.05 times; bench/avx2_prefill_bound.py). */
#define LIMB_SIX_ROWS 2 /* rows a tile: 3 spill (measured slower), 1 loads each weight once a row */
#define LIMB_FIVE_ROWS 3 /* Q5_K's rows a tile: one sequence a block leaves registers for a third (1.09 times two) */
#define LIMB_SIX_VR (2 * LIMB_FIVE_ROWS) /* virtual rows (rows x wide limbs) a tile holds: 2 accumulators each */

/* acc + the pair sums of w times x, summed in place (one chain in a register, as limb_wide_madd,
 * without a copy a step) */
static inline __m256i limb_six_madd(__m256i acc, __m256i w, __m256i x) {
    __m256i p;
    __asm__("vpmaddwd %[w], %[x], %[p]\n\tvpaddd %[p], %[a], %[a]" : [a] "+x"(acc), [p] "=&x"(p) : [w] "x"(w), [x] "x"(x));
    return acc;
}

/* One group's 6-bit weights (pt: Q6_K as packed, or the K-grid types' expanded WT_Q6_K_BYTES) as
 * w = byte - 32, int16 (pt = WT_Q5_K: w = q, no offset): per block and pair j of elements (2j, 2j + 1),
 * outputs 0-7 then 8-15, each output's two weights side by side: w16[512 b + 32 j + 2 o + e] = w(o, 2j + e);
 * then per block its two halves' scales (q8_scale), f32[16] each (Q5_K: its scale, then its min). */
static const int16_t *limb_six_unpack(int pt, const uint8_t *grp, int64_t nb) {
    int16_t *w16 = (int16_t *)scratch(SCRATCH_UNPACK, (size_t)nb * (1024 + 128));
    if (!w16) return NULL; /* out of memory: counted */
    float *ws = (float *)(w16 + nb * 512);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(pt, b), *qs = q8_quants(pt, blk);
        const float *head = (const float *)(blk - (b & 7) * q8_block_bytes(pt) - q8_super_bytes(pt));
        if (q8_halves(pt) == 2)
            for (int h = 0; h < 2; h++) vf_store(ws + 32 * b + 16 * h, q8_scale(pt, blk, head, h));
        else /* Q5_K: the block's scale and min (q8_add_min's dmin * m) */
            vf_store(ws + 32 * b, q8_scale(pt, blk, head, 0)), vf_store(ws + 32 * b + 16, q8_kquant_min(blk, head));
        for (int R = 0; R < 8; R++) { /* quad row R: byte 4o + c is w(o, 4R + c) + 32 */
            vq v = q8_row(pt, qs, R);
            __m256i half[2] = {v.lo, v.hi}; /* outputs 0-7, 8-15 */
            for (int k = 0; k < 2; k++) {
                /* per 128-bit lane (4 outputs) the pairs (c = 0, 1) first, then (2, 3); then the lanes'
                 * first pairs together: pair 2R of 8 outputs, then pair 2R + 1 */
                __m256i p = _mm256_shuffle_epi8(half[k], _mm256_broadcastsi128_si256(_mm_setr_epi8(
                                                             0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15)));
                p = _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0));
                __m256i off = _mm256_set1_epi16((short)q8_offset(pt));
                int16_t *out = w16 + b * 512 + 32 * (2 * R) + 16 * k;
                _mm256_storeu_si256((__m256i *)out, _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(p)), off));
                _mm256_storeu_si256((__m256i *)(out + 32),
                                    _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(p, 1)), off));
            }
        }
    }
    return w16;
}

/* Rows m0 .. m0+rows of one group of 16 Q6_K outputs (five: Q5_K's) on limb_six_unpack's weights:
 * each half's (Q5_K: block's) wide sums, then the sequence at the top (as limb_bytes_rows). */
static inline __attribute__((always_inline)) void limb_six_rows(int five, const int16_t *w16, int64_t nb,
                                                                const limb_rows *xr, int planes, int64_t m0, int rows,
                                                                vf *acc) {
    int vr = rows * planes, halves = five ? 1 : 2, steps = 16 / halves;
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    const float *wsb = (const float *)(w16 + nb * 512);
    for (int64_t b = 0; b < nb; b++) {
        const int16_t *wb = w16 + b * 512, *xp[LIMB_SIX_VR];
        for (int u = 0; u < vr; u++) xp[u] = xr->wide + (((m0 + u / planes) * nb + b) * planes + u % planes) * 32;
#pragma GCC unroll 2
        for (int h = 0; h < halves; h++) {
            __m256i s[LIMB_SIX_VR][2];
#pragma GCC unroll 16
            for (int j = steps * h; j < steps * h + steps; j++) {
                __m256i wl = _mm256_loadu_si256((const __m256i *)(wb + 32 * j));
                __m256i wh = _mm256_loadu_si256((const __m256i *)(wb + 32 * j + 16));
                __asm__("" : "+x"(wl), "+x"(wh)); /* loaded once, not once a row and plane: measured faster */
                for (int u = 0; u < vr; u++) {
                    int32_t x2;
                    memcpy(&x2, xp[u] + 2 * j, 4);
                    __m256i xv = _mm256_set1_epi32(x2);
                    if (j == steps * h) { /* the chains start at the first products */
                        s[u][0] = _mm256_madd_epi16(wl, xv), s[u][1] = _mm256_madd_epi16(wh, xv);
                    } else {
                        s[u][0] = limb_six_madd(s[u][0], wl, xv);
                        s[u][1] = limb_six_madd(s[u][1], wh, xv);
                    }
                }
            }
            vf ws = vf_load(wsb + 32 * b + 16 * h);
            for (int i = 0; i < rows; i++) {
                __m256i (*S)[2] = s + i * planes;
                vf f = planes == 2 ? (vf){limb_wide_value(S[0][0], S[1][0]), limb_wide_value(S[0][1], S[1][1])}
                                   : (vf){_mm256_cvtepi32_ps(S[0][0]), _mm256_cvtepi32_ps(S[0][1])};
                acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i) * nb + b])), f, acc[i]);
            }
        }
        if (five) { /* q8_add_min's K-quant step, the min formed once a group (limb_six_unpack) */
            vf mn = vf_load(wsb + 32 * b + 16);
            for (int i = 0; i < rows; i++) acc[i] = vf_fma(mn, vf_set1(-xr->dsum[2 * ((m0 + i) * nb + b)]), acc[i]);
        }
    }
}

/* Group g's rows 0 .. M (pt: the group's packed type, see limb_six_unpack; WT_Q5_K: Q5_K's). */
static __attribute__((noinline)) void limb_six_group(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int pt,
                                                     const uint8_t *grp, int64_t g, int outs, int64_t N,
                                                     const float *bias, float *y) {
    const int16_t *w16 = limb_six_unpack(pt, grp, nb);
    if (!w16) return; /* out of memory: counted */
    int mr = pt == WT_Q5_K ? LIMB_FIVE_ROWS : LIMB_SIX_ROWS;
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[LIMB_FIVE_ROWS];
#define LIMB_SIX_CASE(F, P)                                                                                        \
    if (F && rows == 3) limb_six_rows(F, w16, nb, xr, P, m0, 3, acc);                                               \
    else if (rows == 2) limb_six_rows(F, w16, nb, xr, P, m0, 2, acc);                                               \
    else limb_six_rows(F, w16, nb, xr, P, m0, 1, acc);
        if (pt == WT_Q5_K) {
            if (limbs == 3) { LIMB_SIX_CASE(1, 2) }
            else { LIMB_SIX_CASE(1, 1) }
        } else if (limbs == 3) { LIMB_SIX_CASE(0, 2) } /* the two 12-bit planes */
        else { LIMB_SIX_CASE(0, 1) }
#undef LIMB_SIX_CASE
        q8_store_rows(acc, rows, m0, g, outs, bias, y, N);
    }
}
#define LIMB_VR 4
#if defined(Q8_INT16_SUMS)
#define LIMB_UNPACK_Q4_K 16 /* Q4_K's nibbles split once a group, not once a row tile (limb_bytes_rows) */
#endif
#else
static inline vi limb_low(vi s0, vi s1) {
    for (int o = 0; o < 16; o++) s0.l[o] += s1.l[o] * 256;
    return s0;
}
static inline vf limb_value3(vi s0, vi s1, vi s2) {
    float f[16];
    for (int o = 0; o < 16; o++) f[o] = (float)((double)s2.l[o] * 65536.0 + (double)(s1.l[o] * 256 + s0.l[o]));
    return vf_load(f);
}
#define LIMB_VR 4
#endif

#if !defined(STRATA_TARGET_AVX512) /* f[i] for the rows of a tile (s: rows x 3 limbs), a row at a time */
static inline void limb_values3(const vi *s, int rows, vf *f) {
    for (int i = 0; i < rows; i++) f[i] = limb_value3(s[3 * i], s[3 * i + 1], s[3 * i + 2]);
}
#endif

#ifndef LIMB_WIDE /* targets whose vi_dot4 takes Q8_0's bytes (up to 255) times a limb into int32 */
#define LIMB_WIDE 0
#endif

#ifndef LIMB_UNPACK_Q6_K /* elsewhere UNPACK_ROWS's rule alone */
#define LIMB_UNPACK_Q6_K 0
#endif
#ifndef LIMB_UNPACK_Q4_K /* elsewhere never (not measured to pay) */
#define LIMB_UNPACK_Q4_K INT64_MAX
#endif
#ifndef LIMB_VR_LARGE
#define LIMB_VR_LARGE LIMB_VR
#endif

/* Rows a tile of `limbs`-limb activations takes: a speed choice only (each row's sums are its own). */
static inline int limb_tile_rows(int t, int limbs) {
#if LIMB_WIDE
    if (wtype_code(t) == WT_Q8_0) return LIMB_WIDE_VR / limb_wide_planes(limbs);
#endif
    int bytes = q8_bytes(t);
    int large = q8_nibbles(t) || q8_two(t) || (bytes && LIMB_VR_LARGE > LIMB_VR);
    int vr = large ? LIMB_VR_LARGE : q8_five(t) || bytes ? (LIMB_VR > 4 ? 6 : 3) : LIMB_VR;
    int rows = vr / limbs;
    return rows < 1 ? 1 : rows > LIMB_ROWS ? LIMB_ROWS : rows;
}

/* Where a step's products go: on targets whose step sums into int32 at once (vh is vi), straight
 * into the block's sums; on AVX2 into int16 partial sums (two chains), widened into them after. */
#ifdef Q8_INT16_SUMS
#define LIMB_P p
#define LIMB_P2 p2
#else
#define LIMB_P s
#define LIMB_P2 s
#endif

/* Virtual row u's plane: limb u % limbs of row u / limbs, from the row's pointer. */
static inline const int8_t *limb_plane(const int8_t *const *xq, int u, int limbs) { return xq[u / limbs] + 32 * (u % limbs); }

/* Block b of a group for the rows m0 .. m0+rows: its bytes (returned), its super-block's head (K-quants,
 * where kq), each row's limb pointer (its limbs 32 bytes apart: one pointer, constant offsets) and
 * offset starts; the weights ahead of it asked for. Every tile's per-block setup. */
static inline __attribute__((always_inline)) const uint8_t *limb_block(int t, int kq, const uint8_t *grp, int64_t b, int64_t nb,
                                                                       const limb_rows *xr, int limbs, int64_t m0, int rows,
                                                                       const float **head, const int8_t **xq,
                                                                       const int32_t **start) {
    const uint8_t *blk = grp + q8_block_at(t, b);
    *head = kq ? (const float *)(blk - (b & 7) * q8_block_bytes(t) - q8_super_bytes(t)) : NULL;
    limb_prefetch(t, blk);
    for (int i = 0; i < rows; i++) {
        int64_t at = ((m0 + i) * nb + b) * limbs;
        xq[i] = xr->q + at * 32, start[i] = xr->start + at * 2;
    }
    return blk;
}

#if defined(STRATA_TARGET_AVX2)
/* ---- AVX2, one row of Q5_K, Q5_0, Q5_1, Q2_K and (not AVX-VNNI) Q6_K -------------------------
 * limb_group_rows's one-row tile held each limb's int16 chains for all 16 outputs at once: Q5's two
 * chains (4 steps each, q8.h's bound), Q6_K's two a half (2 steps each) and its three limbs gave 12
 * registers of sums besides the weights, their masks and the plane of high bits, and GCC spilled
 * (objdump: a third of the loop's instructions were stack moves). Here each block is taken 8 outputs
 * (one 256-bit half of a quad row) at a time, the same chains 6 registers, nothing spilled. The
 * chains end as the block's exact sums (vpmaddwd by 1, and by 256 for limb 1):
 *     L = S_0 + 256 S_1 (+ the starts' share, start_0 + 256 start_1), S_2 (+ start_2)
 * |S_j| <= 32 * 63 * 128 before the starts, so L is exact in int32; then limb_value3's combine of
 * S_2 and L (int32 where |S_2| < 2^14, else double; Q2_K, |S_2| <= 16 * 3 * 128, always int32: no
 * test) gives the correctly rounded float of the exact S and the sequence at the top its fmas in
 * order: the same bits as limb_group_rows. Q2_K's chains run a half's 4 steps (4 * 2 * 3 * 128).
 * AVX-VNNI takes the same tiles with vpdpbusd's int32 chains, two a limb (L = S_0 + (S_1 << 8)).
 * Zen 5, 1 thread, weights from memory (bench_kgrid.py --builds, with LIMB_AHEAD): AVX2 one row
 * Q5_K 1.35-2.0 times limb_group_rows's tile, Q5_0 1.4, Q2_K 1.15. */
#define LIMB_ROW8 1
#ifndef ROW8_VNNI
#if defined(STRATA_AVX_VNNI) /* vpdpbusd: int32 chains, two a limb (its latency overlapped) */
#define ROW8_VNNI 1
#else
#define ROW8_VNNI 0
#endif
#endif
#define ROW8_Q6_K (!ROW8_VNNI) /* Q6_K's one-row tiles too (see limb_group_rows) */

/* p + the pair sums of the unsigned bytes w times x's 4 bytes broadcast: one int16 chain */
static inline __attribute__((always_inline)) __m256i row8_dot(__m256i p, __m256i w, const int8_t *x, int off) {
    /* x[off] broadcast where used, from the row's one pointer and a constant offset: left to GCC, the
     * two halves' shared broadcasts waited on the stack, and a pointer each spilled */
    __m256i xv;
    __asm__ volatile("vpbroadcastd %1, %0" : "=x"(xv) : "m"(*(const int32_t *)(x + off)));
#if ROW8_VNNI
    p = _mm256_dpbusd_avx_epi32(p, w, xv);
#else
    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w, xv));
#endif
    __asm__("" : "+x"(p)); /* one chain in a register (as vh_dot4) */
    return p;
}

/* Quad row R's bytes (q8_row) for outputs 8k .. 8k + 7 */
static inline __m256i row8_weights(int t, const uint8_t *qs, int R, int k) {
    __m256i m15 = _mm256_set1_epi8(15);
    if (q8_two(t))
        return _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(qs + 64 * (R >> 2) + 32 * k)), 2 * (R & 3)),
                                _mm256_set1_epi8(3));
    __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 64 * (R & 3) + 32 * k));
    __m256i nib = R >> 2 ? _mm256_and_si256(_mm256_srli_epi16(v, 4), m15) : _mm256_and_si256(v, m15);
    if (t == WT_Q6_K) return bits_8(nib, _mm256_loadu_si256((const __m256i *)(qs + 256 + 64 * (R >> 2) + 32 * k)), 4 - 2 * (R & 3), 0x30);
    return bits_8(nib, _mm256_loadu_si256((const __m256i *)(qs + 256 + 32 * k)), 4 - (R & 3) - 4 * (R >> 2), 0x10);
}

static inline __attribute__((always_inline)) void limb_row8(int t, const uint8_t *grp, int64_t nb, const limb_rows *xr,
                                                            int limbs, int64_t m0, vf *acc) {
    int halves = q8_halves(t), per = 8 / halves, chain = ROW8_VNNI || t == WT_Q6_K ? 2 : 4;
    __m256i one = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);
    acc[0] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const float *head;
        const int8_t *xq[1];
        const int32_t *start[1];
        const uint8_t *blk = limb_block(t, q8_kquant(t), grp, b, nb, xr, limbs, m0, 1, &head, xq, start), *qs = q8_quants(t, blk);
        float sb = xr->s[m0 * nb + b];
#pragma GCC unroll 2
        for (int h = 0; h < halves; h++) {
            __m256 f[2];
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++) {
                __m256i p[3][2];
                for (int j = 0; j < limbs; j++) p[j][0] = p[j][1] = _mm256_setzero_si256();
                if (q8_five(t)) { /* rows r (chain 0) and r + 4 (chain 1) from one load */
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++) {
                        __m256i lo = row8_weights(t, qs, r, k), hi = row8_weights(t, qs, r + 4, k);
                        for (int j = 0; j < limbs; j++) {
                            p[j][0] = row8_dot(p[j][0], lo, xq[0], 32 * j + 4 * r);
                            p[j][1] = row8_dot(p[j][1], hi, xq[0], 32 * j + 16 + 4 * r);
                        }
                    }
                } else {
#pragma GCC unroll 4
                    for (int i = 0; i < per; i++) {
                        int R = per * h + i, c = i / chain;
                        __m256i w = row8_weights(t, qs, R, k);
                        for (int j = 0; j < limbs; j++) p[j][c] = row8_dot(p[j][c], w, xq[0], 32 * j + 4 * R);
                    }
                }
                int chains = per / chain;
                __m256i L;
                if (ROW8_VNNI) { /* int32 sums: S_0 + 256 S_1 by a shift */
                    for (int j = 0; j < limbs; j++) p[j][0] = _mm256_add_epi32(p[j][0], p[j][1]);
                    L = _mm256_add_epi32(p[0][0], _mm256_slli_epi32(p[1][0], 8));
                } else {
                    L = _mm256_add_epi32(_mm256_madd_epi16(p[0][0], one), _mm256_madd_epi16(p[1][0], k256));
                    if (chains == 2)
                        L = _mm256_add_epi32(L, _mm256_add_epi32(_mm256_madd_epi16(p[0][1], one), _mm256_madd_epi16(p[1][1], k256)));
                }
                if (q8_offset(t)) L = _mm256_add_epi32(L, _mm256_set1_epi32(start[0][h] + 256 * start[0][2 + h]));
                if (limbs == 2) {
                    f[k] = _mm256_cvtepi32_ps(L);
                    continue;
                }
                __m256i S2 = ROW8_VNNI ? p[2][0] : _mm256_madd_epi16(p[2][0], one);
                if (chains == 2 && !ROW8_VNNI) S2 = _mm256_add_epi32(S2, _mm256_madd_epi16(p[2][1], one));
                if (q8_offset(t)) S2 = _mm256_add_epi32(S2, _mm256_set1_epi32(start[0][4 + h]));
                f[k] = q8_two(t) ? _mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_slli_epi32(S2, 16), L)) : limb_f8_any(S2, L);
            }
            acc[0] = vf_fma(vf_mul(q8_scale(t, blk, head, h), vf_set1(sb)), (vf){f[0], f[1]}, acc[0]);
        }
        q8_add_min(t, blk, head, xr->dsum + 2 * (m0 * nb + b), 2 * nb, 1, acc);
    }
}
/* limb_row8 for type t, out of line: inlined into limb_group, its code changed how GCC compiled the
 * other tiles there (AVX-VNNI: Q4_K's one-row tile 0.8 times as fast). */
static __attribute__((noinline)) void limb_row8_tile(int t, const uint8_t *grp, int64_t nb, const limb_rows *xr, int limbs,
                                                     int64_t m0, vf *acc) {
#define ROW8_CASE(T)                                                                                                   \
    case T:                                                                                                            \
        if (limbs == 3) limb_row8(T, grp, nb, xr, 3, m0, acc);                                                         \
        else limb_row8(T, grp, nb, xr, 2, m0, acc);                                                                    \
        break;
    switch (t) {
        ROW8_CASE(WT_Q5_0)
        ROW8_CASE(WT_Q5_0 | WT_HALF_SCALES)
        ROW8_CASE(WT_Q5_1)
        ROW8_CASE(WT_Q5_1 | WT_HALF_SCALES)
        ROW8_CASE(WT_Q5_K)
        ROW8_CASE(WT_Q2_K)
#if ROW8_Q6_K
        ROW8_CASE(WT_Q6_K)
#endif
    }
#undef ROW8_CASE
}
#else
#define LIMB_ROW8 0
#endif

/* Rows m0 .. m0+rows of one group of 16 outputs: the integer steps of q8_group_rows over each
 * row's limb planes ("virtual rows"), from sums that start at the offset's share (xr->start),
 * then the sequence at the top. */
static inline __attribute__((always_inline)) void limb_group_rows(int t, const uint8_t *grp, int64_t nb, const limb_rows *xr,
                                                                  int limbs, int64_t m0, int rows, vf *acc) {
#if LIMB_ROW8
    /* AVX2's one-row tiles of these: limb_row8_tile (Q6_K: 1.35 times this tile at one row, 1.5-1.7 at
     * 2-4; AVX-VNNI's Q6_K, measured 0.90 times when inlined, kept here: ROW8_Q6_K). */
    if (rows == 1 && (q8_five(t) || (t == WT_Q6_K && ROW8_Q6_K) || q8_two(t))) {
        limb_row8_tile(t, grp, nb, xr, limbs, m0, acc);
        return;
    }
#endif
    int halves = q8_halves(t), kq = q8_kquant(t);
    int vr = rows * limbs;
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const float *head;
        const int8_t *xq[LIMB_ROWS];
        const int32_t *start[LIMB_ROWS];
        const uint8_t *blk = limb_block(t, kq, grp, b, nb, xr, limbs, m0, rows, &head, xq, start), *qs = q8_quants(t, blk);
        for (int h = 0; h < halves; h++) {
            vi s[3 * LIMB_ROWS];
            vh p[3 * LIMB_ROWS], p2[3 * LIMB_ROWS];
            for (int u = 0; u < vr; u++) {
                s[u] = q8_offset(t) ? vi_set1(start[u / limbs][2 * (u % limbs) + h]) : vi_zero();
                p[u] = vh_zero(), p2[u] = vh_zero();
            }
            if (q8_nibbles(t) || q8_five(t)) { /* as q8: quads r and r + 4 from one load */
                vq plane = vq_load(qs + (q8_five(t) ? 256 : 0));
#pragma GCC unroll 8
                for (int r = 0; r < 4; r++) {
                    vq v = vq_load(qs + r * 64), lo = vq_lo(v), hi = vq_hi(v);
                    if (q8_five(t)) lo = q8_high(t, lo, plane, r), hi = q8_high(t, hi, plane, r + 4);
                    for (int u = 0; u < vr; u++) {
                        LIMB_P[u] = vh_dot4(LIMB_P[u], lo, limb_plane(xq, u, limbs) + 4 * r);
                        const int8_t *x_hi = limb_plane(xq, u, limbs) + 16 + 4 * r;
                        if (Q8_NIBBLE_CHAINS == 1 && q8_nibbles(t)) LIMB_P[u] = vh_dot4(LIMB_P[u], hi, x_hi);
                        else LIMB_P2[u] = vh_dot4(LIMB_P2[u], hi, x_hi);
                    }
                }
            } else if (wtype_code(t) == WT_Q8_0) { /* bytes up to 255: the step that sums into int32 at once (not AVX2's) */
#pragma GCC unroll 8
                for (int r = 0; r < 8; r++) {
                    vq v = q8_row(t, qs, r);
                    for (int u = 0; u < vr; u++) s[u] = vi_dot4(s[u], v, limb_plane(xq, u, limbs) + 4 * r);
                }
            } else { /* quad rows in pairs (Q6_K: half h's four) */
                int r0 = halves == 2 ? 4 * h : 0, r1 = halves == 2 ? 4 * h + 4 : 8;
#pragma GCC unroll 8 /* whole: the accumulators stay put, no copies between iterations */
                for (int r = r0; r < r1; r += 2) {
                    vq v = q8_row(t, qs, r), v2 = q8_row(t, qs, r + 1);
                    for (int u = 0; u < vr; u++) {
                        LIMB_P[u] = vh_dot4(LIMB_P[u], v, limb_plane(xq, u, limbs) + 4 * r);
                        LIMB_P2[u] = vh_dot4(LIMB_P2[u], v2, limb_plane(xq, u, limbs) + 4 * r + 4);
                    }
#ifdef Q8_INT16_SUMS
                    if (q8_int16_steps(t) == 1) /* the IQ2 bytes: each step widened before the next */
                        for (int u = 0; u < vr; u++) s[u] = vi_add_vh(vi_add_vh(s[u], p[u]), p2[u]), p[u] = p2[u] = vh_zero();
#endif
                }
            }
#ifdef Q8_INT16_SUMS
            for (int u = 0; u < vr; u++)
                s[u] = q8_nibbles(t) ? vi_add_vh(s[u], vh_add(p[u], p2[u])) : vi_add_vh(vi_add_vh(s[u], p[u]), p2[u]);
#endif
            vf ws = q8_scale(t, blk, head, h);
            vf f[LIMB_ROWS];
            if (limbs == 3) limb_values3(s, rows, f);
            else
                for (int i = 0; i < rows; i++) f[i] = vf_from_vi(limb_low(s[2 * i], s[2 * i + 1]));
            for (int i = 0; i < rows; i++) acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i) * nb + b])), f[i], acc[i]);
        }
        q8_add_min(t, blk, head, xr->dsum + 2 * (m0 * nb + b), 2 * nb, rows, acc);
    }
}
#undef LIMB_P
#undef LIMB_P2

/* ---- AVX2, the K-quants' bytes for many rows -------------------------------------------------
 * A call of many rows unpacks Q5_K and Q6_K groups (and here Q4_K's, as Q5_K's bytes) to a byte a
 * weight. limb_group_rows takes them one row a tile in two interleaved int16 chains a limb (q8.h's
 * bounds: 4 steps of Q5_K's bytes, 2 of Q6_K's); here the chains run one after the other, each
 * widened into the int32 sums before the next starts. Q4_K's bytes (at most 15) take one chain of
 * all 8 steps (at most 8 * 2 * 15 * 128 = 30,720), as its nibbles do, and a tile of
 * LIMB_BYTES_ROWS rows, each weight register serving both; Q5_K and Q6_K keep one row a tile (two
 * spill their int32 sums: measured no faster). Where LIMB_WIDE (on these same builds), a call of many rows takes Q6_K
 * and Q5_K by int16 steps instead (limb_six_group); here then Q4_K's bytes and the K-grid types' bytes for few
 * rows (Q5_K's chains of 4 only where LIMB_WIDE is off). The integer sums are the same exact S_j and the
 * float sequence is limb_group_rows's: the same bits (bench/avx2_prefill_bound.py: the speed). */
#if defined(STRATA_TARGET_AVX2) && defined(Q8_INT16_SUMS)
#define LIMB_BYTES 1
#define LIMB_BYTES_ROWS 2

/* Q4_K's bytes (w in [0, 15], no offset) on three limbs, from each limb's int16 chain of all 8
 * steps (p_j, per output two lanes of at most 16 * 15 * 128 = 30,720): S_j = the pair sums of p_j
 * (vpmaddwd by 1), |S_j| <= 32 * 15 * 128 = 61,440. Then L = S_0 + 256 S_1 (vpmaddwd by 256 gives
 * 256 S_1 at once) has |L| <= 257 * 61,440 = 15,790,080 < 2^24, so (float)L and (float)S_2 are
 * exact, as is S_2 * 65536, and one fma rounds the exact S = S_2 * 65536 + L once: the correctly
 * rounded float that limb_value3's int32 or double combine gives, without its shifts, test and
 * branch (Q5_K's bytes, up to 31, allow |L| up to 2^25: they keep limb_value3). */
static inline vf limb_nibble_value(vh p0, vh p1, vh p2) {
    __m256i one = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);
    __m256 big = _mm256_set1_ps(65536.0f);
    __m256i lo = _mm256_add_epi32(_mm256_madd_epi16(p0.lo, one), _mm256_madd_epi16(p1.lo, k256));
    __m256i hi = _mm256_add_epi32(_mm256_madd_epi16(p0.hi, one), _mm256_madd_epi16(p1.hi, k256));
    return (vf){_mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p2.lo, one)), big, _mm256_cvtepi32_ps(lo)),
                _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p2.hi, one)), big, _mm256_cvtepi32_ps(hi))};
}

static inline __attribute__((always_inline)) void limb_bytes_rows(int t, int chain, const uint8_t *grp, int64_t nb,
                                                                  const float *wsm, const limb_rows *xr, int limbs,
                                                                  int64_t m0, int rows, vf *acc) {
    int halves = q8_halves(t), vr = rows * limbs, steps = 8 / halves;
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const float *head;
        const int8_t *xq[LIMB_ROWS];
        const int32_t *start[LIMB_ROWS];
        const uint8_t *blk = limb_block(t, 1, grp, b, nb, xr, limbs, m0, rows, &head, xq, start), *qs = q8_quants(t, blk);
        if (chain == 8 && limbs == 3) { /* Q4_K's bytes, one chain of all 8 steps: limb_nibble_value */
            vh p[3 * LIMB_ROWS];
            for (int u = 0; u < vr; u++) p[u] = vh_zero();
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                vq v = vq_load(qs + 64 * r);
                for (int u = 0; u < vr; u++) p[u] = vh_dot4(p[u], v, limb_plane(xq, u, limbs) + 4 * r);
            }
            vf ws = vf_load(wsm + 32 * b), mn = vf_load(wsm + 32 * b + 16); /* limb_nibble_scales' */
            for (int i = 0; i < rows; i++) {
                vf f = limb_nibble_value(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
                acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i) * nb + b])), f, acc[i]);
            }
            for (int i = 0; i < rows; i++) /* q8_add_min's K-quant step on the same product */
                acc[i] = vf_fma(mn, vf_set1(-xr->dsum[2 * ((m0 + i) * nb + b)]), acc[i]);
            continue;
        }
        for (int h = 0; h < halves; h++) {
            vi s[3 * LIMB_ROWS];
            for (int u = 0; u < vr; u++) s[u] = q8_offset(t) ? vi_set1(start[u / limbs][2 * (u % limbs) + h]) : vi_zero();
#pragma GCC unroll 4
            for (int c = steps * h; c < steps * h + steps; c += chain) {
                vh p[3 * LIMB_ROWS];
                for (int u = 0; u < vr; u++) p[u] = vh_zero();
#pragma GCC unroll 8
                for (int r = c; r < c + chain; r++) {
                    vq v = vq_load(qs + 64 * r);
                    for (int u = 0; u < vr; u++) p[u] = vh_dot4(p[u], v, limb_plane(xq, u, limbs) + 4 * r);
                }
                for (int u = 0; u < vr; u++) s[u] = vi_add_vh(s[u], p[u]);
            }
            vf ws = q8_scale(t, blk, head, h), f[LIMB_ROWS];
            if (limbs == 3) limb_values3(s, rows, f);
            else
                for (int i = 0; i < rows; i++) f[i] = vf_from_vi(limb_low(s[2 * i], s[2 * i + 1]));
            for (int i = 0; i < rows; i++) acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i) * nb + b])), f[i], acc[i]);
        }
        q8_add_min(t, blk, head, xr->dsum + 2 * (m0 * nb + b), 2 * nb, rows, acc);
    }
}

/* One tile of byte type t (a constant) with constant chain, limbs and rows. */
static inline __attribute__((always_inline)) void limb_bytes_tile(int t, int chain, const uint8_t *grp, int64_t nb,
                                                                  const float *wsm, const limb_rows *xr, int limbs,
                                                                  int64_t m0, int rows, vf *acc) {
    if (limbs == 3) {
        if (rows == 2) limb_bytes_rows(t, chain, grp, nb, wsm, xr, 3, m0, 2, acc);
        else limb_bytes_rows(t, chain, grp, nb, wsm, xr, 3, m0, 1, acc);
    } else {
        if (rows == 2) limb_bytes_rows(t, chain, grp, nb, wsm, xr, 2, m0, 2, acc);
        else limb_bytes_rows(t, chain, grp, nb, wsm, xr, 2, m0, 1, acc);
    }
}

/* Q4_K's unpacked group (as Q5_K's bytes): per block its scale d * sc (q8_scale) and min
 * dmin * m (q8_add_min's), 16 floats each, formed once a group instead of once a row tile: the
 * same fp32 products, so the same bits. In the calling thread's scratch (SCRATCH_LOOKUP, which
 * only the expanded types use). */
static const float *limb_nibble_scales(const uint8_t *grp, int64_t nb) {
    float *wsm = (float *)scratch(SCRATCH_LOOKUP, (size_t)nb * 128);
    if (!wsm) return NULL; /* out of memory: counted */
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(WT_Q5_K_BYTES, b);
        const float *head = (const float *)(blk - (b & 7) * q8_block_bytes(WT_Q5_K_BYTES) - q8_super_bytes(WT_Q5_K_BYTES));
        vf_store(wsm + 32 * b, q8_scale(WT_Q5_K_BYTES, blk, head, 0));
        vf_store(wsm + 32 * b + 16, q8_kquant_min(blk, head));
    }
    return wsm;
}

/* Group g's rows 0 .. M on its unpacked bytes (t: Q5_K's, also Q4_K's, or Q6_K's); a function of its
 * own, so that limb_group's other tiles compile as they did. */
static __attribute__((noinline)) void limb_bytes_group(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype,
                                                       int t, const uint8_t *grp, int64_t g, int outs, int64_t N,
                                                       const float *bias, float *y) {
    int mr = wtype == WT_Q4_K ? LIMB_BYTES_ROWS : 1;
    const float *wsm = NULL;
    if (wtype == WT_Q4_K && limbs == 3 && !(wsm = limb_nibble_scales(grp, nb))) return; /* out of memory: counted */
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[LIMB_ROWS];
        if (t == WT_Q6_K_BYTES) limb_bytes_tile(WT_Q6_K_BYTES, 2, grp, nb, NULL, xr, limbs, m0, rows, acc);
        else if (wtype == WT_Q4_K) limb_bytes_tile(WT_Q5_K_BYTES, 8, grp, nb, wsm, xr, limbs, m0, rows, acc);
        else limb_bytes_tile(WT_Q5_K_BYTES, 4, grp, nb, NULL, xr, limbs, m0, rows, acc);
        q8_store_rows(acc, rows, m0, g, outs, bias, y, N);
    }
}
#else
#define LIMB_BYTES 0
#endif

/* One row tile with constant limbs and rows: the compiler keeps the tile in registers. */
static inline __attribute__((always_inline)) void limb_tile(int t, const uint8_t *grp, int64_t nb, const limb_rows *xr,
                                                            int limbs, int64_t m0, int rows, vf *acc) {
    if (limbs == 3) {
        switch (rows) {
        case 1: limb_group_rows(t, grp, nb, xr, 3, m0, 1, acc); break;
#if LIMB_VR >= 6
        case 2: limb_group_rows(t, grp, nb, xr, 3, m0, 2, acc); break;
#endif
#if LIMB_VR_LARGE >= 9
        case 3: limb_group_rows(t, grp, nb, xr, 3, m0, 3, acc); break;
#endif
#if LIMB_VR_LARGE >= 12
        case 4: limb_group_rows(t, grp, nb, xr, 3, m0, 4, acc); break;
#endif
        }
    } else {
        switch (rows) {
        case 1: limb_group_rows(t, grp, nb, xr, 2, m0, 1, acc); break;
        case 2: limb_group_rows(t, grp, nb, xr, 2, m0, 2, acc); break;
#if LIMB_VR >= 6 || LIMB_VR_LARGE >= 6
        case 3: limb_group_rows(t, grp, nb, xr, 2, m0, 3, acc); break;
#endif
#if LIMB_VR >= 8 || LIMB_VR_LARGE >= 8
        case 4: limb_group_rows(t, grp, nb, xr, 2, m0, 4, acc); break;
#endif
        }
    }
}

#if defined(STRATA_TARGET_AVX512) || defined(STRATA_TARGET_AVX2)
/* ---- x86, the codebook types as held (IQ4_NL, MXFP4, IQ4_XS) ----------------------------------
 * Their 4-bit indices lie as Q4_0's nibbles (q8.h); instead of lookup_group's Q8_0 bytes written
 * to scratch every call and read back, each tile maps its nibbles through the codebook with byte
 * shuffles (vpshufb, the 16-byte table in every 128-bit lane) and forms each block's 16 fp32 scales
 * as lookup_blocks does (IQ4_NL's fp16 d, MXFP4's 2^(E - 128) by its bits, IQ4_XS's d * (ls - 32)
 * from its super-block's fields, a vector at a time). AVX-512 and AVX-VNNI feed the bytes
 * codebook + 128 to Q8_0's vpdpbusd steps from the same starts (offset 128); AVX2 feeds the signed
 * values, widened to int16, to Q8_0's vpmaddwd steps on the wide limbs (limb_wide_rows), and for
 * many rows looks a group up once to those int16s (as limb_wide_unpack); AVX-512 from 12 rows
 * (LIMB_PAIR_CB_ROWS) looks each group up once to Q8_0's bytes for limb_pair_bytes's tiles. Either way each output's
 * exact integer sums and float sequence are the expanded Q8_0 group's: the same bits. The
 * fp32-scale layout (the device's, transcode.codebook_blocks) and the other targets keep
 * expand_group. */

/* Block b's 16 scales (cb: the held type, its packed layout): f16 d, e8m0 E, or IQ4_XS's fields at its
 * super-block's head, each the fp32 value lookup_blocks stores. */
static inline vf limb_cb_scale(int cb, const uint8_t *blk, int64_t b) {
    if (cb == (WT_IQ4_NL | WT_HALF_SCALES)) return vf_from_f16(blk);
    const uint8_t *head = blk - (b & 7) * 256 - 128; /* IQ4_XS: d f16[16], scales_h u16[16], scales_l u32[16] */
    __m128i j4 = _mm_cvtsi32_si128(4 * (int)(b & 7)), j2 = _mm_cvtsi32_si128(2 * (int)(b & 7));
#if defined(STRATA_TARGET_AVX512)
    if (cb == (WT_MXFP4 | WT_HALF_SCALES)) { /* e8m0_half_at: E < 2 0x00200000 << E, else (E - 1) << 23 */
        __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)blk));
        __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        __mmask16 sub = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        return (vf){_mm512_castsi512_ps(_mm512_mask_blend_epi32(sub, big, small))};
    }
    __m512i l = _mm512_and_si512(_mm512_srl_epi32(_mm512_loadu_si512((const void *)(head + 64)), j4), _mm512_set1_epi32(15));
    __m512i h = _mm512_srl_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(head + 32))), j2);
    __m512i ls = _mm512_or_si512(l, _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(3)), 4));
    /* the fp16 d exactly, ls - 32 exactly as a float: iq4_xs_scale's product */
    return vf_mul(vf_from_f16(head), (vf){_mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32)))});
#else
    __m256 f[2];
    for (int k = 0; k < 2; k++) { /* outputs 8k .. 8k + 7 */
        if (cb == (WT_MXFP4 | WT_HALF_SCALES)) {
            __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 8 * k)));
            __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
            __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
            f[k] = _mm256_castsi256_ps(_mm256_blendv_epi8(big, small, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
        } else {
            __m256i l = _mm256_srl_epi32(_mm256_loadu_si256((const __m256i *)(head + 64 + 32 * k)), j4);
            __m256i h = _mm256_srl_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(head + 32 + 16 * k))), j2);
            __m256i ls = _mm256_or_si256(_mm256_and_si256(l, _mm256_set1_epi32(15)),
                                         _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(3)), 4));
            f[k] = _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32)));
        }
    }
    if (cb == (WT_MXFP4 | WT_HALF_SCALES)) return (vf){f[0], f[1]};
    return vf_mul(vf_from_f16(head), (vf){f[0], f[1]});
#endif
}

/* The codebook's 16 bytes plus `add` (128: the unsigned Q8_0 bytes; 0: the signed values). */
static inline __m128i limb_cb_table(int wtype, int add) {
    uint8_t bytes[16];
    for (int i = 0; i < 16; i++) bytes[i] = (uint8_t)(codebook_of(wtype)[i] + add);
    return _mm_loadu_si128((const __m128i *)bytes);
}

#if !LIMB_WIDE /* AVX-512, AVX-VNNI: vpdpbusd takes the bytes codebook + 128 */
#if defined(STRATA_TARGET_AVX512)
#define LIMB_CB_ROWS 4 /* rows a tile (3 limbs: 12 chains, as the nibble types') */
static inline vq limb_cb_lut(__m128i table, vq nib) { return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(table), nib); }
#else
#define LIMB_CB_ROWS 2 /* 3 limbs: one row (LIMB_VR) */
static inline vq limb_cb_lut(__m128i table, vq nib) {
    __m256i t = _mm256_broadcastsi128_si256(table);
    return (vq){_mm256_shuffle_epi8(t, nib.lo), _mm256_shuffle_epi8(t, nib.hi)};
}
#endif

/* Rows m0 .. m0+rows of one held codebook group (cb, a constant) with `limbs` limbs: Q8_0's steps on
 * the looked-up bytes (see above), then its float sequence (limb_group_rows's). */
static inline __attribute__((always_inline)) void limb_cb_rows(int cb, __m128i table, const uint8_t *grp, const float *ws16,
                                                               int64_t nb, const limb_rows *xr, int limbs, int64_t m0,
                                                               int rows, vf *acc) {
    int vr = rows * limbs;
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const float *head;
        const int8_t *xq[LIMB_ROWS];
        const int32_t *start[LIMB_ROWS];
        const uint8_t *blk = limb_block(cb, 0, grp, b, nb, xr, limbs, m0, rows, &head, xq, start), *qs = q8_quants(cb, blk);
        vi s[3 * LIMB_ROWS];
        for (int u = 0; u < vr; u++) /* limb 1's start is in limb 0's where LIMB_FOLD_START */
            s[u] = LIMB_FOLD_START && u % limbs == 1 ? vi_zero() : vi_set1(start[u / limbs][2 * (u % limbs)]);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) { /* quad rows r (low nibbles) and r + 4 (high) */
            vq v = vq_load(qs + 64 * r), lo = limb_cb_lut(table, vq_lo(v)), hi = limb_cb_lut(table, vq_hi(v));
            for (int u = 0; u < vr; u++) {
                s[u] = vi_dot4(s[u], lo, limb_plane(xq, u, limbs) + 4 * r);
                s[u] = vi_dot4(s[u], hi, limb_plane(xq, u, limbs) + 16 + 4 * r);
            }
        }
        vf ws = ws16 ? vf_load(ws16 + 16 * b) : limb_cb_scale(cb, blk, b), f[LIMB_ROWS];
        if (limbs == 3) limb_values3(s, rows, f);
        else
            for (int i = 0; i < rows; i++) f[i] = vf_from_vi(limb_low(s[2 * i], s[2 * i + 1]));
        for (int i = 0; i < rows; i++) acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i) * nb + b])), f[i], acc[i]);
    }
}

/* A held codebook type's group g, rows 0 .. M, without expand_group; out of line (limb_group's
 * other tiles compile as before). */
static __attribute__((noinline)) void limb_cb_group(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype,
                                                    const uint8_t *grp, int64_t g, int outs, int64_t N,
                                                    const float *bias, float *y) {
    __m128i table = limb_cb_table(wtype, 128);
    float *ws16 = NULL;
    if (M * limbs >= UNPACK_ROWS) { /* many rows: the scales formed once a group */
        if (!(ws16 = (float *)scratch(SCRATCH_UNPACK, (size_t)nb * 64))) return; /* out of memory: counted */
        for (int64_t b = 0; b < nb; b++) vf_store(ws16 + 16 * b, limb_cb_scale(wtype, grp + q8_block_at(wtype, b), b));
    }
    int mr = LIMB_CB_ROWS > LIMB_ROWS ? LIMB_ROWS : limbs == 3 && LIMB_VR < 6 ? 1 : LIMB_CB_ROWS;
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[LIMB_ROWS];
#define LIMB_CB(CB, L)                                                                                                 \
    switch (rows) {                                                                                                    \
    case 1: limb_cb_rows(CB, table, grp, ws16, nb, xr, L, m0, 1, acc); break;                                                \
    case 2: limb_cb_rows(CB, table, grp, ws16, nb, xr, L, m0, 2, acc); break;                                                \
    case 3: limb_cb_rows(CB, table, grp, ws16, nb, xr, L, m0, LIMB_CB_ROWS > 2 ? 3 : 1, acc); break;                         \
    default: limb_cb_rows(CB, table, grp, ws16, nb, xr, L, m0, LIMB_CB_ROWS > 2 ? 4 : 1, acc); break;                        \
    }
#else /* AVX2: the signed values widened to int16, Q8_0's wide steps */
/* Rows m0 .. m0+rows of one held codebook group with the wide limbs' `planes`: limb_wide_rows's sums
 * and float sequence, the weights looked up in registers, or (w16, ws16 not NULL) limb_cb_unpack's. */
static inline __attribute__((always_inline)) void limb_cb_rows(int cb, __m128i table, const uint8_t *grp,
                                                               const int16_t *w16, const float *ws16, int64_t nb,
                                                               const limb_rows *xr, int planes, int64_t m0, int rows,
                                                               vf *acc) {
    int vr = rows * planes;
    __m128i m15 = _mm_set1_epi8(15);
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(cb, b), *qs = q8_quants(cb, blk);
        if (!w16) limb_prefetch(cb, blk);
        const int16_t *xp[LIMB_WIDE_VR];
        __m256i s[LIMB_WIDE_VR][4];
        limb_wide_block_start(xr, planes, m0, vr, nb, b, xp, s);
        for (int r = 0; r < 4; r++) { /* quad rows r (low nibbles) and r + 4 (high) */
            __m256i xl[LIMB_WIDE_VR], xh[LIMB_WIDE_VR];
            for (int u = 0; u < vr; u++) xl[u] = limb_wide_x(xp[u] + 4 * r), xh[u] = limb_wide_x(xp[u] + 16 + 4 * r);
            for (int g = 0; g < 4; g++) { /* outputs 4g .. 4g + 3 */
                __m256i wl, wh;
                if (w16) {
                    wl = _mm256_loadu_si256((const __m256i *)(w16 + b * 512 + 64 * r + 16 * g));
                    wh = _mm256_loadu_si256((const __m256i *)(w16 + b * 512 + 64 * (r + 4) + 16 * g));
                } else {
                    __m128i v = _mm_loadu_si128((const __m128i *)(qs + 64 * r + 16 * g));
                    wl = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(v, m15)));
                    wh = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), m15)));
                }
                for (int u = 0; u < vr; u++) s[u][g] = limb_wide_madd(limb_wide_madd(s[u][g], wl, xl[u]), wh, xh[u]);
            }
        }
        limb_wide_block_end(s, ws16 ? vf_load(ws16 + 16 * b) : limb_cb_scale(cb, blk, b), xr, planes, m0, rows, nb, b, acc);
    }
}

/* A held codebook group looked up once for many rows: per block the signed values as int16 (quad
 * row R's 64 at 512 b + 64 R, limb_wide_unpack's order), then every block's 16 scales. */
static const int16_t *limb_cb_unpack(int cb, __m128i table, const uint8_t *grp, int64_t nb) {
    int16_t *w16 = (int16_t *)scratch(SCRATCH_UNPACK, (size_t)nb * (1024 + 64));
    if (!w16) return NULL; /* out of memory: counted */
    float *ws = (float *)(w16 + nb * 512);
    __m128i m15 = _mm_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = grp + q8_block_at(cb, b), *qs = q8_quants(cb, blk);
        vf_store(ws + 16 * b, limb_cb_scale(cb, blk, b));
        for (int i = 0; i < 16; i++) { /* quad row i / 4, outputs 4 (i % 4) .. + 3 */
            __m128i v = _mm_loadu_si128((const __m128i *)(qs + 16 * i));
            int16_t *out = w16 + b * 512 + 16 * i;
            _mm256_storeu_si256((__m256i *)out, _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(v, m15))));
            _mm256_storeu_si256((__m256i *)(out + 256),
                                _mm256_cvtepi8_epi16(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(v, 4), m15))));
        }
    }
    return w16;
}

/* A held codebook type's group g, rows 0 .. M, without expand_group (see limb_cb_rows). */
static __attribute__((noinline)) void limb_cb_group(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype,
                                                    const uint8_t *grp, int64_t g, int outs, int64_t N,
                                                    const float *bias, float *y) {
    __m128i table = limb_cb_table(wtype, 0);
    const int16_t *w16 = NULL;
    const float *ws16 = NULL;
    int planes = limb_wide_planes(limbs), mr = LIMB_WIDE_VR / planes;
    if (M > mr) { /* more than one tile: looked up once (as limb_wide_unpack; 4 rows: 1.2 times in each tile) */
        if (!(w16 = limb_cb_unpack(wtype, table, grp, nb))) return; /* out of memory: counted */
        ws16 = (const float *)(w16 + nb * 512);
    }
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[LIMB_ROWS];
#define LIMB_CB(CB, L)                                                                                                 \
    if (L == 3) limb_cb_rows(CB, table, grp, w16, ws16, nb, xr, 2, m0, 1, acc);                                       \
    else if (rows == 2) limb_cb_rows(CB, table, grp, w16, ws16, nb, xr, 1, m0, 2, acc);                               \
    else limb_cb_rows(CB, table, grp, w16, ws16, nb, xr, 1, m0, 1, acc);
#endif
#define LIMB_CB_LIMBS(CB)                                                                                              \
    if (limbs == 3) { LIMB_CB(CB, 3) }                                                                                 \
    else { LIMB_CB(CB, 2) }
        if (wtype == (WT_IQ4_NL | WT_HALF_SCALES)) { LIMB_CB_LIMBS(WT_IQ4_NL | WT_HALF_SCALES) }
        else if (wtype == (WT_MXFP4 | WT_HALF_SCALES)) { LIMB_CB_LIMBS(WT_MXFP4 | WT_HALF_SCALES) }
        else { LIMB_CB_LIMBS(WT_IQ4_XS | WT_HALF_SCALES) }
#undef LIMB_CB_LIMBS
#undef LIMB_CB
        q8_store_rows(acc, rows, m0, g, outs, bias, y, N);
    }
}
#define LIMB_CB_HELD(t) (wtype_codebook(t) && wtype_half(t)) /* held as the file stores it: limb_cb_group */
#endif

/* A K-grid or grid type's few rows, decoded a super-block (a block) at a time, where the target can
 * (grids.c's kgrid_limb_rows, grid_limb_rows; 0: it cannot, nothing written). Out of line: limb_group's other types compile as before. */
static __attribute__((noinline)) int limb_kgrid_few(const limb_rows *xr, int64_t M, int64_t nb, int wtype, const uint8_t *grp,
                                                    int64_t g, int outs, int64_t N, const float *bias, float *y) {
    float few[KGRID_ROWS * 16];
    int done = wtype_grid(wtype) ? grid_limb_rows(wtype, grp, nb, M, xr->q, xr->start, xr->s, few)
                                 : kgrid_limb_rows(wtype, grp, nb, M, xr->q, xr->start, xr->s, few);
    if (!done) return 0;
    for (int i = 0; i < M; i++) {
        vf v = vf_load(few + 16 * i);
        q8_store_rows(&v, 1, i, g, outs, bias, y, N);
    }
    return 1;
}

#if defined(STRATA_TARGET_AVX512)
/* Q6_K's rows m0 .. m0+rows (as stored; unpacked to bytes for many rows, there only a weight's
 * last group where its count is odd, the rest taking limb_pair_rows): limb_group_rows's
 * integer steps and float sequence (the same bits), both halves of a block in one unrolled pass,
 * the rows' pointers and scales set up once a block (Zen 5, 512 rows: 1.1 times; one row 1.2).
 * Its own copy, out of line (limb_q6k_group): unrolled there, limb_group's Q4_K tiles compiled
 * 1.04 times slower. */
static inline __attribute__((always_inline)) void limb_q6k_rows(int t, const uint8_t *grp, int64_t nb, const limb_rows *xr,
                                                                int limbs, int64_t m0, int rows, vf *acc) {
    int vr = rows * limbs;
    for (int i = 0; i < rows; i++) acc[i] = vf_zero();
    for (int64_t b = 0; b < nb; b++) {
        const float *head;
        const int8_t *xq[LIMB_ROWS];
        const int32_t *start[LIMB_ROWS];
        const uint8_t *blk = limb_block(t, 1, grp, b, nb, xr, limbs, m0, rows, &head, xq, start), *qs = q8_quants(t, blk);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            vi s[3 * LIMB_ROWS];
            for (int u = 0; u < vr; u++) /* limb 1's start is in limb 0's (LIMB_FOLD_START) */
                s[u] = LIMB_FOLD_START && u % limbs == 1 ? vi_zero() : vi_set1(start[u / limbs][2 * (u % limbs) + h]);
#pragma GCC unroll 4
            for (int r = 4 * h; r < 4 * h + 4; r += 2) {
                vq v = q8_row(t, qs, r), v2 = q8_row(t, qs, r + 1);
                for (int u = 0; u < vr; u++) {
                    s[u] = vi_dot4(s[u], v, limb_plane(xq, u, limbs) + 4 * r);
                    s[u] = vi_dot4(s[u], v2, limb_plane(xq, u, limbs) + 4 * r + 4);
                }
            }
            vf ws = q8_scale(t, blk, head, h);
            vf f[LIMB_ROWS];
            if (limbs == 3) limb_values3(s, rows, f);
            else
                for (int i = 0; i < rows; i++) f[i] = vf_from_vi(limb_low(s[2 * i], s[2 * i + 1]));
            for (int i = 0; i < rows; i++) acc[i] = vf_fma(vf_mul(ws, vf_set1(xr->s[(m0 + i) * nb + b])), f[i], acc[i]);
        }
    }
}

/* Byte types for many rows (t: Q6_K and Q5_K (and Q4_K) unpacked, WT_Q6_K_BYTES, WT_Q5_K_BYTES;
 * Q8_0's stored groups, and the grid, K-grid and codebook types' groups expanded to Q8_0's bytes or
 * to WT_Q6_K_BYTES / WT_IQ2_BYTES): rows m0 .. m0+rows of two groups at once (grp[0], grp[1]), each
 * activation broadcast feeding both groups' steps, so a tile of 2 rows (3 limbs; 3 rows of 2) keeps
 * 12 chains with half the broadcasts and half the activation reads a weight of limb_q6k_rows's and
 * limb_group_rows's tiles. Each output's integer sums and float sequence are theirs (Q6_K
 * both halves of a block in one pass, Q5_K's min after its one scale, Q8_0's one scale a block):
 * the same bits. */
static inline __attribute__((always_inline)) void limb_pair_rows(int t, int fast, const uint8_t *const *grp, int64_t nb,
                                                                 const limb_rows *xr, int limbs, int64_t m0, int rows,
                                                                 vf *acc) {
    int vr = rows * limbs, halves = q8_halves(t), off = q8_offset(t), kq = q8_kquant(t);
    for (int i = 0; i < 2 * rows; i++) acc[i] = vf_zero(); /* acc[k * rows + i]: group k, row i */
    for (int64_t b = 0; b < nb; b++) {
        const float *head[2];
        const int8_t *xq[LIMB_ROWS];
        const int32_t *start[LIMB_ROWS];
        const uint8_t *blk[2];
        blk[0] = limb_block(t, kq, grp[0], b, nb, xr, limbs, m0, rows, &head[0], xq, start);
        blk[1] = limb_block(t, kq, grp[1], b, nb, xr, limbs, m0, 0, &head[1], xq, start); /* its bytes and head only */
        const uint8_t *qs0 = q8_quants(t, blk[0]), *qs1 = q8_quants(t, blk[1]);
#pragma GCC unroll 2
        for (int h = 0; h < halves; h++) {
            vi s0[3 * LIMB_ROWS], s1[3 * LIMB_ROWS];
            for (int u = 0; u < vr; u++) /* limb 1's start is in limb 0's (LIMB_FOLD_START) */
                s0[u] = s1[u] = !off || (LIMB_FOLD_START && u % limbs == 1) ? vi_zero()
                                                                            : vi_set1(start[u / limbs][2 * (u % limbs) + h]);
            int r0 = halves == 2 ? 4 * h : 0, r1 = halves == 2 ? 4 * h + 4 : 8;
#pragma GCC unroll 8
            for (int r = r0; r < r1; r += 2) {
                vq v0 = q8_row(t, qs0, r), w0 = q8_row(t, qs0, r + 1), v1 = q8_row(t, qs1, r), w1 = q8_row(t, qs1, r + 1);
                for (int u = 0; u < vr; u++) {
                    vi x = vi_splat4(limb_plane(xq, u, limbs) + 4 * r);
                    s0[u] = vi_dot4_splat(s0[u], v0, x), s1[u] = vi_dot4_splat(s1[u], v1, x);
                    vi x2 = vi_splat4(limb_plane(xq, u, limbs) + 4 * r + 4);
                    s0[u] = vi_dot4_splat(s0[u], w0, x2), s1[u] = vi_dot4_splat(s1[u], w1, x2);
                }
            }
            vf ws0 = q8_scale(t, blk[0], head[0], h), ws1 = q8_scale(t, blk[1], head[1], h);
            vf f0[LIMB_ROWS], f1[LIMB_ROWS];
            if (limbs == 3) limb_values3_from(s0, rows, f0, fast), limb_values3_from(s1, rows, f1, fast);
            else
                for (int i = 0; i < rows; i++)
                    f0[i] = vf_from_vi(limb_low(s0[2 * i], s0[2 * i + 1])), f1[i] = vf_from_vi(limb_low(s1[2 * i], s1[2 * i + 1]));
            for (int i = 0; i < rows; i++) {
                vf sx = vf_set1(xr->s[(m0 + i) * nb + b]);
                acc[i] = vf_fma(vf_mul(ws0, sx), f0[i], acc[i]);
                acc[rows + i] = vf_fma(vf_mul(ws1, sx), f1[i], acc[rows + i]);
            }
        }
        for (int k = 0; k < 2; k++) q8_add_min(t, blk[k], head[k], xr->dsum + 2 * (m0 * nb + b), 2 * nb, rows, acc + k * rows);
    }
}

/* Rows 0 .. M of groups g and g + 1 (grp: t's bytes; outs: g + 1's outputs) in limb_pair_rows's
 * tiles of constant type T, limbs and rows. */
static inline __attribute__((always_inline)) void limb_pair_tiles(int T, int fast, const uint8_t *const *grp, const limb_rows *xr,
                                                                  int64_t M, int64_t nb, int limbs, int64_t g, int outs,
                                                                  int64_t N, const float *bias, float *y) {
    int mr = limbs == 3 ? 2 : 3;
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[2 * LIMB_ROWS];
        if (limbs == 3 && rows == 2) limb_pair_rows(T, fast, grp, nb, xr, 3, m0, 2, acc);
        else if (limbs == 3) limb_pair_rows(T, fast, grp, nb, xr, 3, m0, 1, acc);
        else if (rows == 3) limb_pair_rows(T, fast, grp, nb, xr, 2, m0, 3, acc);
        else if (rows == 2) limb_pair_rows(T, fast, grp, nb, xr, 2, m0, 2, acc);
        else limb_pair_rows(T, fast, grp, nb, xr, 2, m0, 1, acc);
        q8_store_rows(acc, rows, m0, g, Q8_GROUP, bias, y, N);
        q8_store_rows(acc + rows, rows, m0, g + 1, outs, bias, y, N);
    }
}

/* The K-grid types' Q6_K bytes and the 8-bit bytes (Q8_0's, as stored or expanded, and the IQ2
 * bytes) in functions of their own. */
static __attribute__((noinline)) void limb_pair_k(const uint8_t *const *grp, const limb_rows *xr, int64_t M, int64_t nb,
                                                  int limbs, int64_t g, int outs, int64_t N, const float *bias, float *y) {
    limb_pair_tiles(WT_Q6_K_BYTES, 1, grp, xr, M, nb, limbs, g, outs, N, bias, y);
}
/* fast 0: no int32 test of |S_2| first (limb_values3_from), for the bytes that pass 2^14 too often for it to pay */
static __attribute__((noinline)) void limb_pair_8(int t, int fast, const uint8_t *const *grp, const limb_rows *xr, int64_t M,
                                                  int64_t nb, int limbs, int64_t g, int outs, int64_t N, const float *bias,
                                                  float *y) {
    if (t == WT_IQ2_BYTES) limb_pair_tiles(WT_IQ2_BYTES, 1, grp, xr, M, nb, limbs, g, outs, N, bias, y);
    else if (t == WT_Q8_0 && fast) limb_pair_tiles(WT_Q8_0, 1, grp, xr, M, nb, limbs, g, outs, N, bias, y);
    else if (t == WT_Q8_0) limb_pair_tiles(WT_Q8_0, 0, grp, xr, M, nb, limbs, g, outs, N, bias, y);
    else limb_pair_tiles(WT_Q8_0 | WT_HALF_SCALES, 0, grp, xr, M, nb, limbs, g, outs, N, bias, y);
}

/* Whether wtype's Q8_0 bytes keep |S_2| below 2^14 often enough for limb_values3_from's int32 test to
 * pay: not where they reach 62 to 127 (IQ3_XXS's and IQ2_XXS's grid values, IQ4_NL's and IQ4_XS's
 * codebook, Q8_0's own; measured: IQ3_XXS 1.7 times, Q8_0 1.06). */
static inline int limb_pair_fast(int wtype) {
    int c = wtype_code(wtype);
    return c != WT_IQ3_XXS && c != WT_IQ2_XXS && c != WT_IQ4_NL && c != WT_IQ4_XS && c != WT_Q8_0;
}

/* Groups g and g + 1 of one weight of type wtype (Q6_K, Q5_K, Q4_K; g + 1 may be its last, partial
 * one) for many rows: both unpacked once to t's bytes, then limb_pair_rows's tiles. */
static __attribute__((noinline)) void limb_pair(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype, int t,
                                                const uint8_t *packed, int64_t g, int64_t N, const float *bias,
                                                float *y) {
    int64_t bytes_per = q8_group_bytes(t, nb);
    uint8_t *bytes = (uint8_t *)scratch(SCRATCH_UNPACK, (size_t)(2 * bytes_per));
    if (!bytes) return; /* out of memory: counted */
    const uint8_t *grp[2] = {bytes, bytes + bytes_per};
    for (int k = 0; k < 2; k++) unpack_group(wtype, packed + (g + k) * q8_group_bytes(wtype, nb), nb, bytes + k * bytes_per);
    int outs = N - (g + 1) * Q8_GROUP < Q8_GROUP ? (int)(N - (g + 1) * Q8_GROUP) : Q8_GROUP;
    int mr = limbs == 3 ? 2 : 3;
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[2 * LIMB_ROWS];
#define LIMB_PAIR(T)                                                                                                   \
    if (limbs == 3 && rows == 2) limb_pair_rows(T, 1, grp, nb, xr, 3, m0, 2, acc);                                     \
    else if (limbs == 3) limb_pair_rows(T, 1, grp, nb, xr, 3, m0, 1, acc);                                             \
    else if (rows == 3) limb_pair_rows(T, 1, grp, nb, xr, 2, m0, 3, acc);                                              \
    else if (rows == 2) limb_pair_rows(T, 1, grp, nb, xr, 2, m0, 2, acc);                                              \
    else limb_pair_rows(T, 1, grp, nb, xr, 2, m0, 1, acc);
        if (t == WT_Q6_K_BYTES) { LIMB_PAIR(WT_Q6_K_BYTES) }
        else { LIMB_PAIR(WT_Q5_K_BYTES) }
#undef LIMB_PAIR
        q8_store_rows(acc, rows, m0, g, Q8_GROUP, bias, y, N);
        q8_store_rows(acc + rows, rows, m0, g + 1, outs, bias, y, N);
    }
}

/* limb_pair for Q8_0 as stored and for the grid, K-grid and codebook types, each group expanded
 * once (expand_group) to t's bytes (Q8_0's, Q6_K's or the IQ2 bytes); then limb_pair_rows's tiles.
 * A function apart from limb_pair, which then compiles as before (in one, Q6_K ran 0.97 times). */
static __attribute__((noinline)) void limb_pair_bytes(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype,
                                                      int t, const uint8_t *packed, int64_t g, int64_t N, const float *bias,
                                                      float *y) {
    int64_t stored = q8_group_bytes(wtype, nb);
    const uint8_t *grp[2] = {packed + g * stored, packed + (g + 1) * stored};
    if (t != wtype) { /* both groups expanded to t's bytes, once for all the rows */
        int64_t bytes_per = q8_group_bytes(t, nb);
        uint8_t *bytes = (uint8_t *)scratch(SCRATCH_LOOKUP, (size_t)(2 * bytes_per));
        if (!bytes) return; /* out of memory: counted */
        for (int k = 0; k < 2; k++) expand_group(wtype, grp[k], nb, bytes + k * bytes_per), grp[k] = bytes + k * bytes_per;
    }
    int outs = N - (g + 1) * Q8_GROUP < Q8_GROUP ? (int)(N - (g + 1) * Q8_GROUP) : Q8_GROUP;
    if (t == WT_Q6_K_BYTES) limb_pair_k(grp, xr, M, nb, limbs, g, outs, N, bias, y);
    else limb_pair_8(t, limb_pair_fast(wtype), grp, xr, M, nb, limbs, g, outs, N, bias, y);
}

/* limb_group for Q6_K (t: WT_Q6_K, or WT_Q6_K_BYTES for many rows, see limb_pair): its tiles, each a constant type,
 * limb count and row count. Called apart from limb_group (not from it), which then compiles as before. */
static __attribute__((noinline)) void limb_q6k_group(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype, int t,
                                                     const uint8_t *packed, int64_t g, int64_t N, const float *bias,
                                                     float *y) {
    int outs = N - g * Q8_GROUP < Q8_GROUP ? (int)(N - g * Q8_GROUP) : Q8_GROUP;
    const uint8_t *grp = packed + g * q8_group_bytes(wtype, nb);
    if (t != wtype) { /* many rows: the group unpacked once to a byte a weight (as limb_group) */
        uint8_t *bytes = (uint8_t *)scratch(SCRATCH_UNPACK, (size_t)q8_group_bytes(t, nb));
        if (!bytes) return; /* out of memory: counted */
        unpack_group(wtype, grp, nb, bytes);
        grp = bytes;
    }
    int mr = limb_tile_rows(t, limbs);
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[LIMB_ROWS];
#define LIMB_SIX(T, L, R) limb_q6k_rows(T, grp, nb, xr, L, m0, R, acc)
#define LIMB_SIX_ROWS(T, L)                                                                                            \
    switch (rows) {                                                                                                    \
    case 1: LIMB_SIX(T, L, 1); break;                                                                                  \
    case 2: LIMB_SIX(T, L, 2); break;                                                                                  \
    case 3: LIMB_SIX(T, L, 3); break;                                                                                  \
    default: LIMB_SIX(T, L, 4); break;                                                                                 \
    }
        if (t == WT_Q6_K && limbs == 3) { LIMB_SIX_ROWS(WT_Q6_K, 3) }
        else if (t == WT_Q6_K) { LIMB_SIX_ROWS(WT_Q6_K, 2) }
        else if (limbs == 3) { LIMB_SIX_ROWS(WT_Q6_K_BYTES, 3) }
        else { LIMB_SIX_ROWS(WT_Q6_K_BYTES, 2) }
#undef LIMB_SIX_ROWS
#undef LIMB_SIX
        q8_store_rows(acc, rows, m0, g, outs, bias, y, N);
    }
}
#endif

/* Group g of one weight for rows 0 .. M (xr: the rows' limbs): y[:, 16g .. 16g+16) (+ bias). */
static inline void limb_group(const limb_rows *xr, int64_t M, int64_t nb, int limbs, int wtype, int t, int64_t wide,
                              const uint8_t *packed, int64_t g, int64_t N, const float *bias, float *y) {
    int outs = N - g * Q8_GROUP < Q8_GROUP ? (int)(N - g * Q8_GROUP) : Q8_GROUP;
    const uint8_t *grp = packed + g * q8_group_bytes(wtype, nb);
#if defined(STRATA_TARGET_AVX512) || defined(STRATA_TARGET_AVX2)
    if (LIMB_CB_HELD(wtype)) { /* a held codebook type: looked up in registers (limb_cb_group) */
        limb_cb_group(xr, M, nb, limbs, wtype, grp, g, outs, N, bias, y);
        return;
    }
#endif
    if (q8_expanded(wtype)) { /* looked up (decoded) as the Q8_0 group of the same values (q8.h) */
        int few = __builtin_expect(M <= KGRID_ROWS && limbs == 3 && (wtype_kgrid(wtype) || wtype_grid(wtype)), 0);
        if (few && limb_kgrid_few(xr, M, nb, wtype, grp, g, outs, N, bias, y)) return;
        uint8_t *bytes = (uint8_t *)scratch(SCRATCH_LOOKUP, (size_t)q8_group_bytes(t, nb));
        if (!bytes) return; /* out of memory: counted */
        expand_group(wtype, grp, nb, bytes);
        grp = bytes;
    }
#if LIMB_WIDE
    if (wide && t == WT_Q6_K_BYTES) { /* Q6_K (and the K-grid types' bytes) for many rows: int16 steps */
        limb_six_group(xr, M, nb, limbs, q8_expanded(wtype) ? t : wtype, grp, g, outs, N, bias, y);
        return;
    }
    if (wide && wtype == WT_Q5_K) { /* Q5_K for many rows: the same int16 steps, one scale and a min a block */
        limb_six_group(xr, M, nb, limbs, WT_Q5_K, grp, g, outs, N, bias, y);
        return;
    }
#endif
    if (t != wtype && !q8_expanded(wtype)) { /* Q5_0, Q5_K, Q6_K (Q4_K) for many rows: the group unpacked once to a byte a weight */
        uint8_t *bytes = (uint8_t *)scratch(SCRATCH_UNPACK, (size_t)q8_group_bytes(t, nb));
        if (!bytes) return; /* out of memory: counted */
        unpack_group(wtype, grp, nb, bytes);
        grp = bytes;
    }
#if LIMB_WIDE /* Q8_0: the group widened once for many rows (as unpack above) */
    const int16_t *w16 = wide && M * limbs >= UNPACK_ROWS ? limb_wide_unpack(t, grp, nb) : NULL;
#else
    (void)wide;
#endif
#if LIMB_BYTES
    if (t != wtype && (t == WT_Q5_K_BYTES || t == WT_Q6_K_BYTES)) { /* unpacked for many rows */
        limb_bytes_group(xr, M, nb, limbs, wtype, t, grp, g, outs, N, bias, y);
        return;
    }
#endif
    int mr = limb_tile_rows(t, limbs);
    for (int64_t m0 = 0; m0 < M; m0 += mr) {
        int rows = M - m0 < mr ? (int)(M - m0) : mr;
        vf acc[LIMB_ROWS];
#define LIMB_CASE(T) limb_tile(T, grp, nb, xr, limbs, m0, rows, acc)
        switch (t) { /* a constant type and limb count: no per-block tests of them in the inner loops */
        case WT_Q4_0: LIMB_CASE(WT_Q4_0); break;
        case WT_Q4_1: LIMB_CASE(WT_Q4_1); break;
        case WT_Q5_0: LIMB_CASE(WT_Q5_0); break;
        case WT_Q5_1: LIMB_CASE(WT_Q5_1); break;
#if LIMB_WIDE
        case WT_Q8_0:
        case WT_Q8_0 | WT_HALF_SCALES: limb_wide_tile(t, grp, w16, nb, xr, limbs, m0, rows, acc); break;
#else
        case WT_Q8_0: LIMB_CASE(WT_Q8_0); break;
        case WT_Q8_0 | WT_HALF_SCALES: LIMB_CASE(WT_Q8_0 | WT_HALF_SCALES); break;
#endif
        case WT_Q4_0 | WT_HALF_SCALES: LIMB_CASE(WT_Q4_0 | WT_HALF_SCALES); break;
        case WT_Q4_1 | WT_HALF_SCALES: LIMB_CASE(WT_Q4_1 | WT_HALF_SCALES); break;
        case WT_Q5_0 | WT_HALF_SCALES: LIMB_CASE(WT_Q5_0 | WT_HALF_SCALES); break;
        case WT_Q5_1 | WT_HALF_SCALES: LIMB_CASE(WT_Q5_1 | WT_HALF_SCALES); break;
        case WT_Q5_0_BYTES | WT_HALF_SCALES: LIMB_CASE(WT_Q5_0_BYTES | WT_HALF_SCALES); break;
        case WT_Q5_1_BYTES | WT_HALF_SCALES: LIMB_CASE(WT_Q5_1_BYTES | WT_HALF_SCALES); break;
        case WT_Q4_K: LIMB_CASE(WT_Q4_K); break;
        case WT_Q6_K: LIMB_CASE(WT_Q6_K); break;
        case WT_Q2_K: LIMB_CASE(WT_Q2_K); break;
        case WT_Q5_K: LIMB_CASE(WT_Q5_K); break;
        case WT_Q5_K_BYTES: LIMB_CASE(WT_Q5_K_BYTES); break;
        case WT_Q5_0_BYTES: LIMB_CASE(WT_Q5_0_BYTES); break;
        case WT_Q5_1_BYTES: LIMB_CASE(WT_Q5_1_BYTES); break;
        case WT_IQ2_BYTES: LIMB_CASE(WT_IQ2_BYTES); break;
        default: LIMB_CASE(WT_Q6_K_BYTES); break;
        }
#undef LIMB_CASE
        q8_store_rows(acc, rows, m0, g, outs, bias, y, N);
    }
}

#if defined(STRATA_TARGET_AVX512)
#include "amx.h" /* the integer sums of many rows on AMX tiles, where the CPU has them */
#endif

/* y_i[M, N_i] = x[M, K] @ W_i^T (+ bias_i) for n weights of one packed type, all read in one
 * parallel region from one split of x into `limbs` (2 or 3): projections that share their input
 * (q/k/v, gate/up) pay for one fork and join of the threads and one split instead of n. Each
 * output is computed alone, as by one call a weight: the same bits. */
void limb_matmul_many(const float *x, int64_t M, int64_t K, int n, const uint8_t *const *packed, int wtype,
                      const int64_t *N, const float *const *bias, float *const *y, int nthreads, int limbs) {
    int64_t nb = K / 32, first[LIMB_MANY + 1] = {0}, work = 0;
    for (int i = 0; i < n; i++) first[i + 1] = first[i] + (N[i] + Q8_GROUP - 1) / Q8_GROUP, work += M * K * N[i];
    int64_t groups = first[n];
    int unpack = (q8_unpacked(wtype) && M * limbs >= UNPACK_ROWS && (wtype != WT_Q6_K || limbs != 3 || M >= LIMB_UNPACK_Q6_K)) ||
                 (wtype == WT_Q4_K && M >= LIMB_UNPACK_Q4_K);
    int t = q8_expanded(wtype) ? q8_expanded_type(wtype) : !unpack ? wtype : wtype == WT_Q4_K ? WT_Q5_K_BYTES : q8_unpacked(wtype);
    /* the wide step's int16 planes (limb_wide_planes): Q8_0's, and the 6-bit bytes' for many rows */
    int64_t wide = LIMB_WIDE && (wtype_code(t) == WT_Q8_0 || ((t == WT_Q6_K_BYTES || wtype == WT_Q5_K) && M * limbs >= UNPACK_ROWS))
                       ? limbs - 1
                       : 0;
    limb_rows xr; /* one scratch block kept between calls: start, s, dsum, the limbs, then the wide limbs */
    uint8_t *block = (uint8_t *)scratch(SCRATCH_Q8, (size_t)(M * nb) * (8 * limbs + 12) + (size_t)(M * K * (limbs + 2 * wide)));
    if (!block) return; /* out of memory: counted */
    xr.start = (int32_t *)block;
    xr.s = (float *)(block + M * nb * 8 * limbs);
    xr.dsum = (float *)(block + M * nb * (8 * limbs + 4));
    xr.q = (int8_t *)(block + M * nb * (8 * limbs + 12));
    xr.wide = (int16_t *)(block + M * nb * (8 * limbs + 12) + M * K * limbs);
    limb_quantize(x, M, K, limbs, t, &xr, nthreads); /* t's offset: the unpacked bytes' (a type's own else) */
#if defined(STRATA_TARGET_AVX512) /* many rows: the same integer sums on AMX tiles where the CPU has them */
    if (amx_matmul(&xr, M, nb, limbs, wtype, t, n, packed, N, first, bias, y, nthreads)) {
        for (int i = 0; i < n; i++) canonical_nans(y[i], M * N[i]);
        return;
    }
#endif
#if LIMB_WIDE
    if (wide) limb_widen(M * nb, limbs, &xr, nthreads);
#endif
    /* Many rows: groups handed out two at a time, so that a thread slowed by the host (a shared
     * machine) does not hold up the call; few rows: one contiguous run each, as the weights stream
     * from memory in order. Either way each output is computed alone: the same bits. */
    int64_t share = M * limbs >= UNPACK_ROWS ? 2 : (groups + nthreads - 1) / nthreads;
#if defined(STRATA_TARGET_AVX512)
    /* a pair a tile and a hand-out: Q6_K, Q5_K, Q4_K unpacked; from LIMB_PAIR_ROWS rows Q8_0 and the
     * types expanded to bytes (the codebook types held too, from LIMB_PAIR_CB_ROWS: looked up once a
     * group and the pair tiles, 1.1-1.26 times limb_cb_group's lookups in registers a tile) */
    int bytes_pair = M >= (LIMB_CB_HELD(wtype) ? LIMB_PAIR_CB_ROWS : LIMB_PAIR_ROWS) &&
                     (wtype_code(wtype) == WT_Q8_0 || q8_expanded(wtype));
    if (bytes_pair || (!q8_expanded(wtype) && (t == WT_Q6_K_BYTES || t == WT_Q5_K_BYTES))) {
        int64_t pairs[LIMB_MANY + 1] = {0}; /* weight i's pairs of groups (its last alone where odd) start here */
        for (int i = 0; i < n; i++) pairs[i + 1] = pairs[i] + (first[i + 1] - first[i] + 1) / 2;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if (groups > 1 && work >= SMALL_WORK)
        for (int64_t p = 0; p < pairs[n]; p++) {
            int i = 0;
            while (p >= pairs[i + 1]) i++;
            int64_t g = 2 * (p - pairs[i]);
            if (first[i] + g + 1 >= first[i + 1]) { /* its last group alone */
                if (wtype == WT_Q6_K) limb_q6k_group(&xr, M, nb, limbs, wtype, t, packed[i], g, N[i], bias[i], y[i]);
                else limb_group(&xr, M, nb, limbs, wtype, t, wide, packed[i], g, N[i], bias[i], y[i]);
            } else if (bytes_pair) {
                limb_pair_bytes(&xr, M, nb, limbs, wtype, t, packed[i], g, N[i], bias[i], y[i]);
            } else {
                limb_pair(&xr, M, nb, limbs, wtype, t, packed[i], g, N[i], bias[i], y[i]);
            }
        }
        for (int i = 0; i < n; i++) canonical_nans(y[i], M * N[i]);
        return;
    }
#endif
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, share) if (groups > 1 && work >= SMALL_WORK)
    for (int64_t g = 0; g < groups; g++) {
        int i = 0;
        while (g >= first[i + 1]) i++;
#if defined(STRATA_TARGET_AVX512)
        if (wtype == WT_Q6_K) {
            limb_q6k_group(&xr, M, nb, limbs, wtype, t, packed[i], g - first[i], N[i], bias[i], y[i]);
            continue;
        }
#endif
        limb_group(&xr, M, nb, limbs, wtype, t, wide, packed[i], g - first[i], N[i], bias[i], y[i]);
    }
    for (int i = 0; i < n; i++) canonical_nans(y[i], M * N[i]);
}

/* y[M, N] = x[M, K] @ W^T (+ bias) with W packed by strata_q8_pack and x split into `limbs` (2 or 3). */
void strata_limb_matmul(const float *x, int64_t M, int64_t K, const uint8_t *packed, int wtype, int64_t N,
                        const float *bias, float *y, int nthreads, int limbs) {
    limb_matmul_many(x, M, K, 1, &packed, wtype, &N, &bias, &y, nthreads, limbs);
}
