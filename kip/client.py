"""The producer's client: sign a request, publish it, await its result by request id.

Each request goes with its envelope (``kip-envelope``, schemas/envelopes.py): the
pipeline checks who sent a message before it parses it.

    async with KipClient(bootstrap, tenant="acme", key_id="k1", secret=b"...") as kip:
        result = await kip.infer("minilm", {"text": ["A man is eating food."]})

Results are read (read_committed) from the reply topic from the moment the client
starts: ``reply_to`` if given, else the tenant's own reply topic (``<results>.<tenant>``,
readable by that tenant alone on a secured cluster) where it exists, else the shared
one. A result answers a pending request only if it came from that topic, carries a
valid signature by one of the deployment's result keys (``result_keys``; by default the
file ``KIP_RESULT_PUBLIC_KEYS_FILE`` names), has the request's id, and names the sha256
of the exact message the client sent. Anything else under a pending request's id is
counted in ``refused`` and ignored: a forged result, a replayed one, or kip's rejection
of someone else's message that reused the id. If the reader dies, every pending request
fails with its error at once.

A process that keeps thousands of requests in flight spends much of its CPU in Python's
cyclic collector, walking them; ``runtime.collector.settle()``, called once the process
has started, stops that (kip's own ``kip batch run`` does).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from kip.client_results import ResultCheck, results_since, verifier_of
from kip.client_messages import (Inputs, cancel_message, retry_wait_s, send_trace,
                                 to_tensors)
from kip.runtime import tracing
from kip.schemas.codec import REQUEST_ID_HEADER, encode, headers, now_ms
from kip.schemas.envelopes import envelope
from kip.schemas.messages import InferenceRequest, InferenceResult, Priority
from kip.schemas.result_signatures import ResultKeys, request_sha256
from kip.schemas.signing import sign
from kip.transport.clients import HOT_PATH_FETCH_MAX_WAIT_MS, KafkaConnection
from kip.transport.aiokafka_adapter import refresh_metadata
from kip.transport.fetch_waits import wait_long_when_whole
from kip.topics.names import TopicNames
from kip.transport.reading import assign_all

log = logging.getLogger("kip.client")


@dataclass
class _Pending:
    future: asyncio.Future[InferenceResult]
    digest: str   # sha256 of the message sent: the one a result must name
    priority: str | None = None   # a request's class, where this client sent it


class KipClient:
    def __init__(self, bootstrap: str, *, tenant: str, key_id: str, secret: bytes | str,
                 topic_prefix: str = "kip", reply_to: str | None = None,
                 bulk_linger_ms: int = 20,
                 result_keys: ResultKeys | Mapping[str, str] | Path | None = None,
                 request_partition: int | None = None, **kafka: Any) -> None:
        """``bulk_linger_ms``: how long a standard or batch request may wait to share a
        produce request with the ones after it. Fewer, larger produce requests cost the
        broker much less; interactive requests go through a producer that does not wait.

        ``kafka``: how to reach a secured cluster, as ``KafkaConnection``'s fields
        (``security_protocol``, ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
        ``sasl_mechanism``, ``sasl_username``, ``sasl_password``, ...), the options the
        ``KIP_KAFKA_`` variables set for kip's own processes.

        ``result_keys``: the deployment's result public keys (``{key id: hex}``, a
        ``ResultKeys`` or its file); by default the file of
        ``KIP_RESULT_PUBLIC_KEYS_FILE``. Needed to start: results are accepted only with
        a valid signature.

        ``request_partition``: the request partition the operator gave this tenant in
        the access file (``request_partition``); by default Kafka's default partitioner
        places requests by their key, the tenant, as the pipeline expects."""
        self.kafka = KafkaConnection(bootstrap=bootstrap, **kafka)
        self.bulk_linger_ms = bulk_linger_ms
        self.tenant, self.key_id = tenant, key_id
        self._secret = secret.encode() if isinstance(secret, str) else secret
        self.names = TopicNames(topic_prefix)
        self.reply_to = reply_to
        self.request_partition = request_partition
        self._result_keys = result_keys
        self._results: ResultCheck | None = None   # once started
        self._pending: dict[str, _Pending] = {}
        self.unmatched = 0   # results for requests this client is not waiting for
        self.refused = 0     # results under a pending id that failed a check
        self._producer: AIOKafkaProducer | None = None        # interactive, raw
        self._bulk_producer: AIOKafkaProducer | None = None   # standard and batch
        self._consumer: AIOKafkaConsumer | None = None
        self._reader: asyncio.Task | None = None
        self.listening_on: str | None = None   # the reply topic, once started

    async def start(self) -> None:
        """Connect; on any failure, close what was opened and raise it."""
        if self._producer is not None:
            return
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        tracing.configure("kip-client")
        self._results = ResultCheck(verifier_of(self._result_keys))
        self._producer = await self._start_producer(linger_ms=0)
        self._bulk_producer = await self._start_producer(linger_ms=self.bulk_linger_ms)
        self._consumer = self.kafka.consumer(   # results come on any partition
            group_id=None, fetch_max_wait_ms=HOT_PATH_FETCH_MAX_WAIT_MS)
        await self._consumer.start()
        wait_long_when_whole(self._consumer)   # transport/fetch_waits.py
        self.listening_on = self._results.topic = (self.reply_to
                                                   or await self._default_reply_topic())
        await self._listen_from_now(self.listening_on)
        self._reader = asyncio.create_task(self._read_results(), name="kip-client-results")
        self._reader.add_done_callback(self._reader_ended)

    async def stop(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        for client in (self._producer, self._bulk_producer, self._consumer):
            if client is not None:
                await client.stop()
        self._producer = self._bulk_producer = self._consumer = None
        self._fail_pending(ConnectionError("KipClient stopped before the result came"))

    async def __aenter__(self) -> KipClient:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    def request(self, model: str, inputs: Inputs, *, priority: Priority | str = "standard",
                deadline_ms: int | None = None, request_id: str | None = None,
                issued_at_ms: int | None = None) -> InferenceRequest:
        """A signed request (not yet sent)."""
        tensors = to_tensors(inputs)
        fields = dict(request_id=request_id or os.urandom(16).hex(), tenant=self.tenant,
                      key_id=self.key_id, issued_at_ms=issued_at_ms or now_ms(),
                      priority=Priority(priority).value, model=model, deadline_ms=deadline_ms,
                      reply_to=self.reply_to)
        signature = sign(self._secret, **fields, inputs=tensors)
        return InferenceRequest(**fields, signature=signature, inputs=tensors,
                                traceparent=send_trace(self.names, fields))

    async def submit(self, request: InferenceRequest,
                     on_delivered: Callable[[], None] | None = None,
                     on_sending: Callable[[str], None] | None = None
                     ) -> asyncio.Future[InferenceResult]:
        """Publish ``request``; the returned future resolves with its result (or fails
        if Kafka did not take the request). Does not wait for the broker's ack, so many
        requests can be in flight from one task. ``on_sending`` is called with the
        message's sha256 before it goes to Kafka, ``on_delivered`` once the broker has
        it (a batch job journals both: kip/batch/job.py)."""
        value = encode(request)
        digest = request_sha256(value)
        fut = self.expect_digest(request.request_id, digest)
        self._pending[request.request_id].priority = request.priority
        if on_sending is not None:
            on_sending(digest)
        delivery = await self._publish(request, value, digest)
        delivery.add_done_callback(lambda d: _fail_if_undelivered(d, fut))
        if on_delivered is not None:
            delivery.add_done_callback(
                lambda d: d.cancelled() or d.exception() is not None or on_delivered())
        return fut

    async def send(self, request: InferenceRequest) -> asyncio.Future:
        """Publish ``request`` without tracking its result; the returned future resolves
        with the record metadata once Kafka has it."""
        value = encode(request)
        return await self._publish(request, value, request_sha256(value))

    async def _publish(self, request: InferenceRequest, value: bytes, digest: str
                       ) -> asyncio.Future:
        producer = (self._producer if request.priority == Priority.INTERACTIVE
                    else self._bulk_producer)
        return await self._sealed(producer, self.names.requests(request.priority), request,
                                  request.request_id, value, digest)

    async def _sealed(self, producer: AIOKafkaProducer, topic: str, message, message_id: str,
                      value: bytes, digest: str) -> asyncio.Future:
        """Send ``message`` (a request or a cancel) with its envelope, keyed by tenant."""
        sealed = [*headers(message, message.traceparent), envelope(
            self._secret, self.key_id, topic, self.tenant, message_id, digest)]
        return await producer.send(topic, value, key=self.tenant.encode(), headers=sealed,
                                   partition=self.request_partition)

    async def cancel(self, request_id: str, *, priority: Priority | str | None = None,
                     request_tenant: str | None = None, timeout_s: float = 30.0
                     ) -> InferenceResult:
        """Cancel request ``request_id`` (this client's, pending: its class is known;
        else give ``priority``). Returns the cancel's acknowledgement: ``ok`` when kip took
        it (the request then ends ``cancelled`` unless it had run, in which case its result
        stands), ``rejected`` with why (only the request's own tenant may cancel it)."""
        pending = self._pending.get(request_id)
        priority = priority or (pending.priority if pending is not None else None)
        if priority is None:
            raise ValueError(f"request {request_id} is not pending here: give its priority")
        message = cancel_message(self._secret, self.tenant, self.key_id, request_id,
                                 request_tenant or self.tenant, self.reply_to)
        value = encode(message)
        digest = request_sha256(value)
        fut = self.expect_digest(message.cancel_id, digest)
        try:
            await self._sealed(self._producer, self.names.requests(priority), message,
                               message.cancel_id, value, digest)
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._pending.pop(message.cancel_id, None)

    async def send_raw(self, topic: str, value: bytes | None, key: bytes | None = None,
                       headers: list | None = None, *, sealed: bool = False,
                       partition: int | None = None) -> asyncio.Future:
        """Publish bytes as they are (tools and tests); the future resolves on the ack.
        ``sealed``: with this client's envelope over them, as ``key``'s and the
        ``kip-request-id`` header's (schemas/envelopes.py)."""
        if sealed:   # over the first kip-request-id (the pipeline takes one alone)
            request_id = next((v for k, v in headers or () if k == REQUEST_ID_HEADER),
                              b"").decode()
            headers = [*(headers or ()), envelope(
                self._secret, self.key_id, topic, (key or b"").decode("utf-8", "replace"),
                request_id, request_sha256(value or b""))]
        return await self._producer.send(topic, value, key=key, headers=headers,
                                         partition=partition)

    async def publish_raw(self, topic: str, value: bytes | None, key: bytes | None = None,
                          headers: list | None = None, *, sealed: bool = False,
                          partition: int | None = None):
        """``send_raw`` and wait for the ack; returns the record metadata."""
        return await (await self.send_raw(topic, value, key, headers, sealed=sealed,
                                          partition=partition))

    async def flush(self) -> None:
        """Wait until every message sent so far is with the broker."""
        for producer in (self._producer, self._bulk_producer):
            await producer.flush()

    def expect(self, request_id: str, sent: bytes) -> asyncio.Future[InferenceResult]:
        """A future for the result of the message ``sent`` (its value bytes), published
        under ``request_id`` some other way."""
        return self.expect_digest(request_id, request_sha256(sent))

    def expect_digest(self, request_id: str, digest: str) -> asyncio.Future[InferenceResult]:
        """A future for the result of the message whose sha256 is ``digest``, sent under
        ``request_id`` earlier (by another run of a job, say), arriving from now on."""
        fut = asyncio.get_running_loop().create_future()
        self._pending[request_id] = _Pending(fut, digest)
        return fut

    def pending_sha256(self, request_id: str) -> str | None:
        """The digest a result for pending ``request_id`` must name."""
        pending = self._pending.get(request_id)
        return None if pending is None else pending.digest

    def forget(self, request_id: str) -> None:
        """Stop waiting for ``request_id`` (a result that comes later is not matched)."""
        self._pending.pop(request_id, None)

    async def results_since(self, digests: Mapping[str, str], since_ms: int
                            ) -> dict[str, InferenceResult]:
        """Results already on this client's reply topic, from ``since_ms`` to its current
        end, for the request ids in ``digests`` (id -> sha256 of the message sent): what
        kip answered while nobody listened (a batch job's resume). Each is checked as a
        live one is: the deployment's signature, the id and the digest."""
        return await results_since(self.kafka, self.listening_on, self._results, digests,
                                   since_ms)

    async def infer(self, model: str, inputs: Inputs, *, priority: Priority | str = "standard",
                    deadline_ms: int | None = None, timeout_s: float = 30.0,
                    retry_s: float = 0.0) -> InferenceResult:
        """Send one request and wait for its terminal result (whatever its status).
        ``retry_s``: for that long, a request rejected with a retriable code and a
        ``retry_after_ms`` (``MODEL_UNAVAILABLE`` while no worker is live, ``OVERLOADED``,
        ``QUOTA_EXCEEDED``) is sent again, as a new request, once that wait has passed."""
        give_up = asyncio.get_running_loop().time() + retry_s
        while True:
            result = await self._infer_once(model, inputs, priority, deadline_ms, timeout_s)
            wait_s = retry_wait_s(result)
            if wait_s is None or asyncio.get_running_loop().time() + wait_s > give_up:
                return result
            await asyncio.sleep(wait_s)

    async def _infer_once(self, model: str, inputs: Inputs, priority: Priority | str,
                          deadline_ms: int | None, timeout_s: float) -> InferenceResult:
        request = self.request(model, inputs, priority=priority, deadline_ms=deadline_ms)
        fut = await self.submit(request)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        finally:
            self._pending.pop(request.request_id, None)

    async def _start_producer(self, linger_ms: int) -> AIOKafkaProducer:
        producer = self.kafka.producer(linger_ms=linger_ms)
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        return producer

    def _reader_ended(self, reader: asyncio.Task) -> None:
        """The result reader ends only when stopped or broken: when broken, no result can
        come any more, so fail every pending request now rather than at its timeout."""
        if reader.cancelled():
            return
        err = reader.exception()
        self._fail_pending(ConnectionError(f"KipClient stopped reading results: {err!r}"))

    def _fail_pending(self, err: Exception) -> None:
        for pending in self._pending.values():
            fut = pending.future
            if not fut.done():
                fut.set_exception(err)
                fut.exception()   # mark retrieved: nobody may be waiting on it any more
        self._pending.clear()

    async def _default_reply_topic(self) -> str:
        """Where the pipeline sends this tenant's results when a request names no
        ``reply_to``: the tenant's own reply topic where it exists, else the shared one."""
        own = self.names.reply_topic(self.tenant)
        await refresh_metadata(self._consumer)
        return own if self._consumer.partitions_for_topic(own) else self.names.results

    async def _listen_from_now(self, topic: str) -> None:
        tps = await assign_all(self._consumer, topic, what="reply topic")
        await self._consumer.seek_to_end(*tps)
        for tp in tps:   # resolve the positions now, before any request is sent
            await self._consumer.position(tp)

    async def _read_results(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=500, max_records=1000)
            for records in batches.values():
                for record in records:
                    self._deliver(record)

    def _deliver(self, record) -> None:
        """Match a result to its pending request. Results are keyed by request id, so
        other clients' results (every client reads the whole reply topic) are counted
        without being decoded or verified."""
        key = record.key
        request_id = key.decode("utf-8", "replace") if key else None
        pending = self._pending.get(request_id)
        if pending is None or pending.future.done():
            self.unmatched += 1   # another client's, a duplicate, or too late
            return
        problem = self._results.check(record, request_id, pending.digest)
        if isinstance(problem, str):
            self.refused += 1
            log.warning("refused a result under pending request %s: %s", request_id, problem)
            return
        del self._pending[request_id]
        pending.future.set_result(problem)


def _fail_if_undelivered(delivery: asyncio.Future, result: asyncio.Future) -> None:
    if not result.done() and (delivery.cancelled() or delivery.exception() is not None):
        result.set_exception(ConnectionError(f"the request was not delivered to Kafka: "
                                             f"{delivery.exception() or 'cancelled'}"))
