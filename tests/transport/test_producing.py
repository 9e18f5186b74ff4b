"""The clearing up after a dropped producer, on the real broker."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.errors import ProducerFenced

from kip.transport.producing import stop_quietly

pytestmark = pytest.mark.broker


def test_a_producer_whose_stop_raises_still_has_its_connections_closed(broker, prefix):
    """A fenced producer's sender, cancelled by ``stop``, can raise ProducerFenced from
    the transactional request it was awaiting; ``stop`` then never closes its client.
    Its connections stayed open until the garbage collector found them."""
    async def scenario():
        producer = broker.kafka.producer(transactional_id=f"{prefix}.t")
        await producer.start()
        await producer._txn_manager.wait_for_pid()   # connections to the coordinator too
        assert any(conn.connected() for conn in producer.client._conns.values())
        sender_close = producer._sender.close

        async def fenced_on_close():
            await sender_close()
            raise ProducerFenced()
        producer._sender.close = fenced_on_close
        await stop_quietly(producer)
        assert not any(conn.connected() for conn in producer.client._conns.values())
    asyncio.run(scenario())
