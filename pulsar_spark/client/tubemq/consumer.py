"""Reading one TubeMQ partition between two offsets, the broker's "bound" consumption.

How this works
--------------
A consumer registers on a broker partition for a group (``RegisterRequestC2B``, opType 31)
with ``currOffset`` set: the broker moves the group's offset there, clamped to what the store
holds, and answers with the offset it took. Every GetMessage then returns the partition's
messages found from the group's offset on and moves the offset past what it scanned; the
reply's ``currOffset`` is where that read started. errCode 404 means the offset reached the
end of the store. No master is involved, and the group's stored offset never matters: each
read registers at the offset it wants (CommitOffset is only asked where the offset stands).

Offsets are positions in the store's index, 28 bytes per message, shared by the partitions
of a store, and the messages of a reply carry no offset of their own. The next read's start
(or the group's offset after the last one) is where a read stopped: when that span holds one
index entry per message returned, every entry was one of them and each message's offset is
known (:meth:`Batch.message_offsets`); when other partitions' messages lay between them, only
the span is. So a read of ``[start, end)`` returns every reply that starts before ``end``, and
a reply that ran past ``end`` (messages appended after ``end`` was chosen) can be cut at
``end`` only when its messages' offsets are known.

:func:`offset_bounds` finds a partition's first and end offsets the same way: registering at
offset 0 is clamped to the store's first offset, at a huge offset to its end.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pulsar_spark.client.tubemq.cluster import TubePartition
from pulsar_spark.client.tubemq.connection import TubeMQConnection
from pulsar_spark.errors import PulsarSparkError, RequestTimeoutError, tubemq_error_for
from pulsar_spark.protocol.tubemq import messages
from pulsar_spark.protocol.tubemq._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.protocol.tubemq.messages import TubeMessage

REGISTER = 31
UNREGISTER = 32
READ_NORMAL = 0
END_OF_DATA = 404
# Bytes of store index per message: offsets of consecutive messages of a store differ by this.
INDEX_ENTRY_SIZE = 28
# An offset beyond any store: registering there is clamped to the store's end.
PAST_ANY_END = 2**62


@dataclass(frozen=True, slots=True)
class Bounds:
    """A partition's first offset and its end (the offset the next message will get)."""

    first: int
    end: int


@dataclass(frozen=True, slots=True)
class Batch:
    """The messages of one GetMessage reply, the store offset where its read started and,
    once the next read showed it, the offset where it stopped (``scanned_to``)."""

    offset: int
    messages: list[TubeMessage]
    scanned_to: int | None = None

    def message_offsets(self) -> list[int] | None:
        """Each message's own offset, when the read scanned nothing but these messages (its
        span is one index entry per message); None when other partitions' entries lay
        between them, or the span is not known."""
        if self.scanned_to is None:
            return None
        if self.scanned_to - self.offset != INDEX_ENTRY_SIZE * len(self.messages):
            return None
        return [self.offset + INDEX_ENTRY_SIZE * i for i in range(len(self.messages))]


class PartitionConsumer:
    """One registration of ``client`` in ``group`` on one partition, over a connection."""

    def __init__(
        self,
        connection: TubeMQConnection,
        partition: TubePartition,
        group: str,
        client: str,
        *,
        timeout: float = 10.0,
    ) -> None:
        self._conn = connection
        self.partition = partition
        self._group = group
        self._client = client
        self._timeout = timeout

    def register(self, offset: int) -> broker_pb.RegisterResponseB2C:
        """Register at ``offset``; the reply's ``currOffset`` is where reading will start."""
        return self._conn.call(
            self._register_request(REGISTER, offset),
            broker_pb.RegisterResponseB2C,
            timeout=self._timeout,
        )

    def unregister(self) -> None:
        """Give the partition back (errors ignored: the broker also times the client out)."""
        if self._conn.closed:
            return
        with contextlib.suppress(PulsarSparkError):
            self._conn.call(
                self._register_request(UNREGISTER, None),
                broker_pb.RegisterResponseB2C,
                timeout=self._timeout,
                check=False,
            )

    def fetch(self) -> Batch | None:
        """The next reply's messages, or None at the end of the store."""
        reply = self._conn.call(
            broker_pb.GetMessageRequestC2B(
                clientId=self._client,
                partitionId=self.partition.partition_id,
                groupName=self._group,
                topicName=self.partition.topic,
                lastPackConsumed=True,
            ),
            broker_pb.GetMessageResponseB2C,
            timeout=self._timeout,
            check=False,
        )
        if reply.errCode == END_OF_DATA:
            return None
        if reply.errCode != 200:
            raise tubemq_error_for(reply.errCode, reply.errMsg)
        return Batch(reply.currOffset, messages.decode_messages(reply))

    def position(self) -> int:
        """The group's offset on the partition now: where the next read would start."""
        reply = self._conn.call(
            broker_pb.CommitOffsetRequestC2B(
                clientId=self._client,
                topicName=self.partition.topic,
                partitionId=self.partition.partition_id,
                groupName=self._group,
                lastPackConsumed=True,
            ),
            broker_pb.CommitOffsetResponseB2C,
            timeout=self._timeout,
        )
        return reply.currOffset

    def _register_request(self, op: int, offset: int | None) -> broker_pb.RegisterRequestC2B:
        request = broker_pb.RegisterRequestC2B(
            opType=op,
            clientId=self._client,
            groupName=self._group,
            topicName=self.partition.topic,
            partitionId=self.partition.partition_id,
            readStatus=READ_NORMAL,
        )
        if offset is not None:
            request.currOffset = offset
        return request


