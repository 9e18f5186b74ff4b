"""Model loading and ONNX Runtime sessions, one per immutable model version.

``ModelSession.run`` takes the inputs of several requests and answers them in two steps:
``prepare`` concatenates their rows and tokenizes text where the manifest says so (no
device); ``execute`` runs the session (once; for text, once per length bucket,
workers/buckets.py), checks the outputs (row count, finite values) and splits them back
per request. On CUDA the background lane prepares its next chunk while one executes
(``prepare_ahead``, workers/batching.py). Both are synchronous: the worker calls them in
threads so the event loop (and Kafka heartbeats) keep running.

On CUDA a call goes through an I/O binding: the inputs are copied to the GPU before
the call, and the outputs stay there until the call has finished, when they are copied
back in one step (ONNX Runtime's advice for non-CPU providers; a plain ``run`` stages
both through its own buffers within the call). What it saves a worker, whose data goes
CPU → GPU → CPU on every call, is not measured yet (docs/architecture.md).

``Sessions`` (workers/sessions.py) holds the versions a worker has loaded.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kip.models.preprocess import padded, token_ids
from kip.models.registry import LoadedVersion
from kip.schemas.errors import InferenceFailed
from kip.schemas.tensors import NUMPY_DTYPES, Tensor, all_finite, output_documents
from kip.workers import cuda
from kip.workers.buckets import CPU_CALL_TOKENS, CUDA_CALL_TOKENS, length_buckets

log = logging.getLogger("kip.worker")
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"


def gpu_present(assume_gpu: bool = False) -> bool:
    return assume_gpu or Path("/dev/nvidia0").exists()


def choose_providers(device: str, assume_gpu: bool = False) -> list[str]:
    """``auto``: CUDA where a GPU and the CUDA provider exist, else CPU; ``cuda``; ``cpu``.
    ``assume_gpu``: a GPU is there even without /dev/nvidia0."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    if device == "cpu":
        return [CPU]
    if device == "cuda":
        if CUDA not in available:
            raise RuntimeError(f"device=cuda but this onnxruntime has only {available}; "
                               "install onnxruntime-gpu")
        return _with_cuda()
    return _with_cuda() if CUDA in available and gpu_present(assume_gpu) else [CPU]


def _with_cuda() -> list[str]:
    cuda.preload()   # the wheels' CUDA libraries, before the provider looks for them
    return [CUDA, CPU]


@dataclass
class Prepared:
    """A chunk made ready for its session: the rows of each request, and the joined
    input arrays or, for text, each row's token ids (not padded)."""

    rows: list[int]
    arrays: dict[str, np.ndarray] | None = None
    ids: list[list[int]] | None = None


