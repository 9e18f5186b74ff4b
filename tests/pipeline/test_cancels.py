"""A cancel message through ``decide``: accepted only from the tenant that sent the
request, signed as requests are; one acknowledgement and one audit record each."""

from kip.client_messages import cancel_message
from kip.pipeline.decide import decide
from kip.pipeline.decisions import Cancel, Origin, Reject
from kip.schemas import Status, encode
from kip.schemas.codec import headers
from kip.schemas.signing import sign_cancel
from tests.pipeline.conftest import NOW_MS, sealed

SECRETS = {"acme": ("acme-k1", b"acme-secret"), "limited": ("lim-k1", b"lim-secret")}


def _cancel(tenant="acme", request_tenant="acme"):
    """A cancel of request r-42 by ``tenant``, issued at the context's clock."""
    key_id, secret = SECRETS[tenant]
    message = cancel_message(secret, tenant, key_id, "r-42", request_tenant, None)
    return message.model_copy(update={"issued_at_ms": NOW_MS})


def _decide(message, ctx, tenant="acme"):
    """``message`` signed anew by ``tenant``'s key (its clock moved) and decided as sent."""
    secret = SECRETS[tenant][1]
    fields = message.model_dump(exclude={"signature", "traceparent", "schema_version"})
    signed = message.model_copy(update={"signature": sign_cancel(secret, **fields)})
    origin = Origin("kip.requests.standard", 0, 9, key=tenant.encode(),
                    headers=tuple(headers(signed)))
    return decide(encode(signed), sealed(encode(signed), origin), ctx), signed


def test_an_accepted_cancel_is_a_notice_an_ok_and_a_final_audit_record(ctx):
    d, cancel = _decide(_cancel(), ctx)
    assert isinstance(d, Cancel)
    assert (d.notice.tenant, d.notice.request_id, d.notice.key_id) == ("acme", "r-42", "acme-k1")
    assert d.result.request_id == cancel.cancel_id and d.result.status == Status.OK
    assert d.audit.final and d.audit.decision == "cancel" and d.audit.key_id == "acme-k1"
    assert "cancels its request r-42" in d.audit.reason
    assert [o.topic for o in d.outputs(ctx.names)] == ["kip.cancels", "kip.results",
                                                        "kip.audit"]
    again, _ = _decide(cancel, ctx)   # the same message once more: a replay
    assert isinstance(again, Reject) and again.result.error.code == "DUPLICATE_REQUEST"


def test_a_cancel_of_another_tenants_request_is_forbidden(ctx):
    d, cancel = _decide(_cancel(tenant="limited", request_tenant="acme"), ctx, "limited")
    assert isinstance(d, Reject) and d.result.status == Status.REJECTED
    assert d.result.request_id == cancel.cancel_id
    assert d.result.error.code == "FORBIDDEN"
    assert "only the tenant that sent a request may cancel it" in d.result.error.message
    assert d.audit.final and d.audit.error_code == "FORBIDDEN" and d.audit.tenant == "limited"


def test_a_cancel_signed_with_another_secret_is_unauthenticated(ctx):
    message = _cancel()
    origin = Origin("kip.requests.standard", 0, 9, key=b"acme", headers=tuple(headers(message)))
    forged = message.model_copy(update={"signature": "0" * 64})
    d = decide(encode(forged), sealed(encode(forged), origin), ctx)
    assert isinstance(d, Reject) and d.result.error.code == "UNAUTHENTICATED"


def test_a_cancel_whose_body_names_another_tenant_than_its_envelope_is_invalid(ctx):
    message = _cancel().model_copy(update={"tenant": "limited"})
    origin = Origin("kip.requests.standard", 0, 9, key=b"acme", headers=tuple(headers(message)))
    d = decide(encode(message), sealed(encode(message), origin), ctx)
    assert isinstance(d, Reject) and d.result.error.code == "INVALID_REQUEST"
