"""kip's one door into aiokafka's internals.

Everything here reads, calls, wraps or replaces what aiokafka keeps private, and nothing
else in kip does (``python -m kip.devkit.layers`` checks it). tests/transport/
test_aiokafka_adapter.py pins each assumption against the installed release, and
``scripts/compat`` runs those tests against the newest release the package index serves.
What it relies on, as of aiokafka 0.14, and why each is worth it:

- **Transactions, one step at a time.** ``AIOKafkaProducer._txn_manager`` (its
  ``wait_for_pid``, ``is_in_transaction``, ``maybe_add_partition_to_txn``,
  ``partitions_to_add``, ``wait_for_transaction_end``), ``_sender`` (its
  ``_find_coordinator`` and ``_retry_backoff``) and ``AddOffsetsToTxnHandler``.
  aiokafka takes a transaction's steps only inside its own calls, and retries a refused
  step after its backoff; kip awaits each step alone and retries AddOffsetsToTxn sooner
  (transport/transactions.py says why). ``_partitioner`` places an unkeyed record as
  ``send`` would, for records kip batches itself.
- **Clearing up after a fenced producer.** ``_txn_manager._transaction_waiter`` and
  each unsent batch's ``_drain_waiter`` in ``_message_accumulator._batches`` fail and
  nobody awaits them once the producer is dropped; reading them keeps asyncio quiet.
- **Fetch waits.** ``AIOKafkaConsumer._fetcher._get_actions_per_node`` (wrapped),
  ``_select_read_replica`` and a fetch request's ``_max_wait_ms``: aiokafka has one
  fetch wait for every fetch, and kip lengthens those that leave no partition out
  (transport/fetch_waits.py). ``_fetch_max_wait_ms`` is set on a consumer faust builds.
- **Fetched bytes, before they are parsed.** The names ``MemoryRecords`` and
  ``PartitionRecords`` in ``aiokafka.consumer.fetcher``, replaced so that a partition's
  fetched bytes pass a filter that knows the partition (transport/inflation.py), and
  ``aiokafka.record.util``'s CRC-32C and varint for the batches it rewrites.
- **Metadata.** ``AIOKafkaConsumer._client`` (``add_topic``,
  ``force_metadata_update``, ``cluster.unauthorized_topics``): naming a topic in the
  metadata request tells "not authorized" from "missing".
- **Admin requests aiokafka does not wrap.** ``AIOKafkaAdminClient._send_request`` and
  the wire structs of ``aiokafka.protocol``: CreateAcls, DescribeAcls, DeleteAcls,
  DescribeClientQuotas, and AlterClientQuotas (v0, defined here). confluent-kafka's
  AdminClient has the ACL calls but no client quotas, so it would add a second Kafka
  client (librdkafka, its own TLS, SCRAM and OAUTHBEARER settings) to every operator's
  host and still leave quotas here (docs/architecture.md).
- **A partition assignor of kip's own.** aiokafka calls an assignor's class methods and
  takes ``AbstractPartitionAssignor`` and the member metadata and assignment structs
  from ``aiokafka.coordinator``; ``sticky_per_topic`` wraps transport/assignment.py in
  them, a subclass per consumer because its state (what the member owns) is the class's.
- **A static member's leave.** aiokafka joins with ``group_instance_id`` (KIP-345) but
  never sends LeaveGroup for such a member, and its LeaveGroup struct stops at v1,
  which cannot name one. kip sends LeaveGroup v3 (defined here) through
  ``AIOKafkaAdminClient._send_request_to_node`` to the group's coordinator when a worker
  stops on purpose, so its partitions move at once instead of after its session timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeAlias

import aiokafka.errors as Errors
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import CoordinationType
from aiokafka.consumer import fetcher as aiokafka_fetcher
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (ConsumerProtocolMemberAssignment,
                                           ConsumerProtocolMemberMetadata)
from aiokafka.errors import KafkaError, for_code
from aiokafka.producer.sender import AddOffsetsToTxnHandler
from aiokafka.protocol.admin import (CreateAclsRequest, DeleteAclsRequest,  # noqa: F401
                                     DescribeAclsRequest, DescribeClientQuotasRequest)
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Float64, Int16, Int32, Schema, String
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c, encode_varint  # noqa: F401

from kip.transport.assignment import assign as assign_partitions, decode_owned, encode_owned

# How often a step looks whether the sender has had its AddPartitionsToTxn answered
# (aiokafka keeps no future for it); a step waits a round trip.
ADDED_POLL_S = 0.0002


# Transactions ------------------------------------------------------------------------

async def wait_for_producer_id(producer: AIOKafkaProducer) -> None:
    """InitProducerId answered: the fence of the transactional id's earlier owners."""
    await producer._txn_manager.wait_for_pid()


