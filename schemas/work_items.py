"""The pipeline's work items as they go on the wire: the request's own bytes inside.

A work item is the request the producer sent, plus the route, deadline and reply topic
the pipeline chose, stamped (schemas/stamps.py). The pipeline has just validated the
request message, so instead of dumping its parsed form again (every tensor re-encoded)
it splices the message bytes in as the ``request`` field:

    {"request": <the request message, byte for byte>, "schema_version": 1, "route": ...}

That is a valid ``WorkItem`` document: the message is a JSON object that decoded as an
``InferenceRequest``. A worker decodes and checks it like any other (the stamp covers the
inputs' digest, so a changed byte in a tensor fails it), and it reads exactly what the
producer signed. The envelope adds well under a kilobyte to the message, inside the
headroom ``pipeline.admission.MAX_REQUEST_BYTES`` leaves below the broker's limit.
"""

from __future__ import annotations

import orjson

from kip.schemas.messages import SCHEMA_VERSION, InferenceRequest, Route
from kip.schemas.stamps import StampKeys, canonical_fields, stamp_mac


def encode_work_item(payload: bytes, request: InferenceRequest, route: Route, *,
                     routed_at_ms: int, deadline_ms: int, reply_to: str | None,
                     request_sha256: str | None, work_partition: int | None,
                     keys: StampKeys) -> bytes:
    """The stamped work item for ``request``, decoded from ``payload``, as JSON bytes."""
    lines = canonical_fields(request, route, routed_at_ms, deadline_ms, reply_to,
                             request_sha256, work_partition)
    envelope = {"schema_version": SCHEMA_VERSION,
                "route": route.model_dump(mode="json", exclude_none=True),
                "routed_at_ms": routed_at_ms, "deadline_ms": deadline_ms,
                "stamp": {"key_id": keys.current, "mac": stamp_mac(lines, keys)}}
    if reply_to is not None:
        envelope["reply_to"] = reply_to
    if request_sha256 is not None:
        envelope["request_sha256"] = request_sha256
    if work_partition is not None:
        envelope["work_partition"] = work_partition
    return b'{"request":' + payload + b"," + orjson.dumps(envelope)[1:]
