"""Model loading and ONNX Runtime sessions, one per immutable model version.

``ModelSession.run`` takes the inputs of several requests, concatenates their rows,
tokenizes text where the manifest says so, runs the session once, checks the outputs
(row count, finite values) and splits them back per request. It is synchronous: the
worker calls it in an executor so the event loop (and Kafka heartbeats) keep running.

``Sessions`` (workers/sessions.py) holds the versions a worker has loaded.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from models.preprocess import encode_texts
from models.registry import LoadedVersion
from schemas.errors import InferenceFailed
from schemas.tensors import NUMPY_DTYPES, Tensor
from workers import cuda

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


class ModelSession:
    """One verified version in ONNX Runtime, built from the bytes that were checked
    (``Registry.load``), never from the files again: ``artifact_sha256`` is theirs."""

    def __init__(self, loaded: LoadedVersion, device: str = "auto",
                 intra_op_threads: int = 0, assume_gpu: bool = False,
                 spinning: bool = False) -> None:
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
        self.tokenizer = self._load_tokenizer()
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
        rows = [_rows(inputs) for inputs in requests]
        feeds = self.feeds(requests)
        try:
            outputs = self.session.run(self.output_names, feeds)
        except Exception as exc:  # ORT raises its own exception types
            raise InferenceFailed(f"ONNX Runtime failed: {exc}") from exc
        _check(outputs, self.output_names, sum(rows))
        bounds = np.cumsum([0, *rows])
        return [[Tensor.of_output(name, out[bounds[i]:bounds[i + 1]])
                 for name, out in zip(self.output_names, outputs)]
                for i in range(len(requests))]

    def feeds(self, requests: list[list[Tensor]]) -> dict[str, np.ndarray]:
        """The ONNX inputs for a batch: rows concatenated, text tokenized."""
        joined = {spec.name: np.concatenate([_named(r, spec.name).array for r in requests])
                  for spec in self.manifest.inputs}
        pre = self.manifest.preprocessing
        if pre is None:
            return joined
        encoded = encode_texts(self.tokenizer, [str(t) for t in joined[pre.text_input]],
                               pre.max_length)
        ids_name, mask_name = pre.onnx_inputs
        return {ids_name: encoded["input_ids"], mask_name: encoded["attention_mask"]}


def _named(inputs: list[Tensor], name: str) -> Tensor:
    return next(t for t in inputs if t.name == name)


def _rows(inputs: list[Tensor]) -> int:
    return inputs[0].shape[0]


def _check(outputs: list[np.ndarray], names: list[str], rows: int) -> None:
    for name, out in zip(names, outputs, strict=True):
        if out.shape[0] != rows:
            raise InferenceFailed(f"output '{name}' has {out.shape[0]} rows for {rows} inputs")
        if out.dtype.kind == "f" and not np.isfinite(out).all():
            raise InferenceFailed(f"output '{name}' holds NaN or infinity")

