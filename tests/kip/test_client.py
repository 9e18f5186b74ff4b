import asyncio
from typing import NamedTuple

import numpy as np
import pytest

from kip.client import KipClient
from kip.schemas.codec import encode
from kip.schemas.messages import InferenceResult, Status, Timings
from kip.schemas.result_signatures import ResultSigningKey, request_sha256
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames

KIP_KEY = ResultSigningKey.generate("r1")


def _client(broker, prefix, **kw) -> KipClient:
    return KipClient(broker.bootstrap, tenant="acme", key_id="k1", secret="s",
                     topic_prefix=prefix, result_keys={"r1": KIP_KEY.public()}, **kw)


class _Record(NamedTuple):
    topic: str
    key: bytes
    value: bytes
    headers: list


def _result(request_id: str, answers: bytes | None, key: ResultSigningKey | None = KIP_KEY,
            topic: str | None = None, client: KipClient | None = None) -> _Record:
    """A result record for ``request_id`` naming the digest of ``answers``, signed with
    ``key`` (None: unsigned), on ``topic`` (default: the client's reply topic)."""
    result = InferenceResult(request_id=request_id, status=Status.OK,
                             request_sha256=answers and request_sha256(answers),
                             timings=Timings(total_ms=1.0), produced_at_ms=1)
    value = encode(result)
    headers = [key.signer().header(value)] if key else []
    return _Record(topic or client.listening_on, request_id.encode(), value, headers)


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


def test_only_a_signed_result_naming_the_message_sent_answers_a_request(broker, prefix):
    """Forged, replayed or misdirected results under a pending id are refused; other
    clients' results are counted without being decoded."""
    asyncio.run(apply(broker.kafka, catalogue(TopicNames(prefix), ["digits"], 1)))
    sent = b'{"the": "request as sent"}'
    stranger = ResultSigningKey.generate("r1")   # same key id, not kip's key

    async def go():
        async with _client(broker, prefix) as client:
            mine = client.expect("mine", sent)
            client._deliver(_Record("x", b"someone-else", b"not json at all", []))
            for forged in (_result("mine", sent, key=None, client=client),
                           _result("mine", sent, key=stranger, client=client),
                           _result("mine", b"another message", client=client),
                           _result("mine", None, client=client),
                           _result("mine", sent, topic="elsewhere", client=client),
                           _Record(client.listening_on, b"mine", b"not json", [])):
                client._deliver(forged)
            refused, done_early = client.refused, mine.done()
            client._deliver(_result("mine", sent, client=client))
            return client.unmatched, refused, done_early, mine.result()
    unmatched, refused, done_early, result = asyncio.run(go())
    assert (unmatched, refused, done_early) == (1, 6, False)
    assert result.request_id == "mine" and result.status == Status.OK


def test_a_client_without_the_result_keys_says_what_to_do(broker, prefix, tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv("KIP_HOME", str(tmp_path))
    client = KipClient(broker.bootstrap, tenant="acme", key_id="k1", secret="s",
                       topic_prefix=prefix)
    with pytest.raises(ValueError, match="result public keys .*kip keys init"):
        asyncio.run(client.start())



def test_a_dead_result_reader_fails_every_waiting_request_at_once(broker, prefix):
    asyncio.run(apply(broker.kafka, catalogue(TopicNames(prefix), ["digits"], 1)))

    async def go():
        async with _client(broker, prefix) as client:
            waiting = client.expect("never-answered", b"{}")
            await client._consumer.stop()   # the reader's next fetch raises
            try:
                await asyncio.wait_for(waiting, 10)
            except ConnectionError as err:
                return str(err)
    assert "stopped reading results" in asyncio.run(go())
