import numpy as np
import pytest

from kip.models.manifest import Manifest
from kip.schemas.errors import InvalidRequest, KipError, ModelNotFound
from kip.schemas.messages import InferenceRequest, Route, WorkItem
from kip.schemas.tensors import Tensor
from kip.topics.names import TopicNames
from kip.workers.checks import check_addressed, check_inputs

NAMES = TopicNames("kip")
MANIFEST = Manifest(name="digits", version="1", artifact_sha256="a" * 64,
                    inputs=[{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}],
                    outputs=[{"name": "label", "datatype": "INT64", "shape": [-1]}],
                    max_batch=8, memory_estimate_bytes=1)


def _item(tensor: Tensor, model: str = "digits", reply_to: str = "kip.results.acme",
          digest: str = "a" * 64) -> WorkItem:
    request = InferenceRequest(request_id="r", tenant="acme", key_id="k", signature="0" * 64,
                               issued_at_ms=1, priority="standard", model=model,
                               inputs=[tensor])
    return WorkItem(request=request, routed_at_ms=1, deadline_ms=2, reply_to=reply_to,
                    route=Route(alias=model, model_name=model, model_version="1",
                                artifact_sha256=digest))


GOOD = Tensor.from_array("pixels", np.zeros((2, 64), np.float32))


@pytest.mark.parametrize("tensor, error", [
    (Tensor(name="pixels", datatype="FP32", shape=[], data=[0.5]), InvalidRequest),
    (Tensor.from_array("pixels", np.zeros((1, 64), np.float64)), InvalidRequest),
    (Tensor.from_array("pixels", np.zeros((9, 64), np.float32)), InvalidRequest),
    (Tensor.from_array("pixels", np.zeros((0, 64), np.float32)), InvalidRequest),
    (Tensor.from_array("image", np.zeros((1, 64), np.float32)), InvalidRequest),
])
def test_inputs_the_manifest_does_not_take_are_refused(tensor, error):
    with pytest.raises(error):
        check_inputs(_item(tensor), MANIFEST, MANIFEST.artifact_sha256)
    check_inputs(_item(GOOD), MANIFEST, MANIFEST.artifact_sha256)


def test_a_work_item_routed_to_another_artifact_is_refused():
    with pytest.raises(ModelNotFound, match="routed to"):
        check_inputs(_item(GOOD, digest="b" * 64), MANIFEST, MANIFEST.artifact_sha256)


@pytest.mark.parametrize("model, reply_to", [("minilm", "kip.results.acme"),
                                             ("digits", "kip.control"),
                                             ("digits", "kip.audit"),
                                             ("digits", "kip.results.")])
def test_a_work_item_for_another_model_or_replying_outside_results_is_refused(model, reply_to):
    with pytest.raises(KipError):
        check_addressed(_item(GOOD, model, reply_to), "digits", NAMES)
    check_addressed(_item(GOOD), "digits", NAMES)
