"""The cancels a worker honours: stamped by the pipeline, per tenant and request id,
forgotten after their retention."""

import numpy as np
import pytest

from kip.schemas import encode
from kip.schemas.errors import KipError, Unauthenticated
from kip.schemas.messages import CancelNotice, Route, WorkItem
from kip.schemas.stamps import StampKeys, stamped_notice
from kip.workers.cancels import Cancels, cancelled_error
from tests.pipeline.conftest import NOW_MS, signer

KEYS = StampKeys.generate()


def _item(tenant_client=None) -> WorkItem:
    request = (tenant_client or signer()).request(
        "digits", {"pixels": np.zeros((1, 64), np.float32)}, issued_at_ms=NOW_MS,
        request_id="r-7")
    route = Route(alias="digits", model_name="digits", model_version="v1",
                  artifact_sha256="a" * 64)
    return WorkItem(request=request, route=route, routed_at_ms=NOW_MS, deadline_ms=NOW_MS + 1)


def _notice(tenant="acme", request_id="r-7", at_ms=NOW_MS + 5) -> CancelNotice:
    return CancelNotice(tenant=tenant, request_id=request_id, cancel_id="c-1",
                        key_id="acme-k1", at_ms=at_ms)


def test_a_stamped_notice_cancels_that_tenants_request_only():
    cancels = Cancels(KEYS)
    cancels.apply(b"acme/r-7", encode(stamped_notice(_notice(), KEYS)))
    notice = cancels.notice_for(_item())
    assert notice is not None and notice.cancel_id == "c-1"
    other = signer(tenant="limited", key_id="lim-k1", secret="lim-secret")
    assert cancels.notice_for(_item(other)) is None   # the same id, another tenant's
    err = cancelled_error(notice)
    assert err.code == "CANCELLED" and "by tenant acme (key acme-k1" in err.message


@pytest.mark.parametrize("notice", [_notice(), _notice().model_copy(update={"stamp": None})])
def test_a_notice_without_a_valid_stamp_is_refused(notice):
    cancels = Cancels(KEYS)
    forged = stamped_notice(notice, StampKeys.generate()) if notice.stamp is None else notice
    with pytest.raises(Unauthenticated):
        cancels.apply(b"k", encode(forged))
    with pytest.raises(KipError):
        cancels.apply(b"k", b"{not json")
    assert len(cancels) == 0 and cancels.notice_for(_item()) is None


def test_notices_past_their_retention_are_forgotten():
    cancels = Cancels(KEYS, retention_ms=1000)
    cancels.apply(b"k", encode(stamped_notice(_notice(at_ms=NOW_MS - 5000), KEYS)))
    assert cancels.notice_for(_item()) is None   # older than the request by the retention
    for i in range(1024):
        cancels.apply(b"k", encode(stamped_notice(_notice(request_id=f"x{i}"), KEYS)))
    assert len(cancels) == 1024   # the expired one swept out
