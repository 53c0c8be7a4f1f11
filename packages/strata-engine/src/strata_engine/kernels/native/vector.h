/*
 * The virtual vector: 16 float lanes, one sequence of operations on every instruction set.
 *
 * Every kernel is written against `vf` and the operations below, never against intrinsics.
 * Each target implements each operation with exactly the IEEE single-precision semantics
 * written next to it, lane by lane, so a kernel computes the same bits on every target:
 *   add/sub/mul/div: one correctly rounded operation per lane;
 *   fma(a, b, c):    a * b + c with one rounding (hardware FMA, or C99 fmaf, which is exact);
 *   max / min:       lane-wise (a > b ? a : b) / (a < b ? a : b), the same for NaN and
 *                    signed zeros everywhere (not the instruction sets' own max/min);
 *   hsum:            lanes (i, i+8), then (i, i+4), (i, i+2), (0, 1): one fixed tree;
 *   conversions:     small integers to float (exact), 2^k from an integral float (exact),
 *                    16 bits to 16 lanes of 0.0 / 1.0 (lane i = bit i).
 * Targets: STRATA_TARGET_AVX512 (one __m512), STRATA_TARGET_AVX2 (two __m256, FMA3),
 * STRATA_TARGET_NEON (four float32x4_t, AArch64), otherwise portable C (float[16], fmaf).
 * Build with -ffp-contract=off: the compiler may not fuse a multiply and an add on its own.
 */
#ifndef STRATA_VECTOR_H
#define STRATA_VECTOR_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define VL 16 /* lanes of the virtual vector */

#if defined(STRATA_TARGET_AVX512)
#include <immintrin.h>
#define STRATA_TARGET_NAME "avx512"
typedef struct { __m512 v; } vf;
static inline vf vf_zero(void) { return (vf){_mm512_setzero_ps()}; }
static inline vf vf_set1(float x) { return (vf){_mm512_set1_ps(x)}; }
static inline vf vf_load(const float *p) { return (vf){_mm512_loadu_ps(p)}; }
static inline void vf_store(float *p, vf a) { _mm512_storeu_ps(p, a.v); }
static inline vf vf_add(vf a, vf b) { return (vf){_mm512_add_ps(a.v, b.v)}; }
static inline vf vf_sub(vf a, vf b) { return (vf){_mm512_sub_ps(a.v, b.v)}; }
static inline vf vf_mul(vf a, vf b) { return (vf){_mm512_mul_ps(a.v, b.v)}; }
static inline vf vf_div(vf a, vf b) { return (vf){_mm512_div_ps(a.v, b.v)}; }
static inline vf vf_fma(vf a, vf b, vf c) { return (vf){_mm512_fmadd_ps(a.v, b.v, c.v)}; }
static inline vf vf_fnma(vf a, vf b, vf c) { return (vf){_mm512_fnmadd_ps(a.v, b.v, c.v)}; }
static inline vf vf_max(vf a, vf b) {
    return (vf){_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ), b.v, a.v)};
}
static inline vf vf_min(vf a, vf b) {
    return (vf){_mm512_mask_blend_ps(_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ), b.v, a.v)};
}
static inline float vf_hsum(vf a) {
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(a.v),
                              _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a.v), 1)));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}
/* Four vf_hsum at once: the same additions (the same operand pairs, in the same tree), so the
 * same bits, with the lanes of four vectors shuffled together. */
#define VF_HSUM4 1
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float out[4]) {
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a.v, b.v, 0x44), _mm512_shuffle_f32x4(a.v, b.v, 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c.v, d.v, 0x44), _mm512_shuffle_f32x4(c.v, d.v, 0xEE));
    /* lanes (i, i+8) of each done; now (i, i+4): [a, b, c, d] four lanes each */
    __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0x4E));  /* (i, i+2) */
    x = _mm512_add_ps(x, _mm512_permute_ps(x, 0xB1));  /* (0, 1) */
    __m128 r = _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), x));
    _mm_storeu_ps(out, r);
}
static inline vf vf_from_i8(const int8_t *p) {
    return (vf){_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)))};
}
static inline vf vf_from_u4(const uint8_t *p, int high) {
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    q = high ? _mm512_srli_epi32(q, 4) : _mm512_and_si512(q, _mm512_set1_epi32(15));
    return (vf){_mm512_cvtepi32_ps(q)};
}
static inline vf vf_from_bits16(uint32_t bits) {
    return (vf){_mm512_maskz_mov_ps((__mmask16)bits, _mm512_set1_ps(1.0f))};
}
#define VF_FROM_F16 1 /* 16 halves widened by vcvtph2ps (internal.h states the contract) */
static inline vf vf_from_f16(const uint8_t *p) { return (vf){_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p))}; }
/* Table lookup of 32 nibbles (16 bytes, low nibbles then high): lane i of *lo is table lane
 * (p[i] & 15), of *hi table lane (p[i] >> 4). Only this target has it (VF_LUT16): a dequantiser
 * that builds the table from the same float operations gets the same bits as computing each
 * weight, with fewer instructions per weight. */
