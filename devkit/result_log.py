"""A bench's results, read as they are committed (read_committed, from the beginning):
request id -> every result for it, so that a duplicate shows. Lighter than the fault
harness's tally (devkit/faults_report.py), which reads and checks the audit chains too:
on two cores the reader's CPU is taken from the kip it measures."""

from __future__ import annotations

from collections import defaultdict

from aiokafka import AIOKafkaConsumer

from kip.schemas import InferenceResult, decode
from kip.transport.clients import KafkaConnection
from kip.transport.reading import assign_all, reader_to_end


class ResultLog:
    def __init__(self, kafka: KafkaConnection, topics: list[str]) -> None:
        self.kafka, self.topics = kafka, topics
        self.results: dict[str, list[InferenceResult]] = defaultdict(list)
        self.undecodable = 0
        self._consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        self._consumer = reader_to_end(self.kafka)
        await self._consumer.start()
        tps = []
        for topic in self.topics:
            tps += await assign_all(self._consumer, topic)
        self._consumer.assign(tps)
        await self._consumer.seek_to_beginning(*tps)

    async def poll(self, seconds: float) -> None:
        batches = await self._consumer.getmany(timeout_ms=int(seconds * 1000),
                                               max_records=100_000)
        for records in batches.values():
            for record in records:
                try:
                    result = decode(InferenceResult, record.value)
                except ValueError:
                    self.undecodable += 1
                    continue
                self.results[result.request_id].append(result)

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
