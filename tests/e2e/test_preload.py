"""A released version is loaded before its first request: once `kip rollout start` names
a new version of digits-pre, its worker loads, checks and warms it up within seconds,
with no request for it sent; the first canary request then runs on it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import pytest

from kip.devkit.broker import free_port
from tests.e2e.test_memory_budget import PIXELS, _publish
from tests.e2e.test_fallback import _served
from tests.e2e.test_signed_models import _metric
from tests.e2e.conftest import client_for
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue
from kip.schemas import Status

pytestmark = pytest.mark.broker
MODEL = "digits-pre"   # a model of this test's own worker


def test_a_released_version_is_loaded_before_its_first_request(plain_stack, tmp_path):
    s = plain_stack
    stable = _publish(s, tmp_path, "preload-stable", 8 * 2**20, MODEL)
    canary = _publish(s, tmp_path, "preload-canary", 8 * 2**20, MODEL)
    s.registry.set_alias(MODEL, stable)
    asyncio.run(apply(s.kafka, [t for t in catalogue(s.names, [MODEL]) if MODEL in t.name]))
    port = free_port()
    s.procs.append(s.spawn(["worker", "--model", MODEL], port, log=lambda *_: None))
    asyncio.run(_served(s, MODEL))
    loaded = f'kip_models_loaded{{model="{MODEL}",provider="CPUExecutionProvider",' \
             f'version="{canary.split("@")[1]}"}}'
    assert _metric(port, loaded) == 0

    subprocess.run([sys.executable, "-m", "kip.cli", "rollout", "start", MODEL, canary,
                    "--canary", "50"], env=s.env(), check=True, capture_output=True)
    for _ in range(40):
        if _metric(port, loaded) == 1:
            break
        time.sleep(0.25)
    assert _metric(port, loaded) == 1   # loaded ahead: no request has asked for it

    async def until_the_canary_answers():
        async with client_for(s) as kip:
            for _ in range(20):
                result = await kip.infer(MODEL, PIXELS, timeout_s=30)
                if result.model_version == canary.split("@")[1]:
                    return result
        raise AssertionError("no request went to the canary")
    result = asyncio.run(until_the_canary_answers())
    assert result.status == Status.OK and result.timings.total_ms < 2_000
