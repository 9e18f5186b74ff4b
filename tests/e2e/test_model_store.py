"""A worker on a host with an empty cache, its model in an S3-compatible store (versitygw,
devkit/s3_server.py): it stages a signed MiniLM version and serves it; a version whose
object was altered in the store ends MODEL_UNVERIFIED and never loads; with the store
stopped, every interactive request to the cached version stays ok and one for a version
never staged ends MODEL_UNAVAILABLE within the interactive wait budget (500 ms)."""

from __future__ import annotations

import asyncio
import time

import pytest

from kip.devkit.broker import free_port
from kip.devkit.s3_server import ACCESS_KEY, SECRET_KEY, S3Server, S3Unavailable
from kip.models.store import ModelStore
from kip.schemas import Status
from kip.topics.catalogue import catalogue
from kip.transport.admin import apply
from tests.e2e.conftest import client_for, publish_variant
from tests.e2e.test_signed_models import _metric

pytestmark = pytest.mark.broker
pytest.importorskip("s3fs")
MODEL = "minilm-store"
TEXT = {"text": ["the store is the one copy"]}
INTERACTIVE_BUDGET_S = 0.5


def _publish(s, tmp_path, tag: str) -> str:
    """MiniLM under the doc string ``tag``, with its tokenizer files, published as
    ``MODEL`` in the stack's registry (its pipeline routes from there) and signed."""
    return publish_variant(s, tmp_path, "minilm", tag, MODEL)


def _store_env(server: S3Server, url: str, cache) -> dict[str, str]:
    return {"KIP_MODEL_STORE": url, "KIP_REGISTRY_DIR": str(cache),
            "AWS_ENDPOINT_URL": server.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": "us-east-1"}


async def _ask(s, target: str, count: int = 1, timeout_s: float = 60) -> list:
    """``count`` interactive requests for ``target``, one after another, each with the
    seconds it took."""
    out = []
    async with client_for(s) as kip:
        for _ in range(count):
            started = time.monotonic()
            result = await kip.infer(target, TEXT, priority="interactive", timeout_s=timeout_s)
            out.append((result, time.monotonic() - started))
    return out


def test_a_worker_stages_from_the_store_and_serves_through_its_outage(plain_stack, tmp_path):
    s = plain_stack
    try:
        server = S3Server(tmp_path / "s3").start()
    except S3Unavailable as err:
        pytest.skip(str(err))
    served, altered, never = (_publish(s, tmp_path, tag) for tag in ("served", "altered",
                                                                     "never"))
    url = f"s3://models/{s.prefix}"
    store = ModelStore(url, server.storage_options())
    for target in (served, altered):
        store.push(s.registry.get(*target.split("@")))
    name, version = altered.split("@")
    stored = server.data_dir / "models" / s.prefix / name / version / "model.onnx"
    data = bytearray(stored.read_bytes())
    data[len(data) // 2] ^= 0xFF
    stored.write_bytes(bytes(data))
    asyncio.run(apply(s.kafka, [t for t in catalogue(s.names, [MODEL]) if MODEL in t.name]))
    try:
        port = _start_worker(s, server, url, tmp_path / "empty-cache", served)
        _the_altered_version_is_refused(s, altered, port)
        server.stop()
        _cached_stays_ok_and_uncached_is_unavailable(s, served, never)
    finally:
        server.stop()
    s.check_services()


def _start_worker(s, server: S3Server, url: str, cache, served: str) -> int:
    port, shared = free_port(), s.worker_env
    s.worker_env = shared | _store_env(server, url, cache)
    started = time.monotonic()
    try:
        s.procs.append(s.spawn(["worker", "--model", served], port, log=lambda *_: None))
    finally:
        s.worker_env = shared
    # The pipeline refuses until it sees the new topics (2 s); a request it admits while
    # the worker still stages and joins may expire, on a loaded host, before it runs.
    for _ in range(120):
        ((first, _),) = asyncio.run(_ask(s, served, timeout_s=120))
        if first.status not in (Status.REJECTED, Status.EXPIRED):
            break
        time.sleep(0.5)
    assert first.status == Status.OK, first.error
    print(f"\ntime to first result, empty cache, MiniLM from S3: "
          f"{time.monotonic() - started:.1f} s")
    assert (cache / MODEL / served.split("@")[1] / "model.onnx").exists()
    return port


def _the_altered_version_is_refused(s, altered: str, port: int) -> None:
    for _ in range(40):
        ((result, _),) = asyncio.run(_ask(s, altered))
        assert result.status == Status.FAILED, result
        if result.error.code == "MODEL_UNVERIFIED":
            break
        assert result.error.code == "MODEL_UNAVAILABLE" and "being staged" in \
            result.error.message
        time.sleep(0.25)
    assert result.error.code == "MODEL_UNVERIFIED", result.error
    assert "does not match its manifest" in result.error.message
    assert _metric(port, f'kip_models_loaded{{model="{MODEL}",provider="CPUExecutionProvider"'
                         f',version="{altered.split("@")[1]}"}}') == 0


def _cached_stays_ok_and_uncached_is_unavailable(s, served: str, never: str) -> None:
    cached = asyncio.run(_ask(s, served, count=50))
    assert [r.status for r, _ in cached] == [Status.OK] * 50
    for _ in range(2):   # the first starts a stage; the second gets the store's reason
        ((result, took_s),) = asyncio.run(_ask(s, never))
        assert (result.status, result.error.code) == (Status.FAILED, "MODEL_UNAVAILABLE")
        assert took_s < INTERACTIVE_BUDGET_S, took_s
        time.sleep(3)   # the stage gives the stopped store model_store_timeout_s
    assert "cannot be read" in result.error.message, result.error
