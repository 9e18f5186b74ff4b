"""The desired-worker formula and offset dating (kip/scaling/estimate.py)."""

from __future__ import annotations

import pytest

from kip.scaling.estimate import EndHistory, Sizing, demand, desired_workers

SIZING = Sizing(drain_s=30, utilization=0.8)


def test_demand_is_arrivals_plus_the_backlog_over_the_drain_time():
    assert demand(10.0, 300, SIZING) == pytest.approx(20.0)


@pytest.mark.parametrize("wanted, per_worker, live, cap, desired", [
    (0.0, 50.0, 3, 12, 0),      # nothing waits, nothing arrives: none
    (1.0, 50.0, 0, 12, 1),      # a trickle: at least one
    (100.0, 50.0, 1, 12, 3),    # 100 / (50 * 0.8) = 2.5
    (10_000.0, 50.0, 3, 12, 12),   # capped at the partitions
    (5.0, 0.0, 2, 12, 3),       # capacity unknown: one more than are live
    (5.0, 0.0, 12, 12, 12),
])
def test_desired_workers(wanted, per_worker, live, cap, desired):
    assert desired_workers(wanted, per_worker, live, cap, SIZING) == desired


def test_an_offset_is_dated_when_the_end_passed_it():
    history = EndHistory()
    history.add(100.0, 10)
    history.add(110.0, 20)
    assert history.written_at(14) == pytest.approx(105.0)
    assert history.written_at(3) == 100.0      # older than every sample: the oldest
    assert history.written_at(20) is None       # not written yet
    assert history.rate(60.0) == pytest.approx(1.0)
    history.add(120.0, 5)                       # recreated: its past is gone
    assert history.written_at(3) == 120.0 and history.rate(60.0) == 0.0
