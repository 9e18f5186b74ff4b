"""``kip security init``: what compose's init service writes boots a real broker that
trusts no one, and kip's principals connect to it with the client configs it wrote."""

from __future__ import annotations

import asyncio
import json
import stat

import pytest
from aiokafka.errors import TopicAuthorizationFailedError

from kip.devkit.broker import LocalBroker, free_port
from kip.security import Listeners, ensure_access_file, init_deployment
from kip.schemas.messages import PRIORITIES
from kip.transport.acl_admin import apply as apply_acls
from kip.topics.acls import plan
from kip.transport.admin import apply
from kip.topics.catalogue import MAX_MESSAGE_BYTES, catalogue
from kip.transport.clients import KafkaConnection
from kip.topics.names import TopicNames

pytestmark = pytest.mark.broker
USERS = ["pipeline", "operator", "audit-reader", "worker-digits", "tenant-demo"]


def test_the_init_output_boots_a_secured_broker_and_serves_its_principals(tmp_path):
    security, data = tmp_path / "security", tmp_path / "kafka"
    at = Listeners(free_port(), free_port(), free_port(), bind="127.0.0.1",
                   advertised="localhost", scram=False)
    config = tmp_path / "config" / "server.properties"
    init_deployment(security, USERS, "localhost", config, MAX_MESSAGE_BYTES, at=at,
                    log_dir=str(data / "logs"))
    properties = config.read_text()
    assert "allow.everyone.if.no.acl.found=false" in properties
    assert f"message.max.bytes={MAX_MESSAGE_BYTES}" in properties
    for private in (config, security / "users.json", security / "clients" / "pipeline.json"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600

    broker = LocalBroker(data, port=at.port, controller_port=at.controller_port, config=config)
    broker.start(log=lambda *_: None)
    try:
        asyncio.run(_serve(security))
    finally:
        broker.stop()


async def _serve(security) -> None:
    def connection(user: str) -> KafkaConnection:
        return KafkaConnection(**json.loads((security / "clients" / f"{user}.json").read_text()))
    names = TopicNames("c")
    admin = connection("admin")
    assert admin.sasl_mechanism == "PLAIN" and admin.security_protocol == "SASL_SSL"
    await apply(admin, catalogue(names, ["digits"], 1, ["demo"]))
    await apply_acls(admin, names, plan(names, ["digits"], {"demo": PRIORITIES}))
    producer = connection("tenant-demo").producer(enable_idempotence=False)
    await producer.start()
    try:
        await producer.send_and_wait(names.requests("batch"), b"{}", key=b"demo")
        with pytest.raises(TopicAuthorizationFailedError):
            await producer.send_and_wait(names.work("digits", "batch"), b"{}", key=b"x")
    finally:
        await producer.stop()


def test_the_access_file_is_made_once_with_a_random_secret(tmp_path):
    path = tmp_path / "access.json"
    first = ensure_access_file(path, "demo", "demo-key")
    again = ensure_access_file(path, "demo", "demo-key")
    secret = first.keys["demo-key"].secret.get_secret_value()
    assert len(secret) == 64 and again.keys["demo-key"].secret.get_secret_value() == secret
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
