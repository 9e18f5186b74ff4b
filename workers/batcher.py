"""Micro-batching in one place: pull up to ``max_batch`` records within ``max_delay_ms``.

The clock starts at the first record; each further ``getmany`` waits only for the time
left, so a batch never waits longer than ``max_delay_ms`` for company.
"""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord

IDLE_POLL_MS = 200


async def next_batch(consumer: AIOKafkaConsumer, max_batch: int, max_delay_ms: float,
                     idle_ms: int = IDLE_POLL_MS) -> list[ConsumerRecord]:
    """Records for one inference call (empty after ``idle_ms`` with nothing)."""
    batch = _flatten(await consumer.getmany(timeout_ms=idle_ms, max_records=max_batch))
    if not batch:
        return batch
    deadline = time.monotonic() + max_delay_ms / 1000
    while len(batch) < max_batch:
        left_ms = (deadline - time.monotonic()) * 1000
        if left_ms <= 0:
            break
        batch += _flatten(await consumer.getmany(timeout_ms=int(left_ms) or 1,
                                                 max_records=max_batch - len(batch)))
    return batch


def _flatten(by_partition: dict) -> list[ConsumerRecord]:
    return [r for records in by_partition.values() for r in records]