def in_transaction(producer: AIOKafkaProducer) -> bool:
    return producer._txn_manager.is_in_transaction()


def broken(producer: AIOKafkaProducer, when: str) -> KafkaError:
    """What broke the producer's transaction off (fenced, refused), to raise."""
    ended = producer._txn_manager.wait_for_transaction_end()
    cause = ended.exception() if ended.done() and not ended.cancelled() else None
    return cause if isinstance(cause, KafkaError) else KafkaError(
        f"the transaction broke off {when}: {cause!r}")


async def add_group(producer: AIOKafkaProducer, group_id: str, retry_s: float) -> None:
    """AddOffsetsToTxn for ``group_id``, answered; CONCURRENT_TRANSACTIONS retried after
    ``retry_s``, doubled up to the producer's own backoff."""
    sender, txn = producer._sender, producer._txn_manager
    while True:
        node_id = await sender._find_coordinator(CoordinationType.TRANSACTION,
                                                 txn.transactional_id)
        if await _AddGroup(sender, group_id, retry_s).do(node_id):
            break   # else a retriable error, and its backoff waited
        retry_s = min(2 * retry_s, sender._retry_backoff)
    if not txn.is_in_transaction():   # refused (the group's ACL)
        raise KafkaError(f"adding group {group_id} to the transaction failed")


class _AddGroup(AddOffsetsToTxnHandler):
    """aiokafka's AddOffsetsToTxn step, with CONCURRENT_TRANSACTIONS retried after
    ``concurrent_retry_s`` instead of the producer's backoff."""

    def __init__(self, sender, group_id: str, concurrent_retry_s: float) -> None:
        super().__init__(sender, group_id)
        self.concurrent_retry_s = concurrent_retry_s

    def handle_response(self, resp):
        if Errors.for_code(resp.error_code) is Errors.ConcurrentTransactions:
            return self.concurrent_retry_s
        return super().handle_response(resp)


async def add_partitions(producer: AIOKafkaProducer, partitions: list[TopicPartition]
                         ) -> None:
    """AddPartitionsToTxn for those of ``partitions`` the transaction lacks, answered."""
    txn = producer._txn_manager
    for tp in partitions:
        txn.maybe_add_partition_to_txn(tp)   # the sender sends them in one request
    while txn.partitions_to_add() and txn.is_in_transaction():
        await asyncio.sleep(ADDED_POLL_S)
    if not txn.is_in_transaction():
        raise broken(producer, "while its partitions were added")


def unkeyed_partition(producer: AIOKafkaProducer, partitions: list[int],
                      available: list[int]) -> int:
    """Where ``producer.send`` would put a record without a key."""
    return producer._partitioner(None, partitions, available)


def internal_waiters(producer: AIOKafkaProducer) -> list[asyncio.Future]:
    """The producer's internal futures that fail with it once it is fenced."""
    waiters = [getattr(producer._txn_manager, "_transaction_waiter", None)]
    accumulator = getattr(producer, "_message_accumulator", None)
    for batches in getattr(accumulator, "_batches", {}).values():
        waiters += [getattr(batch, "_drain_waiter", None) for batch in batches]
    return [w for w in waiters if w is not None]


# Fetch waits -------------------------------------------------------------------------

def set_fetch_max_wait(consumer: AIOKafkaConsumer, wait_ms: int) -> None:
    """The fetch wait of a consumer built elsewhere (faust's), before it starts."""
    consumer._fetch_max_wait_ms = wait_ms   # read by start()


