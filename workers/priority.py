"""Priority between classes at the worker: serve interactive, then standard, then batch.

Kafka has no priority inside a topic, so each class has its own topic and the worker
pauses the partitions of lower classes while a higher class has backlog. Aging bounds
starvation: a class that has waited with backlog longer than ``max_wait_ms`` is
resumed until it has been served once.
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer

from kip.schemas.messages import PRIORITIES, Priority


def classes_to_pause(backlog: dict[Priority, int], waiting_since_ms: dict[Priority, float],
                     now_ms: float, max_wait_ms: float) -> set[Priority]:
    """The classes below the highest class with backlog, except those aged past the bound."""
    busy = [p for p in PRIORITIES if backlog.get(p, 0) > 0]
    if not busy:
        return set()
    below = set(busy[0].below())
    aged = {p for p in below
            if p in waiting_since_ms and now_ms - waiting_since_ms[p] >= max_wait_ms}
    return below - aged


class Prioritizer:
    """Keeps a fresh view of backlog per class and pauses/resumes partitions to match."""

    def __init__(self, consumer: AIOKafkaConsumer, topic_class: dict[str, Priority],
                 max_wait_ms: float, refresh_ms: float = 20.0) -> None:
        self.consumer = consumer
        self.topic_class = topic_class
        self.max_wait_ms = max_wait_ms
        self.refresh_ms = refresh_ms
        self.backlog: dict[Priority, int] = {}
        self.waiting_since_ms: dict[Priority, float] = {}
        self._refreshed_at = float("-inf")

    async def apply(self) -> None:
        now = time.monotonic() * 1000
        if now - self._refreshed_at < self.refresh_ms:
            return
        self._refreshed_at = now
        self.backlog = await backlog_by_class(self.consumer, self.topic_class)
        paused = classes_to_pause(self.backlog, self.waiting_since_ms, now, self.max_wait_ms)
        for p in PRIORITIES:
            if p in paused and self.backlog.get(p, 0) > 0:
                self.waiting_since_ms.setdefault(p, now)
        self._set_paused(paused)

    def served(self, classes: set[Priority]) -> None:
        """Classes that had records in the last batch stop aging."""
        for p in classes:
            self.waiting_since_ms.pop(p, None)

    def _set_paused(self, paused: set[Priority]) -> None:
        assigned = self.consumer.assignment()
        pause = [tp for tp in assigned if self.topic_class.get(tp.topic) in paused]
        resume = [tp for tp in assigned if self.topic_class.get(tp.topic) not in paused]
        if pause:
            self.consumer.pause(*pause)
        if resume:
            self.consumer.resume(*resume)


async def backlog_by_class(consumer: AIOKafkaConsumer, topic_class: dict[str, Priority]
                           ) -> dict[Priority, int]:
    """Records not yet consumed in this member's partitions, per class.

    Uses the high watermark that fetch responses carry, never a request of its own:
    an offsets request shares the connection with the fetch long-poll and would wait
    behind it (up to fetch_max_wait_ms) on every call. The high watermark, not the last
    stable offset: work items in a pipeline transaction not yet committed are already
    on their way, and admission must count them (with the stable offset it missed them
    and let in requests that then expired). A paused partition keeps the value it had
    when it was paused, which still shows that it has backlog.
    """
    out: dict[Priority, int] = {}
    for tp in consumer.assignment():
        end = consumer.highwater(tp)
        if end is None:
            continue
        priority = topic_class[tp.topic]
        out[priority] = out.get(priority, 0) + max(0, end - await consumer.position(tp))
    return out
