"""Which group member reads which partition: sticky, and balanced topic by topic.

A worker's background lane reads two topics (standard and batch) whose loads differ. An
assignor that balances partition counts over all topics together, as Kafka's sticky
assignor does, may give one member every standard partition and another every batch
one: three workers then serve standard requests at the pace of one. Round robin
interleaves topics, but moves most partitions at every join or leave, and each moved
partition costs its new owner a take-over (workers/lane.py).

``assign`` balances each topic on its own (every member of a topic gets its partition
count divided by the members, or one more) and, within that, leaves each partition with
the member that had it. Members send what they had in their join metadata
(``encode_owned``); the group's leader runs ``assign``. The aiokafka side of it is in
transport/aiokafka_adapter.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping


def assign(partitions: Mapping[str, list[int]], subscriptions: Mapping[str, list[str]],
           owned: Mapping[str, Mapping[str, list[int]]]) -> dict[str, dict[str, list[int]]]:
    """``{member: {topic: [partition]}}`` for ``partitions`` (per topic), given each
    member's subscribed topics and the partitions it owned before."""
    out: dict[str, dict[str, list[int]]] = {member: {} for member in subscriptions}
    for topic, parts in sorted(partitions.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if members:
            for member, got in _assign_topic(sorted(parts), members, topic, owned).items():
                if got:
                    out[member][topic] = got
    return out


def _assign_topic(parts: list[int], members: list[str], topic: str,
                  owned: Mapping[str, Mapping[str, list[int]]]) -> dict[str, list[int]]:
    base, extra = divmod(len(parts), len(members))
    taken: dict[str, list[int]] = {m: [] for m in members}
    free = set(parts)
    had = {m: [p for p in sorted(owned.get(m, {}).get(topic, [])) if p in free]
           for m in members}
    for member in members:   # each keeps up to its share of what it had
        for p in had[member][:base]:
            if p in free:
                taken[member].append(p)
                free.discard(p)
    for member in members:   # the extra partitions go first to members that had more
        if extra and len(had[member]) > base:
            more = [p for p in had[member][base:] if p in free][:1]
            if more:
                taken[member].append(more[0])
                free.discard(more[0])
                extra -= 1
    for p in sorted(free):   # the rest to the members furthest below their share
        member = min((m for m in members if len(taken[m]) < base
                      or (len(taken[m]) == base and extra)),
                     key=lambda m: (len(taken[m]), m))
        if len(taken[member]) == base:
            extra -= 1
        taken[member].append(p)
    return {m: sorted(ps) for m, ps in taken.items()}


def encode_owned(owned: Mapping[str, list[int]] | None) -> bytes:
    return json.dumps(owned or {}, sort_keys=True).encode()


def decode_owned(data: bytes | None) -> dict[str, list[int]]:
    """What a member says it owned; anything unreadable counts as nothing."""
    try:
        found = json.loads(data or b"{}")
        return {str(t): [int(p) for p in ps] for t, ps in found.items()}
    except (ValueError, TypeError, AttributeError):
        return {}
