"""Keep a long-running kip process's memory where its work leaves it.

glibc serves allocations above its mmap threshold (128 KiB) with their own mappings,
returned to the system when freed, but it raises that threshold each time such a block
is freed, up to 32 MiB. A process that reads megabyte-sized messages (up to 8 MiB here)
therefore soon takes them from its heap instead, and the heap keeps whatever the worst
mix of them left behind: a pipeline fed malformed and oversized messages settled at
~123 MiB instead of ~94 MiB, at a level that depended on how they happened to arrive
together (docs/benchmarks.md). Fixing the threshold keeps big buffers in mappings of
their own, so the memory goes back when they do.

Only the pipeline does it: it faces messages of any size from anyone. In a worker, whose
every fetch and batch is a large buffer, the page faults of a fresh mapping for each
cost a fifth of its goodput under overload (`kip bench load`, docs/benchmarks.md).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("kip.runtime")
M_MMAP_THRESHOLD = -3          # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 128 * 1024


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Pin glibc's mmap threshold (which also stops its dynamic raising); False where
    the C library is not glibc (nothing to do there)."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError, TypeError):
        log.info("not glibc: the mmap threshold is left as it is")
        return False
