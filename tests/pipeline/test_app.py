"""The faust adapter's consumer: offset commits off, fetches that do not wait long."""

from __future__ import annotations

import asyncio

from pipeline.app import FetchWaitConsumerThread, TransactionalConsumer, create_app
from pipeline.settings import PipelineSettings
from topics.clients import HOT_PATH_FETCH_MAX_WAIT_MS


def test_the_pipeline_consumer_fetches_with_the_hot_path_wait(tmp_path, access):
    settings = PipelineSettings(home=tmp_path, bootstrap_servers="127.0.0.1:9",
                                registry_dir=tmp_path / "registry")
    settings.access_file.write_text(access.to_json())
    settings.ensure_keys()

    async def consumer_of_its_thread():
        app = create_app(settings)
        assert app.transport.Consumer is TransactionalConsumer
        thread = app.consumer._thread
        assert isinstance(thread, FetchWaitConsumerThread)
        assert thread.thread_loop is asyncio.get_running_loop()   # pipeline/one_loop.py
        consumer = thread._create_worker_consumer(app.transport)
        await consumer.stop()   # never started: nothing to close but itself
        return consumer._fetch_max_wait_ms

    wait_ms = asyncio.run(consumer_of_its_thread())
    assert wait_ms == HOT_PATH_FETCH_MAX_WAIT_MS < 1500   # faust's own
