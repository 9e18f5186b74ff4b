"""How long a hot-path reader's fetch may wait at the broker: short only when it leaves
partitions out.

aiokafka keeps one fetch in flight per broker, and leaves out of it the partitions it
cannot fetch now: those whose fetched records the reader has not taken yet, paused
ones, and those waiting for an offset reset. A record that arrives on a partition left
out waits until the fetch in flight returns, so those readers fetch with a short wait
(``HOT_PATH_FETCH_MAX_WAIT_MS``; transport/clients.py says why). A fetch that asks for
every partition the reader is assigned on that broker leaves nothing out: the broker
answers it as soon as any of them has a record to give (the minimum is one byte), so its
wait costs no latency, and ``IDLE_FETCH_MAX_WAIT_MS`` spares an idle reader and its
broker a fetch every few tens of milliseconds (docs/benchmarks.md has what that costs
an idle broker).

aiokafka has no setting for this: transport/aiokafka_adapter.py wraps the fetcher's own
choice of fetches and lengthens the wait of each fetch that left nothing out.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer

from kip.transport.aiokafka_adapter import lengthen_whole_fetches

IDLE_FETCH_MAX_WAIT_MS = 500   # aiokafka's default, as readers off the hot path keep
# A follower that has caught up (the pipeline's views, a worker's releases) reads every
# partition of its topic, so a record answers its fetch at once: waiting longer only
# spares its broker fetches.
FOLLOWING_FETCH_MAX_WAIT_MS = 5_000


def wait_long_when_whole(consumer: AIOKafkaConsumer,
                         idle_ms: int = IDLE_FETCH_MAX_WAIT_MS) -> None:
    """From now on, each fetch of the started ``consumer`` that asks for every partition
    it is assigned on that broker waits up to ``idle_ms``; the others keep the
    consumer's ``fetch_max_wait_ms``."""
    lengthen_whole_fetches(consumer, idle_ms)
