"""One real request at a time through the real broker, pipeline and workers."""

from __future__ import annotations

import asyncio
import hashlib
import urllib.request

import numpy as np
import orjson
import pytest

from kip.devkit.loadproc import offer_from_child
from kip.devkit.stack import ClientSpec, tenant_credentials
from kip.client import KipClient
from kip.models.export.digits import dataset
from kip.schemas import DeadLetterRecord, InferenceResult, Status, decode, encode
from kip.schemas.codec import headers, now_ms
from kip.schemas.messages import Priority, output_array
from tests.e2e.conftest import (client_for, explained, outputs_of, publish_as, read_topic,
                                stack_on)
from kip.transport.admin import apply
from kip.topics.catalogue import TopicSpec, reply_topic

pytestmark = pytest.mark.broker
PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


@pytest.fixture(scope="module", params=["plain", "secured", "cluster"])
def stack(request, registry, tmp_path_factory):
    """The request path, replays and the audit chains hold on one broker, on a secured
    one, and on a cluster of three whose topics keep 3 copies, 2 in sync."""
    yield from stack_on(request, registry, tmp_path_factory)


def _one_result_one_final_audit(stack, result: InferenceResult) -> dict:
    seen = asyncio.run(outputs_of(stack, result.request_id))
    assert len(seen["results"]) == 1, seen["results"]
    finals = [a for a in seen["audit"] if a.final]
    assert len(finals) == 1 and finals[0].decision == result.status.value
    return seen


def _send(stack, model, inputs, *, client_kw=None, **kw) -> InferenceResult:
    async def go():
        async with client_for(stack, **(client_kw or {})) as kip:
            return await kip.infer(model, inputs, **kw)
    return asyncio.run(go())


def _still_serving(stack) -> None:
    result = _send(stack, "digits", PIXELS, priority="interactive")
    assert result.status == Status.OK


def test_an_authorised_request_gets_an_ok_result_with_its_model_identity(stack):
    _, _, images, labels = dataset()
    result = _send(stack, "digits", {"pixels": images[:3]}, priority="interactive")
    assert result.status == Status.OK and result.error is None
    assert list(output_array(result, "label")) == list(labels[:3])
    assert result.model_name == "digits" and len(result.artifact_sha256) == 64
    assert result.batch_size >= 3 and result.timings.inference_ms is not None
    started = result.timings.inference_started_at_ms
    # produced_at_ms is whole ms
    assert started is not None and started + result.timings.inference_ms < result.produced_at_ms + 1
    seen = _one_result_one_final_audit(stack, result)
    assert [a.decision for a in seen["audit"]] == ["routed", "ok"]
    routed, ok = seen["audit"]
    assert routed.reason.startswith("digits routed to digits@")
    assert routed.request_sha256 == ok.request_sha256 == result.request_sha256
    assert ok.timings == result.timings and ok.artifact_sha256 == result.artifact_sha256
    words = explained(stack, result.request_id).splitlines()
    assert len(words) == 3 and "routed | digits routed to digits@" in words[1]
    assert "worker   ok (final)" in words[2] and "inference" in words[2]


def test_sentence_embeddings_through_the_pipeline_match_torch(stack):
    a = _send(stack, "minilm", {"text": ["A man is eating food."]})
    b = _send(stack, "minilm", {"text": ["A man is eating a piece of bread."]})
    cosine = float(output_array(a, "embedding")[0] @ output_array(b, "embedding")[0])
    assert abs(cosine - 0.7553) < 1e-3


@pytest.mark.parametrize("client_kw", [{"secret": "not-the-secret"},
                                       {"key_id": "who-is-this"}],
                         ids=["wrong-secret", "unknown-key"])
def test_a_message_no_tenant_sent_is_answered_on_the_shared_topic(stack, client_kw):
    """Its envelope does not check: no tenant's. UNAUTHENTICATED on the shared results
    topic under its coordinates, nothing on the tenant's topic or under its id."""
    async def go():
        async with client_for(stack, **client_kw) as kip:
            request = kip.request("digits", PIXELS)
            meta = await (await kip.send(request))
        coordinates = f"undecodable.{meta.topic}.{meta.partition}.{meta.offset}"
        for _ in range(30):
            seen = await outputs_of(stack, coordinates, settle_s=1)
            if seen["results"]:
                break
        return seen, await outputs_of(stack, request.request_id)
    seen, under_its_id = asyncio.run(go())
    [result] = seen["results"]
    assert result.status == Status.REJECTED and result.error.code == "UNAUTHENTICATED"
    assert result.tenant is None and "envelope" in result.error.message
    assert [a.final for a in seen["audit"]] == [True]
    assert under_its_id == {"results": [], "audit": [], "deadletter": []}
    _still_serving(stack)


