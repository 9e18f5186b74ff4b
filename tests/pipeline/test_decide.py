import base64
from dataclasses import replace

import numpy as np
import orjson
import pytest

from kip.pipeline.access import TenantPolicy
from kip.pipeline.decide import decide as decide_as_sent
from kip.pipeline.decisions import Forward, Origin, Reject
from kip.pipeline.quota import TenantQuota
from kip.schemas import InferenceRequest, Status, encode
from kip.schemas.messages import WorkerTelemetry
from kip.schemas.result_signatures import request_sha256
from tests.pipeline.conftest import DIGITS_MANIFEST, NOW_MS, decide_sealed, signer

# each message as its tenant's client sends it (kip-envelope and kip-request-id)
decide = decide_sealed

PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def _origin(priority="standard", offset=7, tenant="acme") -> Origin:
    """Where a request of ``tenant`` arrives: keyed by its tenant, as the protocol says."""
    return Origin(f"kip.requests.{priority}", 0, offset, key=tenant.encode())


def _payload(request: InferenceRequest) -> bytes:
    return encode(request)


def test_a_good_request_is_forwarded_to_its_models_work_topic(ctx):
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    d = decide(_payload(request), _origin(), ctx)
    assert isinstance(d, Forward)
    assert d.topic == "kip.work.digits.standard"
    assert d.work_item.request == request and d.work_item.route.model_name == "digits"
    assert len(d.work_item.route.artifact_sha256) == 64 and d.work_item.route.model_version
    assert d.audit.decision == "routed" and not d.audit.final
    assert d.audit.reason == f"digits routed to digits@{d.work_item.route.model_version}"
    assert d.audit.request_sha256 == d.work_item.request_sha256 == request_sha256(_payload(request))


def _rejected(d, code: str, status=Status.REJECTED) -> Reject:
    assert isinstance(d, Reject), d
    assert d.result.status == status and d.result.error.code == code, d.result.error
    assert d.audit.final and d.audit.error_code == code
    assert d.audit.request_id == d.result.request_id
    return d


@pytest.mark.parametrize("build, code", [
    (lambda: signer(secret="bad").request("digits", PIXELS, issued_at_ms=NOW_MS),
     "UNAUTHENTICATED"),
    (lambda: signer().request("digits", PIXELS, issued_at_ms=NOW_MS - 3_600_000),
     "UNAUTHENTICATED"),
    (lambda: signer("limited", "lim-k1", "lim-secret").request(
        "digits", PIXELS, priority="batch", issued_at_ms=NOW_MS), "FORBIDDEN"),
    (lambda: signer().request("nope", PIXELS, issued_at_ms=NOW_MS), "MODEL_NOT_FOUND"),
    (lambda: signer().request("digits", {"pixels": np.zeros((1, 64), np.float64)},
                              issued_at_ms=NOW_MS), "INVALID_REQUEST"),
    (lambda: signer().request("digits", {"pixels": np.zeros((1, 63), np.float32)},
                              issued_at_ms=NOW_MS), "INVALID_REQUEST"),
    (lambda: signer().request("digits", {"image": np.zeros((1, 64), np.float32)},
                              issued_at_ms=NOW_MS), "INVALID_REQUEST"),
    (lambda: signer(reply_to="elsewhere").request("digits", PIXELS, issued_at_ms=NOW_MS),
     "INVALID_REQUEST"),
])
def test_rejections_carry_their_code(ctx, build, code):
    request = build()
    d = _rejected(decide(_payload(request), _origin(request.priority, tenant=request.tenant),
                         ctx), code)
    assert d.result.request_id == request.request_id and d.deadletter is None


def test_a_request_on_the_wrong_class_topic_is_invalid(ctx):
    request = signer().request("digits", PIXELS, priority="batch", issued_at_ms=NOW_MS)
    _rejected(decide(_payload(request), _origin("interactive"), ctx), "INVALID_REQUEST")