#define VF_LUT16 1
static inline vf vf_iota(void) {
    return (vf){_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)};
}
static inline void vf_lut16_u4(vf table, const uint8_t *p, vf *lo, vf *hi) {
    __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    lo->v = _mm512_permutexvar_ps(q, table.v); /* uses index bits 0-3 only: the low nibble */
    hi->v = _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), table.v);
}
static inline vf vf_pow2i(vf k) {
    __m512i e = _mm512_add_epi32(_mm512_cvttps_epi32(k.v), _mm512_set1_epi32(127));
    return (vf){_mm512_castsi512_ps(_mm512_slli_epi32(e, 23))};
}
/* vf_from_f16 (above) is exact for every finite half, subnormals included, but a NaN may come back
 * quietened: a caller that keeps payloads checks vf_any_nan. 16 bfloat16 widened by a shift.
 * (VF_HALVES: the x86 targets; elsewhere internal.h's f16_at / bf16_at a value at a time.) */
#define VF_HALVES 1
static inline vf vf_from_bf16(const uint8_t *p) { /* its bits are fp32's upper half */
    __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return (vf){_mm512_castsi512_ps(_mm512_slli_epi32(h, 16))};
}
static inline int vf_any_nan(vf a) { return _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q) != 0; }

#elif defined(STRATA_TARGET_AVX2)
#include <immintrin.h>
#ifdef STRATA_AVX_VNNI
#define STRATA_TARGET_NAME "avxvnni" /* AVX2 plus AVX-VNNI's vpdpbusd (q8.h) */
#else
#define STRATA_TARGET_NAME "avx2"
#endif
typedef struct { __m256 lo, hi; } vf; /* lanes 0-7, 8-15 */
static inline vf vf_zero(void) { return (vf){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
static inline vf vf_set1(float x) { return (vf){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
static inline vf vf_load(const float *p) { return (vf){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
static inline void vf_store(float *p, vf a) { _mm256_storeu_ps(p, a.lo); _mm256_storeu_ps(p + 8, a.hi); }
static inline vf vf_add(vf a, vf b) { return (vf){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
static inline vf vf_sub(vf a, vf b) { return (vf){_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
static inline vf vf_mul(vf a, vf b) { return (vf){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
static inline vf vf_div(vf a, vf b) { return (vf){_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
static inline vf vf_fma(vf a, vf b, vf c) {
    return (vf){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
static inline vf vf_fnma(vf a, vf b, vf c) {
    return (vf){_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)};
}
static inline vf vf_max(vf a, vf b) {
    return (vf){_mm256_blendv_ps(b.lo, a.lo, _mm256_cmp_ps(a.lo, b.lo, _CMP_GT_OQ)),
                _mm256_blendv_ps(b.hi, a.hi, _mm256_cmp_ps(a.hi, b.hi, _CMP_GT_OQ))};
}
static inline vf vf_min(vf a, vf b) {
    return (vf){_mm256_blendv_ps(b.lo, a.lo, _mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ)),
                _mm256_blendv_ps(b.hi, a.hi, _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ))};
}
static inline float vf_hsum(vf a) {
    __m256 s8 = _mm256_add_ps(a.lo, a.hi);
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s4 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    s4 = _mm_add_ss(s4, _mm_movehdup_ps(s4));
    return _mm_cvtss_f32(s4);
}
static inline vf vf_from_i8(const int8_t *p) { /* each half widened straight from memory */
    return (vf){_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))),
                _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))))};
}
static inline vf vf_from_u4(const uint8_t *p, int high) {
    /* bytes widened straight from memory, then the nibble taken from each 32-bit lane: no
     * shuffles besides the widening, and the low and high calls on one p share the loads */
    __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)));
    __m256i m = _mm256_set1_epi32(15);
    a = high ? _mm256_srli_epi32(a, 4) : _mm256_and_si256(a, m);
    b = high ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, m);
    return (vf){_mm256_cvtepi32_ps(a), _mm256_cvtepi32_ps(b)};
}
static inline __m256 bits8(uint32_t bits, __m256i lanes) {
    __m256i hit = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32((int)bits), lanes), lanes);
    return _mm256_and_ps(_mm256_castsi256_ps(hit), _mm256_set1_ps(1.0f));
}
static inline vf vf_from_bits16(uint32_t bits) {
    return (vf){bits8(bits, _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128)),
                bits8(bits, _mm256_setr_epi32(256, 512, 1024, 2048, 4096, 8192, 16384, 32768))};
}
#define VF_FROM_F16 1 /* 16 halves widened by F16C's vcvtph2ps (internal.h states the contract) */
static inline vf vf_from_f16(const uint8_t *p) {
    return (vf){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)))};
}
static inline __m256 pow2i8(__m256 k) {
    __m256i e = _mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
}
static inline vf vf_pow2i(vf k) { return (vf){pow2i8(k.lo), pow2i8(k.hi)}; }
#define VF_HALVES 1 /* as on AVX-512 */
static inline __m256 bf16x8(const uint8_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}
static inline vf vf_from_bf16(const uint8_t *p) { return (vf){bf16x8(p), bf16x8(p + 16)}; }
static inline int vf_any_nan(vf a) {
    return _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(a.lo, a.lo, _CMP_UNORD_Q), _mm256_cmp_ps(a.hi, a.hi, _CMP_UNORD_Q))) != 0;
}

