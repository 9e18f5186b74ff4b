import argparse

import pytest

from kip.benchload import class_rate
from schemas.messages import Priority


def test_a_class_rate_is_read_before_anything_starts():
    assert class_rate("batch=400") == (Priority.BATCH, 400.0)
    for bad in ("interactive", "urgent=5", "batch=fast", "batch=0"):
        with pytest.raises(argparse.ArgumentTypeError, match=bad):
            class_rate(bad)