def lengthen_whole_fetches(consumer: AIOKafkaConsumer, idle_ms: int) -> None:
    """From now on, each fetch of the started ``consumer`` that asks for every partition
    it is assigned on that broker waits up to ``idle_ms``; the others keep the
    consumer's ``fetch_max_wait_ms``, and so does every fetch while a partition has no
    known leader (once it has one, it may be on a broker with a fetch in flight)."""
    fetcher = consumer._fetcher
    if fetcher is None:
        raise RuntimeError("start the consumer first: its fetcher is made by start()")
    choose = fetcher._get_actions_per_node

    def actions_per_node(assignment):
        actions = choose(assignment)
        nodes = [fetcher._select_read_replica(tp) for tp in assignment.tps]
        if None in nodes or -1 in nodes:   # a partition without a leader is left out
            return actions
        for node_id, request in actions[0]:
            if _asked(request) == nodes.count(node_id):
                request._max_wait_ms = max(request._max_wait_ms, idle_ms)
        return actions

    fetcher._get_actions_per_node = actions_per_node


def _asked(request) -> int:
    return sum(len(partitions) for _, partitions in request.topics)


# Fetched bytes -----------------------------------------------------------------------

FetchFilter = Callable[[TopicPartition, bytes], bytes]   # a partition's fetched bytes
_AIOKAFKAS = (aiokafka_fetcher.MemoryRecords, aiokafka_fetcher.PartitionRecords)
_filter: FetchFilter | None = None


def filter_fetched(bytes_filter: FetchFilter) -> None:
    """From now on, in this process, every consumer's fetched bytes of a partition pass
    ``bytes_filter`` before aiokafka parses them."""
    global _filter
    _filter = bytes_filter
    aiokafka_fetcher.MemoryRecords = _Fetched
    aiokafka_fetcher.PartitionRecords = _FilteredPartitionRecords


def unfilter_fetched() -> None:
    """aiokafka's own names back."""
    global _filter
    _filter = None
    aiokafka_fetcher.MemoryRecords, aiokafka_fetcher.PartitionRecords = _AIOKAFKAS


class _Fetched:
    """A partition's fetched bytes, kept as they came until their partition is known."""

    __slots__ = ("data", "records")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.records = MemoryRecords(data)

    def has_next(self) -> bool:
        return self.records.has_next()

    def size_in_bytes(self) -> int:
        return self.records.size_in_bytes()

    def next_batch(self):
        return self.records.next_batch()


class _FilteredPartitionRecords(_AIOKAFKAS[1]):
    def __init__(self, tp, records, *args, **kwargs) -> None:
        if isinstance(records, _Fetched) and _filter is not None:
            data = _filter(tp, records.data)
            records = MemoryRecords(data) if data is not records.data else records.records
        super().__init__(tp, records, *args, **kwargs)


# Metadata ----------------------------------------------------------------------------

async def refresh_metadata(consumer: AIOKafkaConsumer) -> None:
    await consumer._client.force_metadata_update()


async def ask_metadata_for(consumer: AIOKafkaConsumer, topic: str) -> None:
    """Name ``topic`` in the consumer's metadata requests from now on."""
    await consumer._client.add_topic(topic)


def unauthorized_topics(consumer: AIOKafkaConsumer) -> set[str]:
    return set(consumer._client.cluster.unauthorized_topics)


# Admin requests ----------------------------------------------------------------------

async def send_request(admin: AIOKafkaAdminClient, request) -> Any:
    """Send ``request``; raise Kafka's error if the response carries one."""
    response = await admin._send_request(request)
    codes = [getattr(response, "error_code", 0)]
    codes += [r[0] for r in getattr(response, "creation_responses", [])]
    codes += [r[0] for r in getattr(response, "filter_responses", [])]
    for code in codes:
        if code:
            raise for_code(code)(f"{type(request).__name__} failed")
    return response


async def alter_client_quotas(admin: AIOKafkaAdminClient, entries: list) -> None:
    """AlterClientQuotas (KIP-546) of ``entries``: ``([(entity type, name)], [(key,
    value, remove)])`` each; raise the first entry's error."""
    response = await admin._send_request(AlterClientQuotasRequest(entries))
    for code, message, entity in response.entries:
        if code:
            raise for_code(code)(f"AlterClientQuotas for {entity}: {message}")