def test_a_past_deadline_expires_at_admission(ctx):
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS, deadline_ms=NOW_MS - 1)
    _rejected(decide(_payload(request), _origin(), ctx), "DEADLINE_EXCEEDED", Status.EXPIRED)


def test_replies_go_to_the_requested_results_topic_when_it_exists(ctx):
    mine = "kip.results.acme.mine"
    request = signer(reply_to=mine).request("nope", PIXELS, issued_at_ms=NOW_MS)
    with_topic = replace(ctx, topics=ctx.topics | {mine})
    assert decide(_payload(request), _origin(), with_topic).reply_to == mine
    d = _rejected(decide(_payload(request), _origin(), ctx), "INVALID_REQUEST")
    assert d.reply_to == "kip.results" and "does not exist" in d.result.error.message


def test_undecodable_bytes_become_a_result_audit_and_dead_letter(ctx):
    payload = b"\xff\x00 this is not json"
    origin = replace(_origin(offset=42), headers=(("kip-request-id", b"junk-42"),))
    d = _rejected(decide(payload, origin, ctx), "INVALID_REQUEST")
    assert d.result.request_id == "junk-42" and d.result.tenant == "acme"
    assert d.reply_to == "kip.results"   # acme has no reply topic of its own here
    dead = d.deadletter
    assert (dead.origin_topic, dead.origin_partition, dead.origin_offset) == \
        ("kip.requests.standard", 0, 42)
    assert base64.b64decode(dead.payload_b64) == payload
    assert dead.envelope and dead.envelope.startswith("acme-k1:")


@pytest.mark.parametrize("headers", [
    (), (("kip-request-id", b"r-1"),),
    (("kip-request-id", b"r-1"), ("kip-envelope", b"acme-k1:" + b"0" * 64)),
    (("kip-request-id", b"r-1"), ("kip-envelope", b"lim-k1:" + b"0" * 64))])
def test_a_message_without_a_valid_envelope_is_no_tenants(ctx, headers):
    """Answered on the shared results topic under its coordinates, with no tenant: what
    it claims (its key, its id, a reply_to) reaches no tenant and is recorded under none."""
    request = signer(reply_to="kip.results.acme").request("digits", PIXELS,
                                                           issued_at_ms=NOW_MS)
    d = _rejected(decide_as_sent(_payload(request), replace(_origin(offset=5), headers=headers),
                                 ctx), "UNAUTHENTICATED")
    assert d.reply_to == "kip.results" and d.result.tenant is None
    assert d.result.request_id == d.audit.request_id == "undecodable.kip.requests.standard.0.5"
    assert d.audit.tenant is None and d.deadletter is None
    assert "envelope" in d.result.error.message


def test_unsigned_messages_past_their_keys_allowance_are_shed(ctx):
    ctx = replace(ctx, policy=ctx.policy.model_copy(
        update={"unsigned_per_s": 1.0, "unsigned_burst": 3.0}))
    decided = [decide_as_sent(b"junk", _origin(offset=n), ctx) for n in range(5)]
    assert [type(d).__name__ for d in decided] == ["Reject"] * 3 + ["Shed"] * 2
    assert decided[-1].key == "acme" and decided[-1].outputs(ctx.names) == []
    other = decide_as_sent(b"junk", _origin(tenant="limited"), ctx)   # its own allowance
    assert isinstance(other, Reject)
    sealed = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    assert isinstance(decide(_payload(sealed), _origin(), ctx), Forward)   # never shed
    strangers = [decide_as_sent(b"junk", Origin("kip.requests.standard", 0, n, key=k), ctx)
                 for n, k in enumerate([b"x1", b"x2", b"x3", b"x4", None])]
    assert [type(d).__name__ for d in strangers] == ["Reject"] * 3 + ["Shed"] * 2


