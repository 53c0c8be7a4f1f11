/* What the library has once: the name of the target it was built for, and the scratch memory
 * the other files' calls keep between calls (internal.h), with the count of its failures. */
#include <stdatomic.h>

#include "internal.h"

const char *strata_target(void) { return STRATA_TARGET_NAME; }

/* Allocations (scratch, kernel_malloc) that failed since strata_alloc_failures last read the
 * count: any thread (a parallel region's too) adds to it; the caller reads it once a call returns. */
static atomic_int alloc_failures;

int strata_alloc_failures(void) { return atomic_exchange(&alloc_failures, 0); }

/* See internal.h: malloc, its failures counted. */
void *kernel_malloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) atomic_fetch_add(&alloc_failures, 1);
    return p;
}

/* See internal.h: one block per slot and calling thread, grown when a call needs more; NULL
 * (counted) when the memory is not there, and the caller returns without computing. */
void *scratch(int slot, size_t bytes) {
    static _Thread_local void *buf[SCRATCH_SLOTS];
    static _Thread_local size_t cap[SCRATCH_SLOTS];
    if (bytes > cap[slot]) {
        free(buf[slot]);
        size_t grown = bytes + bytes / 4 + 4096; /* room for somewhat larger steps */
        buf[slot] = kernel_malloc(grown);
        cap[slot] = buf[slot] ? grown : 0;
    }
    return buf[slot];
}
