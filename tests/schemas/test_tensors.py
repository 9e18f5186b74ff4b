import base64
import binascii
import random

import numpy as np
import orjson
import pytest
from pydantic import ValidationError

from kip.schemas.messages import InferenceRequest
from kip.schemas.tensors import Tensor, output_documents


def test_raw_form_round_trips_little_endian_bytes():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor.from_array("x", a)
    assert t.datatype == "FP32" and t.shape == [3, 4] and t.data is None
    assert base64.b64decode(t.raw) == a.astype("<f4").tobytes()
    np.testing.assert_array_equal(Tensor.model_validate_json(t.model_dump_json()).array, a)


def test_data_form_matches_raw_form_and_digest():
    a = np.array([[1, 2], [3, 4]], dtype=np.int64)
    as_data, as_raw = Tensor.from_array("ids", a, raw=False), Tensor.from_array("ids", a)
    assert as_data.data == [1, 2, 3, 4]
    np.testing.assert_array_equal(as_data.array, as_raw.array)
    assert as_data.digest() == as_raw.digest()


# 80 bytes of zeros: 108 characters, long enough for the decoder's vector loop.
_LONG = base64.b64encode(bytes(80)).decode()


@pytest.mark.parametrize("raw", [
    _LONG[:50] + "*" + _LONG[51:],          # outside the alphabet, mid-vector
    _LONG[:50] + "-" + _LONG[51:],          # the URL-safe alphabet
    _LONG[:50] + "\n" + _LONG[50:],         # whitespace
    _LONG[:-4] + "AA=A",                    # padding before the end
    "AAA=AAAA",                             # data after padding
    "AAA",                                  # a partial group without its padding
    "AAAA=",                                # padding after a whole group
    "AAAA====",
    "=AAA",
    "AAA\u00e9",                            # not ASCII
])
def test_raw_that_is_not_strict_base64_is_refused(raw):
    with pytest.raises(ValidationError, match="not valid base64"):
        Tensor(name="x", datatype="UINT8", shape=[len(raw) * 3 // 4], raw=raw)


def test_raw_accepted_is_what_strict_base64_accepts():
    """Against CPython's strict decoder on mangled base64 of every length up to 200
    bytes: the same bytes or the same refusal, but for padding after a whole group,
    which only CPython lets through."""
    rng = random.Random(14)
    for _ in range(3000):
        chars = list(base64.b64encode(rng.randbytes(rng.randint(0, 200))).decode())
        for _ in range(rng.randint(0, 2)):
            chars.insert(rng.randint(0, len(chars)), rng.choice("=*-_ \n\x00"))
        raw = "".join(chars)
        try:
            expected = binascii.a2b_base64(raw, strict_mode=True)
        except binascii.Error:
            expected = None
        if expected is not None and len(raw.rstrip("=")) % 4 == 0 and raw.endswith("="):
            expected = None   # padding after a whole group
        if expected is None:
            with pytest.raises(ValidationError, match="not valid base64"):
                Tensor(name="x", datatype="UINT8", shape=[0], raw=raw)
        else:
            tensor = Tensor(name="x", datatype="UINT8", shape=[len(expected)], raw=raw)
            assert tensor.array.tobytes() == expected, raw


def test_bytes_tensor_holds_text():
    t = Tensor.text("text", ["héllo", "world"])
    assert t.array.tolist() == ["héllo", "world"]


@pytest.mark.parametrize("fields, message", [
    ({"datatype": "FP32", "shape": [3], "data": [1.0, 2.0]}, "has 2 elements"),
    ({"datatype": "FP32", "shape": [1], "data": ["a"]}, "needs int or float"),
    ({"datatype": "INT64", "shape": [1], "data": [1.5]}, "needs int"),
    ({"datatype": "INT8", "shape": [1], "data": [1000]}, "does not fit"),
    ({"datatype": "FP32", "shape": [1], "raw": "!!!"}, "not valid base64"),
    ({"datatype": "FP32", "shape": [2], "raw": base64.b64encode(b"\0" * 4).decode()},
     "has 1 elements"),
    ({"datatype": "BYTES", "shape": [1], "data": [1]}, "needs strings"),
    ({"datatype": "FP32", "shape": [1]}, "exactly one of"),
    ({"datatype": "FP32", "shape": [1], "data": [1.0], "extra": 1}, "Extra inputs"),
    ({"datatype": "FP32", "shape": [-1], "data": []}, "greater than or equal to 0"),
])
def test_invalid_tensors_are_rejected_with_a_reason(fields, message):
    with pytest.raises(ValidationError, match=message):
        Tensor(name="x", **fields)


@pytest.mark.parametrize("name, array, message", [
    ("", np.zeros(1, np.float32), "at least 1 character"),
    ("x" * 129, np.zeros(1, np.float32), "at most 128 characters"),
    ("x", np.zeros([1] * 9, np.float32), "at most 8 items"),
    ("x", np.array([1.0, float("-inf")]), "NaN or infinity"),
])
def test_an_array_that_fails_a_check_gets_the_validation_error(name, array, message):
    with pytest.raises(ValidationError, match=message):
        Tensor.from_array(name, array)


def test_a_tensor_keeps_the_values_it_was_built_from():
    source = np.arange(6, dtype=np.float32).reshape(2, 3)
    for tensor in (Tensor.from_array("x", source), Tensor.of_output("x", source)):
        source[0, 0] = 99
        assert tensor.array[0, 0] == 0 and not tensor.array.flags.writeable
        assert np.array_equal(tensor.array, Tensor.model_validate_json(tensor.model_dump_json()).array)
        source[0, 0] = 0


def test_nan_and_infinity_are_rejected_in_both_forms():
    for value in (float("nan"), float("inf")):
        with pytest.raises(ValidationError, match="NaN or infinity"):
            Tensor.from_array("x", np.array([value], dtype=np.float32))
        with pytest.raises(ValidationError, match="NaN or infinity"):
            Tensor(name="x", datatype="FP64", shape=[1], data=[value])


@pytest.mark.parametrize("array", [np.arange(12, dtype=np.float32).reshape(3, 4),
                                   np.array([1, 2, 3], dtype=np.int64),
                                   np.ones((2, 384), dtype=np.float16)[1:]])
def test_an_output_tensor_is_the_same_as_one_built_from_its_array(array):
    trusted, checked = Tensor.of_output("out", array), Tensor.from_array("out", array)
    assert trusted == checked and encode_json(trusted) == encode_json(checked)
    assert np.array_equal(trusted.array, array) and trusted.digest() == checked.digest()
    validated = Tensor.model_validate_json(encode_json(trusted))
    assert validated == checked and np.array_equal(validated.array, checked.array)
    assert validated.array.dtype == checked.array.dtype


def encode_json(tensor: Tensor) -> bytes:
    return orjson.dumps(tensor.model_dump(mode="json", exclude_none=True))


@pytest.mark.parametrize("array", [np.arange(12, dtype=np.float32).reshape(6, 2),
                                   np.arange(5, dtype=">i8"),
                                   np.ones((6, 3, 2), dtype=np.float16)[::-1],
                                   np.array([True, False, True, True, False, True])])
def test_a_batchs_outputs_are_each_requests_rows_as_one_tensor(array):
    """``of_outputs`` splits once what ``of_output`` would build request by request."""
    bounds = [0, 1, 1, 4, len(array)]   # a request of no rows, too
    split = Tensor.of_outputs("out", array, bounds)
    alone = [Tensor.from_array("out", array[a:b]) for a, b in zip(bounds, bounds[1:])]
    assert split == alone and [encode_json(t) for t in split] == [encode_json(t) for t in alone]
    for tensor, expected in zip(split, alone):
        assert np.array_equal(tensor.array, expected.array) and not tensor.array.flags.writeable
        assert tensor.array.dtype == expected.array.dtype and tensor.digest() == expected.digest()
    assert output_documents("out", array, bounds) == [
        t.model_dump(mode="json", exclude_none=True) for t in alone]


def test_outputs_outside_the_raw_form_are_documented_as_their_tensors():
    words = np.array(["a", "bc", "d"])
    assert output_documents("words", words, [0, 2, 3]) == [
        {"name": "words", "datatype": "BYTES", "shape": [2], "data": ["a", "bc"]},
        {"name": "words", "datatype": "BYTES", "shape": [1], "data": ["d"]}]


def test_a_tensor_given_to_a_request_is_not_decoded_again(monkeypatch):
    tensor = Tensor.from_array("x", np.arange(4, dtype=np.float32))
    decodes = []
    monkeypatch.setattr(Tensor, "_decoded", lambda self: decodes.append(self) or None)
    InferenceRequest(request_id="r1", tenant="t", key_id="k", signature="0" * 64,
                     issued_at_ms=1, priority="standard", model="m", inputs=[tensor])
    assert decodes == []


def test_a_tensor_copied_with_new_fields_is_checked_and_decoded_anew():
    tensor = Tensor.from_array("x", np.arange(4, dtype=np.float32))
    digest = tensor.digest()
    copy = tensor.model_copy(update={"raw": base64.b64encode(b"\0" * 16).decode()})
    np.testing.assert_array_equal(copy.array, np.zeros(4, np.float32))
    assert copy.digest() != digest
    with pytest.raises(ValueError, match="has 1 elements"):
        tensor.model_copy(update={"raw": base64.b64encode(b"\0" * 4).decode()})