#elif defined(STRATA_TARGET_NEON)
#include <arm_neon.h>
#define STRATA_TARGET_NAME "neon"
typedef struct { float32x4_t v[4]; } vf; /* lanes 0-3, 4-7, 8-11, 12-15 */
#define VF_MAP(EXPR) { vf r; for (int i = 0; i < 4; i++) r.v[i] = (EXPR); return r; }
static inline vf vf_zero(void) VF_MAP(vdupq_n_f32(0.0f))
static inline vf vf_set1(float x) VF_MAP(vdupq_n_f32(x))
static inline vf vf_load(const float *p) VF_MAP(vld1q_f32(p + 4 * i))
static inline void vf_store(float *p, vf a) { for (int i = 0; i < 4; i++) vst1q_f32(p + 4 * i, a.v[i]); }
static inline vf vf_add(vf a, vf b) VF_MAP(vaddq_f32(a.v[i], b.v[i]))
static inline vf vf_sub(vf a, vf b) VF_MAP(vsubq_f32(a.v[i], b.v[i]))
static inline vf vf_mul(vf a, vf b) VF_MAP(vmulq_f32(a.v[i], b.v[i]))
static inline vf vf_div(vf a, vf b) VF_MAP(vdivq_f32(a.v[i], b.v[i]))
static inline vf vf_fma(vf a, vf b, vf c) VF_MAP(vfmaq_f32(c.v[i], a.v[i], b.v[i]))
static inline vf vf_fnma(vf a, vf b, vf c) VF_MAP(vfmsq_f32(c.v[i], a.v[i], b.v[i]))
static inline vf vf_max(vf a, vf b) VF_MAP(vbslq_f32(vcgtq_f32(a.v[i], b.v[i]), a.v[i], b.v[i]))
static inline vf vf_min(vf a, vf b) VF_MAP(vbslq_f32(vcltq_f32(a.v[i], b.v[i]), a.v[i], b.v[i]))
static inline float vf_hsum(vf a) {
    float32x4_t s4 = vaddq_f32(vaddq_f32(a.v[0], a.v[2]), vaddq_f32(a.v[1], a.v[3]));
    float32x2_t s2 = vadd_f32(vget_low_f32(s4), vget_high_f32(s4));
    return vget_lane_f32(s2, 0) + vget_lane_f32(s2, 1);
}
static inline vf vf_from_i8(const int8_t *p) {
    int8x16_t b = vld1q_s8(p);
    int16x8_t l = vmovl_s8(vget_low_s8(b)), h = vmovl_s8(vget_high_s8(b));
    vf r = {{vcvtq_f32_s32(vmovl_s16(vget_low_s16(l))), vcvtq_f32_s32(vmovl_s16(vget_high_s16(l))),
             vcvtq_f32_s32(vmovl_s16(vget_low_s16(h))), vcvtq_f32_s32(vmovl_s16(vget_high_s16(h)))}};
    return r;
}
static inline vf vf_from_u4(const uint8_t *p, int high) {
    uint8x16_t b = vld1q_u8(p);
    b = high ? vshrq_n_u8(b, 4) : vandq_u8(b, vdupq_n_u8(15));
    uint16x8_t l = vmovl_u8(vget_low_u8(b)), h = vmovl_u8(vget_high_u8(b));
    vf r = {{vcvtq_f32_u32(vmovl_u16(vget_low_u16(l))), vcvtq_f32_u32(vmovl_u16(vget_high_u16(l))),
             vcvtq_f32_u32(vmovl_u16(vget_low_u16(h))), vcvtq_f32_u32(vmovl_u16(vget_high_u16(h)))}};
    return r;
}
static inline vf vf_from_bits16(uint32_t bits) {
    static const uint32_t lanes[16] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
    vf r;
    for (int i = 0; i < 4; i++) {
        uint32x4_t hit = vtstq_u32(vdupq_n_u32(bits), vld1q_u32(lanes + 4 * i));
        r.v[i] = vreinterpretq_f32_u32(vandq_u32(hit, vreinterpretq_u32_f32(vdupq_n_f32(1.0f))));
    }
    return r;
}
static inline vf vf_pow2i(vf k)
    VF_MAP(vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k.v[i]), vdupq_n_s32(127)), 23)))
