"""The release health gate on a running kip: a canary of digits that fails every request
whose first pixel is over 0.5 (20% of the requests sent here) is rolled back by the
pipeline itself, within the health window, and the release record says why."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from kip.rollout import history
from kip.schemas import Status
from tests.e2e.conftest import client_for

pytestmark = pytest.mark.broker
WITHIN_S = 60


def _failing_digits(s, tmp_path) -> str:
    """digits' graph, its probabilities NaN where pixel 0 > 0.5; published and signed."""
    digits = s.registry.resolve("digits")
    graph = onnx.load(str(digits.artifact))
    softmax = next(n for n in graph.graph.node if n.op_type == "Softmax")
    probabilities = softmax.output[0]
    softmax.output[0] = "probs_raw"
    for node in graph.graph.node:
        node.input[:] = ["probs_raw" if i == probabilities else i for i in node.input]
    graph.graph.initializer.extend([
        numpy_helper.from_array(np.array([0], np.int64), "zero_i"),
        numpy_helper.from_array(np.array([1], np.int64), "one_i"),
        numpy_helper.from_array(np.array(0.5, np.float32), "half"),
        numpy_helper.from_array(np.array(0.0, np.float32), "nought")])
    graph.graph.node.extend([
        helper.make_node("Slice", ["pixels", "zero_i", "one_i", "one_i"], ["first"]),
        helper.make_node("Sub", ["half", "first"], ["room"]),
        helper.make_node("Sqrt", ["room"], ["root"]),          # NaN where first > 0.5
        helper.make_node("Mul", ["root", "nought"], ["poison"]),
        helper.make_node("Add", ["probs_raw", "poison"], [probabilities])])
    path = tmp_path / "failing.onnx"
    onnx.save(graph, str(path))
    mv = s.registry.publish(path, digits.manifest.model_dump(
        exclude={"version", "artifact_sha256", "files_sha256"}), {})
    target = f"digits@{mv.manifest.version}"
    s.sign_models([target])
    return target


def _rollout(s, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "kip.cli", "rollout", *args], env=s.env(),
                   check=True, capture_output=True)


def test_a_failing_canary_is_rolled_back_by_the_gate_saying_why(plain_stack, tmp_path):
    s = plain_stack
    stable = s.registry.resolve("digits").manifest.version
    failing = _failing_digits(s, tmp_path)
    _rollout(s, "start", "digits", failing, "--canary", "50", "--reason", "gate test")

    async def until_rolled_back() -> tuple[list, list]:
        seen = []
        async with client_for(s) as kip:
            started = time.monotonic()
            while time.monotonic() - started < WITHIN_S:
                for i in range(20):   # one at a time: each its own batch
                    pixels = np.zeros((1, 64), np.float32)
                    pixels[0, 0] = 1.0 if i % 5 == 0 else 0.0
                    seen.append(await kip.infer("digits", {"pixels": pixels},
                                                priority="interactive", timeout_s=30))
                releases = await history(s.kafka, s.names, "digits")
                if releases[-1].action == "health-rollback":
                    after = [await kip.infer("digits", {"pixels": np.ones((1, 64), np.float32)},
                                             priority="interactive") for _ in range(20)]
                    return releases, seen, after
        outcomes = Counter((r.model_version, r.status.value) for r in seen)
        raise AssertionError(f"no health rollback within {WITHIN_S}s: {outcomes}; "
                             f"latest {releases[-1]}")
    releases, seen, after = asyncio.run(until_rolled_back())
    failed = [r for r in seen if r.status == Status.FAILED]
    assert failed and {r.error.code for r in failed} == {"INFERENCE_FAILED"}
    assert {r.model_version for r in failed} == {failing.split("@")[1]}
    rollback = releases[-1]
    print(f"rolled back after {len(seen)} requests: {rollback.reason}")
    assert rollback.by == "pipeline health gate"
    assert [(r.version, r.weight) for r in rollback.routes] == [(f"digits@{stable}", 100.0)]
    assert f"canary {failing} failed" in rollback.reason
    time.sleep(1)
    assert {r.model_version for r in after} <= {stable} and \
        all(r.status == Status.OK for r in after)
