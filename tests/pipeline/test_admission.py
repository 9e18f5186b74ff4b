import numpy as np
import pytest

from kip.models.manifest import Manifest
from kip.pipeline.admission import (MAX_REQUEST_BYTES, AdmissionPolicy, ClassPolicy,
                                    check_payload_size, check_request_limits, check_wait,
                                    effective_deadline)
from kip.schemas.errors import InvalidRequest, Overloaded, PayloadTooLarge
from tests.pipeline.conftest import DIGITS_MANIFEST, NOW_MS, signer
from kip.topics.catalogue import MAX_MESSAGE_BYTES

POLICY = AdmissionPolicy()


def _manifest(**over) -> Manifest:
    return Manifest(**DIGITS_MANIFEST, version="v", artifact_sha256="a" * 64, **over)


def test_payload_limits_by_class_and_model():
    check_payload_size(1024 * 1024, "interactive", POLICY)
    with pytest.raises(PayloadTooLarge, match="interactive class allows 1048576"):
        check_payload_size(1024 * 1024 + 1, "interactive", POLICY)
    check_payload_size(2 * 1024 * 1024, "batch", POLICY)
    with pytest.raises(PayloadTooLarge, match="model allows 100"):
        check_payload_size(101, "batch", POLICY, model_limit=100)


def test_rows_and_elements_per_request():
    request = signer().request("digits", {"pixels": np.zeros((9, 64), np.float32)})
    with pytest.raises(InvalidRequest, match="9 rows .* at most 8"):
        _manifest().check_inputs(request.inputs)
    assert _manifest(max_rows_per_request=9).check_inputs(request.inputs) == 9
    check_request_limits(request, _manifest(max_rows_per_request=9), 100, POLICY)
    small = AdmissionPolicy(max_tensor_elements=500)
    with pytest.raises(InvalidRequest, match="576 elements; the limit is 500"):
        check_request_limits(request, _manifest(max_rows_per_request=9), 100, small)


def test_default_deadline_per_class():
    request = signer().request("digits", {"pixels": np.zeros((1, 64), np.float32)},
                               priority="interactive", issued_at_ms=NOW_MS)
    assert effective_deadline(request, POLICY) == NOW_MS + 2_000
    pinned = signer().request("digits", {"pixels": np.zeros((1, 64), np.float32)},
                              issued_at_ms=NOW_MS, deadline_ms=NOW_MS + 5)
    assert effective_deadline(pinned, POLICY) == NOW_MS + 5


def test_overload_against_budget_and_deadline():
    check_wait(None, "interactive", NOW_MS + 10_000, NOW_MS, POLICY)
    check_wait(400, "interactive", NOW_MS + 10_000, NOW_MS, POLICY)
    with pytest.raises(Overloaded, match="class budget of 500") as err:
        check_wait(1500, "interactive", NOW_MS + 10_000, NOW_MS, POLICY)
    assert err.value.retry_after_ms == 1001
    with pytest.raises(Overloaded, match="time to the deadline of 120"):
        check_wait(300, "interactive", NOW_MS + 300, NOW_MS, POLICY)   # 40% headroom


def test_no_class_may_admit_a_request_too_large_to_forward():
    with pytest.raises(ValueError, match="less than or equal"):
        ClassPolicy(max_payload_bytes=MAX_MESSAGE_BYTES, default_deadline_ms=1,
                    wait_budget_ms=1)
    assert POLICY.of("batch").max_payload_bytes == MAX_REQUEST_BYTES < MAX_MESSAGE_BYTES
