"""aiokafka's internals that transport/aiokafka_adapter.py relies on, pinned against the
installed release: a newer aiokafka that moves one fails here by name (``scripts/compat``
runs this file against the newest release the package index serves). The behaviour
behind each is checked on the real broker by the tests of the modules that use it:
test_transactions.py, test_producing.py, test_fetch_waits.py, test_inflation.py,
test_reading.py, test_acl_admin.py and test_quota_admin.py."""

from __future__ import annotations

import asyncio
import inspect

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.consumer import fetcher
from aiokafka.producer.sender import AddOffsetsToTxnHandler

from kip.transport import aiokafka_adapter

NOWHERE = "127.0.0.1:9"   # never connected to: these tests only construct clients


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


def test_a_transactional_producer_keeps_its_transaction_manager_sender_and_partitioner():
    async def built():
        producer = AIOKafkaProducer(bootstrap_servers=NOWHERE, transactional_id="pinned")
        try:
            txn, sender = producer._txn_manager, producer._sender
            for method in ("wait_for_pid", "is_in_transaction", "maybe_add_partition_to_txn",
                           "partitions_to_add", "wait_for_transaction_end"):
                assert callable(getattr(txn, method)), method
            assert txn.transactional_id == "pinned" and hasattr(txn, "_transaction_waiter")
            assert inspect.iscoroutinefunction(sender._find_coordinator)
            assert isinstance(sender._retry_backoff, float)
            assert aiokafka_adapter.unkeyed_partition(producer, [0, 1, 2], [0, 1, 2]) in {0, 1, 2}
            assert isinstance(producer._message_accumulator._batches, dict)
            assert aiokafka_adapter.internal_waiters(producer) == []   # none in flight
            assert not aiokafka_adapter.in_transaction(producer)
        finally:
            await producer.stop()
    asyncio.run(built())


def test_the_add_offsets_step_can_be_taken_alone():
    assert _parameters(AddOffsetsToTxnHandler.__init__) == ["self", "sender", "group_id"]
    assert _parameters(AddOffsetsToTxnHandler.do) == ["self", "node_id"]
    assert _parameters(AddOffsetsToTxnHandler.handle_response) == ["self", "resp"]
    assert issubclass(aiokafka_adapter._AddGroup, AddOffsetsToTxnHandler)


def test_a_consumer_keeps_its_client_fetch_wait_and_a_fetcher_made_by_start():
    async def built():
        consumer = AIOKafkaConsumer(bootstrap_servers=NOWHERE, fetch_max_wait_ms=123)
        try:
            assert consumer._fetcher is None and consumer._fetch_max_wait_ms == 123
            aiokafka_adapter.set_fetch_max_wait(consumer, 7)
            assert consumer._fetch_max_wait_ms == 7
            assert callable(consumer._client.add_topic)   # returns an awaitable
            assert callable(consumer._client.force_metadata_update)
            assert aiokafka_adapter.unauthorized_topics(consumer) == set()
            with pytest.raises(RuntimeError, match="start the consumer first"):
                aiokafka_adapter.lengthen_whole_fetches(consumer, 500)
        finally:
            await consumer.stop()
    asyncio.run(built())


def test_the_fetcher_chooses_fetches_and_builds_partition_records_where_the_adapter_hooks():
    assert _parameters(fetcher.Fetcher._get_actions_per_node) == ["self", "assignment"]
    assert _parameters(fetcher.Fetcher._select_read_replica) == ["self", "tp"]
    assert _parameters(fetcher.PartitionRecords.__init__)[:3] == ["self", "tp", "records"]
    assert aiokafka_adapter._AIOKAFKAS[0] is aiokafka_adapter.MemoryRecords   # as imported
    assert fetcher.MemoryRecords in (aiokafka_adapter.MemoryRecords, aiokafka_adapter._Fetched)
    source = inspect.getsource(fetcher)
    assert "MemoryRecords(" in source and "PartitionRecords(" in source
    request_source = inspect.getsource(fetcher.FetchRequest)
    assert "_max_wait_ms" in request_source


