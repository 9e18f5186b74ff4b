"""Train a small torch classifier on scikit-learn's bundled 8x8 digits and export it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from kip.models.export.checks import compare_with_onnxruntime, export_onnx
from kip.models.registry import ModelVersion, Registry

NAME = "digits"
HELD_OUT = 360          # the last rows of a seeded shuffle never seen in training
SEED = 7
MIN_ACCURACY = 0.95
EPOCHS = 30


def dataset() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_x, train_y, held_out_x, held_out_y); pixels scaled to [0, 1], FP32."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(x))
    train, held = order[:-HELD_OUT], order[-HELD_OUT:]
    return x[train], y[train], x[held], y[held]


def build_classifier():
    import torch
    from torch import nn

    class DigitsClassifier(nn.Module):
        """64 pixels -> (class probabilities, predicted label); a small CNN on 8x8."""

        def __init__(self) -> None:
            super().__init__()
            self.net = nn.Sequential(
                nn.Unflatten(1, (1, 8, 8)),
                nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
                nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(64 * 16, 128), nn.ReLU(), nn.Linear(128, 10))

        def forward(self, pixels: torch.Tensor):
            probabilities = torch.softmax(self.net(pixels), dim=1)
            return probabilities, torch.argmax(probabilities, dim=1)

    return DigitsClassifier()


def train(log=print):
    import torch

    torch.manual_seed(SEED)
    x, y, hx, hy = dataset()
    model = build_classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=1e-4)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    for _ in range(EPOCHS):
        for idx in torch.randperm(len(xt)).split(64):
            loss = torch.nn.functional.cross_entropy(model.net(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(torch.from_numpy(hx))[1].numpy() == hy).mean())
    if accuracy < MIN_ACCURACY:
        raise RuntimeError(f"digits classifier reached {accuracy:.3f} < {MIN_ACCURACY}")
    log(f"  digits: held-out accuracy {accuracy:.3f} on {len(hy)} images")
    return model


def export(registry: Registry, log=print) -> ModelVersion:
    import torch

    model = train(log)
    _, _, hx, _ = dataset()
    with torch.no_grad():
        probs, labels = model(torch.from_numpy(hx))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        export_onnx(model, (torch.from_numpy(hx[:4]),), path,
                    input_names=["pixels"], output_names=["probabilities", "label"],
                    dynamic_axes={"pixels": {0: "rows"}, "probabilities": {0: "rows"},
                                  "label": {0: "rows"}})
        diff = compare_with_onnxruntime(path, {"pixels": hx},
                                        [probs.numpy(), labels.numpy()], atol=1e-5)
        log(f"  digits: ONNX Runtime matches torch (max |diff| {diff:.1e})")
        return registry.publish(path, _manifest(), {})


def _manifest() -> dict:
    return {
        "name": NAME,
        "description": "8x8 digit classifier (scikit-learn digits, pixels scaled to [0, 1])",
        "inputs": [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}],
        "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
                    {"name": "label", "datatype": "INT64", "shape": [-1]}],
        "max_batch": 256,
        "memory_estimate_bytes": 8 * 1024 * 1024,
    }