def test_an_invalid_request_keeps_its_id_for_correlation(ctx):
    payload = orjson.dumps({"request_id": "r-77", "tenant": "acme", "inputs": "oops",
                            "reply_to": "kip.results.mine"})
    ctx = replace(ctx, topics=ctx.topics | {"kip.results.mine"})
    d = _rejected(decide(payload, _origin(), ctx), "INVALID_REQUEST")
    assert d.result.request_id == "r-77" and d.deadletter.request_id == "r-77"
    assert d.reply_to == "kip.results" and d.audit.tenant == "acme"   # not acme's: unused
    assert "Field required" in d.result.error.message and "more" in d.result.error.message


def test_forwarded_work_carries_the_class_default_deadline(ctx):
    request = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    d = decide(_payload(request), _origin("interactive"), ctx)
    assert d.work_item.deadline_ms == NOW_MS + 2_000


def test_an_oversized_message_is_rejected_unparsed_using_its_headers(ctx):
    payload = b"\xff" * (1024 * 1024 + 1)     # not even JSON: proves it was never parsed
    origin = Origin("kip.requests.interactive", 2, 9, key=b"acme",
                    headers=(("kip-request-id", b"big-1"), ("kip-model", b"digits")))
    d = _rejected(decide(payload, origin, ctx), "PAYLOAD_TOO_LARGE")
    assert d.result.request_id == "big-1" and d.result.tenant == "acme"
    assert d.deadletter is None and d.audit.payload_bytes == len(payload)


def test_a_per_model_payload_limit_applies_before_parsing(ctx, small_registry, tmp_path):
    artifact = tmp_path / "tiny.onnx"
    artifact.write_bytes(b"tiny")
    manifest = DIGITS_MANIFEST | {"name": "tiny", "max_payload_bytes": 100}
    mv = small_registry.publish(artifact, manifest, {})
    small_registry.set_alias("tiny", f"tiny@{mv.manifest.version}")
    origin = Origin("kip.requests.batch", 0, 1, key=b"acme", headers=(("kip-model", b"tiny"),))
    _rejected(decide(b"x" * 101, origin, ctx), "PAYLOAD_TOO_LARGE")


def test_a_tenant_over_quota_is_refused_with_retry_after(ctx):
    ctx.ledger.quotas["acme"] = TenantQuota(tenant="acme", requests_per_s=1, burst_requests=2)
    codes = []
    for _ in range(3):
        request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
        d = decide(_payload(request), _origin(), ctx)
        codes.append(d.result.error.code if isinstance(d, Reject) else "ok")
    assert codes == ["ok", "ok", "QUOTA_EXCEEDED"]
    assert d.result.error.retry_after_ms == 1000
    # the audit record says why, with the level seen, and names the request's digest
    assert d.audit.reason == ("tenant 'acme' is over its requests quota (0.0 of 2 left, "
                              "1 needed, refilling 1/s)")
    assert d.audit.request_sha256 == d.result.request_sha256


def _telemetry(model: str, rate: float, backlog: int) -> WorkerTelemetry:
    return WorkerTelemetry(worker_id=f"w-{model}", model=model, versions=["v"], provider="cpu",
                           requests_per_s=rate, backlog={"interactive": backlog},
                           memory_rss_bytes=1, at_ms=NOW_MS)


def test_an_overloaded_model_rejects_with_retry_after(ctx):
    ctx.capacity.update("w", _telemetry("digits", 100, 300))      # 3 s of backlog
    request = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    d = _rejected(decide(_payload(request), _origin("interactive"), ctx), "OVERLOADED")
    assert d.result.error.retry_after_ms == 2501


