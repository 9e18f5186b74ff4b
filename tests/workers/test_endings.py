import numpy as np
from aiokafka.structs import ConsumerRecord

from kip.schemas import DeadlineExceeded, InferenceFailed, InvalidRequest, Status
from kip.schemas.codec import decode, encode
from kip.schemas.messages import Route, WorkItem
from kip.schemas.pseudonyms import PseudonymKey
from kip.schemas.result_signatures import ResultSigningKey
from kip.schemas.tensors import Tensor, output_documents
from tests.pipeline.conftest import NOW_MS, signer
from kip.topics.names import TopicNames
from kip.transport.outputs import Sealing, key_of
from kip.workers.endings import (Stamps, destinations, ended, poisoned, ran_inference, served,
                                 terminal, terminal_outputs, undecodable_item)

NAMES = TopicNames("t")
RESULT_KEY = ResultSigningKey.generate()


def signer_key():
    return RESULT_KEY.signer()


def _item() -> WorkItem:
    request = signer().request("digits", {"pixels": np.zeros((1, 64), np.float32)},
                               issued_at_ms=NOW_MS)
    route = Route(alias="digits", model_name="digits", model_version="v1",
                  artifact_sha256="a" * 64)
    return WorkItem(request=request, route=route, routed_at_ms=NOW_MS + 5,
                    deadline_ms=NOW_MS + 1000)


def test_ok_result_has_timings_and_the_model_identity():
    stamps = Stamps(pulled_ms=NOW_MS + 15, started_ms=NOW_MS + 20, finished_ms=NOW_MS + 23,
                    batch_size=4)
    result, audit = terminal(_item(), stamps, NOW_MS + 30)
    assert result.status == Status.OK and result.batch_size == 4
    t = result.timings
    assert (t.queue_ms, t.batch_wait_ms, t.inference_ms, t.total_ms) == (10, 5, 3, 30)
    assert result.artifact_sha256 == "a" * 64 and audit.final and audit.decision == "ok"


def test_errors_map_to_expired_and_failed():
    expired, _ = terminal(_item(), Stamps(NOW_MS), NOW_MS, error=DeadlineExceeded("late"))
    failed, audit = terminal(_item(), Stamps(NOW_MS), NOW_MS, error=InferenceFailed("nan"))
    assert expired.status == Status.EXPIRED and expired.error.code == "DEADLINE_EXCEEDED"
    assert failed.status == Status.FAILED and audit.error_code == "INFERENCE_FAILED"


def test_destinations_are_where_the_terminal_outputs_go():
    """What a lane adds to its transaction before inference is where the outputs land:
    a topic or key missed there costs the commit a round trip again."""
    for item in (_item(), _item().model_copy(update={"reply_to": "t.results.team-a"})):
        outputs = terminal_outputs(item, Stamps(NOW_MS), NAMES, outputs=[])
        assert [(o.topic, key_of(o.message)) for o in outputs] == destinations(item, NAMES)


def _record(value: bytes) -> ConsumerRecord:
    return ConsumerRecord(topic="t.work.digits.standard", partition=2, offset=41,
                          timestamp=0, timestamp_type=0, key=None, value=value,
                          checksum=None, serialized_key_size=0,
                          serialized_value_size=len(value), headers=())


def test_poisoned_request_fails_with_its_code_and_a_dead_letter_with_its_origin():
    item = _item()
    outputs = poisoned(_record(encode(item)), item, Stamps(NOW_MS), NAMES,
                       InferenceFailed("output holds NaN"))
    assert [o.topic for o in outputs] == ["t.results", "t.audit", "t.deadletter"]
    result, audit, dead = (o.message for o in outputs)
    assert result.status == Status.FAILED and result.error.code == "INFERENCE_FAILED"
    assert audit.final and audit.error_code == "INFERENCE_FAILED"
    assert (dead.origin_topic, dead.origin_partition, dead.origin_offset) == \
        ("t.work.digits.standard", 2, 41)
    assert dead.request_id == item.request.request_id
    trace = item.request.traceparent
    assert trace and [o.traceparent for o in outputs] == [trace] * 3   # the dead letter too


