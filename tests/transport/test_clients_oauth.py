"""OAUTHBEARER end to end: a token read from a file at each authentication names the
principal. The broker here checks tokens with Kafka's unsecured validator (tests only:
it trusts any unsigned token), which is enough to show which principal kip presents."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import faust
import pytest

from kip.devkit.broker import LocalBroker, free_port
from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec
from kip.transport.clients import KafkaConnection

pytestmark = pytest.mark.broker
LOGIN = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"


class OAuthBroker(LocalBroker):
    """The secured local broker plus a SASL_SSL listener that takes OAUTHBEARER."""

    def __init__(self, *args, oauth_port: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.oauth_port = oauth_port

    def _listeners(self) -> list[str]:
        extra = {"listeners=": f",OAUTH://127.0.0.1:{self.oauth_port}",
                 "advertised.listeners=": f",OAUTH://127.0.0.1:{self.oauth_port}",
                 "listener.security.protocol.map=": ",OAUTH:SASL_SSL"}
        lines = [line + next((v for k, v in extra.items() if line.startswith(k)), "")
                 for line in super()._listeners()]
        return lines + ["listener.name.oauth.sasl.enabled.mechanisms=OAUTHBEARER",
                        f'listener.name.oauth.oauthbearer.sasl.jaas.config={LOGIN} '
                        'unsecuredLoginStringClaim_sub="admin";']


def _token(subject: str) -> str:
    def part(doc: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()
    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + 600})}."


def test_the_token_file_names_the_principal(tmp_path):
    broker = OAuthBroker(tmp_path / "kafka", port=free_port(), controller_port=free_port(),
                         mtls_port=free_port(), secure=True, oauth_port=free_port())
    broker.start(log=lambda *_: None)
    token = tmp_path / "token"
    oauth = KafkaConnection(bootstrap=f"127.0.0.1:{broker.oauth_port}",
                            security_protocol="SASL_SSL", ssl_cafile=broker.security.ca.cert_path,
                            sasl_mechanism="OAUTHBEARER", sasl_oauth_token_file=token)

    async def visible_topics() -> list[str]:
        admin = oauth.admin()
        await admin.start()
        try:
            return await admin.list_topics()
        finally:
            await admin.close()
    try:
        asyncio.run(apply(broker.kafka, [TopicSpec("o.visible", 1, "k", "test", {})]))
        token.write_text(_token("admin"))          # a super user sees the topic
        as_admin = asyncio.run(visible_topics())
        token.write_text(_token("tenant-acme"))    # a principal without ACLs sees nothing
        as_tenant = asyncio.run(visible_topics())
    finally:
        broker.stop()
    assert "o.visible" in as_admin and as_tenant == []


def test_faust_gets_the_same_oauth_credentials(tmp_path):
    oauth = KafkaConnection(bootstrap="h:1", security_protocol="SASL_SSL",
                            sasl_mechanism="OAUTHBEARER", sasl_oauth_token_file=tmp_path / "t")
    credentials = oauth.faust_broker()["broker_credentials"]
    assert isinstance(credentials, faust.OAuthCredentials)
    assert credentials.protocol.value == "SASL_SSL"
    assert credentials.oauth_cb.path == tmp_path / "t"
