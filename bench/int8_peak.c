/*
 * The machine's peak rate of the integer step the native-q8 kernels are built on: 12 independent
 * chains of it per thread, nothing else (no loads, no stores). Built by bench_matmul.py with the
 * kernels' own target flags. AVX-512: vpdpbusd on 64 bytes (64 multiply-adds); AVX2: vpmaddubsw
 * + vpmaddwd + vpaddd on 32 bytes (32); otherwise none (returns 0).
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
#define STEP(a, w, x) a = _mm512_dpbusd_epi32(a, w, x)
    typedef __m512i acc_t;
#define SPLAT(v) _mm512_set1_epi8(v)
#define ZERO() _mm512_setzero_si512()
#elif defined(__AVX2__)
    const int64_t per_step = 32;
#define STEP(a, w, x) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)))
    typedef __m256i acc_t;
#define SPLAT(v) _mm256_set1_epi8(v)
#define ZERO() _mm256_setzero_si256()
#else
    (void)iters, (void)nthreads;
    return 0;
#endif
#if defined(__AVX512VNNI__) || defined(__AVX2__)
    int32_t sink = 0;
#pragma omp parallel num_threads(nthreads) reduction(+ : sink)
    {
        acc_t a[12], w = SPLAT(3), x = SPLAT(1);
        for (int i = 0; i < 12; i++) a[i] = ZERO();
        for (int64_t it = 0; it < iters; it++) {
            for (int i = 0; i < 12; i++) STEP(a[i], w, x);
            __asm__ volatile("" : "+v"(w)); /* w may have changed: the steps cannot be hoisted */
        }
        int32_t lanes[sizeof(acc_t) / 4];
        for (int i = 0; i < 12; i++) {
            __builtin_memcpy(lanes, &a[i], sizeof lanes);
            sink += lanes[0];
        }
    }
    int8_peak_sink = sink; /* the chains' results are used */
    return iters * 12 * per_step * nthreads;
#endif
}