def test_an_overloaded_model_degrades_to_its_fallback(ctx, small_registry, tmp_path):
    artifact = tmp_path / "small.onnx"
    artifact.write_bytes(b"small")
    mv = small_registry.publish(artifact, DIGITS_MANIFEST | {"name": "digits-small"}, {})
    small_registry.set_alias("digits-small", f"digits-small@{mv.manifest.version}")
    ctx = replace(ctx, fallbacks={"digits": "digits-small"})
    ctx.capacity.update("w", _telemetry("digits", 100, 300))
    request = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    d = decide(_payload(request), _origin("interactive"), ctx)
    assert isinstance(d, Forward) and d.topic == "kip.work.digits-small.interactive"
    assert d.work_item.route.fallback_from == "digits" and d.audit.decision == "degraded"
    assert d.audit.fallback_from == "digits"
    only_digits = ctx.access.model_copy(update={"tenants": {
        "acme": TenantPolicy(models=["digits"])}})
    again = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    d = _rejected(decide(_payload(again), _origin("interactive"),
                         replace(ctx, access=only_digits)), "OVERLOADED")
    assert "its fallback digits-small is not a model tenant 'acme' may use" in \
        d.result.error.message and d.result.error.retry_after_ms > 0


def test_a_model_with_no_live_worker_fails_closed_until_one_reports(ctx):
    """No worker has reported (all stopped, or their telemetry lost): the request ends
    MODEL_UNAVAILABLE at once, retriable, instead of waiting in a topic nobody reads."""
    ctx.capacity.update("digits.w1", None)
    request = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    d = _rejected(decide(_payload(request), _origin("interactive"), ctx), "MODEL_UNAVAILABLE")
    assert "no live worker of digits" in d.result.error.message
    assert d.result.error.retry_after_ms == 1000
    stale = _telemetry("digits", 100, 0).model_copy(update={"at_ms": NOW_MS - 5_000})
    ctx.capacity.update("w", stale)
    again = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    _rejected(decide(_payload(again), _origin("interactive"), ctx), "MODEL_UNAVAILABLE")
    ctx.capacity.update("w", _telemetry("digits", 100, 0))
    third = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    assert isinstance(decide(_payload(third), _origin("interactive"), ctx), Forward)


def test_a_model_with_no_live_worker_degrades_to_a_live_fallback(ctx, small_registry,
                                                                  tmp_path):
    artifact = tmp_path / "small.onnx"
    artifact.write_bytes(b"small")
    mv = small_registry.publish(artifact, DIGITS_MANIFEST | {"name": "digits-small"}, {})
    small_registry.set_alias("digits-small", f"digits-small@{mv.manifest.version}")
    ctx = replace(ctx, fallbacks={"digits": "digits-small"})
    ctx.capacity.update("digits.w1", None)
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    d = decide(_payload(request), _origin(), ctx)
    assert isinstance(d, Forward) and d.topic == "kip.work.digits-small.standard"
    ctx.capacity.update("digits-small.w1", None)
    again = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    _rejected(decide(_payload(again), _origin(), ctx), "MODEL_UNAVAILABLE")


def test_a_work_topic_whose_partitions_are_unknown_is_not_routed_to(ctx):
    """A work item needs the partition its stamp names: with the topic's partition count
    unknown (metadata mid-move) the request waits for a retry, it is not placed blind."""
    partitions = {t: 3 for t in ctx.topics} | {"kip.work.digits.standard": 0}
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    d = _rejected(decide(_payload(request), _origin(), replace(ctx, partitions=partitions)),
                  "MODEL_UNAVAILABLE")
    assert "partitions of kip.work.digits.standard are not known" in d.result.error.message
    assert d.result.error.retry_after_ms == 1000


def test_a_model_without_work_topics_is_not_found_instead_of_stalling(ctx):
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    d = _rejected(decide(_payload(request), _origin(), replace(ctx, topics=frozenset())),
                  "MODEL_NOT_FOUND")
    assert "kip topics apply --models digits" in d.result.error.message


def test_an_unusable_fallback_leaves_the_request_overloaded(ctx):
    ctx = replace(ctx, fallbacks={"digits": "no-such-model"})
    ctx.capacity.update("w", _telemetry("digits", 100, 300))
    request = signer().request("digits", PIXELS, priority="interactive", issued_at_ms=NOW_MS)
    _rejected(decide(_payload(request), _origin("interactive"), ctx), "OVERLOADED")


