"""glibc's allocator in a long-running kip stage: freed memory stays with the process.

A stage allocates a batch's messages together and frees them together once the batch's
transaction commits. With glibc's defaults, whenever more than 128 KiB at the top of the
heap is free (``M_TRIM_THRESHOLD``) it is given back to the system, and the next batch
takes the same pages back, each a page fault. In a worker's pattern (two pulls of a few
hundred requests alive, a result and an audit record each) orjson's encoding took ~3 µs
a message instead of ~1.5 µs, most of it that round trip (docs/benchmarks.md).

``keep_freed`` raises the threshold to ``KEEP_BYTES``: up to that much freed memory stays
with the process for its next batch. Memory given back on purpose still goes
(``malloc_trim``, as a worker does when it unloads a model: workers/sessions.py). Outside
glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1   # glibc's mallopt parameter numbers (malloc.h)
KEEP_BYTES = 64 * 1024 * 1024


def keep_freed(keep_bytes: int = KEEP_BYTES) -> bool:
    """Keep up to ``keep_bytes`` of freed heap; whether the allocator took it."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return mallopt(M_TRIM_THRESHOLD, ctypes.c_int(keep_bytes)) == 1
