"""The C heap's policy for a serving process: large blocks go back to the OS when freed.

glibc serves an allocation of 128 KiB or more with a mapping of its own, unmapped on free, but
raises that threshold to the largest such block freed so far (up to 32 MiB). After the first
load temporary or logits chunk is freed, every later block of its size comes from the heap,
whose freed pages stay resident: 20-30 MB of a Gemma 3 server's peak was such free heap. A
fixed 16 MiB threshold keeps the largest blocks (load temporaries, a long prompt's chunks)
mapped and returned on free, and a decode step's blocks (up to 8 MiB at 262k ids) on the heap,
reused without page faults (at 4 MiB those cost 4,400 faults a step). The number of heap arenas
is left to glibc: capping it at two cost about 3% of the default model's decode here. An
operator's own MALLOC_MMAP_THRESHOLD_ is left as it is.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameters (malloc.h)
MMAP_THRESHOLD = 16 * 2**20  # a decode step's blocks (8 MiB at 262k ids, 4 rows) stay on the heap


def tune_heap() -> dict[str, int]:
    """Set the policy above where the C library is glibc; the settings made (none elsewhere)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return {}
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return {}
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    made = {}
    env = "MALLOC_MMAP_THRESHOLD_"
    if env not in os.environ and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1:
        made[env] = MMAP_THRESHOLD
    return made


def trim_heap() -> bool:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim), once the model is loaded:
    llguidance's and the load's temporaries leave about 15 MB of free heap that the serving
    steps' smaller blocks would not fill. False where the C library has no malloc_trim."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        malloc_trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    malloc_trim.argtypes, malloc_trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(malloc_trim(0))


@contextmanager
def loading_to_serve() -> Iterator[None]:
    """Around a serving process's model load (the single server's and each Ray replica's): the
    policy set before the model's blocks, the load's freed temporaries handed back after it."""
    tune_heap()
    try:
        yield
    finally:
        trim_heap()
