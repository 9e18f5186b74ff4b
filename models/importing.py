"""Models from outside kip into the registry: an ONNX file with its manifest fields
(``kip models import``), or a torch module exported to ONNX and checked against torch
(``kip models export``). Either way the graph is opened in ONNX Runtime first and its
outputs (and, without preprocessing, its inputs) must be the manifest's, by name and
datatype: a manifest that does not describe its model is refused before it is published.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

import numpy as np

from kip.models.export.checks import compare_with_onnxruntime, export_onnx
from kip.models.manifest import Manifest
from kip.models.registry import ModelVersion, Registry

# ONNX Runtime's type names for the manifest's datatypes
ORT_TYPES = {"FP32": "tensor(float)", "FP16": "tensor(float16)", "FP64": "tensor(double)",
             "INT64": "tensor(int64)", "INT32": "tensor(int32)", "INT8": "tensor(int8)",
             "UINT8": "tensor(uint8)", "BOOL": "tensor(bool)", "BYTES": "tensor(string)"}


def import_onnx(registry: Registry, onnx_path: Path, fields: dict,
                files: dict[str, Path] | None = None) -> ModelVersion:
    """Publish ``onnx_path`` with the manifest ``fields`` once the graph matches them."""
    check_graph(onnx_path, fields)
    return registry.publish(onnx_path, fields, files or {})


def check_graph(onnx_path: Path, fields: dict) -> None:
    """Raise ``ValueError`` unless the graph's outputs (and its inputs, where the model
    takes them as they come) are the manifest's, by name and datatype."""
    import onnxruntime as ort

    manifest = Manifest(**fields, version="0", artifact_sha256="0" * 64)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    pairs = [("output", manifest.outputs, session.get_outputs())]
    if manifest.preprocessing is None:
        pairs.append(("input", manifest.inputs, session.get_inputs()))
    for kind, specs, graph in pairs:
        found = {g.name: g.type for g in graph}
        for spec in specs:
            if spec.name not in found:
                raise ValueError(f"the manifest's {kind} {spec.name!r} is not in the graph "
                                 f"(it has {sorted(found)})")
            if found[spec.name] != ORT_TYPES.get(spec.datatype):
                raise ValueError(f"{kind} {spec.name!r} is {found[spec.name]} in the graph, "
                                 f"{spec.datatype} in the manifest")


def export_torch(registry: Registry, factory: str, atol: float = 1e-4,
                 log=print) -> ModelVersion:
    """``factory`` (``package.module:function``) returns a torch module, example inputs
    ({name: numpy array}) and the manifest fields; the module is exported, ONNX Runtime's
    outputs checked against torch's within ``atol``, and the result imported."""
    import torch

    module_name, _, function = factory.partition(":")
    model, examples, fields = getattr(importlib.import_module(module_name), function)()
    model.eval()
    args = tuple(torch.from_numpy(examples[spec["name"]]) for spec in fields["inputs"])
    with torch.no_grad():
        expected = model(*args)
    expected = [expected] if isinstance(expected, torch.Tensor) else list(expected)
    names = [spec["name"] for spec in fields["inputs"] + fields["outputs"]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.onnx"
        export_onnx(model, args, path, input_names=[s["name"] for s in fields["inputs"]],
                    output_names=[s["name"] for s in fields["outputs"]],
                    dynamic_axes={name: {0: "rows"} for name in names})
        worst = compare_with_onnxruntime(path, examples,
                                         [np.asarray(e.numpy()) for e in expected], atol)
        log(f"{fields['name']}: ONNX Runtime matches torch (max |diff| {worst:.1e})")
        return import_onnx(registry, path, fields)
