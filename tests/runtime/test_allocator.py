"""A stage keeps the heap it freed for its next batch instead of giving it back."""

import platform
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import allocator

# In a process of its own: a stage frees a batch's records together; glibc reports how
# much free memory sits at the top of its heap (``keepcost``), which it would trim.
FREE_A_BATCH = """
import ctypes, ctypes.util, sys
from runtime.allocator import keep_freed
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in (
        "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split())]
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = Info
if sys.argv[1] == "keep":
    assert keep_freed()
records = [bytes(2000) for _ in range(10_000)]   # 20 MB, each past pymalloc's small blocks
del records
print(libc.mallinfo2().keepcost)
"""

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")


def _kept_after_freeing(mode: str) -> int:
    run = subprocess.run([sys.executable, "-c", FREE_A_BATCH, mode], capture_output=True,
                         text=True, check=True, cwd=Path(__file__).parents[2])
    return int(run.stdout)


@glibc
def test_a_freed_batch_stays_with_the_process():
    assert _kept_after_freeing("default") < 1024 * 1024 < 16 * 1024 * 1024 < \
        _kept_after_freeing("keep")


@glibc
def test_keep_freed_is_taken_by_glibc():
    assert allocator.keep_freed(allocator.KEEP_BYTES)
