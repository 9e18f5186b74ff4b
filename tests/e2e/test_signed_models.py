"""Signed models on a running kip (``KIP_REQUIRE_SIGNED_MODELS`` on, as in every dev
stack): six versions of one model (digits' graph, each with its own doc string), all
signed; five are then tampered with as an attacker with write access to the registry
folder would. Requests pinned to them end MODEL_UNVERIFIED, from the pipeline (the
manifest no longer verifies) or from the worker (the bytes do not match the signed
manifest), and the worker runs no inference for any of them."""

from __future__ import annotations

import asyncio
import urllib.request

import numpy as np
import onnx
import pytest

from kip.devkit.broker import free_port
from kip.schemas import Status
from tests.e2e.conftest import client_for
from tests.models.test_signing import (_flip_a_byte, _remove_the_signature,
                                       _sign_with_another_key, _swap_and_fix_the_manifest,
                                       _swap_the_file)
from tests.e2e.test_fallback import _served
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue

pytestmark = pytest.mark.broker
MODEL = "digits-signed"
PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


def _variants(s, tmp_path, count: int) -> list:
    """``count`` versions of MODEL, signed with the stack's model key; the first is the
    alias's."""
    digits = s.registry.resolve("digits")
    manifest = digits.manifest.model_dump(exclude={"version", "artifact_sha256",
                                                   "files_sha256"}) | {"name": MODEL}
    versions = []
    for i in range(count):
        graph = onnx.load(str(digits.artifact))
        graph.doc_string = f"variant {i}"
        path = tmp_path / f"variant-{i}.onnx"
        onnx.save(graph, str(path))
        versions.append(s.registry.publish(path, manifest, {}))
    s.registry.set_alias(MODEL, f"{MODEL}@{versions[0].manifest.version}")
    s.sign_models([f"{MODEL}@{v.manifest.version}" for v in versions])
    return versions


def _metric(port: int, prefix: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return sum(float(line.split()[-1]) for line in response.read().decode().splitlines()
                   if line.startswith(prefix))


def test_tampered_versions_end_model_unverified_and_never_run(plain_stack, tmp_path):
    s = plain_stack
    good, *tampered = _variants(s, tmp_path, 6)
    asyncio.run(apply(s.kafka, [t for t in catalogue(s.names, [MODEL]) if MODEL in t.name]))
    port = free_port()
    s.procs.append(s.spawn(["worker", "--model", MODEL], port, log=lambda *_: None))
    asyncio.run(_served(s, MODEL))
    rows_before = _metric(port, f'kip_batch_rows_sum{{model="{MODEL}"}}')

    swap_in = good.artifact
    for tamper, mv in zip((_flip_a_byte, _swap_the_file, _swap_and_fix_the_manifest,
                           _sign_with_another_key, _remove_the_signature), tampered):
        tamper(mv, swap_in)

    async def ask():
        async with client_for(s) as kip:
            return [await kip.infer(f"{MODEL}@{mv.manifest.version}", PIXELS, timeout_s=30)
                    for mv in tampered]
    results = asyncio.run(ask())
    assert [r.error.code if r.error else "ok" for r in results] == ["MODEL_UNVERIFIED"] * 5
    assert [r.status for r in results] == [Status.FAILED] * 2 + [Status.REJECTED] * 3
    assert "does not match the manifest" in results[0].error.message
    assert "not signed" in results[4].error.message
    assert _metric(port, f'kip_batch_rows_sum{{model="{MODEL}"}}') == rows_before
    assert _metric(port, "kip_models_refused_total{") >= 2
    assert _metric(s.metrics_base_port, "kip_models_refused_total{") >= 3