#undef VF_MAP

#else
#define STRATA_TARGET_NAME "portable"
typedef struct { float l[VL]; } vf;
#define VF_MAP(EXPR) { vf r; for (int i = 0; i < VL; i++) r.l[i] = (EXPR); return r; }
static inline vf vf_zero(void) VF_MAP(0.0f)
static inline vf vf_set1(float x) VF_MAP(x)
static inline vf vf_load(const float *p) VF_MAP(p[i])
static inline void vf_store(float *p, vf a) { memcpy(p, a.l, sizeof a.l); }
static inline vf vf_add(vf a, vf b) VF_MAP(a.l[i] + b.l[i])
static inline vf vf_sub(vf a, vf b) VF_MAP(a.l[i] - b.l[i])
static inline vf vf_mul(vf a, vf b) VF_MAP(a.l[i] * b.l[i])
static inline vf vf_div(vf a, vf b) VF_MAP(a.l[i] / b.l[i])
static inline vf vf_fma(vf a, vf b, vf c) VF_MAP(fmaf(a.l[i], b.l[i], c.l[i]))
static inline vf vf_fnma(vf a, vf b, vf c) VF_MAP(fmaf(-a.l[i], b.l[i], c.l[i]))
static inline vf vf_max(vf a, vf b) VF_MAP(a.l[i] > b.l[i] ? a.l[i] : b.l[i])
static inline vf vf_min(vf a, vf b) VF_MAP(a.l[i] < b.l[i] ? a.l[i] : b.l[i])
static inline float vf_hsum(vf a) {
    float s[8];
    for (int i = 0; i < 8; i++) s[i] = a.l[i] + a.l[i + 8];
    for (int i = 0; i < 4; i++) s[i] = s[i] + s[i + 4];
    for (int i = 0; i < 2; i++) s[i] = s[i] + s[i + 2];
    return s[0] + s[1];
}
static inline vf vf_from_i8(const int8_t *p) VF_MAP((float)p[i])
static inline vf vf_from_u4(const uint8_t *p, int high) VF_MAP((float)(high ? p[i] >> 4 : p[i] & 15))
static inline vf vf_from_bits16(uint32_t bits) VF_MAP((float)((bits >> i) & 1u))
static inline vf vf_pow2i(vf k) {
    vf r;
    for (int i = 0; i < VL; i++) {
        uint32_t bits = (uint32_t)((int32_t)k.l[i] + 127) << 23;
        memcpy(&r.l[i], &bits, 4);
    }
    return r;
}
#undef VF_MAP
#endif

