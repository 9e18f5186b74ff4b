"""Replay protection in the pure decision, and what the admitted-ids records hold."""

from dataclasses import replace

import numpy as np
import orjson
import pytest

from kip.pipeline.decisions import Forward, Origin, Reject
from kip.pipeline.quota import TenantQuota
from kip.pipeline.replays import BUCKET_MS, SeenRequests
from kip.transport.id_records import parse_id_record as parse_admitted
from kip.schemas import encode
from kip.schemas.result_signatures import request_sha256
from tests.pipeline.conftest import NOW_MS, decide_sealed as decide, signer

PIXELS = {"pixels": np.zeros((1, 64), np.float32)}
ORIGIN = Origin("kip.requests.standard", 0, 1, key=b"acme")


def _code(d) -> str:
    return "forwarded" if isinstance(d, Forward) else d.result.error.code


def test_a_copy_of_an_admitted_request_is_a_duplicate_and_charges_nothing(ctx):
    ctx.ledger.quotas["acme"] = TenantQuota(tenant="acme", requests_per_s=1, burst_requests=2)
    body = encode(signer().request("digits", PIXELS, issued_at_ms=NOW_MS))
    first, copy = decide(body, ORIGIN, ctx), decide(body, ORIGIN, ctx)
    assert (_code(first), _code(copy)) == ("forwarded", "DUPLICATE_REQUEST")
    assert copy.result.request_sha256 is None and copy.audit.error_code == "DUPLICATE_REQUEST"
    fresh = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    assert _code(decide(encode(fresh), ORIGIN, ctx)) == "forwarded"   # budget: 2, 1 spent


def test_a_rejected_request_may_be_sent_again_under_its_id(ctx):
    ctx.ledger.quotas["acme"] = TenantQuota(tenant="acme", requests_per_s=1, burst_requests=1)
    decide(encode(signer().request("digits", PIXELS, issued_at_ms=NOW_MS)), ORIGIN, ctx)
    retry = signer().request("digits", PIXELS, issued_at_ms=NOW_MS, request_id="again")
    assert _code(decide(encode(retry), ORIGIN, ctx)) == "QUOTA_EXCEEDED"
    later = replace(ctx, now_ms=NOW_MS + 1000)
    resent = signer().request("digits", PIXELS, issued_at_ms=NOW_MS + 1000,
                              request_id="again")
    assert _code(decide(encode(resent), ORIGIN, later)) == "forwarded"


def test_an_unauthenticated_message_takes_no_id_from_its_tenant(ctx):
    forged = signer(secret="wrong").request("digits", PIXELS, issued_at_ms=NOW_MS,
                                            request_id="victim-1")
    assert _code(decide(encode(forged), ORIGIN, ctx)) == "UNAUTHENTICATED"
    real = signer().request("digits", PIXELS, issued_at_ms=NOW_MS, request_id="victim-1")
    assert _code(decide(encode(real), ORIGIN, ctx)) == "forwarded"


def test_ids_are_remembered_per_partition_and_written_per_round(ctx):
    request = signer().request("digits", PIXELS, issued_at_ms=NOW_MS)
    decide(encode(request), ORIGIN, ctx)
    [record] = ctx.seen.records("kip.admitted.standard", ORIGIN.tp)
    assert record.partition == 0 and record.topic == "kip.admitted.standard"
    entries = parse_admitted(record.value)
    assert entries == [["acme", request.request_id, NOW_MS]]
    assert ctx.seen.records("kip.admitted.standard", ORIGIN.tp) == []   # written once

    rebuilt = SeenRequests(ctx.replay_window_ms)
    rebuilt.load(ORIGIN.tp, entries, NOW_MS)
    again = replace(ctx, seen=rebuilt)
    assert _code(decide(encode(request), ORIGIN, again)) == "DUPLICATE_REQUEST"