def test_filtering_fetched_bytes_swaps_the_fetchers_names_and_back():
    before = aiokafka_adapter._filter   # a stage run in this process may have set one
    aiokafka_adapter.filter_fetched(lambda tp, data: data)
    try:
        assert fetcher.MemoryRecords is aiokafka_adapter._Fetched
        assert issubclass(fetcher.PartitionRecords, aiokafka_adapter._AIOKAFKAS[1])
        aiokafka_adapter.unfilter_fetched()
        assert (fetcher.MemoryRecords, fetcher.PartitionRecords) == aiokafka_adapter._AIOKAFKAS
    finally:
        if before is not None:
            aiokafka_adapter.filter_fetched(before)


def test_crc32c_and_varints_are_kafkas():
    assert aiokafka_adapter.calc_crc32c(b"123456789") == 0xE3069283   # CRC-32C check value
    out = bytearray()
    aiokafka_adapter.encode_varint(-2, out.append)   # zigzag: -2 -> 3
    assert bytes(out) == b"\x03"


def test_the_admin_client_sends_a_request_it_is_given():
    assert inspect.iscoroutinefunction(AIOKafkaAdminClient._send_request)
    assert _parameters(AIOKafkaAdminClient._send_request)[:2] == ["self", "request"]
    request = aiokafka_adapter.AlterClientQuotasRequest(
        [([("user", "tenant-a")], [("producer_byte_rate", 1024.0, False)])])
    struct = request.build(aiokafka_adapter.AlterClientQuotasRequest_v0)
    assert struct.API_KEY == 49 and struct.encode()
    describe = aiokafka_adapter.DescribeAclsRequest(1, None, 1, None, None, 1, 1)
    assert describe.API_KEY == 29


def test_a_static_member_never_leaves_by_itself_and_the_admin_client_sends_to_a_node():
    """transport/membership.py sends the leave aiokafka skips for a member with a
    ``group_instance_id`` (test_membership.py checks it on the broker)."""
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    assert "group_instance_id" in _parameters(AIOKafkaConsumer.__init__)
    assert "self._group_instance_id is None" in inspect.getsource(
        GroupCoordinator._maybe_leave_group)
    assert _parameters(AIOKafkaAdminClient._send_request_to_node)[:3] == [
        "self", "node_id", "request"]
    struct = aiokafka_adapter.LeaveGroupV3Request("g", "worker-0").build(
        aiokafka_adapter.LeaveGroupRequest_v3)
    assert struct.API_VERSION == 3 and struct.encode()


def test_kips_assignor_plugs_into_aiokafkas_coordinator_with_its_state_per_consumer():
    """aiokafka's coordinator calls ``metadata``, ``assign`` and ``on_assignment`` on the
    classes it is given, and encodes what they return (group_coordinator.py)."""
    from aiokafka.consumer import group_coordinator

    source = inspect.getsource(group_coordinator)
    for call in ("assignor.metadata(topics)", "assignor.assign(self._cluster, member_metadata)",
                 "assignor.on_assignment(assignment)"):
        assert call in source
    (one,) = aiokafka_adapter.sticky_per_topic("one")
    (other,) = aiokafka_adapter.sticky_per_topic("other")
    assert one.name == "kip-sticky-per-topic"

    class Cluster:
        def partitions_for_topic(self, topic):
            return {0, 1, 2}
    members = {m: one.metadata(["standard", "batch"]) for m in ("a", "b", "c")}
    assignment = one.assign(Cluster(), members)
    one.on_assignment(assignment["a"])
    assert sorted(tp.topic for tp in assignment["a"].partitions()) == ["batch", "standard"]
    assert one.metadata(["standard"]).user_data != b"{}" and other.owned is None
    assert assignment["a"].encode()
