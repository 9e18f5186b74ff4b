"""glibc's allocator in a long-running kip stage: freed memory stays with the process.

A stage allocates a batch's messages together and frees them together once the batch's
transaction commits. With glibc's defaults, whenever more than 128 KiB at the top of the
heap is free (``M_TRIM_THRESHOLD``) it is given back to the system, and the next batch
takes the same pages back, each a page fault. In a worker's pattern (two pulls of a few
hundred requests alive, a result and an audit record each) orjson's encoding took ~3 µs
a message instead of ~1.4 µs, most of it that round trip (docs/benchmarks.md).

``keep_freed`` raises the threshold to ``KEEP_BYTES``: up to that much freed memory
stays with the process for its next batch (and in its resident size: a pipeline flooded
with oversized messages must stay within 64 MiB of where it started,
tests/e2e/test_admission.py). Setting it turns off glibc's sliding threshold for serving
a large block by a mapping of its own (128 KiB at first, raised to the size of each such
block freed), and a 256 KiB buffer then cost ~180 µs each time instead of ~7 (a fresh
mapping, every page faulted in). So blocks under ``MMAP_ABOVE_BYTES`` come from the
heap; larger ones (oversized payloads, large fetch responses) still get mappings of
their own, given back as soon as they are freed: served from the heap too, they left it
fragmented, and a flooded pipeline grew by 650 MiB. Memory given back on purpose still
goes (``malloc_trim``, as a worker does when it unloads a model: workers/sessions.py).
Outside glibc (musl, macOS) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's mallopt parameters (malloc.h)
KEEP_BYTES = 16 * 1024 * 1024
MMAP_ABOVE_BYTES = 1024 * 1024


def keep_freed(keep_bytes: int = KEEP_BYTES, mmap_above: int = MMAP_ABOVE_BYTES) -> bool:
    """Keep up to ``keep_bytes`` of freed heap, and serve blocks up to ``mmap_above``
    from it; whether the allocator took both."""
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c")).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return (mallopt(M_MMAP_THRESHOLD, ctypes.c_int(mmap_above)) == 1
            and mallopt(M_TRIM_THRESHOLD, ctypes.c_int(keep_bytes)) == 1)
