import argparse

import pytest

from kip.benchload import class_rate, cpu_ticks, stolen_since
from schemas.messages import Priority


def test_a_class_rate_is_read_before_anything_starts():
    assert class_rate("batch=400") == (Priority.BATCH, 400.0)
    for bad in ("interactive", "urgent=5", "batch=fast", "batch=0"):
        with pytest.raises(argparse.ArgumentTypeError, match=bad):
            class_rate(bad)


def test_stolen_cpu_time_is_a_share_of_the_ticks_since():
    assert stolen_since((100, 10_000), (150, 11_000)) == "5.0%"
    assert stolen_since(None) == "unknown" and stolen_since((1, 5), (1, 5)) == "unknown"
    stolen, total = cpu_ticks()   # this machine's own /proc/stat
    assert 0 <= stolen <= total