def test_a_request_whose_body_signature_fails_is_answered_to_its_sender(stack):
    """Its envelope checks (the sender holds the key), its body's signature does not:
    UNAUTHENTICATED on the sender's own topic, under its id."""
    async def go():
        async with client_for(stack) as kip:
            forged = KipClient("unused:0", tenant="acme", key_id="acme-k1", secret="wrong",
                               topic_prefix=stack.prefix).request("digits", PIXELS)
            body = encode(forged)
            answer = kip.expect(forged.request_id, body)
            await kip.publish_raw(kip.names.requests("standard"), body, key=b"acme",
                                  headers=headers(forged), sealed=True)
            return await asyncio.wait_for(answer, 30)
    result = asyncio.run(go())
    assert result.status == Status.REJECTED and result.error.code == "UNAUTHENTICATED"
    assert result.tenant == "acme"
    _one_result_one_final_audit(stack, result)


def test_a_replayed_old_request_is_unauthenticated(stack):
    async def go():
        async with client_for(stack) as kip:
            old = kip.request("digits", PIXELS, issued_at_ms=1_000_000_000_000)
            return await asyncio.wait_for(await kip.submit(old), 30)
    result = asyncio.run(go())
    assert result.error.code == "UNAUTHENTICATED" and "replay window" in result.error.message
    _one_result_one_final_audit(stack, result)
    _still_serving(stack)


def test_a_model_the_tenant_may_not_use_is_forbidden(stack):
    result = _send(stack, "minilm", {"text": ["hi"]},
                   client_kw={"tenant": "limited", "key_id": "lim-k1"})
    assert result.status == Status.REJECTED and result.error.code == "FORBIDDEN"
    _one_result_one_final_audit(stack, result)


def test_an_unknown_alias_is_model_not_found(stack):
    result = _send(stack, "no-such-model", PIXELS)
    assert result.error.code == "MODEL_NOT_FOUND"
    _one_result_one_final_audit(stack, result)
    _still_serving(stack)


@pytest.mark.parametrize("inputs", [
    {"pixels": np.zeros((1, 64), np.float64)},          # wrong datatype
    {"pixels": np.zeros((1, 8, 8), np.float32)},        # wrong shape
], ids=["wrong-datatype", "wrong-shape"])
def test_inputs_that_do_not_fit_the_model_are_invalid(stack, inputs):
    result = _send(stack, "digits", inputs)
    assert result.status == Status.REJECTED and result.error.code == "INVALID_REQUEST"
    seen = _one_result_one_final_audit(stack, result)
    assert seen["deadletter"] == []
    _still_serving(stack)


def test_a_malformed_body_is_invalid_and_dead_lettered_with_its_origin(stack):
    async def go():
        async with client_for(stack) as kip:
            topic = kip.names.requests("standard")
            body = b'{"request_id": "malformed-1", "tenant": "acme", "inputs": 42}'
            meta = await kip.publish_raw(topic, body, key=b"acme", sealed=True,
                                         headers=[("kip-request-id", b"malformed-1")])
            return await asyncio.wait_for(kip.expect("malformed-1", body), 30), meta, body
    result, meta, body = asyncio.run(go())
    assert result.status == Status.REJECTED and result.error.code == "INVALID_REQUEST"
    seen = _one_result_one_final_audit(stack, result)
    [dead] = [d for d in seen["deadletter"]]
    assert (dead.origin_topic, dead.origin_partition, dead.origin_offset) == \
        (meta.topic, meta.partition, meta.offset)
    _still_serving(stack)


