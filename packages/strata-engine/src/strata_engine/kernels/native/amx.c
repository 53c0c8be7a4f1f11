/*
 * Whether the integer-limb kernels may take their integer sums on AMX tiles (amx.h): only in the
 * AVX-512 build, on a CPU whose CPUID reports AMX-TILE and AMX-INT8, whose OS saves the tile
 * state (XCR0 bits 17 and 18), and once Linux has granted this process the tile data
 * (arch_prctl ARCH_REQ_XCOMP_PERM: a process must ask before its first tile instruction, or the
 * instruction faults). Asked once, the answer kept. STRATA_AMX=0 turns the tiles off (tests,
 * benchmarks): the integer sums are exact either way, so the outputs' bits never change.
 */
#define _DEFAULT_SOURCE /* syscall() under -std=c11 */
#include <stdatomic.h>

#include "internal.h"

#if defined(STRATA_TARGET_AVX512) && defined(__linux__) && defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_XCOMP_PERM 0x1023 /* ARCH_REQ_XCOMP_PERM */
#define AMX_XTILEDATA 18      /* XFEATURE_XTILEDATA */

/* The CPU, the OS and the kernel's permission, in that order (each needs the one before). */
static int amx_available(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c >> 27 & 1u)) return 0; /* OSXSAVE: xgetbv runs */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || (d >> 24 & 3u) != 3u) return 0; /* AMX-TILE, AMX-INT8 */
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo >> 17 & 3u) != 3u) return 0; /* the OS saves XTILECFG and XTILEDATA */
    return syscall(SYS_arch_prctl, AMX_XCOMP_PERM, AMX_XTILEDATA) == 0;
}
#else
static int amx_available(void) { return 0; }
#endif

/* -1: not asked yet; then 0 (no tiles) or 1 (tiles where they pay, amx.h) */
static atomic_int amx_state = -1;
static atomic_int amx_hardware = -1;

int strata_amx_use(int want) {
    int hw = atomic_load(&amx_hardware);
    if (hw < 0) {
        hw = amx_available();
        atomic_store(&amx_hardware, hw);
    }
    if (want < 0) {
        int state = atomic_load(&amx_state);
        if (state >= 0) return state;
        const char *env = getenv("STRATA_AMX");
        want = !(env && env[0] == '0' && env[1] == '\0');
    }
    int state = want && hw;
    atomic_store(&amx_state, state);
    return state;
}
