"""Tensors on the wire, in the Open Inference Protocol v2 shape.

A tensor is ``name``, ``datatype``, ``shape`` and exactly one of:

- ``data``: the elements as a flat, row-major JSON list (numbers, booleans, or UTF-8
  strings for ``BYTES``), as Triton and KServe accept them;
- ``raw``: base64 of the raw little-endian element bytes, row-major. About 1.3x the
  bytes of the array instead of ~5x for a JSON float list, and no per-element parsing.

Validation turns the tensor into a numpy array once, so a tensor that validates is one
the worker can use: element count matches the shape, and floating values are finite.
"""

from __future__ import annotations

import binascii
import hashlib
import math
from functools import cached_property
from typing import Annotated, Any, Literal

import numpy as np
import pybase64
from pydantic import BaseModel, ConfigDict, Field, model_validator

from kip.schemas.pydantic_adapter import built

Datatype = Literal["BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64",
                   "FP16", "FP32", "FP64", "BYTES"]

NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype("bool"),
    "UINT8": np.dtype("<u1"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
_DATATYPE_OF_KIND = {v.str: k for k, v in NUMPY_DTYPES.items()}
_MAX_DIMS = 8
_MAX_NAME = 128
_MAX_DIM = 2**31 - 1


class Tensor(BaseModel):
    """One named input or output tensor (OIP v2 plus the ``raw`` form)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=_MAX_NAME)
    datatype: Datatype
    shape: list[Annotated[int, Field(ge=0, le=_MAX_DIM)]] = Field(max_length=_MAX_DIMS)
    data: list[Any] | None = None
    raw: str | None = Field(default=None, description="base64 of little-endian bytes")

    @model_validator(mode="after")
    def _check(self) -> Tensor:
        if "array" in self.__dict__:
            # Checked already. pydantic runs this again on a tensor given to another
            # model's field (pydantic/pydantic#12085), though nothing was validated
            # anew; decoding again would only repeat the costliest check.
            return self
        if (self.data is None) == (self.raw is None):
            raise ValueError("a tensor carries exactly one of 'data' or 'raw'")
        # Decoding is the validation. Stored straight into the instance, as ``array``'s
        # cache would be: Python 3.11's cached_property takes a lock on every first read.
        self.__dict__["array"] = self._decoded()
        return self

    def __eq__(self, other: object) -> bool:
        """Field equality (the cached numpy array is not part of a tensor's identity)."""
        if not isinstance(other, Tensor):
            return NotImplemented
        return (self.name, self.datatype, self.shape, self.data, self.raw) == \
            (other.name, other.datatype, other.shape, other.data, other.raw)

    __hash__ = None

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> Tensor:
        """A copy; with ``update``, decoded and checked anew (what this tensor keeps, its
        array and digest, are of the fields it had)."""
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy.__dict__.pop("array", None)
            copy.__dict__.pop("_content_digest", None)
            copy._check()
        return copy

    @property
    def element_count(self) -> int:
        return math.prod(self.shape)   # plain ints: np.prod converts the list to an array

    @cached_property
    def array(self) -> np.ndarray:
        """The tensor as a numpy array of its shape (object array of str for BYTES)."""
        return self._decoded()

    def _decoded(self) -> np.ndarray:
        if self.datatype == "BYTES":
            return self._bytes_array()
        dtype = NUMPY_DTYPES[self.datatype]
        if self.raw is not None:
            flat = np.frombuffer(_b64decode(self.raw), dtype=dtype)
        else:
            flat = _numbers_to_array(self.data, dtype, self.datatype)
        if flat.size != self.element_count:
            raise ValueError(f"tensor '{self.name}' has {flat.size} elements, "
                             f"shape {self.shape} needs {self.element_count}")
        if not all_finite(flat):
            raise ValueError(f"tensor '{self.name}' holds NaN or infinity")
        return flat.reshape(self.shape)

    def _bytes_array(self) -> np.ndarray:
        if self.raw is not None:
            raise ValueError("BYTES tensors travel as 'data' (a list of strings)")
        if not all(isinstance(s, str) for s in self.data):
            raise ValueError(f"tensor '{self.name}' of datatype BYTES needs strings")
        if len(self.data) != self.element_count:
            raise ValueError(f"tensor '{self.name}' has {len(self.data)} elements, "
                             f"shape {self.shape} needs {self.element_count}")
        return np.array(self.data, dtype=object).reshape(self.shape)

    def digest(self) -> bytes:
        """sha256 over name, datatype, shape and the element bytes (see docs/protocol.md).

        Independent of the JSON spelling of numbers, so a producer in any language
        can compute it from the values it sends. Computed once per tensor and kept in
        the instance (cached_property would take its lock): the pipeline needs it to
        authenticate a request and again to stamp its work item.
        """
        found = self.__dict__.get("_content_digest")
        if found is None:
            found = self.__dict__["_content_digest"] = self._content_digest()
        return found

    def _content_digest(self) -> bytes:
        h = hashlib.sha256()
        h.update(f"{self.name}\n{self.datatype}\n{','.join(map(str, self.shape))}\n".encode())
        if self.datatype == "BYTES":
            for s in self.data:
                b = s.encode("utf-8")
                h.update(len(b).to_bytes(4, "little"))
                h.update(b)
        else:
            h.update(np.ascontiguousarray(self.array).tobytes())
        return h.digest()

    @classmethod
    def from_array(cls, name: str, array: np.ndarray, *, raw: bool = True) -> Tensor:
        """Build a tensor from a numpy array (``raw`` form by default).

        An array that plainly passes the checks (its name's length, its rank, finite
        values) is checked here, on the array, rather than by decoding the base64 just
        encoded; any other goes through validation, which names what is wrong."""
        if array.dtype.kind in "OUS":
            return cls(name=name, datatype="BYTES", shape=list(array.shape),
                       data=[str(s) for s in array.reshape(-1)])
        arr = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        datatype = _DATATYPE_OF_KIND.get(arr.dtype.str)
        if datatype is None:
            raise ValueError(f"numpy dtype {array.dtype} has no kip datatype")
        if not raw:
            return cls(name=name, datatype=datatype, shape=list(arr.shape),
                       data=arr.reshape(-1).tolist())
        if _plainly_valid(name, arr):
            return cls._built(name, datatype, arr)
        return cls(name=name, datatype=datatype, shape=list(arr.shape),
                   raw=_b64encode(arr.tobytes()))

    @classmethod
    def of_output(cls, name: str, array: np.ndarray) -> Tensor:
        """``from_array`` for an array kip made itself (a model's output, which the
        session has checked): the same tensor, built without checking it again."""
        arr = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        datatype = _DATATYPE_OF_KIND.get(arr.dtype.str)
        if datatype is None or array.dtype.kind in "OUS":
            return cls.from_array(name, array)
        return cls._built(name, datatype, arr)

    @classmethod
    def of_outputs(cls, name: str, array: np.ndarray, bounds: list[int]) -> list[Tensor]:
        """``of_output`` of each request's rows, ``array[bounds[i]:bounds[i + 1]]``, of a
        batch's output: the array made little-endian and copied out once, each request's
        bytes a slice of that copy, and its array a read-only view of it."""
        arr = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        if not _raw_form(array, arr):
            return [cls.of_output(name, array[a:b]) for a, b in zip(bounds, bounds[1:])]
        data = arr.tobytes()
        decoded = np.frombuffer(data, dtype=arr.dtype).reshape(arr.shape)
        tensors = []
        for (a, b), fields in zip(zip(bounds, bounds[1:]), _raw_fields(name, arr, data, bounds)):
            tensor = built(cls, fields)
            tensor.__dict__["array"] = decoded[a:b]
            tensors.append(tensor)
        return tensors

    @classmethod
    def _built(cls, name: str, datatype: str, arr: np.ndarray) -> Tensor:
        """The raw-form tensor of a little-endian contiguous ``arr`` that passes every
        check, with the array it would decode to already in place: read-only, over the
        bytes encoded, as a decoded one is (a caller's later change to ``arr`` changes
        nothing here)."""
        data = arr.tobytes()
        tensor = built(cls, {"name": name, "datatype": datatype, "shape": list(arr.shape),
                             "raw": _b64encode(data)})
        tensor.__dict__["array"] = np.frombuffer(data, dtype=arr.dtype).reshape(arr.shape)
        return tensor

    @classmethod
    def text(cls, name: str, texts: list[str]) -> Tensor:
        """A BYTES tensor of shape ``[len(texts)]``."""
        return cls(name=name, datatype="BYTES", shape=[len(texts)], data=list(texts))


def output_documents(name: str, array: np.ndarray, bounds: list[int]) -> list[dict]:
    """What ``Tensor.of_outputs`` makes of a batch's output, each tensor as its JSON
    document (its fields, absent ones left out) instead of a model: what a worker writes
    into the results it serves (workers/endings.py ``served``), where a model per
    tensor would only be encoded again."""
    arr = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    if not _raw_form(array, arr):
        return [t.model_dump(mode="json", exclude_none=True)
                for t in Tensor.of_outputs(name, array, bounds)]
    return _raw_fields(name, arr, arr.tobytes(), bounds)


def _raw_form(array: np.ndarray, arr: np.ndarray) -> bool:
    """Whether an output (``arr``: it made little-endian) travels in the raw form."""
    return arr.dtype.str in _DATATYPE_OF_KIND and array.dtype.kind not in "OUS" and arr.ndim > 0


def _raw_fields(name: str, arr: np.ndarray, data: bytes, bounds: list[int]) -> list[dict]:
    """The fields of each request's raw-form tensor of ``arr`` (its bytes: ``data``)."""
    datatype = _DATATYPE_OF_KIND[arr.dtype.str]
    row_bytes, rest = arr.itemsize * math.prod(arr.shape[1:]), list(arr.shape[1:])
    return [{"name": name, "datatype": datatype, "shape": [b - a, *rest],
             "raw": _b64encode(data[a * row_bytes:b * row_bytes])}
            for a, b in zip(bounds, bounds[1:])]


def all_finite(arr: np.ndarray) -> bool:
    """Whether a numeric array holds no NaN or infinity. ``count_nonzero`` is one call
    into C; ``ndarray.all`` passes through numpy's Python wrapper first, which doubles
    the cost for the few-element tensors most requests carry."""
    return arr.dtype.kind != "f" or np.count_nonzero(np.isfinite(arr)) == arr.size


def _plainly_valid(name: str, arr: np.ndarray) -> bool:
    """Whether a tensor of ``arr`` passes every field's check: the same limits as the
    model's fields, and finite values (what decoding checks)."""
    return (0 < len(name) <= _MAX_NAME and arr.ndim <= _MAX_DIMS
            and all(d <= _MAX_DIM for d in arr.shape)
            and all_finite(arr))


def _b64encode(data: bytes) -> str:
    """Standard base64 of ``data`` (``_b64decode``'s library)."""
    return pybase64.b64encode_as_string(data)


def _b64decode(raw: str) -> bytes:
    """Strict base64: RFC 4648's alphabet, and padding only where a last partial group
    needs it. pybase64 decodes with the CPU's vector instructions; CPython's binascii
    goes a byte at a time, and a tensor is decoded by the pipeline, by the worker, and
    by the client of its result. It refuses one string that binascii's
    strict mode accepts: padding after a whole group (``QUJD=``), which no encoder
    writes."""
    try:
        return pybase64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"'raw' is not valid base64: {exc}") from None


def _numbers_to_array(data: list[Any], dtype: np.dtype, datatype: str) -> np.ndarray:
    kind_ok = (bool,) if datatype == "BOOL" else (int, float) if dtype.kind == "f" else (int,)
    if not all(isinstance(v, kind_ok) and (datatype == "BOOL" or not isinstance(v, bool))
               for v in data):
        raise ValueError(f"datatype {datatype} needs {' or '.join(t.__name__ for t in kind_ok)} "
                         "elements")
    try:
        return np.array(data, dtype=dtype)
    except OverflowError:
        raise ValueError(f"a value does not fit datatype {datatype}") from None
