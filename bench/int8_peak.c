/*
 * The machine's peak rate of the integer step the native-q8 kernels are built on: independent
 * chains of it per thread (12 on AVX-512, 6 on AVX2), nothing else (no loads, no stores). Built by
 * bench_matmul.py with the kernels' own target flags. AVX-512: vpdpbusd on 64 bytes (64
 * multiply-adds); AVX2: vpmaddubsw + vpmaddwd + vpaddd on 32 bytes (32); otherwise none (returns 0).
 * Written so that GCC 12 cannot shortcut it: each chain starts from its own value (equal chains were
 * merged into one), the chains are named variables (an array of them was kept in memory, a store a
 * step), AVX-512's step is inline asm (the builtin's accumulator was copied each step) and AVX2's
 * chains take their own activations (one product was formed for all). On an AMD Zen 5 it reaches 2
 * vpdpbusd a cycle a core.
 */
#include <stdint.h>
#if defined(__AVX512VNNI__) || defined(__AVX2__)
#include <immintrin.h>
#endif

volatile int32_t int8_peak_sink;

/* Runs `iters` rounds on `nthreads` threads; returns the multiply-adds done (0: no vector step). */
int64_t int8_peak(int64_t iters, int nthreads) {
#if defined(__AVX512VNNI__)
    const int64_t per_step = 64;
#define STEP(a, w, x) __asm__("vpdpbusd %2, %1, %0" : "+v"(a) : "v"(w), "v"(x))
    typedef __m512i acc_t;
#define SPLAT(v) _mm512_set1_epi8(v)
#define START(i) _mm512_set1_epi32(i)
#define LANE0(v) _mm_cvtsi128_si32(_mm512_castsi512_si128(v))
#define OWN_X 0
#define CHAINS 12
#define EACH_CHAIN(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11)
#elif defined(__AVX2__)
    const int64_t per_step = 32;
#define STEP(a, w, x) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)))
    typedef __m256i acc_t;
#define SPLAT(v) _mm256_set1_epi8(v)
#define START(i) _mm256_set1_epi32(i)
#define LANE0(v) _mm_cvtsi128_si32(_mm256_castsi256_si128(v))
#define OWN_X 1
#define CHAINS 6 /* with their own activations: 12 registers of 16 */
#define EACH_CHAIN(F) F(0) F(1) F(2) F(3) F(4) F(5)
#else
    (void)iters, (void)nthreads;
    return 0;
#endif
#if defined(__AVX512VNNI__) || defined(__AVX2__)
    int32_t sink = 0;
#pragma omp parallel num_threads(nthreads) reduction(+ : sink)
    {
        acc_t w = SPLAT(3);
#define DECLARE(i) acc_t a##i = START(i), x##i = SPLAT(OWN_X ? 1 + i : 1);
        EACH_CHAIN(DECLARE)
        for (int64_t it = 0; it < iters; it++) {
#define ADVANCE(i) STEP(a##i, w, x##i);
            EACH_CHAIN(ADVANCE)
            __asm__ volatile("" : "+v"(w)); /* w may have changed: the steps cannot be hoisted */
        }
#define COLLECT(i) sink += LANE0(a##i);
        EACH_CHAIN(COLLECT)
    }
    int8_peak_sink = sink; /* the chains' results are used */
    return iters * CHAINS * per_step * nthreads;
#endif
}
