"""One place builds Kafka clients, with safe defaults a caller can only make explicit."""

from __future__ import annotations

import re

import pytest

from kip.devkit.layers import modules
from tests.conftest import repo_root
from kip.topics.catalogue import MAX_MESSAGE_BYTES
from kip.transport.clients import BATCH_BYTES, METADATA_MAX_AGE_MS, KafkaConnection

BUILDS_A_CLIENT = re.compile(r"AIOKafka(Producer|Consumer|AdminClient)\(|kafka://")


def test_only_topics_clients_builds_kafka_clients():
    builders = [str(p.relative_to(repo_root())) for p in modules(repo_root())
                if BUILDS_A_CLIENT.search(p.read_text())]
    assert builders == ["transport/clients.py"]


def test_producers_and_consumers_get_the_safe_defaults(monkeypatch):
    built = {}
    for name in ("AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"):
        monkeypatch.setattr(f"kip.transport.clients.{name}",
                            lambda *a, _n=name, **kw: built.setdefault(_n, (a, kw)))
    kafka = KafkaConnection(bootstrap="127.0.0.1:1")
    kafka.producer(linger_ms=20)
    kafka.consumer("t", group_id=None)
    kafka.admin(client_id="x")
    _, producer = built["AIOKafkaProducer"]
    assert producer == {"bootstrap_servers": "127.0.0.1:1", "security_protocol": "PLAINTEXT",
                        "acks": "all",
                        "enable_idempotence": True, "max_request_size": MAX_MESSAGE_BYTES,
                        "max_batch_size": BATCH_BYTES, "linger_ms": 20,
                        "metadata_max_age_ms": METADATA_MAX_AGE_MS}
    topics, consumer = built["AIOKafkaConsumer"]
    assert topics == ("t",) and consumer["isolation_level"] == "read_committed"
    assert consumer["enable_auto_commit"] is False and consumer["group_id"] is None
    assert consumer["max_partition_fetch_bytes"] > MAX_MESSAGE_BYTES
    assert consumer["metadata_max_age_ms"] == METADATA_MAX_AGE_MS
    assert built["AIOKafkaAdminClient"][1] == {"bootstrap_servers": "127.0.0.1:1",
                                               "security_protocol": "PLAINTEXT",
                                               "client_id": "x"}
    assert kafka.faust_broker() == {"broker": "kafka://127.0.0.1:1"}


def test_a_caller_can_override_a_default_explicitly(monkeypatch):
    built = {}
    monkeypatch.setattr("kip.transport.clients.AIOKafkaProducer", lambda **kw: built.update(kw))
    KafkaConnection(bootstrap="h:1").producer(enable_idempotence=False)
    assert built["enable_idempotence"] is False and built["acks"] == "all"


def test_security_settings_that_cannot_work_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="PLAIN sends the password"):
        KafkaConnection(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                        sasl_username="u", sasl_password="p")
    with pytest.raises(ValueError, match="needs sasl_username and sasl_password"):
        KafkaConnection(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512")
    with pytest.raises(ValueError, match="goes with a SASL"):
        KafkaConnection(security_protocol="SSL", sasl_mechanism="SCRAM-SHA-512")
    with pytest.raises(ValueError, match="go together"):
        KafkaConnection(security_protocol="SSL", ssl_certfile="c.pem")


def test_a_password_never_shows_in_a_repr_or_an_error():
    kafka = KafkaConnection(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                            sasl_username="pipeline", sasl_password="hunter2-secret")
    assert "hunter2" not in repr(kafka) and "hunter2" not in str(kafka.model_dump())
    assert kafka.aiokafka()["sasl_plain_password"] == "hunter2-secret"
