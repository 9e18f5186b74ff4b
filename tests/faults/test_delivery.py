"""The fault harness at a size CI can afford: every fault kind at least once, and not one
request lost, duplicated or left without its audit record (`kip faults` runs 20,000)."""

from __future__ import annotations

import asyncio

import pytest

from kip.devkit.faults import FaultPlan, run_faults
from kip.devkit.faults_report import REPLAY_REFUSED

pytestmark = pytest.mark.broker


@pytest.mark.timeout(300)
def test_every_request_answered_exactly_once_through_crashes(registry):
    plan = FaultPlan(requests=1500, rate=120, workers=3, worker_kills=3, worker_pauses=1,
                     pipeline_kills=1, pipeline_pauses=1, broker_restarts=1, seed=7)
    report = asyncio.run(run_faults(plan, registry.root, log=lambda *_: None))
    print("\n".join(report.lines()))
    assert report.sent == 1500 and report.failed_sends == 0
    assert report.lost == 0
    assert report.duplicated == 0
    assert report.unseen == 0
    assert report.orphaned == 0
    assert report.faults == {"kill worker": 3, "kill pipeline": 1, "pause worker": 1,
                             "pause pipeline": 1, "restart broker": 1}
    assert report.replay == REPLAY_REFUSED
    assert not any(report.leftover.values()), report.leftover
    assert report.passed
