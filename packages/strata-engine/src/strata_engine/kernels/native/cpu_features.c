/*
 * Which of the kernels' instruction sets this CPU (and OS) can run, asked of the CPU itself
 * (cpuid through the compiler's builtins, which also check that the OS saves the vector
 * registers), never read from /proc/cpuinfo. AArch64 always has NEON (Advanced SIMD).
 */
#include "strata_kernels.h" /* the feature bits: enum strata_cpu */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

int strata_cpu_features(void) {
    int f = 0;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) f |= HAS_AVX2_FMA;
    /* the avx512 target also uses byte operations (BW) and integer dot products (VNNI) */
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vnni"))
        f |= HAS_AVX512;
    /* AVX-VNNI (vpdpbusd on 256-bit registers): cpuid leaf 7, subleaf 1, EAX bit 4, asked directly
     * (compilers before gcc 11 and clang 15 know no "avxvnni" string); the avxvnni target also
     * needs HAS_AVX2_FMA, whose check covers the OS saving the registers */
    unsigned int a, b, c, d;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 4 & 1u)) f |= HAS_AVX_VNNI;
#elif defined(__aarch64__)
    f |= HAS_NEON;
#endif
    return f;
}
