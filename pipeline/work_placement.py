"""Which partition of a work topic a round's work items go to, chosen before they are
stamped: the stamp names it (schemas/stamps.py), and a worker runs an item only from
that partition, whose owner answers each request id once (workers/single_use.py).

One partition per work topic, drawn at random, kept for ``keep_ms``: a transaction then
touches one partition of each work topic, as kip's transactions do for topics placed by
no key (transport/transactions.py), and an interactive pipeline, which keeps its next
transaction begun with the partitions of its last, finds it begun with the right one.
"""

from __future__ import annotations

import random

from kip.schemas.messages import Priority

INTERACTIVE_KEEP_MS = 1000


class WorkPlacement:
    def __init__(self, keep_ms: int = 0) -> None:
        self.keep_ms = keep_ms
        self._chosen: dict[str, tuple[int, int]] = {}   # topic -> (partition, since ms)

    @classmethod
    def of_class(cls, priority: Priority) -> WorkPlacement:
        """An agent's: interactive rounds keep a partition ``INTERACTIVE_KEEP_MS`` (their
        transactions are kept begun with the last one's partitions); the others draw
        one each round."""
        return cls(INTERACTIVE_KEEP_MS if priority == Priority.INTERACTIVE else 0)

    def partition(self, topic: str, count: int, now_ms: int) -> int:
        """The partition of ``topic`` (of ``count``) for a work item routed at ``now_ms``:
        the one drawn last while younger than ``keep_ms`` (and in a round of the same
        instant, always), else a new draw."""
        chosen = self._chosen.get(topic)
        if chosen is not None and chosen[0] < count and now_ms - chosen[1] <= self.keep_ms:
            return chosen[0]
        partition = random.randrange(count)
        self._chosen[topic] = (partition, now_ms)
        return partition