class ModelSession:
    """One verified version in ONNX Runtime, built from the bytes that were checked
    (``Registry.load``), never from the files again: ``artifact_sha256`` is theirs."""

    def __init__(self, loaded: LoadedVersion, device: str = "auto",
                 intra_op_threads: int = 0, assume_gpu: bool = False,
                 spinning: bool = False, io_binding: bool | None = None,
                 prepare_ahead: bool | None = None) -> None:
        """``io_binding``: run through an I/O binding (default: on CUDA only).
        ``prepare_ahead``: a lane tokenizes the next chunk while one executes (default:
        on CUDA only; never for a model without a tokenizer)."""
        import onnxruntime as ort

        self.loaded = loaded
        self.manifest = loaded.manifest
        self.artifact_sha256 = loaded.artifact_sha256
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = intra_op_threads
        # ONNX Runtime's pool threads spin for a while after each call, waiting for the
        # next: on a host whose cores also run the broker and the pipeline, that is CPU
        # taken from them (most of the digits worker's CPU per request, docs/
        # benchmarks.md). Off unless the host is the worker's alone.
        options.add_session_config_entry("session.intra_op.allow_spinning",
                                         "1" if spinning else "0")
        self.session = ort.InferenceSession(loaded.artifact, options,
                                            providers=choose_providers(device, assume_gpu))
        self.provider = self.session.get_providers()[0]
        if device == "cuda" and self.provider != CUDA:
            raise RuntimeError(f"CUDA was required but ONNX Runtime gave {self.provider}")
        self.io_binding = self.provider == CUDA if io_binding is None else io_binding
        self.call_tokens = CUDA_CALL_TOKENS if self.provider == CUDA else CPU_CALL_TOKENS
        self.tokenizer = self._load_tokenizer()
        # On a CPU the tokenizer would take the cores ONNX Runtime runs on, and joining
        # tensor rows costs less than a hand-off to a thread (docs/architecture.md).
        self.prepare_ahead = self.tokenizer is not None and (
            self.provider == CUDA if prepare_ahead is None else prepare_ahead)
        self.output_names = [o.name for o in self.manifest.outputs]
        log.info("loaded %s@%s on %s", self.manifest.name, self.manifest.version, self.provider)

    def warm_up(self) -> None:
        """One inference on a row of zeros (or one short text) per input: ONNX Runtime
        sizes its buffers on a first run, which should not be a request's."""
        inputs = [Tensor.text(spec.name, ["warm-up"]) if spec.datatype == "BYTES" else
                  Tensor.from_array(spec.name, np.zeros([1 if d < 0 else d for d in spec.shape],
                                                        NUMPY_DTYPES[spec.datatype]))
                  for spec in self.manifest.inputs]
        self.run([inputs])

    def _load_tokenizer(self):
        pre = self.manifest.preprocessing
        if pre is None:
            return None
        from tokenizers import Tokenizer
        return Tokenizer.from_str(self.loaded.files[pre.tokenizer_file].decode("utf-8"))

    def run(self, requests: list[list[Tensor]]) -> list[list[Tensor]]:
        """Outputs per request, in order; raises ``InferenceFailed`` for the whole batch."""
        return self.execute(self.prepare(requests))

    def prepare(self, requests: list[list[Tensor]]) -> Prepared:
        """The rows of ``requests`` joined per input, text tokenized: the part of a run
        that needs no device, so a lane can do it for the next chunk while this one runs
        (workers/batching.py)."""
        specs = self.manifest.inputs
        joined = {spec.name: np.concatenate([_named(r, spec.name).array for r in requests])
                  for spec in specs}
        rows = [_named(inputs, specs[0].name).shape[0] for inputs in requests]
        pre = self.manifest.preprocessing
        if pre is None:
            return Prepared(rows, arrays=joined)
        return Prepared(rows, ids=token_ids(
            self.tokenizer, [str(t) for t in joined[pre.text_input]], pre.max_length))

    def execute(self, prepared: Prepared) -> list[list[Tensor]]:
        """Run what ``prepare`` made: outputs per request, in order."""
        return self._split(prepared, Tensor.of_outputs)

    def execute_documents(self, prepared: Prepared) -> list[list[dict]]:
        """``execute``, each output tensor as its JSON document (``output_documents``):
        what a worker writes into the results it serves."""
        return self._split(prepared, output_documents)

    def _split(self, prepared: Prepared, per_request: Callable[[str, np.ndarray, list[int]],
                                                               list]) -> list[list]:
        outputs = self._infer(prepared)
        bounds = [0, *itertools.accumulate(prepared.rows)]
        by_output = [per_request(name, out, bounds)
                     for name, out in zip(self.output_names, outputs)]
        return [list(tensors) for tensors in zip(*by_output)]

    def _infer(self, prepared: Prepared) -> list[np.ndarray]:
        """The outputs for every row, concatenated, checked: text in length buckets."""
        if prepared.ids is None:
            outputs = self._call(prepared.arrays)
            _check(outputs, self.output_names, sum(prepared.rows))
            return outputs
        ids = prepared.ids
        buckets = length_buckets([len(row) for row in ids], self.call_tokens)
        if len(buckets) == 1:
            return self._text_call(ids)
        parts = [(rows, self._text_call([ids[i] for i in rows])) for rows in buckets]
        return [_scattered(len(ids), [(rows, outs[k]) for rows, outs in parts])
                for k in range(len(self.output_names))]

    def _text_call(self, ids: list[list[int]]) -> list[np.ndarray]:
        encoded = padded(ids)
        ids_name, mask_name = self.manifest.preprocessing.onnx_inputs
        outputs = self._call({ids_name: encoded["input_ids"],
                              mask_name: encoded["attention_mask"]})
        _check(outputs, self.output_names, len(ids))
        return outputs

    def _call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        try:
            if self.io_binding:
                return self._bound_call(feeds)
            return self.session.run(self.output_names, feeds)
        except Exception as exc:  # ORT raises its own exception types
            raise InferenceFailed(f"ONNX Runtime failed: {exc}") from exc

    def _bound_call(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        import onnxruntime as ort

        device = "cuda" if self.provider == CUDA else "cpu"
        binding = self.session.io_binding()
        for name, array in feeds.items():
            binding.bind_ortvalue_input(
                name, ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array), device, 0))
        for name in self.output_names:
            binding.bind_output(name, device)
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()


def _scattered(count: int, parts: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """One output's rows back in batch order, from the buckets that computed them."""
    first = parts[0][1]
    out = np.empty((count, *first.shape[1:]), first.dtype)
    for rows, values in parts:
        out[rows] = values
    return out


def _named(inputs: list[Tensor], name: str) -> Tensor:
    return next(t for t in inputs if t.name == name)


def _check(outputs: list[np.ndarray], names: list[str], rows: int) -> None:
    for name, out in zip(names, outputs, strict=True):
        if out.shape[0] != rows:
            raise InferenceFailed(f"output '{name}' has {out.shape[0]} rows for {rows} inputs")
        if not all_finite(out):
            raise InferenceFailed(f"output '{name}' holds NaN or infinity")

