import numpy as np
import pytest

from kip.schemas.codec import decode, encode
from kip.schemas.messages import AuditRecord, ErrorInfo, InferenceResult, Priority, Status, Timings
from kip.schemas.tensors import Tensor
from kip.schemas.pydantic_adapter import built

TIMINGS = dict(admission_ms=5.0, queue_ms=10.0, batch_wait_ms=None, inference_ms=3.5,
               total_ms=30.0, inference_started_at_ms=1.8e12)
RESULT = dict(request_id="r-1", request_sha256="b" * 64, tenant="acme",
              priority=Priority.STANDARD, status=Status.FAILED,
              error=ErrorInfo(code="INFERENCE_FAILED", message="nan"), model="digits",
              model_name="digits", model_version="v1", artifact_sha256="a" * 64,
              fallback_from=None, outputs=[Tensor.of_output("label", np.arange(2))],
              batch_size=4, traceparent=None, produced_at_ms=1_800_000_000_030)
AUDIT = dict(request_id="r-1", stage="worker", decision="ok", final=True, tenant="acme",
             key_id="acme-k1", priority=Priority.BATCH, model="digits", model_name=None,
             reason="", payload_bytes=0, at_ms=1_800_000_000_030)


@pytest.mark.parametrize("cls, fields", [
    (Timings, TIMINGS),
    (InferenceResult, RESULT | {"timings": Timings(**TIMINGS)}),
    (AuditRecord, AUDIT | {"timings": Timings(**TIMINGS)}),
    (Tensor, {"name": "x", "datatype": "INT64", "shape": [1], "raw": "AQAAAAAAAAA="}),
])
def test_a_built_message_equals_and_encodes_as_the_validated_one(cls, fields):
    """Field order included: pydantic writes a message's JSON in its dict's order."""
    message, validated = built(cls, fields), cls(**fields)
    assert message == validated and encode(message) == encode(validated)
    assert message.model_fields_set == validated.model_fields_set
    assert decode(cls, encode(message)) == validated


def test_unknown_and_missing_fields_are_refused():
    with pytest.raises(TypeError, match=r"has no fields \['typo_ms'\]"):
        built(Timings, TIMINGS | {"typo_ms": 1.0})
    with pytest.raises(TypeError, match=r"lacks required \['total_ms'\]"):
        built(Timings, {"queue_ms": 1.0})   # total_ms has no default
    with pytest.raises(TypeError, match=r"lacks required \['outputs'\]"):   # a factory's
        built(InferenceResult, {k: v for k, v in RESULT.items() if k != "outputs"}
              | {"timings": Timings(**TIMINGS)})


def test_a_built_message_is_frozen_and_owns_its_fields():
    first, second = built(Timings, TIMINGS), built(Timings, {"total_ms": 1.0})
    with pytest.raises(Exception):
        first.total_ms = 2.0
    assert second.queue_ms is None and first.queue_ms == 10.0


def test_pydantics_instance_and_class_internals_are_where_the_adapter_reaches():
    """Pinned against the installed pydantic (``scripts/compat``'s sort of check)."""
    from kip.schemas.pydantic_adapter import to_json
    timings = Timings(total_ms=1.5)
    assert set(vars(timings)) == set(Timings.model_fields)   # the field dict is __dict__
    for name in ("__pydantic_fields_set__", "__pydantic_extra__", "__pydantic_private__"):
        assert hasattr(timings, name), name
    assert Timings.__pydantic_post_init__ is None   # a model class says it has none
    assert to_json(timings) == timings.model_dump_json(exclude_none=True).encode()