/* ---- built on the operations above: identical on every target ---------------------- */

#ifndef VF_HSUM4
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float out[4]) {
    out[0] = vf_hsum(a), out[1] = vf_hsum(b), out[2] = vf_hsum(c), out[3] = vf_hsum(d);
}
#endif

/* The first n (0..16) lanes from p, the rest 0. */
static inline vf vf_load_n(const float *p, int n) {
    if (n >= VL) return vf_load(p);
    float buf[VL] = {0};
    memcpy(buf, p, (size_t)n * 4);
    return vf_load(buf);
}

static inline void vf_store_n(float *p, vf a, int n) {
    if (n >= VL) {
        vf_store(p, a);
        return;
    }
    float buf[VL];
    vf_store(buf, a);
    memcpy(p, buf, (size_t)n * 4);
}

/*
 * e^x, lane-wise, within 2 ulp of the exact value for x in [-87.3, 88.3]; x is clamped to
 * that range first (so e^x never underflows to a subnormal or overflows).
 * x = k ln2 + r with k = round(x / ln2), |r| <= ln2/2 (Cody-Waite, ln2 in two parts: k * LN2_HI
 * is exact), e^r by its Taylor polynomial of degree 7 in Horner form, times 2^k (exact).
 */
static inline vf vf_exp(vf x) {
    const vf magic = vf_set1(12582912.0f); /* 1.5 * 2^23: adding and subtracting it rounds to an integer */
    x = vf_min(vf_max(x, vf_set1(-87.3f)), vf_set1(88.3f));
    vf k = vf_sub(vf_add(vf_mul(x, vf_set1(1.44269504088896341f)), magic), magic); /* round to nearest */
    vf r = vf_fma(k, vf_set1(-0.693359375f), x);               /* LN2_HI: 10 significant bits */
    r = vf_fma(k, vf_set1(2.12194440e-4f), r);                 /* -LN2_LO */
    vf p = vf_set1(1.0f / 5040.0f);
    p = vf_fma(p, r, vf_set1(1.0f / 720.0f));
    p = vf_fma(p, r, vf_set1(1.0f / 120.0f));
    p = vf_fma(p, r, vf_set1(1.0f / 24.0f));
    p = vf_fma(p, r, vf_set1(1.0f / 6.0f));
    p = vf_fma(p, r, vf_set1(0.5f));
    p = vf_fma(p, r, vf_set1(1.0f));
    p = vf_fma(p, r, vf_set1(1.0f));
    return vf_mul(p, vf_pow2i(k));
}

/*
 * tanh x, lane-wise, as one fixed sequence: x clamped to [-9, 9] (tanh 9 is 1 to within half
 * an ulp), then 1 - 2 / (e^(2x) + 1). Absolute error a few 1e-8 (relative error grows near 0,
 * where 1 - ... cancels); used for soft-capping, whose outputs are compared in absolute terms.
 */
static inline vf vf_tanh(vf x) {
    const vf one = vf_set1(1.0f);
    x = vf_min(vf_max(x, vf_set1(-9.0f)), vf_set1(9.0f));
    vf e = vf_exp(vf_add(x, x)); /* 2x: exact */
    return vf_sub(one, vf_div(vf_set1(2.0f), vf_add(e, one)));
}

/*
 * Natural log of a positive, normal double, in double precision from basic operations only
 * (no libm): x = m 2^e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(f), f = (m-1)/(m+1),
 * by its series to f^23 (|f| < 0.172, so the first omitted term is below 1e-20 of the result).
 * Used once per logprob row (the log of the softmax sum), so it need not be vectorised.
 */
static inline double log_d(double x) {
    uint64_t bits;
    memcpy(&bits, &x, 8);
    int e = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL; /* m in [1, 2) */
    double m;
    memcpy(&m, &bits, 8);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    double f = (m - 1.0) / (m + 1.0), s = f * f, q = 1.0 / 23.0;
    for (int n = 21; n >= 1; n -= 2) q = q * s + 1.0 / n;
    return (double)e * 0.6931471805599453 + 2.0 * f * q;
}

#endif