def connect(partition: TubePartition, timeout: float) -> TubeMQConnection:
    broker = partition.broker
    return TubeMQConnection(broker.host, broker.port, connect_timeout=timeout)


def offset_bounds(
    connection: TubeMQConnection,
    partition: TubePartition,
    group: str,
    client: str,
    *,
    timeout: float = 10.0,
) -> Bounds:
    """The partition's first offset and its end, by registering at both extremes."""
    consumer = PartitionConsumer(connection, partition, group, client, timeout=timeout)
    try:
        first = consumer.register(0).currOffset
        end = consumer.register(PAST_ANY_END).currOffset
    finally:
        consumer.unregister()
    return Bounds(first, end)


def read_range(
    partition: TubePartition,
    group: str,
    client: str,
    start: int,
    end: int,
    *,
    timeout: float = 10.0,
    on_start_moved: Callable[[int], None] | None = None,
) -> Iterator[Batch]:
    """Every reply of ``partition`` that starts in ``[start, end)`` (see the module docstring).

    ``on_start_moved(first)`` is called when the store no longer holds ``start`` (retention
    removed it) and reading starts at its first offset ``first`` instead. A read that stops
    returning replies before ``end`` for ``timeout`` seconds raises RequestTimeoutError.
    """
    if start >= end:
        return
    with connect(partition, timeout) as connection:
        consumer = PartitionConsumer(connection, partition, group, client, timeout=timeout)
        taken = consumer.register(start).currOffset
        try:
            if taken != start and on_start_moved is not None:
                on_start_moved(taken)
            yield from _replies(consumer, end, timeout)
        finally:
            consumer.unregister()


def _replies(consumer: PartitionConsumer, end: int, timeout: float) -> Iterator[Batch]:
    """The replies from the registered offset to ``end``, each yielded once the next read
    (or the group's offset at the end) showed where it stopped."""
    deadline = time.monotonic() + timeout
    pending: Batch | None = None

    def done(scanned_to: int) -> Iterator[Batch]:
        if pending is not None:
            yield dataclasses.replace(pending, scanned_to=scanned_to)

    while True:
        try:
            batch = consumer.fetch()
        except PulsarSparkError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            continue
        if batch is None:
            # 404 also answers a read while the broker flushes its memory cache: it is the
            # end only once the group's offset reached ``end``.
            position = consumer.position()
            if position >= end:
                yield from done(position)
                return
            if time.monotonic() > deadline:
                raise RequestTimeoutError(
                    f"partition {consumer.partition.key} reported its end before offset {end}"
                )
            time.sleep(0.05)
            continue
        if batch.offset >= end:
            yield from done(batch.offset)
            return
        if pending is not None and batch.offset == pending.offset:
            # the broker held the offset (flow control): ask again
            if time.monotonic() > deadline:
                raise RequestTimeoutError(
                    f"partition {consumer.partition.key} stopped at offset {batch.offset} "
                    f"before {end}"
                )
            time.sleep(0.05)
            continue
        deadline = time.monotonic() + timeout
        yield from done(batch.offset)
        pending = batch