def test_undecodable_bytes_are_answered_where_their_sender_is_known(stack):
    """Sealed by acme's client: INVALID_REQUEST on acme's topic under the id its envelope
    vouches for, with a dead letter. Sent bare: no tenant's, so UNAUTHENTICATED on the
    shared results topic under its coordinates, whatever it claims."""
    junk = b"\x00\xff binary junk"

    async def go():
        async with client_for(stack) as kip:
            topic = kip.names.requests("batch")
            meta = await kip.publish_raw(topic, junk, key=b"acme", sealed=True,
                                         headers=[("kip-request-id", b"junk-1")])
            sealed = await asyncio.wait_for(kip.expect("junk-1", junk), 30)
            bare = await kip.publish_raw(topic, junk, key=b"acme",
                                         headers=[("kip-request-id", b"junk-2")])
            return sealed, meta, bare
    result, meta, bare = asyncio.run(go())
    assert result.error.code == "INVALID_REQUEST" and result.tenant == "acme"
    _one_result_one_final_audit(stack, result)
    records = asyncio.run(read_topic(stack.kafka, stack.names.deadletter))
    dead = [d for d in (decode(DeadLetterRecord, r.value) for r in records)
            if (d.origin_topic, d.origin_partition, d.origin_offset) ==
            (meta.topic, meta.partition, meta.offset)]
    assert len(dead) == 1 and dead[0].payload_b64 is None   # payloads are not kept by default
    assert dead[0].payload_sha256 == hashlib.sha256(junk).hexdigest()
    coordinates = f"undecodable.{bare.topic}.{bare.partition}.{bare.offset}"
    for _ in range(30):
        seen = asyncio.run(outputs_of(stack, coordinates, settle_s=1))
        if seen["results"]:
            break
    [unsigned] = seen["results"]
    assert unsigned.error.code == "UNAUTHENTICATED" and unsigned.tenant is None
    assert asyncio.run(outputs_of(stack, "junk-2"))["results"] == []
    _still_serving(stack)


def test_every_process_serves_prometheus_metrics(stack):
    _still_serving(stack)

    async def unsigned():   # no tenant's: answered on the shared topic, counted
        async with client_for(stack, secret="wrong") as kip:
            await (await kip.send(kip.request("digits", PIXELS)))
        await asyncio.sleep(2)
    asyncio.run(unsigned())
    text = {}
    for i, name in enumerate(("pipeline", "minilm", "digits")):
        url = f"http://127.0.0.1:{stack.metrics_base_port + i}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text[name] = response.read().decode()
    assert 'kip_requests_total{code="",model="digits",outcome="routed"' in text["pipeline"]
    assert 'code="UNAUTHENTICATED"' in text["pipeline"]
    assert 'outcome="ok",priority="interactive",stage="worker"' in text["digits"]
    assert "kip_batch_rows_count" in text["digits"]
    assert 'provider="CPUExecutionProvider"' in text["minilm"]
    assert 'kip_latency_seconds_count{kind="end_to_end"' in text["digits"]


def test_a_poison_work_item_fails_with_a_dead_letter_and_the_worker_keeps_serving(stack):
    """Its failure goes to the shared results topic: what an undecodable work item says of
    its tenant or reply topic cannot be trusted."""
    topic = stack.names.work("digits", "standard")
    meta = asyncio.run(publish_as(stack, "pipeline", topic,   # a pipeline's defect
                                  b'{"request": {"request_id": "poison-1"}}', key=b"poison-1"))
    coordinates = f"undecodable.{meta.topic}.{meta.partition}.{meta.offset}"
    for _ in range(30):   # under its coordinates: nothing vouches for the id it names
        seen = asyncio.run(outputs_of(stack, coordinates, settle_s=1))
        if seen["results"]:
            break
    [result] = seen["results"]
    assert result.status == Status.FAILED and result.error.code == "INVALID_REQUEST"
    _one_result_one_final_audit(stack, result)
    [dead] = asyncio.run(outputs_of(stack, "poison-1"))["deadletter"]   # the id it names
    assert (dead.origin_topic, dead.origin_offset) == (meta.topic, meta.offset)
    _still_serving(stack)


