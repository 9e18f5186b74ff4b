"""Static group membership (KIP-345): a consumer that joins with a ``group.instance.id``
(a pod's name) and comes back within its session timeout takes its partitions back
without a rebalance, so a crashed or restarted worker costs its group nothing.

Such a member never leaves on its own: aiokafka sends no LeaveGroup for it, and the
group would wait out its session timeout after a deliberate stop. ``leave`` sends the
leave a stopping worker owes, once its last batch is committed and its consumer closed,
so a scale-in moves its partitions at once.
"""

from __future__ import annotations

import asyncio
import logging

from aiokafka.errors import KafkaError

from kip.transport.aiokafka_adapter import leave_as_static_member
from kip.transport.clients import KafkaConnection

log = logging.getLogger("kip.transport")
TRIES, BACKOFF_S = 5, 0.2


async def leave(kafka: KafkaConnection, group_id: str, instance_id: str) -> bool:
    """Remove the static member ``instance_id`` from ``group_id``; False (logged) where
    the coordinator cannot be reached: the group then waits out the session timeout."""
    admin = kafka.admin(client_id=f"kip-leave-{instance_id}"[:64])
    try:
        await admin.start()
        for attempt in range(TRIES):
            try:
                await leave_as_static_member(admin, group_id, instance_id)
                return True
            except KafkaError as err:   # a coordinator moving: ask again shortly
                if not err.retriable or attempt == TRIES - 1:
                    raise
                await asyncio.sleep(BACKOFF_S)
    except KafkaError as err:
        log.error("%s could not leave %s at once (its partitions move after its session "
                  "timeout): %r", instance_id, group_id, err)
        return False
    finally:
        await admin.close()
