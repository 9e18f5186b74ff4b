"""The local cluster: three KRaft nodes with a production cluster's settings, one of which
the quorum elected controller; and the fault plan that breaks it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from kip.devkit.cluster_faults import active_controller, short_of_replicas
from kip.devkit.fault_injection import FaultPlan


def _properties(path: Path) -> dict[str, str]:
    lines = [line.split("=", 1) for line in path.read_text().splitlines() if "=" in line]
    return {key: value for key, value in lines}


def test_every_node_runs_with_a_production_clusters_replication(cluster):
    for node in cluster.nodes:
        props = _properties(node.data_dir / "server.properties")
        assert props["node.id"] == str(node.node_id)
        assert len(props["controller.quorum.voters"].split(",")) == 3
        assert props["unclean.leader.election.enable"] == "false"
        assert props["min.insync.replicas"] == "2"
        assert props["transaction.state.log.min.isr"] == "2"
        assert props["default.replication.factor"] == "3"
        assert props["offsets.topic.replication.factor"] == "3"
    assert len({node.port for node in cluster.nodes}) == 3
    assert cluster.bootstrap.count(",") == 2 and "running" in cluster.status()


def test_the_active_controller_is_one_the_quorum_elected(cluster):
    assert active_controller(cluster) in {1, 2, 3}


def _logged(tmp_path: Path, node: int, lines: list[str]) -> SimpleNamespace:
    log = tmp_path / f"node-{node}.log"
    log.write_text("".join(f"[t] INFO [RaftManager id={node}] Completed transition to "
                           f"{line} (org.apache.kafka.raft.QuorumState)\n" for line in lines))
    return SimpleNamespace(log_file=log)


def test_the_newest_epoch_names_the_controller(tmp_path):
    nodes = [_logged(tmp_path, 1, ["Leader(localVoterNode=..., epoch=1, x=y)",
                                   "FollowerState(fetchTimeoutMs=2000, epoch=2, leader=3)"]),
             _logged(tmp_path, 2, ["FollowerState(fetchTimeoutMs=2000, epoch=1, leader=1)"]),
             _logged(tmp_path, 3, ["Leader(localVoterNode=..., epoch=2, x=y)"])]
    assert active_controller(SimpleNamespace(nodes=nodes)) == 3


def test_the_cluster_plan_holds_every_fault_the_acceptance_asks_for():
    events = FaultPlan.cluster(requests=20_000).events()
    counts = {e: events.count(e) for e in set(events)}
    assert counts["kill leader"] + counts["kill coordinator"] >= 3
    assert counts["kill coordinator"] == 1 and counts["kill controller"] == 1
    assert counts["pause broker"] == 1 and counts["partition worker"] == 2
    assert counts["partition pipeline"] == 1 and counts["partition broker"] == 1
    assert counts["kill worker"] >= 1 and counts["pause pipeline"] >= 1
    assert FaultPlan.cluster().brokers == 3 and FaultPlan.cluster().hosts


def _described(topic: str, *partitions: tuple[list[int], list[int]]) -> dict:
    return {"topic": topic, "error_code": 0,
            "partitions": [{"replicas": r, "isr": i} for r, i in partitions]}


def test_the_wait_for_sync_passes_over_a_partition_whose_only_copies_are_gone():
    described = [_described("caught-up", ([1, 2, 3], [3, 1, 2])),
                 _described("catching-up", ([1, 2, 3], [1, 2, 3]), ([1, 2, 3], [2, 3])),
                 _described("wiped-at-factor-1", ([1], []))]
    assert short_of_replicas(described) == ["catching-up"]
    assert short_of_replicas(described[2:]) == []
