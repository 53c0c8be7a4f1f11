/*
 * The floating-point modes the kernels' bits assume: IEEE defaults (no flush-to-zero, no
 * denormals-are-zero, round to nearest). Other code in the process can change them (e.g.
 * torch.set_flush_denormal(True) sets MXCSR's FTZ and DAZ on the calling thread), and every
 * thread has its own copy: an OpenMP worker inherits its creator's modes when the pool starts.
 * The engine calls strata_fp_ieee before each step and strata_fp_restore after it (backend.py
 * NativeOps.ieee_floats), so the step's every float operation, on the calling thread and on
 * each worker, runs with the defaults, and the caller's modes are given back.
 */
#include <stdint.h>

#include "strata_kernels.h"

#if defined(__x86_64__) || defined(__SSE__)
#include <xmmintrin.h>
/* MXCSR: FTZ (bit 15), DAZ (bit 6), rounding control (bits 13-14) */
#define FP_MODE_BITS 0xE040u
static inline unsigned fp_get(void) { return _mm_getcsr(); }
static inline void fp_set(unsigned v) { _mm_setcsr(v); }
#elif defined(__aarch64__)
/* FPCR: FZ (bit 24), rounding mode (bits 22-23), FZ16 (bit 19), AH and FIZ (bits 1, 0) */
#define FP_MODE_BITS 0x1D80003u
static inline unsigned fp_get(void) {
    uint64_t v;
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(v));
    return (unsigned)v;
}
static inline void fp_set(unsigned v) {
    uint64_t w = v;
    __asm__ __volatile__("msr fpcr, %0" : : "r"(w));
}
#else /* a portable build elsewhere: the modes cannot be read here (assumed the defaults) */
#define FP_MODE_BITS 0u
static inline unsigned fp_get(void) { return 0; }
static inline void fp_set(unsigned v) { (void)v; }
#endif

int strata_fp_mode(void) { return (int)(fp_get() & FP_MODE_BITS); }

/* The defaults on this thread only; returns its previous mode bits. */
static inline int fp_ieee_here(void) {
    unsigned v = fp_get();
    if (v & FP_MODE_BITS) fp_set(v & ~FP_MODE_BITS);
    return (int)(v & FP_MODE_BITS);
}

int strata_fp_ieee(int nthreads) {
    int before = fp_ieee_here();
    /* the workers of a team of nthreads (the kernels' teams are this size or smaller, and
     * libgomp reuses one pool per calling thread): they keep the defaults afterwards */
#pragma omp parallel num_threads(nthreads)
    fp_ieee_here();
    return before;
}

void strata_fp_restore(int mode) {
    unsigned v = fp_get();
    fp_set((v & ~FP_MODE_BITS) | ((unsigned)mode & FP_MODE_BITS));
}
