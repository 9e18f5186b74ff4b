"""Checks every export runs: ONNX Runtime's output against torch's on the same inputs."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def compare_with_onnxruntime(onnx_path: Path, feeds: dict[str, np.ndarray],
                             expected: list[np.ndarray], atol: float) -> float:
    """Run ``onnx_path`` on CPU; raise unless every output is within ``atol``."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(None, feeds)
    worst = 0.0
    for g, e in zip(got, expected, strict=True):
        if g.shape != e.shape:
            raise RuntimeError(f"ONNX output shape {g.shape} != torch shape {e.shape}")
        worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - e))))
    if worst > atol:
        raise RuntimeError(f"ONNX Runtime differs from torch by {worst:.2e} > {atol:.0e}")
    return worst


def export_onnx(model, args: tuple, path: Path, **kwargs) -> None:
    """``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``).

    torch >= 2.9 defaults to the torch.export-based exporter and warns that this one is
    deprecated; for these models the new exporter wrote an ONNX file that ONNX Runtime
    refuses (duplicate output name), so kip keeps the proven path. docs/architecture.md
    records the decision and the check that will tell when to switch.
    """
    import warnings

    import torch

    with warnings.catch_warnings():
        # the exporter's own deprecation notices about itself and its internals
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(model, args, str(path), opset_version=17, dynamo=False, **kwargs)
