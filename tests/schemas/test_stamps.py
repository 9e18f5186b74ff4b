import numpy as np
import pytest

from kip.schemas.errors import Unauthenticated
from kip.schemas.messages import InferenceRequest, Route, WorkItem
from kip.schemas.stamps import StampKeys, check_stamp, stamped
from kip.schemas.tensors import Tensor

KEYS = StampKeys.generate("s1")


def _item(**fields) -> WorkItem:
    request = InferenceRequest(
        request_id="r-1", tenant="acme", key_id="k1", signature="0" * 64,
        issued_at_ms=1, priority="standard", model="digits",
        inputs=[Tensor.from_array("pixels", np.zeros((1, 64), np.float32))])
    return WorkItem(**({"request": request, "routed_at_ms": 5, "deadline_ms": 9,
                        "reply_to": "kip.results.acme", "request_sha256": "a" * 64,
                        "route": Route(alias="digits", model_name="digits",
                                       model_version="1", artifact_sha256="b" * 64)}
                       | fields))


def test_a_stamped_item_verifies_and_any_change_breaks_the_stamp():
    item = stamped(_item(), KEYS)
    check_stamp(item, KEYS)
    other_inputs = item.request.model_copy(update={"inputs": [
        Tensor.from_array("pixels", np.ones((1, 64), np.float32))]})
    for changed in (item.model_copy(update={"reply_to": "kip.results.bob"}),
                    item.model_copy(update={"deadline_ms": 10**12}),
                    item.model_copy(update={"request_sha256": "c" * 64}),
                    item.model_copy(update={"request": other_inputs}),
                    item.model_copy(update={"route": item.route.model_copy(
                        update={"model_version": "2"})})):
        with pytest.raises(Unauthenticated, match="does not match"):
            check_stamp(changed, KEYS)


def test_unstamped_and_foreign_stamps_are_refused():
    with pytest.raises(Unauthenticated, match="no pipeline stamp"):
        check_stamp(_item(), KEYS)
    foreign = stamped(_item(), StampKeys.generate("s9"))
    with pytest.raises(Unauthenticated, match="not on this worker's ring"):
        check_stamp(foreign, KEYS)
    with pytest.raises(Unauthenticated, match="does not match"):
        check_stamp(stamped(_item(), StampKeys.generate("s1")), KEYS)


def test_a_ring_accepts_its_old_keys_during_a_rotation():
    old = StampKeys.generate("s1")
    new = StampKeys.generate("s2")
    ring = StampKeys(current="s2", keys={**old.keys, **new.keys})
    check_stamp(stamped(_item(), old), ring)
    check_stamp(stamped(_item(), ring), new)


def test_a_ring_refuses_short_keys_and_a_current_key_it_lacks():
    with pytest.raises(ValueError, match="shorter than 32"):
        StampKeys(current="s1", keys={"s1": "short"})
    with pytest.raises(ValueError, match="not on the ring"):
        StampKeys(current="s2", keys={"s1": "x" * 64})
