"""Degrading to a fallback on the real pipeline: with digits overloaded and a second model
(digits-small, served by a worker of its own) as its fallback, a request is served by the
fallback, its result says so, and ``kip audit explain`` tells its trail from the
pipeline's decision to the fallback worker's answer."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from kip.pipeline.control import fallback_record, publish_control
from kip.schemas import Status
from tests.e2e.conftest import client_for, explained, overloaded
from kip.transport.admin import apply
from kip.topics.catalogue import catalogue

pytestmark = pytest.mark.broker
PIXELS = {"pixels": np.zeros((1, 64), np.float32)}


@pytest.fixture(scope="module")
def with_digits_small(plain_stack):
    """digits' artifact published again as model digits-small, its topics, its worker."""
    s = plain_stack
    digits = s.registry.resolve("digits")
    manifest = digits.manifest.model_dump(exclude={"version", "artifact_sha256",
                                                   "files_sha256"})
    small = s.registry.publish(digits.artifact, manifest | {"name": "digits-small"}, {})
    s.registry.set_alias("digits-small", f"digits-small@{small.manifest.version}")
    s.sign_models(["digits-small"])
    asyncio.run(apply(s.kafka, [t for t in catalogue(s.names, ["digits-small"])
                                if "digits-small" in t.name]))
    s.procs.append(s.spawn(["worker", "--model", "digits-small"], log=lambda *_: None))
    asyncio.run(_served(s, "digits-small"))
    return s


async def _served(s, model: str) -> None:
    """Until ``model`` answers (the pipeline sees new topics within 2 s, the worker
    starts in a few)."""
    result = None
    async with client_for(s) as kip:
        for _ in range(30):
            s.check_services()
            try:
                result = await kip.infer(model, PIXELS, timeout_s=5)
            except TimeoutError:
                continue
            if result.status == Status.OK:
                return
            await asyncio.sleep(1)
    raise TimeoutError(f"{model} never answered: {result and result.error}")


def test_an_overloaded_model_degrades_to_its_fallback_and_says_so(with_digits_small):
    s = with_digits_small

    async def ask():
        async with client_for(s) as kip:
            return await kip.infer("digits", PIXELS, priority="interactive", timeout_s=30)
    asyncio.run(publish_control(s.kafka, s.names.control,
                                *fallback_record("digits", "digits-small")))
    try:
        with overloaded(s, "digits"):
            result = asyncio.run(ask())
    finally:
        asyncio.run(publish_control(s.kafka, s.names.control,
                                    *fallback_record("digits", None)))
    assert result.status == Status.OK, result.error
    assert (result.fallback_from, result.model_name) == ("digits", "digits-small")
    words = explained(s, result.request_id).splitlines()
    assert "pipeline degraded" in words[1] and "digits could not serve in time" in words[1]
    assert "fallback digits-small@" in words[1]
    assert "worker   ok (final)" in words[2] and "version digits-small@" in words[2]
