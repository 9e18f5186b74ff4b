"""``kip deadletter list|show|replay`` on the real broker: dead letters as the stages write
them (payload kept or not, from a request topic or a work topic); a replay sends the one
that can go back to its request topic once, and a second replay sends nothing."""

from __future__ import annotations

import asyncio
import json

import pytest

from kip.cli import main
from kip.schemas.codec import encode
from kip.schemas.deadletter import dead_letter
from kip.schemas.errors import InvalidRequest
from kip.schemas.result_signatures import ResultSigningKey
from tests.e2e.conftest import read_topic
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.topics.names import TopicNames
from kip.transport.outputs import Sealing

pytestmark = pytest.mark.broker
REQUEST = b'{"request_id": "r-1", "tenant": "acme", "schema_version": 2}'
ENVELOPE = "acme-k1:" + "a" * 64


async def _letters(broker, names: TopicNames) -> None:
    """Five letters: 0 replayable; 1 payload not kept; 2 from a work topic; 3 cut at
    64 KiB; 4 with no envelope (no tenant vouched for it)."""
    await apply(broker.kafka, catalogue(names, ["digits"], partitions=1, tenants=["acme"]))
    keep, drop = (Sealing(ResultSigningKey.generate().signer(), keep) for keep in (True, False))
    standard, work = names.requests("standard"), names.work("digits", "standard")
    letters = [(keep, REQUEST, standard), (drop, REQUEST, standard), (keep, REQUEST, work),
               (keep, REQUEST + b" " * 70_000, standard), (keep, b'{"request_id": "r-5"}',
                                                           standard)]
    producer = broker.kafka.producer()
    await producer.start()
    try:
        for offset, (sealing, payload, origin) in enumerate(letters):
            letter = dead_letter(payload, origin, 0, offset, InvalidRequest("schema_version 2"),
                                 now_ms=1)
            if offset < 4:   # the pipeline's: its sender's envelope checked
                letter = letter.model_copy(update={"tenant": "acme", "envelope": ENVELOPE})
            await producer.send_and_wait(names.deadletter, encode(sealing.kept(letter)),
                                         key=origin.encode())
    finally:
        await producer.stop()


def test_list_show_and_a_replay_that_happens_once(broker, prefix, monkeypatch, capsys):
    names = TopicNames(prefix)
    asyncio.run(_letters(broker, names))
    monkeypatch.setenv("KIP_BOOTSTRAP", broker.bootstrap)
    monkeypatch.setenv("KIP_TOPIC_PREFIX", prefix)

    assert main(["deadletter", "list", "--code", "INVALID_REQUEST"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == 5 and "payload not kept" in listed[1]
    assert main(["deadletter", "show", "0"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["payload"] == REQUEST.decode() and shown["replayed"] is None

    assert main(["deadletter", "replay", "--all", "--dry-run"]) == 0
    assert "would replay: to " in capsys.readouterr().out
    for attempt in range(2):
        assert main(["deadletter", "replay", "--all"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert ("replayed: to " in lines[0]) == (attempt == 0)
        assert "not replayed: already replayed" in lines[0] or attempt == 0
        assert "not kept" in lines[1] and "answer its request twice" in lines[2]
        assert "cut to the first 64 KiB" in lines[3] and "no tenant vouched" in lines[4]

    sent = asyncio.run(read_topic(broker.kafka, names.requests("standard")))
    assert [(r.key, r.value) for r in sent] == [(b"acme", REQUEST)]   # once, keyed by tenant
    assert dict(sent[0].headers) == {"kip-request-id": b"r-1",
                                     "kip-envelope": ENVELOPE.encode()}   # as it was sent
    assert main(["deadletter", "show", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["replayed"]["request_id"] == "r-1"
    assert main(["deadletter", "replay", "99"]) == 1


def test_on_a_secured_cluster_the_operator_replays_and_the_audit_reader_may_not(
        secure_broker, prefix):
    from aiokafka.errors import KafkaError

    from kip.deadletter.letters import letters
    from kip.deadletter.replay import replay
    from kip.transport.acl_admin import apply as apply_acls
    from kip.topics.acls import plan

    names = TopicNames(prefix)
    asyncio.run(_letters(secure_broker, names))
    asyncio.run(apply_acls(secure_broker.kafka, names,
                           plan(names, ["digits"], {"acme": ["standard"]})))

    async def as_operator():
        operator = secure_broker.client("operator")
        chosen = [letter async for letter in letters(operator, names)]
        return await replay(operator, names, chosen, "test")
    verdicts = asyncio.run(as_operator())
    assert [v.replayable for v in verdicts] == [True, False, False, False, False]
    sent = asyncio.run(read_topic(secure_broker.kafka, names.requests("standard")))
    assert [r.value for r in sent] == [REQUEST]

    async def as_audit_reader():
        return [letter async for letter in letters(secure_broker.client("audit-reader"),
                                                   names)]
    with pytest.raises((PermissionError, KafkaError)):
        asyncio.run(as_audit_reader())
