"""A model version's manifest: what it takes and returns, how its input is prepared, and
the digests of its files. ``check_inputs`` is the one check of a request against a model,
run by the pipeline before routing."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from kip.schemas.errors import InvalidRequest
from kip.schemas.tensors import Datatype, Tensor


class TensorSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    datatype: Datatype
    shape: list[int] = Field(description="-1 for a variable dimension; dim 0 is rows")


class Tokenize(BaseModel):
    """Text to token ids with a HuggingFace ``tokenizers`` file kept beside the model."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    kind: Literal["tokenize"] = "tokenize"
    tokenizer_file: str
    max_length: int
    text_input: str = Field(description="the request's BYTES input")
    onnx_inputs: list[str] = Field(description="ids, then attention mask")


class Manifest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    version: str
    artifact_sha256: str
    files_sha256: dict[str, str] = Field(default_factory=dict)
    inputs: list[TensorSpec] = Field(description="what a request sends")
    outputs: list[TensorSpec]
    max_batch: int = Field(gt=0, description="rows per inference call")
    preprocessing: Tokenize | None = None
    memory_estimate_bytes: int
    max_payload_bytes: int | None = Field(None, description="largest request message")
    max_rows_per_request: int | None = Field(None, description="default: max_batch")
    description: str = ""

    @property
    def rows_per_request(self) -> int:
        return self.max_rows_per_request or self.max_batch

    def check_inputs(self, inputs: list[Tensor]) -> int:
        """Raise ``InvalidRequest`` unless ``inputs`` fit this model; return the row count.

        The one reading of a request's inputs, run by the pipeline before routing and by
        the worker before inference: each input named once (a name given twice could be
        read as either tensor), exactly the manifest's names, their datatypes and
        shapes, the same number of rows in each, and no more rows than a request may
        carry."""
        given = _by_name(inputs)
        wanted = {s.name for s in self.inputs}
        if set(given) != wanted:
            raise InvalidRequest(f"model {self.name} takes inputs {sorted(wanted)}, "
                                 f"got {sorted(given)}")
        rows = {_check_one(given[s.name], s, self.name) for s in self.inputs}
        if len(rows) != 1:
            raise InvalidRequest("all inputs must have the same number of rows")
        count = rows.pop()
        if count > self.rows_per_request:
            raise InvalidRequest(f"{count} rows in one request; model {self.name} takes at "
                                 f"most {self.rows_per_request} (split the request)")
        return count


def _by_name(inputs: list[Tensor]) -> dict[str, Tensor]:
    """``inputs`` by name; ``InvalidRequest`` if a name comes twice."""
    given = {t.name: t for t in inputs}
    if len(given) != len(inputs):
        seen: set[str] = set()
        twice = sorted({t.name for t in inputs if t.name in seen or seen.add(t.name)})
        raise InvalidRequest(f"input names must be unique; given more than once: {twice}")
    return given


def _check_one(tensor: Tensor, spec: TensorSpec, model: str) -> int:
    if tensor.datatype != spec.datatype:
        raise InvalidRequest(f"input '{spec.name}' of model {model} is {spec.datatype}, "
                             f"got {tensor.datatype}")
    shape_ok = len(tensor.shape) == len(spec.shape) and all(
        want in (-1, got) for want, got in zip(spec.shape, tensor.shape))
    if not shape_ok or tensor.shape[0] == 0:
        raise InvalidRequest(f"input '{spec.name}' of model {model} has shape {spec.shape} "
                             f"(-1: any, at least one row), got {tensor.shape}")
    return tensor.shape[0]
