"""Poison among good requests: each poison message becomes a failed or rejected result and
exactly one dead letter with its origin; the good requests around it are served, no
worker crashes and no partition stalls."""

from __future__ import annotations

import asyncio

import pytest

from kip.devkit.faults import FaultPlan, run_faults

pytestmark = pytest.mark.broker


@pytest.mark.timeout(240)
def test_poison_is_dead_lettered_once_and_serving_goes_on(registry):
    plan = FaultPlan(requests=1000, rate=200, workers=2, worker_kills=0, worker_pauses=0,
                     pipeline_kills=0, pipeline_pauses=0, broker_restarts=0,
                     poison_ratio=0.03, seed=3)
    report = asyncio.run(run_faults(plan, registry.root, log=lambda *_: None))
    print("\n".join(report.lines()))
    assert report.poison == 30   # ten of each kind
    assert report.poison_deadlettered_once == report.poison
    assert report.deadletters_not_poison == 0
    assert report.unplanned == {}, "a process exited on its own"
    assert not any(report.leftover.values()), report.leftover
    assert report.outcomes["ok"] == report.sent - report.poison
    assert report.lost == report.duplicated == report.orphaned == 0
