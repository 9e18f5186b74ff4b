"""How long a hot-path reader's fetch may wait at the broker: short only when it leaves
partitions out.

aiokafka keeps one fetch in flight per broker, and leaves out of it the partitions it
cannot fetch now: those whose fetched records the reader has not taken yet, paused
ones, and those waiting for an offset reset. A record that arrives on a partition left
out waits until the fetch in flight returns, so those readers fetch with a short wait
(``HOT_PATH_FETCH_MAX_WAIT_MS``; topics/clients.py says why). A fetch that asks for
every partition the reader is assigned on that broker leaves nothing out: the broker
answers it as soon as any of them has a record to give (the minimum is one byte), so its
wait costs no latency, and ``IDLE_FETCH_MAX_WAIT_MS`` spares an idle reader and its
broker a fetch every 50 ms. An idle kip of four processes cost its broker 13.8% of a
core with every fetch at 50 ms (docs/benchmarks.md).

aiokafka has no setting for this: ``wait_long_when_whole`` wraps the fetcher's own
choice of fetches (``Fetcher._get_actions_per_node``, aiokafka 0.14; its test fails if
that changes) and lengthens the wait of each fetch that left nothing out.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

IDLE_FETCH_MAX_WAIT_MS = 500   # aiokafka's default, as readers off the hot path keep
# A follower that has caught up (the pipeline's views, a worker's releases) reads every
# partition of its topic, so a record answers its fetch at once: waiting longer only
# spares its broker fetches (each ~1 ms of the broker's CPU on a small host).
FOLLOWING_FETCH_MAX_WAIT_MS = 5_000


def wait_long_when_whole(consumer: AIOKafkaConsumer,
                         idle_ms: int = IDLE_FETCH_MAX_WAIT_MS) -> None:
    """From now on, each fetch of the started ``consumer`` that asks for every partition
    it is assigned on that broker waits up to ``idle_ms``; the others keep the
    consumer's ``fetch_max_wait_ms``, and so does every fetch while a partition has no
    known leader (once it has one, it may be on a broker with a fetch in flight)."""
    fetcher = consumer._fetcher
    if fetcher is None:
        raise RuntimeError("start the consumer first: its fetcher is made by start()")
    choose = fetcher._get_actions_per_node

    def actions_per_node(assignment):
        actions = choose(assignment)
        nodes = [fetcher._select_read_replica(tp) for tp in assignment.tps]
        if None in nodes or -1 in nodes:   # a partition without a leader is left out
            return actions
        for node_id, request in actions[0]:
            if _asked(request) == nodes.count(node_id):
                request._max_wait_ms = max(request._max_wait_ms, idle_ms)
        return actions

    fetcher._get_actions_per_node = actions_per_node


def _asked(request) -> int:
    return sum(len(partitions) for _, partitions in request.topics)
