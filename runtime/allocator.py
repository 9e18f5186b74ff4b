"""glibc's allocator in a long-running kip stage: where large blocks come from, and how
much freed memory stays with the process.

By default glibc serves blocks above its mmap threshold (128 KiB) with mappings of their
own, given back when freed, but raises the threshold each time such a block is freed, up
to 32 MiB. A process that reads megabyte-sized messages (up to 8 MiB here) soon takes
them from its heap instead, which keeps whatever the worst mix of them left behind, at a
level set by how they happened to arrive together. The pipeline
therefore pins the threshold as it starts (``pin_mmap_threshold``), before it reads
anything. A worker does not: its every fetch and batch is a large buffer, and a fresh
mapping for each cost goodput under overload (``kip bench load``); it only keeps freed
heap (below, which moves the threshold to 1 MiB).

A stage allocates a batch's messages together and frees them together once the batch's
transaction commits. With glibc's defaults, whenever more than 128 KiB at the top of the
heap is free (``M_TRIM_THRESHOLD``) it is given back to the system, and the next batch
takes the same pages back, each a page fault: in a worker's pattern (two pulls of a few
hundred requests alive, a result and an audit record each) that round trip was most of
what encoding a message cost.

``keep_freed`` raises the trim threshold to ``KEEP_BYTES``: up to that much freed memory
stays with the process for its next batch (and in its resident size: a pipeline flooded
with oversized messages must come back within 32 MiB of where it started,
tests/e2e/test_admission.py). Setting it turns off glibc's sliding threshold for serving
a large block by a mapping of its own (128 KiB at first, raised to the size of each such
block freed), and every buffer past 128 KiB would then be a fresh mapping, each page
faulted in each time. So blocks under ``MMAP_ABOVE_BYTES`` come from the
heap; larger ones (oversized payloads, large fetch responses) get mappings of their own,
given back as soon as they are freed, whenever the heap has no free block that size.

When it has one (the kept 16 MiB, or the holes a burst of large messages leaves), glibc
serves a large block from the heap, and the holes stay resident: a pipeline flooded
with 1 MiB messages grew from one flood to the next. A stage that
reads large messages therefore counts them (``LargeMessages``), and once
``GIVE_BACK_AFTER_BYTES`` of them have passed it gives the free pages back
(``give_back``: glibc's ``malloc_trim``, which also returns the pages of free blocks
inside the heap); a worker does the same when it unloads a model (workers/sessions.py).
Outside glibc (musl, macOS) all of it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterable

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3   # glibc's mallopt parameters (malloc.h)
MMAP_AT_START_BYTES = 128 * 1024   # glibc's own default, no longer raised
KEEP_BYTES = 16 * 1024 * 1024
MMAP_ABOVE_BYTES = 1024 * 1024
GIVE_BACK_AFTER_BYTES = 16 * 1024 * 1024


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c"))


def pin_mmap_threshold(threshold: int = MMAP_AT_START_BYTES) -> bool:
    """Serve blocks over ``threshold`` by mappings of their own, and stop glibc raising
    it; whether the allocator took it."""
    try:
        return _libc().mallopt(M_MMAP_THRESHOLD, ctypes.c_int(threshold)) == 1
    except (OSError, AttributeError, TypeError):
        return False


def keep_freed(keep_bytes: int = KEEP_BYTES, mmap_above: int = MMAP_ABOVE_BYTES) -> bool:
    """Keep up to ``keep_bytes`` of freed heap, and serve blocks up to ``mmap_above``
    from it; whether the allocator took both."""
    try:
        mallopt = _libc().mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return (mallopt(M_MMAP_THRESHOLD, ctypes.c_int(mmap_above)) == 1
            and mallopt(M_TRIM_THRESHOLD, ctypes.c_int(keep_bytes)) == 1)


def give_back(keep_bytes: int = 0) -> bool:
    """Return the heap's free pages to the system, all but ``keep_bytes`` at its top;
    whether glibc gave any back."""
    try:
        return _libc().malloc_trim(ctypes.c_size_t(keep_bytes)) == 1
    except (OSError, AttributeError, TypeError):
        return False


class LargeMessages:
    """The bytes of large messages (``MMAP_ABOVE_BYTES`` and over) read since the heap's
    free pages were last given back."""

    def __init__(self, after_bytes: int = GIVE_BACK_AFTER_BYTES) -> None:
        self.after_bytes = after_bytes
        self.unreturned = 0

    def read(self, sizes: Iterable[int]) -> None:
        self.unreturned += sum(n for n in sizes if n >= MMAP_ABOVE_BYTES)

    def give_back_if_due(self) -> bool:
        """Give the free pages back once ``after_bytes`` of large messages have been
        read; the kept heap (``KEEP_BYTES``) stays. Whether it was due."""
        if self.unreturned < self.after_bytes:
            return False
        self.unreturned = 0
        give_back(KEEP_BYTES)
        return True
