"""glibc's allocator in a long-running kip stage: freed memory stays with the process.

A stage allocates a batch's messages together and frees them together once the batch's
transaction commits. With glibc's defaults, whenever more than 128 KiB at the top of the
heap is free (``M_TRIM_THRESHOLD``) it is given back to the system, and the next batch
takes the same pages back, each a page fault. In a worker's pattern (two pulls of a few
hundred requests alive, a result and an audit record each) orjson's encoding took ~3 µs
a message instead of ~1.4 µs, most of it that round trip (docs/benchmarks.md).

``keep_freed`` raises the threshold to ``KEEP_BYTES``: up to that much freed memory stays
with the process for its next batch. Setting it turns off glibc's sliding threshold for
serving a large block by mmap (128 KiB at first, raised to the size of each such block
freed), and a 1 MiB buffer then cost ~560 µs each time instead of ~25-30 (a fresh
mapping, every page faulted in): so blocks up to ``MMAP_ABOVE_BYTES``, glibc's own
ceiling for that threshold, come from the heap too. Memory given back on purpose still
goes (``malloc_trim``, as a worker does when it unloads a model: workers/sessions.py).
Outside glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's mallopt parameters (malloc.h)
KEEP_BYTES = 64 * 1024 * 1024
MMAP_ABOVE_BYTES = 32 * 1024 * 1024   # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit glibc


def keep_freed(keep_bytes: int = KEEP_BYTES, mmap_above: int = MMAP_ABOVE_BYTES) -> bool:
    """Keep up to ``keep_bytes`` of freed heap, and serve blocks up to ``mmap_above``
    from it; whether the allocator took both."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return (mallopt(M_MMAP_THRESHOLD, ctypes.c_int(mmap_above)) == 1
            and mallopt(M_TRIM_THRESHOLD, ctypes.c_int(keep_bytes)) == 1)