def sticky_per_topic(consumer_name: str) -> tuple[type]:
    """A consumer's assignment strategy: kip's sticky, per-topic balanced assignor, a
    class of its own. Alone: offered beside round robin, three members joining at once
    rebalanced without end (aiokafka 0.14, Kafka 4.1; tests/transport/test_assignment.py)."""
    return (type(f"StickyPerTopic_{consumer_name}", (_StickyPerTopic,), {}),)


class _StickyPerTopic(AbstractPartitionAssignor):
    name = "kip-sticky-per-topic"
    version = 0
    owned: dict[str, list[int]] | None = None   # per subclass: set by on_assignment

    @classmethod
    def assign(cls, cluster, members) -> dict[str, ConsumerProtocolMemberAssignment]:
        subscriptions = {m: list(meta.subscription) for m, meta in members.items()}
        partitions = {}
        for topic in {t for topics in subscriptions.values() for t in topics}:
            found = cluster.partitions_for_topic(topic)
            if found:
                partitions[topic] = sorted(found)
        owned = {m: decode_owned(meta.user_data) for m, meta in members.items()}
        result = assign_partitions(partitions, subscriptions, owned)
        return {m: ConsumerProtocolMemberAssignment(cls.version, sorted(t.items()), b"")
                for m, t in result.items()}

    @classmethod
    def metadata(cls, topics) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(cls.version, list(topics),
                                              encode_owned(cls.owned))

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        owned: dict[str, list[int]] = {}
        for tp in assignment.partitions():
            owned.setdefault(tp.topic, []).append(tp.partition)
        cls.owned = owned


async def leave_as_static_member(admin: AIOKafkaAdminClient, group_id: str,
                                 instance_id: str) -> None:
    """LeaveGroup v3 for the static member ``instance_id`` of ``group_id``; a member the
    coordinator no longer knows has left already."""
    node = await admin.find_coordinator(group_id)
    response = await admin._send_request_to_node(node, LeaveGroupV3Request(group_id,
                                                                           instance_id))
    codes = [response.error_code] + [member[2] for member in response.members]
    for code in codes:
        if code and code != Errors.UnknownMemberIdError.errno:
            raise for_code(code)(f"LeaveGroup of {instance_id} from {group_id}")


class LeaveGroupResponse_v3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32), ("error_code", Int16),
        ("members", Array(("member_id", String("utf-8")),
                          ("group_instance_id", String("utf-8")), ("error_code", Int16))))


class LeaveGroupRequest_v3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(("group_id", String("utf-8")),
                    ("members", Array(("member_id", String("utf-8")),
                                      ("group_instance_id", String("utf-8")))))


class LeaveGroupV3Request(Request[LeaveGroupRequest_v3]):
    API_KEY = 13

    def __init__(self, group_id: str, instance_id: str) -> None:
        self._group_id = group_id
        self._instance_id = instance_id

    def build(self, request_struct_class: type[LeaveGroupRequest_v3]) -> LeaveGroupRequest_v3:
        return request_struct_class(self._group_id, [("", self._instance_id)])


class AlterClientQuotasResponse_v0(Response):
    API_KEY = 49
    API_VERSION = 0
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("entries", Array(
            ("error_code", Int16),
            ("error_message", String("utf-8")),
            ("entity", Array(("entity_type", String("utf-8")),
                             ("entity_name", String("utf-8")))))))


class AlterClientQuotasRequest_v0(RequestStruct):
    API_KEY = 49
    API_VERSION = 0
    RESPONSE_TYPE = AlterClientQuotasResponse_v0
    SCHEMA = Schema(
        ("entries", Array(
            ("entity", Array(("entity_type", String("utf-8")),
                             ("entity_name", String("utf-8")))),
            ("ops", Array(("key", String("utf-8")), ("value", Float64),
                          ("remove", Boolean))))),
        ("validate_only", Boolean))


AlterClientQuotasRequestStruct: TypeAlias = AlterClientQuotasRequest_v0


class AlterClientQuotasRequest(Request[AlterClientQuotasRequestStruct]):
    API_KEY = 49

    def __init__(self, entries: list, validate_only: bool = False) -> None:
        self._entries = entries
        self._validate_only = validate_only

    def build(self, request_struct_class: type[AlterClientQuotasRequestStruct]
              ) -> AlterClientQuotasRequestStruct:
        return request_struct_class(self._entries, self._validate_only)
