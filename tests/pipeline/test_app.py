"""The faust adapter: its consumer (offset commits off, fetches that do not wait long)
and its rounds' decisions."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from types import SimpleNamespace

from kip.pipeline.app import DECIDE_SLICE, create_app, decide_round
from kip.pipeline.faust_adapter import FetchWaitConsumerThread, TransactionalConsumer
from kip.pipeline.settings import PipelineSettings
from kip.transport.clients import HOT_PATH_FETCH_MAX_WAIT_MS, METADATA_MAX_AGE_MS


def test_the_pipeline_consumer_fetches_with_the_hot_path_wait(tmp_path, access):
    settings = PipelineSettings(home=tmp_path, bootstrap_servers="127.0.0.1:9",
                                registry_dir=tmp_path / "registry")
    settings.access_file.write_text(access.to_json())
    settings.ensure_keys()

    async def consumer_of_its_thread():
        app = create_app(settings)
        assert app.transport.Consumer is TransactionalConsumer
        # metadata refreshed often: a moved leader is found (transport/clients.py)
        assert (app.conf.consumer_metadata_max_age_ms == app.conf.producer_metadata_max_age_ms
                == METADATA_MAX_AGE_MS)
        thread = app.consumer._thread
        assert isinstance(thread, FetchWaitConsumerThread)
        assert thread.thread_loop is asyncio.get_running_loop()   # pipeline/faust_adapter.py
        consumer = thread._create_worker_consumer(app.transport)
        await consumer.stop()   # never started: nothing to close but itself
        return consumer._fetch_max_wait_ms

    wait_ms = asyncio.run(consumer_of_its_thread())
    assert wait_ms == HOT_PATH_FETCH_MAX_WAIT_MS < 1500   # faust's own


def _event(offset: int) -> SimpleNamespace:
    return SimpleNamespace(message=SimpleNamespace(
        value=b"junk", topic="kip.requests.standard", partition=0, offset=offset,
        key=None, headers=()))


def test_a_long_round_gives_the_event_loop_a_turn_after_each_slice(ctx):
    events = [_event(i) for i in range(2 * DECIDE_SLICE + 50)]
    ctx = replace(ctx, policy=ctx.policy.model_copy(update={"unsigned_burst": 1e6}))

    async def go():
        turns = 0

        async def another_agent():
            nonlocal turns
            while True:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(another_agent())
        decisions = await decide_round(events, ctx)
        other.cancel()
        return decisions, turns

    decisions, turns = asyncio.run(go())
    assert turns == 2   # between the three slices
    assert [d.audit.request_id for d in decisions] == [
        f"undecodable.kip.requests.standard.0.{i}" for i in range(len(events))]
