"""Sticky, per-topic balanced assignment (transport/assignment.py)."""

from __future__ import annotations

import asyncio
import time

import pytest

from kip.topics.catalogue import TopicSpec
from kip.transport.admin import apply
from kip.transport.aiokafka_adapter import sticky_per_topic
from kip.transport.assignment import assign, decode_owned, encode_owned

TOPICS = {"standard": [0, 1, 2], "batch": [0, 1, 2]}
BOTH = ["standard", "batch"]


def _counts(result, topic):
    return sorted(len(topics.get(topic, [])) for topics in result.values())


def test_each_topic_is_balanced_on_its_own():
    """Count-balanced over both topics, three members could get (s, s), (s, b), (b, b)."""
    owned = {"w1": {"standard": [0, 1]}, "w2": {"standard": [2], "batch": [0]},
             "w3": {"batch": [1, 2]}}
    result = assign(TOPICS, {m: BOTH for m in owned}, owned)
    assert _counts(result, "standard") == _counts(result, "batch") == [1, 1, 1]
    assert result["w1"]["standard"][0] in (0, 1) and result["w3"]["batch"][0] in (1, 2)


def test_a_join_moves_only_what_the_newcomer_takes():
    owned = {"w1": {"standard": [0, 1, 2], "batch": [0, 1, 2]}}
    result = assign(TOPICS, {"w1": BOTH, "w2": BOTH}, owned)
    moved = {(t, p) for t, ps in result["w2"].items() for p in ps}
    assert len(moved) == 2 and {t for t, _ in moved} == {"standard", "batch"}
    assert all(p in owned["w1"][t] for t, ps in result["w1"].items() for p in ps)


def test_a_leave_moves_only_the_leavers_partitions():
    owned = {"w1": {"standard": [0], "batch": [0]}, "w2": {"standard": [1], "batch": [1]},
             "w3": {"standard": [2], "batch": [2]}}
    result = assign(TOPICS, {"w1": BOTH, "w2": BOTH}, owned)
    for member in ("w1", "w2"):
        for topic in BOTH:
            assert set(owned[member][topic]) <= set(result[member][topic])
    assert sorted(p for r in result.values() for p in r["standard"]) == [0, 1, 2]


def test_a_partition_claimed_twice_goes_to_one_and_unreadable_metadata_is_nothing():
    owned = {"w1": {"standard": [0]}, "w2": {"standard": [0]}}
    result = assign({"standard": [0, 1]}, {"w1": ["standard"], "w2": ["standard"]}, owned)
    assert sorted(p for r in result.values() for p in r.get("standard", [])) == [0, 1]
    assert decode_owned(b"not json") == {} and decode_owned(encode_owned({"t": [1]})) == \
        {"t": [1]}


def test_more_members_than_partitions_leaves_some_without():
    result = assign({"interactive": [0, 1]}, {m: ["interactive"] for m in ("a", "b", "c")},
                    {})
    assert _counts(result, "interactive") == [0, 1, 1]


@pytest.mark.broker
def test_three_members_joining_at_once_settle_balanced_per_topic(broker, prefix):
    """On the broker, through aiokafka's coordinator: no rebalance storm (offered beside
    round robin, this assignor's members rebalanced without end), and each member reads
    one partition of each topic."""
    topics = [f"{prefix}.standard", f"{prefix}.batch"]

    async def go():
        await apply(broker.kafka, [TopicSpec(t, 3, "any", "test", {}) for t in topics])
        consumers = [broker.kafka.consumer(
            group_id=f"{prefix}-g", session_timeout_ms=6000, heartbeat_interval_ms=250,
            partition_assignment_strategy=sticky_per_topic(f"{prefix}-{n}"))
            for n in range(3)]
        for consumer in consumers:
            consumer.subscribe(topics)
        await asyncio.gather(*(c.start() for c in consumers))
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not all(len(c.assignment()) == 2
                                                           for c in consumers):
                await asyncio.gather(*(c.getmany(timeout_ms=100) for c in consumers))
            return [sorted(tp.topic for tp in c.assignment()) for c in consumers]
        finally:
            await asyncio.gather(*(c.stop() for c in consumers))

    assert asyncio.run(go()) == [sorted(topics)] * 3
