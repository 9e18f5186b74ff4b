"""Which results a ``KipClient`` accepts, and the results already on its reply topic.

A result answers a pending request only if it came from the client's reply topic,
carries a valid signature by one of the deployment's result keys, has the request's id,
and names the sha256 of the exact message the client sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kip.runtime import keys
from kip.runtime.settings import KipSettings
from kip.schemas.codec import decode
from kip.schemas.errors import InvalidRequest
from kip.schemas.messages import InferenceResult
from kip.schemas.result_signatures import ResultKeys, ResultVerifier
from kip.transport.clients import KafkaConnection
from kip.transport.reading import assign_all, reached, reader_to_end, seek_to_time


class ResultCheck:
    def __init__(self, verifier: ResultVerifier, topic: str | None = None) -> None:
        self.verifier = verifier
        self.topic = topic   # the reply topic, once the client knows it

    def check(self, record, request_id: str, digest: str) -> InferenceResult | str:
        """The result, if it answers the message ``digest`` sent as ``request_id``; else
        what is wrong with it."""
        if record.topic != self.topic:
            return f"it came from {record.topic}, not {self.topic}"
        if not self.verifier.valid(record.value, record.headers):
            return "no valid signature by a deployment result key"
        try:
            result = decode(InferenceResult, record.value)
        except InvalidRequest as err:
            return f"malformed: {err.message[:200]}"
        if result.request_id != request_id or result.request_sha256 != digest:
            return "it answers another message under this id (a replay or a forgery)"
        return result


def verifier_of(given: ResultKeys | Mapping[str, str] | Path | None) -> ResultVerifier:
    """The deployment's result keys as given, else from ``KIP_RESULT_PUBLIC_KEYS_FILE``."""
    if isinstance(given, ResultKeys):
        return given.verifier()
    if isinstance(given, Mapping):
        return ResultKeys(keys=dict(given)).verifier()
    return keys.result_keys(given or KipSettings().result_public_keys_file).verifier()


async def results_since(kafka: KafkaConnection, topic: str, check: ResultCheck,
                        digests: Mapping[str, str], since_ms: int
                        ) -> dict[str, InferenceResult]:
    """The results on ``topic`` from ``since_ms`` to its current end that ``check``
    accepts for the ids in ``digests`` (id -> sha256 of the message sent)."""
    consumer = reader_to_end(kafka)
    await consumer.start()
    try:
        tps = await assign_all(consumer, topic, what="reply topic")
        ends = await seek_to_time(consumer, tps, since_ms)
        found: dict[str, InferenceResult] = {}
        while not await reached(consumer, ends):
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for record in records:
                    request_id = record.key.decode("utf-8", "replace") if record.key else ""
                    if request_id not in digests or request_id in found:
                        continue
                    checked = check.check(record, request_id, digests[request_id])
                    if not isinstance(checked, str):
                        found[request_id] = checked
        return found
    finally:
        await consumer.stop()
