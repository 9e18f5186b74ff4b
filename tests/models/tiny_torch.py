"""A torch module for ``kip models export`` to export in the tests: a seeded linear layer."""

from __future__ import annotations

import numpy as np


def linear():
    import torch

    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Softmax(dim=1))
    fields = {"name": "tiny", "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
              "outputs": [{"name": "probabilities", "datatype": "FP32", "shape": [-1, 3]}],
              "max_batch": 8, "memory_estimate_bytes": 1024 * 1024}
    return model, {"x": np.random.default_rng(1).random((5, 4), dtype=np.float32)}, fields
