import argparse

import pytest

from devkit.bench_load import class_rate, nice_level
from schemas.messages import Priority


def test_a_class_rate_is_read_before_anything_starts():
    assert class_rate("batch=400") == (Priority.BATCH, 400.0)
    for bad in ("interactive", "urgent=5", "batch=fast", "batch=0"):
        with pytest.raises(argparse.ArgumentTypeError, match=bad):
            class_rate(bad)


def test_the_batch_load_can_only_be_given_a_lower_priority():
    assert nice_level("0") == 0 and nice_level("19") == 19
    for bad in ("-5", "20", "low"):
        with pytest.raises(argparse.ArgumentTypeError, match="0 to 19"):
            nice_level(bad)