def test_results_go_to_an_existing_reply_topic_and_a_missing_one_is_refused(stack):
    mine = stack.names.reply_topic("acme") + ".mine"   # a reply topic acme owns

    async def go():
        await apply(stack.kafka, [TopicSpec(mine, 1, "request id", "test", {})])
        await asyncio.sleep(3)   # the pipeline refreshes its view of reply topics every 2 s
        async with client_for(stack) as on_default, client_for(stack, reply_to=mine) as on_mine:
            ok = await on_mine.infer("digits", PIXELS)
            missing = KipClient("unused:0", tenant="acme", key_id="acme-k1",
                                secret="acme-secret", topic_prefix=stack.prefix,
                                reply_to=f"{stack.prefix}.results.missing")
            request = missing.request("digits", PIXELS)
            await on_default.publish_raw(on_default.names.requests("standard"),
                                         encode(request), key=b"acme", sealed=True,
                                         headers=headers(request))
            refused = await asyncio.wait_for(
                on_default.expect(request.request_id, encode(request)), 30)
            return ok, refused
    ok, refused = asyncio.run(go())
    assert ok.status == Status.OK
    assert refused.error.code == "INVALID_REQUEST" and "does not exist" in refused.error.message
    _still_serving(stack)


def test_load_offered_from_a_child_process_is_answered_on_its_own_reply_topic(stack):
    """How ``kip bench load`` offers batch load: every request answered, back in the
    parent, and none of those results reaches a client on the default reply topic."""
    spec = reply_topic(stack.names, "acme.child-load")   # a reply topic acme owns
    child = ClientSpec(stack.client_bootstrap, "acme", "acme-k1", "acme-secret", stack.prefix,
                       spec.name, tenant_credentials(stack, "acme"), stack.result_keys())

    async def go():
        await apply(stack.kafka, [spec])
        await asyncio.sleep(3)   # the pipeline refreshes its view of reply topics every 2 s
        async with client_for(stack) as here:
            before = here.unmatched
            report = await offer_from_child(child, 5, "minilm", {Priority.BATCH: 40.0}, 2.0,
                                            {Priority.BATCH: 10_000}, 1, now_ms())
            await asyncio.sleep(1)
            return report, here.unmatched - before
    report, seen_here = asyncio.run(go())
    stats = report.classes[Priority.BATCH]
    assert stats.offered >= 40 and len(stats.results) == stats.offered
    assert [r.status for r in stats.results] == [Status.OK] * stats.offered
    assert report.duplicates == 0 and stats.late_inferences == 0
    assert seen_here == 0


def test_a_request_naming_an_input_twice_is_refused_and_its_batch_mates_served(stack):
    """One tenant's request gives ``pixels`` twice (the first a scalar), sent among 20
    requests of two other tenants: it alone is refused, INVALID_REQUEST on its sender's
    own reply topic, and each of the 20 is served on its own tenant's."""
    async def go():
        async with client_for(stack, key_id="acme-k1") as acme, \
                client_for(stack, key_id="modest-k1") as modest, \
                client_for(stack, key_id="lim-k1") as rogue:
            bad = rogue.request("digits", PIXELS, priority="interactive")
            doc = bad.model_dump(mode="json", exclude_none=True)
            doc["inputs"].insert(0, {"name": "pixels", "datatype": "FP32", "shape": [],
                                     "data": [0.5]})
            body = orjson.dumps(doc)
            futures = [await (acme if n % 2 else modest).submit(
                (acme if n % 2 else modest).request(
                    "digits", {"pixels": np.full((1, 64), n, np.float32)},
                    priority="interactive")) for n in range(10)]
            refused = rogue.expect(bad.request_id, body)
            await rogue.publish_raw(rogue.names.requests("interactive"), body,
                                    key=b"limited", sealed=True, headers=headers(bad))
            futures += [await (acme if n % 2 else modest).submit(
                (acme if n % 2 else modest).request(
                    "digits", {"pixels": np.full((1, 64), n, np.float32)},
                    priority="interactive")) for n in range(10)]
            served = await asyncio.wait_for(asyncio.gather(*futures), 60)
            return await asyncio.wait_for(refused, 30), served, (acme, modest, rogue)
    refused, served, clients = asyncio.run(go())
    assert refused.status == Status.REJECTED and refused.error.code == "INVALID_REQUEST"
    assert "input names must be unique" in refused.error.message
    assert [r.status for r in served] == [Status.OK] * 20
    assert {r.tenant for r in served} == {"acme", "modest"}
