import asyncio

import numpy as np
import pytest

from kip.client import KipClient
from topics.admin import apply
from topics.catalogue import catalogue
from topics.names import TopicNames


def _client(broker, prefix, **kw) -> KipClient:
    return KipClient(broker.bootstrap, tenant="acme", key_id="k1", secret="s",
                     topic_prefix=prefix, **kw)


def test_starting_without_the_reply_topic_says_what_to_do(broker, prefix):
    async def go():
        client = _client(broker, prefix)
        try:
            await client.start()
        finally:
            await client.stop()
    with pytest.raises(RuntimeError, match=r"reply topic .*results does not exist.*topics apply"):
        asyncio.run(go())


def test_stopping_fails_requests_still_waiting(broker, prefix):
    asyncio.run(apply(broker.kafka, catalogue(TopicNames(prefix), ["digits"], 1)))

    async def go():
        async with _client(broker, prefix) as client:
            request = client.request("digits", {"pixels": np.zeros((1, 64), np.float32)})
            pending = await client.submit(request)   # no pipeline runs: no result comes
        return pending
    pending = asyncio.run(go())
    with pytest.raises(ConnectionError, match="stopped before the result"):
        pending.result()


def test_results_of_other_requests_are_counted_without_being_decoded(broker, prefix):
    asyncio.run(apply(broker.kafka, catalogue(TopicNames(prefix), ["digits"], 1)))

    async def go():
        async with _client(broker, prefix) as client:
            mine = client.expect("mine")
            client._deliver(b"someone-else", b"not json at all")   # skipped by its key
            client._deliver(b"mine", b"not json either")           # ours, but malformed
            return client.unmatched, mine.done()
    unmatched, answered = asyncio.run(go())
    assert (unmatched, answered) == (1, False)



def test_a_dead_result_reader_fails_every_waiting_request_at_once(broker, prefix):
    asyncio.run(apply(broker.kafka, catalogue(TopicNames(prefix), ["digits"], 1)))

    async def go():
        async with _client(broker, prefix) as client:
            waiting = client.expect("never-answered")
            await client._consumer.stop()   # the reader's next fetch raises
            try:
                await asyncio.wait_for(waiting, 10)
            except ConnectionError as err:
                return str(err)
    assert "stopped reading results" in asyncio.run(go())