def test_a_version_every_worker_refused_to_load_is_not_routed_to(ctx, small_registry):
    version = small_registry.resolve("digits").manifest.version
    refusing = _telemetry("digits", 100, 0).model_copy(update={
        "refused": {version: f"MODEL_UNAVAILABLE: digits@{version} needs an estimated 8 MiB; "
                             "budget 4 MiB"}})
    ctx.capacity.update("digits.w1", None)   # the fixture's worker could load it
    ctx.capacity.update("w", refusing)
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    d = _rejected(decide(_payload(request), _origin(), ctx), "MODEL_UNAVAILABLE")
    assert "no worker of digits can load it: digits@" in d.result.error.message
    tampered = refusing.model_copy(update={"refused": {version: "MODEL_UNVERIFIED: digest"}})
    ctx.capacity.update("w", tampered)
    once_more = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    _rejected(decide(_payload(once_more), _origin(), ctx), "MODEL_UNVERIFIED")
    ctx.capacity.update("w2", _telemetry("digits", 100, 0).model_copy(
        update={"worker_id": "w2"}))   # one worker that can: routed
    again = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    assert isinstance(decide(_payload(again), _origin(), ctx), Forward)


def test_a_request_naming_an_input_twice_is_refused_before_routing(ctx):
    """The manifest check and the worker would read different tensors of that name: the
    request is refused as it is decoded, before anything else reads it."""
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    doc = orjson.loads(_payload(request))
    doc["inputs"] = [{"name": "pixels", "datatype": "FP32", "shape": [], "data": [0.5]},
                     *doc["inputs"]]
    d = _rejected(decide(orjson.dumps(doc), _origin(), ctx), "INVALID_REQUEST")
    assert d.result.request_id == request.request_id
    assert "input names must be unique" in d.result.error.message


@pytest.mark.parametrize("why, code, words", [
    ("too-large 268435456", "PAYLOAD_TOO_LARGE", "inflates to 268435456 bytes"),
    ("budget 1048576", "PAYLOAD_TOO_LARGE", "one fetch may hold"),
    ("codec lz4", "INVALID_REQUEST", "codec lz4 is not accepted"),
    ("corrupt", "INVALID_REQUEST", "does not inflate")])
def test_a_record_its_compressed_batch_left_unread_is_refused_by_its_headers(
        ctx, why, code, words):
    origin = replace(_origin("interactive"), headers=(("kip-request-id", b"r-9"),
                                                      ("kip-unread", why.encode())))
    d = _rejected(decide_as_sent(b"", origin, ctx), code)
    assert words in d.result.error.message
    assert d.result.request_sha256 is None   # its bytes were never all seen
    assert d.reply_to == "kip.results"   # nothing of it was authenticated
    assert d.result.request_id == "undecodable.kip.requests.interactive.0.7"


def test_a_tenants_quota_is_charged_before_its_message_is_parsed(ctx):
    """A flood's excess costs a hash, an HMAC and a bucket: past the quota, not even
    garbage is parsed, and its rejection goes to the sender's own topic."""
    ctx.ledger.quotas["acme"] = TenantQuota(tenant="acme", requests_per_s=1, burst_requests=2)
    ctx = replace(ctx, topics=ctx.topics | {"kip.results.acme"})
    codes = [decide(b"not json at all", replace(_origin(offset=n), headers=(
        ("kip-request-id", f"g-{n}".encode()),)), ctx).result.error.code for n in range(4)]
    assert codes == ["INVALID_REQUEST", "INVALID_REQUEST", "QUOTA_EXCEEDED", "QUOTA_EXCEEDED"]
    d = decide(b"not json", replace(_origin(offset=9), headers=(("kip-request-id", b"g-9"),)),
               ctx)
    assert d.reply_to == "kip.results.acme" and d.result.request_id == "g-9"
    assert d.result.error.retry_after_ms > 0


