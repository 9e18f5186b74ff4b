"""A stage keeps the heap it freed for its next batch instead of giving it back."""

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from kip.runtime import allocator

# Each script runs in a process of its own, reading glibc's counters (``mallinfo2``).
MALLINFO = """
import ctypes, ctypes.util, sys
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Info
"""
# A stage frees a batch's records together; glibc reports how much free memory sits at
# the top of its heap (``keepcost``), which it would trim.
FREE_A_BATCH = MALLINFO + """
from kip.runtime.allocator import keep_freed
if sys.argv[1] == "keep":
    assert keep_freed()
mapped = libc.mallinfo2().hblks
fetched = bytearray(512 << 10)   # a batch's embeddings: a mapping of its own?
mapped = libc.mallinfo2().hblks - mapped
records = [bytes(2000) for _ in range(5_000)]   # 10 MB, each past pymalloc's small blocks
del records
print(libc.mallinfo2().keepcost, mapped)
"""

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")


def _run(script: str, mode: str) -> list[int]:
    run = subprocess.run([sys.executable, "-c", script, mode], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parents[2])
    return [int(n) for n in run.stdout.split()]


def _after_freeing(mode: str) -> tuple[int, int]:
    """Bytes kept at the top of the heap after a batch is freed, and the blocks mapped
    on their own with a large buffer alive."""
    kept, mapped = _run(FREE_A_BATCH, mode)
    return kept, mapped


@glibc
def test_a_freed_batch_stays_with_the_process():
    assert _after_freeing("default")[0] < 1024 * 1024 < 8 * 1024 * 1024 < \
        _after_freeing("keep")[0]


@glibc
def test_a_large_buffer_still_comes_from_the_heap():
    """Keeping freed memory turns off glibc's sliding mmap threshold; without a fixed
    one, every buffer over 128 KiB would be a fresh mapping, its pages faulted in each
    time."""
    assert _after_freeing("keep")[1] == 0 < _after_freeing("default")[1]


@glibc
def test_keep_freed_is_taken_by_glibc():
    assert allocator.keep_freed(allocator.KEEP_BYTES)


# A pipeline reads an 8 MiB message, then a 1 MiB one: is the second a mapping of its own?
LARGE_AFTER_LARGER = MALLINFO + """
from kip.runtime.allocator import pin_mmap_threshold
if sys.argv[1] == "pin":
    assert pin_mmap_threshold()
larger = bytearray(8 << 20)
del larger   # glibc's default raises its mmap threshold to 8 MiB here
mapped = libc.mallinfo2().hblks
message = bytearray(1 << 20)
alive = libc.mallinfo2().hblks - mapped
del message
print(alive, libc.mallinfo2().hblks - mapped)
"""


@glibc
def test_a_pinned_threshold_keeps_large_messages_in_mappings_of_their_own():
    """Pinned, glibc stops raising its mmap threshold: a large message read after a
    larger one is still mapped on its own, and goes back when it is freed."""
    assert _run(LARGE_AFTER_LARGER, "pin") == [1, 0]   # mapped while alive, then unmapped
    assert _run(LARGE_AFTER_LARGER, "default") == [0, 0]   # from the heap all along


# Holes in the heap: every other block under the mmap threshold freed, the rest alive.
FREE_BETWEEN_SURVIVORS = """
import os
from kip.runtime.allocator import MMAP_ABOVE_BYTES, LargeMessages, keep_freed
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
assert keep_freed()
blocks = [b"k" * (512 << 10) for _ in range(200)]   # written: resident
del blocks[::2]
freed = rss()
large = LargeMessages(after_bytes=4 * MMAP_ABOVE_BYTES)
large.read([MMAP_ABOVE_BYTES - 1] * 10 + [MMAP_ABOVE_BYTES] * 3)
early = large.give_back_if_due()
large.read([8 * MMAP_ABOVE_BYTES])
print(freed, early, large.give_back_if_due(), rss(), large.unreturned)
"""


@glibc
def test_freed_holes_go_back_once_enough_large_messages_came():
    run = subprocess.run([sys.executable, "-c", FREE_BETWEEN_SURVIVORS],
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[2])
    freed, early, due, after, unreturned = run.stdout.split()
    assert (early, due, unreturned) == ("False", "True", "0")
    assert int(freed) - int(after) > 32 * 1024 * 1024, (freed, after)
