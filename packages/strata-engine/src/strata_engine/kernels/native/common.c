/* What the library has once: the name of the target it was built for, and the scratch memory
 * the other files' calls keep between calls (internal.h). */
#include "internal.h"

const char *strata_target(void) { return STRATA_TARGET_NAME; }

/* See internal.h: one block per slot and calling thread, grown when a call needs more. */
void *scratch(int slot, size_t bytes) {
    static _Thread_local void *buf[SCRATCH_SLOTS];
    static _Thread_local size_t cap[SCRATCH_SLOTS];
    if (bytes > cap[slot]) {
        free(buf[slot]);
        size_t grown = bytes + bytes / 4 + 4096; /* room for somewhat larger steps */
        buf[slot] = malloc(grown);
        cap[slot] = buf[slot] ? grown : 0;
    }
    return buf[slot];
}