def test_a_tenant_sends_on_its_request_partition_only(ctx, access):
    """The partition Kafka's default partitioner gives its key, or the one its policy
    names: then its messages are one ordered queue, and a noisy tenant can have one of
    its own."""
    from kip.transport.partitioning import key_partition
    ctx = replace(ctx, partitions={"kip.requests.standard": 8,
                                   "kip.work.digits.standard": 3})
    home = key_partition(b"acme", list(range(8)))
    for partition in range(8):
        request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
        d = decide(_payload(request), replace(_origin(), partition=partition), ctx)
        if partition == home:
            assert isinstance(d, Forward)
        else:
            assert d.result.error.code == "INVALID_REQUEST"
            assert f"go to partition {home} of kip.requests.standard" in d.result.error.message
    placed = access.model_copy(update={"tenants": access.tenants | {
        "acme": TenantPolicy(models=["*"], request_partition=11)}})
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    d = decide(_payload(request), replace(_origin(), partition=3), replace(ctx, access=placed))
    assert isinstance(d, Forward)   # 11 of 8 partitions: the fourth (3)


def test_a_shed_record_names_every_offset_it_shed():
    from kip.pipeline.intake import ShedTally, shed_record
    tally = ShedTally()
    for offset, key in [(5, "acme"), (6, "acme"), (7, ""), (9, "acme")]:
        tally.add(offset, key)
    audit = shed_record("kip.requests.interactive", 2, tally, NOW_MS)
    assert audit.request_id == "shed.kip.requests.interactive.2.5" and audit.final
    assert audit.reason.endswith("offsets 5-7,9") and "4 messages" in audit.reason
    assert "(no tenant)" in audit.reason and audit.tenant is None


def test_the_drains_screen_sheds_unsigned_messages_past_the_allowance_only(ctx):
    """Before faust's stream takes them: a sender's message is kept, an unsigned one is
    kept within its key's allowance (and the decision does not charge it again), the
    rest are shed and tallied."""
    from kip.pipeline.intake import Screen
    policy = ctx.policy.model_copy(update={"unsigned_per_s": 1.0, "unsigned_burst": 2.0})
    ctx = replace(ctx, policy=policy)
    screen = Screen(ctx.access, policy, ctx.allowance)
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    from tests.pipeline.conftest import sealed as seal
    signed = seal(_payload(request), _origin(offset=0))
    assert screen.keep(signed.topic, 0, 0, b"acme", _payload(request), signed.headers, NOW_MS)
    kept = [screen.keep("kip.requests.standard", 0, n, b"acme", b"junk", (), NOW_MS)
            for n in range(1, 5)]
    assert kept == [True, True, False, False]
    for n in (1, 2):   # the two kept: answered, not charged again, not shed
        assert isinstance(decide_as_sent(b"junk", _origin(offset=n), ctx), Reject)
    tally = screen.take_shed("kip.requests.standard", 0)
    assert tally.count == 2 and tally.ranges == [[3, 4]]
    assert screen.take_shed("kip.requests.standard", 0) is None


def test_an_envelope_the_screen_verified_is_not_verified_again(ctx, monkeypatch):
    """The drain's screen notes the sender it verified by the message's coordinates; the
    decision takes it from there (and verifies a message the screen did not see)."""
    import kip.pipeline.decide as decide_module
    from kip.pipeline.intake import Screen
    from tests.pipeline.conftest import sealed as seal
    screen = Screen(ctx.access, ctx.policy, ctx.allowance, ctx.envelopes)
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    signed = seal(_payload(request), _origin(offset=3))
    assert screen.keep(signed.topic, signed.partition, signed.offset, signed.key,
                       _payload(request), signed.headers, NOW_MS)
    verified = []
    real = decide_module.sent_by
    monkeypatch.setattr(decide_module, "sent_by", lambda *a: verified.append(a) or real(*a))
    assert isinstance(decide_as_sent(_payload(request), signed, ctx), Forward)
    assert verified == [] and not ctx.envelopes.checked
    again = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    assert isinstance(decide_sealed(_payload(again), _origin(offset=4), ctx), Forward)
    assert len(verified) == 1
