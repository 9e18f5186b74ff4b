import argparse
from types import SimpleNamespace

import pytest

from kip.devkit.bench_load import class_rate, nice_level, stage_breakdown
from kip.schemas.messages import Priority, Timings


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


def test_the_breakdown_reads_admission_from_the_pipeline_stamp():
    """Admission is the pipeline's stamp (issued to routed), not what is left of the
    total: a stall before routing shows as admission, one after it as the queue."""
    ok = [SimpleNamespace(timings=Timings(admission_ms=a, queue_ms=q, batch_wait_ms=1.0,
                                          inference_ms=8.0, total_ms=a + q + 9.0))
          for a, q in ((10.0, 20.0), (30.0, 40.0))]
    assert stage_breakdown(ok) == (
        "admission 20, worker queue 30, batch wait 1, inference 8, total 59")
