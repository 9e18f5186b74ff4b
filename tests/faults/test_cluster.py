"""The fault harness on a cluster of three brokers at a size CI can afford: the broker
that is the pipeline's transaction coordinator killed, then the active controller, and,
where the suite may make hosts apart (root), a worker's host cut off past its session
timeout and healed. Not one request lost or duplicated, the audit chains whole, a copy of
an admitted request refused (`kip faults --cluster` runs 20,000 through every fault)."""

from __future__ import annotations

import asyncio

import pytest

from kip.devkit.faults import FaultPlan, run_faults
from kip.devkit.faults_report import REPLAY_REFUSED
from kip.devkit.hosts import HostsUnavailable, Network

pytestmark = pytest.mark.broker


def _hosts_apart() -> bool:
    try:
        Network.check()
    except HostsUnavailable:
        return False
    return True


@pytest.mark.timeout(420)
def test_every_request_answered_exactly_once_through_a_clusters_faults(registry):
    hosts = _hosts_apart()
    plan = FaultPlan.cluster(
        requests=2400, rate=60, worker_kills=0, worker_pauses=0, pipeline_kills=0,
        pipeline_pauses=0, broker_restarts=0, leader_kills=1, controller_kills=1,
        broker_pauses=0, hosts=hosts, worker_partitions=int(hosts), pipeline_partitions=0,
        broker_partitions=0, degraded_links=0, poison_ratio=0.01, seed=11)
    report = asyncio.run(run_faults(plan, registry.root, log=lambda *_: None))
    print("\n".join(report.lines()))
    assert report.sent == 2400 and report.failed_sends == 0
    assert report.lost == report.duplicated == report.unseen == report.orphaned == 0
    assert report.faults == {"kill coordinator": 1, "kill controller": 1} | (
        {"partition worker": 1} if hosts else {})
    assert report.poison_deadlettered_once + report.poison_turned_away == report.poison > 0
    assert not report.audit_chain_problems
    assert report.replay == REPLAY_REFUSED
    assert report.passed