def test_ids_issued_before_the_window_are_not_kept(ctx):
    seen = SeenRequests(window_ms=1000)
    seen.load(ORIGIN.tp, [["acme", "old", NOW_MS - 5000], ["acme", "new", NOW_MS]], NOW_MS)
    assert set(seen.partitions[ORIGIN.tp]) == {("acme", "new")}


def test_a_sweep_forgets_each_id_once_its_bucket_has_left_the_window():
    seen = SeenRequests(window_ms=10 * BUCKET_MS)
    start = 100 * BUCKET_MS
    entries = [["acme", f"r-{i}", start + i * BUCKET_MS // 2] for i in range(8)]
    seen.load(ORIGIN.tp, entries, start)
    ids = lambda: sorted(request_id for _, request_id in seen.partitions[ORIGIN.tp])

    seen.sweep(start + 10 * BUCKET_MS + BUCKET_MS - 1)   # r-0 and r-1's bucket: not yet
    assert ids() == [f"r-{i}" for i in range(8)]
    seen.sweep(start + 11 * BUCKET_MS)   # all of it older than the window now
    assert ids() == [f"r-{i}" for i in range(2, 8)]
    seen.sweep(start + 13 * BUCKET_MS + 1)
    assert ids() == ["r-6", "r-7"]


def test_a_sweep_keeps_an_id_admitted_again_under_a_later_time():
    seen = SeenRequests(window_ms=BUCKET_MS)
    seen.load(ORIGIN.tp, [["acme", "r-1", 0], ["acme", "r-1", 5 * BUCKET_MS]], 0)
    seen.sweep(3 * BUCKET_MS)
    assert seen.partitions[ORIGIN.tp] == {("acme", "r-1"): 5 * BUCKET_MS}
    seen.sweep(7 * BUCKET_MS)
    assert seen.partitions[ORIGIN.tp] == {}


@pytest.mark.parametrize("value", [b"null", b"{}", b'{"ids": [["a", "b"]]}',
                                   b'{"ids": [["a", "b", "1"]]}', b"[]"])
def test_an_unusable_admitted_record_is_refused(value):
    with pytest.raises((ValueError, orjson.JSONDecodeError)):
        parse_admitted(value)


def test_a_request_keyed_by_anything_but_its_tenant_is_refused(ctx):
    """Keyed by another name, its envelope is not that tenant's: no tenant's message.
    Keyed by its sender but naming another tenant in its body: invalid."""
    body = encode(signer().request("digits", PIXELS, issued_at_ms=NOW_MS))
    for key in (None, b"bob", b""):
        d = decide(body, Origin("kip.requests.standard", 0, 1, key=key), ctx)
        assert isinstance(d, Reject) and d.result.error.code == "UNAUTHENTICATED"
        assert d.reply_to == "kip.results" and d.result.tenant is None
    limited = encode(signer("limited", "lim-k1", "lim-secret").request(
        "digits", PIXELS, issued_at_ms=NOW_MS))
    d = decide(limited, Origin("kip.requests.standard", 0, 1, key=b"acme"), ctx)
    assert d.result.error.code == "INVALID_REQUEST" and d.result.tenant == "acme"


def test_another_tenants_reply_topic_is_forbidden_and_not_written_to(ctx):
    bobs = "kip.results.bob"
    ctx = replace(ctx, topics=ctx.topics | {bobs, "kip.results.acme"})
    request = signer(reply_to=bobs).request("digits", PIXELS, issued_at_ms=NOW_MS)
    d = decide(encode(request), ORIGIN, ctx)
    assert d.result.error.code == "FORBIDDEN" and d.reply_to == "kip.results.acme"
    forged = signer(reply_to=bobs, secret="wrong").request("digits", PIXELS,
                                                           issued_at_ms=NOW_MS)
    d = decide(encode(forged), ORIGIN, ctx)   # its envelope is acme's: acme learns why
    assert d.result.error.code == "UNAUTHENTICATED" and d.reply_to == "kip.results.acme"
    assert d.result.request_sha256 == request_sha256(encode(forged))   # its own digest
