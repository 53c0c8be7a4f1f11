/*
 * The AVX2 peak rate of the exact (limb) arithmetic's integer step, for bench/avx2_prefill_bound.py:
 * 8 independent chains per thread, nothing else (no loads besides the named ones, no stores).
 *   mode 0, "step": vpmaddubsw (32 products of a weight byte and a limb byte, pair-summed into
 *           int16) + vpaddw into an int16 chain, operands in registers: the arithmetic's bound;
 *   mode 1, "as issued": the kernel's own shape (limb.c on AVX2): one vpbroadcastd of 4 limb bytes
 *           from memory feeding two of mode 0's steps (outputs 0-7 and 8-15 of a group).
 * Returns the products done (32 a vpmaddubsw) on one thread.
 */
#include <stdint.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

volatile int32_t avx2_step_sink;

int64_t avx2_step_peak(int64_t iters, int mode) {
#if defined(__AVX2__)
    /* 8 chains (a vpaddw's latency is a cycle) in named registers, one loop a mode (an array of
     * them, or both modes in one loop, went through the stack every step); the chains multiply 8
     * different pairs of w0 .. w2 and x0 .. x2, so that no product is computed once for two */
    __m256i w0 = _mm256_set1_epi8(3), w1 = _mm256_set1_epi8(5), w2 = _mm256_set1_epi8(6), x0 = _mm256_set1_epi8(1);
    __m256i x1 = _mm256_set1_epi8(-2), x2 = _mm256_set1_epi8(7), z = _mm256_setzero_si256();
    __m256i a0 = z, a1 = z, a2 = z, a3 = z, a4 = z, a5 = z, a6 = z, a7 = z;
    int32_t xs[64];
    for (int i = 0; i < 64; i++) xs[i] = i;
#define STEP(a, w, x) a = _mm256_add_epi16(a, _mm256_maddubs_epi16(w, x))
    if (mode == 0) /* written out: the compiler kept some chains on the stack */
        for (int64_t it = 0; it < iters; it++)
            __asm__ volatile(
                "vpmaddubsw %[x0], %[w0], %%ymm14\n\tvpaddw %%ymm14, %[a0], %[a0]\n\t"
                "vpmaddubsw %[x1], %[w0], %%ymm15\n\tvpaddw %%ymm15, %[a1], %[a1]\n\t"
                "vpmaddubsw %[x2], %[w0], %%ymm14\n\tvpaddw %%ymm14, %[a2], %[a2]\n\t"
                "vpmaddubsw %[x0], %[w1], %%ymm15\n\tvpaddw %%ymm15, %[a3], %[a3]\n\t"
                "vpmaddubsw %[x1], %[w1], %%ymm14\n\tvpaddw %%ymm14, %[a4], %[a4]\n\t"
                "vpmaddubsw %[x2], %[w1], %%ymm15\n\tvpaddw %%ymm15, %[a5], %[a5]\n\t"
                "vpmaddubsw %[x0], %[w2], %%ymm14\n\tvpaddw %%ymm14, %[a6], %[a6]\n\t"
                "vpmaddubsw %[x1], %[w2], %%ymm15\n\tvpaddw %%ymm15, %[a7], %[a7]"
                : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5),
                  [a6] "+x"(a6), [a7] "+x"(a7)
                : [w0] "x"(w0), [w1] "x"(w1), [w2] "x"(w2), [x0] "x"(x0), [x1] "x"(x1), [x2] "x"(x2)
                : "xmm14", "xmm15");
    else /* 4 broadcasts from memory, each for two steps (outputs 0-7 and 8-15) */
        for (int64_t it = 0; it < iters; it++) {
            __m256i b;
            __asm__ volatile("vpbroadcastd %1, %0" : "=x"(b) : "m"(xs[it & 63]));
            STEP(a0, w0, b), STEP(a1, w1, b);
            __asm__ volatile("vpbroadcastd %1, %0" : "=x"(b) : "m"(xs[(it + 1) & 63]));
            STEP(a2, w0, b), STEP(a3, w1, b);
            __asm__ volatile("vpbroadcastd %1, %0" : "=x"(b) : "m"(xs[(it + 2) & 63]));
            STEP(a4, w0, b), STEP(a5, w1, b);
            __asm__ volatile("vpbroadcastd %1, %0" : "=x"(b) : "m"(xs[(it + 3) & 63]));
            STEP(a6, w0, b), STEP(a7, w1, b);
            __asm__ volatile("" : "+x"(w0), "+x"(w1));
        }
#undef STEP
    __m256i sum = _mm256_add_epi16(_mm256_add_epi16(_mm256_add_epi16(a0, a1), _mm256_add_epi16(a2, a3)),
                                   _mm256_add_epi16(_mm256_add_epi16(a4, a5), _mm256_add_epi16(a6, a7)));
    avx2_step_sink = _mm256_extract_epi16(sum, 0); /* the chains' results are used */
    return iters * 8 * 32;
#else
    (void)iters, (void)mode;
    return 0;
#endif
}