def test_a_defect_in_inference_is_internal_not_a_crash():
    item = _item()
    outputs = poisoned(_record(encode(item)), item, Stamps(NOW_MS), NAMES,
                       ZeroDivisionError("division by zero"))
    assert outputs[0].message.error.code == "INTERNAL"
    assert "ZeroDivisionError" in outputs[2].message.reason


def test_an_undecodable_work_item_ends_under_its_coordinates_not_the_id_it_claims():
    """Nothing authenticated it: its result and final audit record go under its
    coordinates, so that it cannot end a request it names; the dead letter keeps the id
    read off it for the operator."""
    value = b'{"request": {"request_id": "r-1"}, "route": 1}'
    outputs = undecodable_item(_record(value), InvalidRequest("route: not an object"), NAMES)
    assert [o.topic for o in outputs] == ["t.results", "t.audit", "t.deadletter"]
    coordinates = "undecodable.t.work.digits.standard.2.41"
    assert [o.message.request_id for o in outputs] == [coordinates, coordinates, "r-1"]
    assert outputs[2].message.origin_offset == 41


def test_terminal_messages_encode_as_their_validated_selves():
    """``terminal`` builds its messages unvalidated (schemas/pydantic_adapter.py): each must be
    valid, and the message validation makes of its own bytes."""
    stamps = Stamps(pulled_ms=NOW_MS + 15, started_ms=NOW_MS + 20, finished_ms=NOW_MS + 23,
                    batch_size=4)
    out = [Tensor.of_output("label", np.arange(3))]
    for outputs, error in ((out, None), (None, InferenceFailed("nan"))):
        for message in terminal(_item(), stamps, NOW_MS + 30, outputs, error):
            assert encode(decode(type(message), encode(message))) == encode(message)
            assert decode(type(message), encode(message)) == message


def test_only_a_result_whose_inference_ran_counts_as_inferred():
    ran = Stamps(pulled_ms=NOW_MS, started_ms=NOW_MS + 1, finished_ms=NOW_MS + 2, batch_size=1)
    assert ran_inference(ended(terminal_outputs(_item(), ran, NAMES, outputs=[])))
    assert not ran_inference(ended(terminal_outputs(_item(), Stamps(NOW_MS), NAMES,
                                                    error=DeadlineExceeded("late"))))
    assert not ran_inference(ended(undecodable_item(_record(b"{"), InvalidRequest("bad"), NAMES)))


def _served_pair(item: WorkItem, stamps: Stamps, names: TopicNames = NAMES):
    """``served`` and ``terminal_outputs`` for the same served request, at one instant."""
    arrays = {"probabilities": np.linspace(0, 1, 30, dtype=np.float32).reshape(3, 10),
              "label": np.arange(3)}
    docs = [[output_documents(n, a, [0, 3])[0] for n, a in arrays.items()]]
    tensors = [Tensor.of_outputs(n, a, [0, 3])[0] for n, a in arrays.items()]
    now = NOW_MS + 30
    with_message = terminal_outputs(item, stamps, names, outputs=tensors)
    for output, message in zip(with_message, terminal(item, stamps, now, tensors)):
        object.__setattr__(output, "message", message)   # the same instant as ``served``
    return served(item, stamps, names, docs[0], now), with_message


def test_a_served_request_is_written_as_terminal_outputs_would_write_it():
    """The documents ``served`` writes are the bytes of the messages ``terminal``
    builds, with every optional field there or absent, under each sealing."""
    stamps = Stamps(pulled_ms=NOW_MS + 15, started_ms=NOW_MS + 20, finished_ms=NOW_MS + 23,
                    batch_size=3)
    route = _item().route.model_copy(update={"fallback_from": "digits@v0", "revision": 7})
    items = [_item(), _item().model_copy(update={
        "request_sha256": "b" * 64, "reply_to": "t.results.team-a", "route": route,
        "request": _item().request.model_copy(update={"traceparent": "00-" + "1" * 32 + "-"
                                                      + "2" * 16 + "-01"})})]
    sealings = [Sealing(signer_key()),
                Sealing(signer_key(), pseudonym_key=PseudonymKey.generate())]
    for item in items:
        documents, messages = _served_pair(item, stamps)
        for sealing in sealings:
            for document, output in zip(documents, messages, strict=True):
                assert document.record(sealing) == output.record(sealing)
        assert [e.is_result for e in documents] == [True, False]
        assert ended(documents) == ended(messages) and ran_inference(ended(documents))
