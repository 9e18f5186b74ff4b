"""The endings both stages build: undecodable input, statuses, audit records."""

from __future__ import annotations

import numpy as np

from kip.schemas.errors import DeadlineExceeded, InvalidRequest, Overloaded
from kip.schemas.messages import Status
from kip.schemas.endings import Coordinates, audit_record, status_of, undecodable_ending
from tests.pipeline.conftest import NOW_MS, signer


def test_an_undecodable_message_without_an_id_is_named_by_its_coordinates():
    end = undecodable_ending(b"\xff not json", Coordinates("t.work.digits.batch", 0, 3),
                      InvalidRequest("bad"), stage="worker", status=Status.FAILED, now_ms=5)
    assert end.result.request_id == "undecodable.t.work.digits.batch.0.3"
    assert (end.audit.stage, end.audit.decision, end.audit.final) == ("worker", "failed", True)
    assert end.deadletter.origin_offset == 3 and end.reply_to is None


def test_status_follows_the_error_and_the_stage():
    assert status_of(None, Status.FAILED) == Status.OK
    assert status_of(DeadlineExceeded("late"), Status.REJECTED) == Status.EXPIRED
    assert status_of(Overloaded("busy"), Status.REJECTED) == Status.REJECTED


def test_an_audit_record_names_the_request_and_never_its_payload():
    request = signer().request("digits", {"pixels": np.zeros((1, 64), np.float32)},
                               issued_at_ms=NOW_MS)
    audit = audit_record(request, stage="pipeline", decision="rejected", final=True,
                         at_ms=NOW_MS, payload_bytes=300, code="QUOTA_EXCEEDED")
    assert (audit.request_id, audit.tenant, audit.key_id) == (
        request.request_id, request.tenant, request.key_id)
    assert audit.error_code == "QUOTA_EXCEEDED" and audit.model_version is None
    assert "inputs" not in audit.model_dump()
