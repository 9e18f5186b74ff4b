"""Request envelopes: who sent a request message, checked before its body is parsed.

A request's own signature (schemas/signing.py) covers its fields and its inputs'
digests, so checking it means parsing the JSON and decoding every tensor: the most
expensive work the pipeline does. Until it has been done, nothing said who sent a
message, so a flood of messages keyed with another tenant's name cost that tenant its
budget and filled its reply topic. The envelope is a second HMAC, under the same API
key, over what the pipeline knows before parsing, carried in the record header

    kip-envelope: <key id>:<hex HMAC-SHA256 of the lines below>

    kip-envelope-v1, topic, tenant (the record's key), request id (the
    ``kip-request-id`` header), sha256 of the record's value (hex)

joined with "\\n". The value's sha256 is the digest every result names
(``request_sha256``), computed once for both. A message whose envelope checks came
from a holder of the tenant's key, byte for byte; only then does the pipeline spend
its budget on it, answer it on the tenant's own reply topic, or parse it.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kip.schemas.messages import ID_PATTERN

_ID = re.compile(ID_PATTERN)
ENVELOPE_HEADER = "kip-envelope"
ENVELOPE_SCHEME = "kip-envelope-v1"
MAX_HEADER = 256   # a key id (128) and a hex MAC (64) fit well inside


@dataclass(frozen=True)
class Sender:
    """What a valid envelope proves of a message."""

    tenant: str
    key_id: str
    request_id: str


def envelope_lines(topic: str, tenant: str, request_id: str, value_sha256: str) -> bytes:
    return "\n".join((ENVELOPE_SCHEME, topic, tenant, request_id, value_sha256)).encode()


def envelope(secret: bytes, key_id: str, topic: str, tenant: str, request_id: str,
             value_sha256: str) -> tuple[str, bytes]:
    """The ``kip-envelope`` header of a request message."""
    mac = hmac.digest(secret, envelope_lines(topic, tenant, request_id, value_sha256),
                      "sha256").hex()
    return ENVELOPE_HEADER, f"{key_id}:{mac}".encode()


def sender(headers: Sequence[tuple[str, bytes | None]], topic: str, key: bytes | None,
           value_sha256: str, request_id: str | None,
           secret_of: Callable[[str, str], bytes | None]) -> Sender | None:
    """Who sent the message, if its envelope checks: one ``kip-envelope`` header, a
    well-formed ``request_id`` (the ``kip-request-id`` header), a key id whose secret
    ``secret_of(key_id, tenant)`` gives for the tenant the record's key names, and the
    MAC over ``topic``, that tenant, ``request_id`` and ``value_sha256``."""
    found = [v for k, v in headers if k == ENVELOPE_HEADER]
    if len(found) != 1 or not found[0] or len(found[0]) > MAX_HEADER or not key \
            or request_id is None or not _ID.match(request_id):
        return None
    key_id, _, mac = found[0].decode("ascii", "replace").rpartition(":")
    tenant = key.decode("utf-8", "replace")
    secret = secret_of(key_id, tenant)
    if secret is None:
        return None
    wanted = hmac.digest(secret, envelope_lines(topic, tenant, request_id, value_sha256),
                         "sha256").hex()
    return Sender(tenant, key_id, request_id) if hmac.compare_digest(wanted, mac) else None
