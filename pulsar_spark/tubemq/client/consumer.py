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
the span is. The broker has no bounded read: a reply runs on as far as its size limit, so
the last reply of a read of ``[start, end)`` can run past ``end`` (messages appended after
``end`` was chosen). It is cut there by its messages' offsets when they are known, and
otherwise before the partition's first message at or after ``end``, which a read registered
at ``end`` returns first: the broker gives each message an id unique in the store, so that
message is found in the reply by its id. Either way a read returns exactly the partition's
messages in ``[start, end)``.

A read keeps one GetMessage ahead of its caller: once a reply shows that the read goes on
(it starts before ``end``), the next request goes out before the reply before it is handed
over, so the broker reads its store while the caller converts rows. The broker sees one
request at a time, each sent after the last reply arrived, and nothing else is asked of the
registration while a request is out.

A read sends the broker a heartbeat every :data:`HEARTBEAT_INTERVAL` seconds from a thread
(GetMessage counts as one too), since the broker drops a registration that sent nothing for
``consumerRegTimeoutMs``; and it reconnects after a lost connection or a retriable error,
registering again at the first offset it has not returned (:func:`read_range`).

:func:`offset_bounds` finds a partition's first and end offsets the same way: registering at
offset 0 is clamped to the store's first offset, at a huge offset to its end.

A read with filters registers with ``filterCondStr``, the message types it wants, as the Java
consumer does. The broker then skips, while it scans, the index entries whose type's hash
(Java's ``String.hashCode`` of ``$msgType$``, kept in each entry) none of the filters has, so
a reply holds the partition's messages of those types, and may hold another type of the same
hash: the caller drops those by their ``$msgType$``, as the Java consumer does. Under the
broker's default consume rule a filtered read is served from the store's files only, not its
memory cache: messages are read once the broker has flushed them (``memCacheFlushIntvl``,
20 s by default), and until then a read waits at 404 as at the end of the store.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.retry import Retrier
from pulsar_spark.errors import PulsarSparkError, RequestTimeoutError
from pulsar_spark.tubemq.client.cluster import TubePartition, connect
from pulsar_spark.tubemq.client.connection import (
    NO_SECURITY,
    Submitted,
    TubeMQConnection,
    TubeMQSecurity,
)
from pulsar_spark.tubemq.errors import TubeMQHeartbeatNodeMissingError, tubemq_error_for
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.messages import TubeMessages

REGISTER = 31
UNREGISTER = 32
READ_NORMAL = 0
END_OF_DATA = 404
# Bytes of store index per message: offsets of consecutive messages of a store differ by this.
INDEX_ENTRY_SIZE = 28
# The read option that sets ``retry_for`` (named when retries run out).
RETRY_OPTION = "retryTimeoutMs"
# Seconds between heartbeats of a read (the Java client's default period for its broker).
HEARTBEAT_INTERVAL = 10.0
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
    messages: TubeMessages
    scanned_to: int | None = None

    def message_offsets(self) -> npt.NDArray[np.int64] | None:
        """Each message's own offset, when the read scanned nothing but these messages (its
        span is one index entry per message); None when other partitions' entries lay
        between them, or the span is not known."""
        if self.scanned_to is None:
            return None
        if self.scanned_to - self.offset != INDEX_ENTRY_SIZE * len(self.messages):
            return None
        return self.offset + INDEX_ENTRY_SIZE * np.arange(len(self.messages), dtype=np.int64)


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
        filters: tuple[str, ...] = (),
    ) -> None:
        self._conn = connection
        self.partition = partition
        self._group = group
        self._client = client
        self._timeout = timeout
        self._filters = filters

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
        return self.received(self.ask())

    def ask(self) -> Submitted[broker_pb.GetMessageResponseB2C]:
        """Send a GetMessage request without waiting; :meth:`received` takes its reply."""
        return self._conn.submit(
            [
                broker_pb.GetMessageRequestC2B(
                    clientId=self._client,
                    partitionId=self.partition.partition_id,
                    groupName=self._group,
                    topicName=self.partition.topic,
                    lastPackConsumed=True,
                )
            ],
            broker_pb.GetMessageResponseB2C,
            timeout=self._timeout,
        )

    def received(self, asked: Submitted[broker_pb.GetMessageResponseB2C]) -> Batch | None:
        """The messages of the reply to ``asked``, or None at the end of the store."""
        reply = asked.messages()
        if reply.errCode == END_OF_DATA:
            return None
        if reply.errCode != 200:
            raise tubemq_error_for(reply.errCode, reply.errMsg)
        return Batch(reply.currOffset, reply.messages)

    def heartbeat(self) -> None:
        """Tell the broker the registration is alive (it drops one that sent nothing for
        ``consumerRegTimeoutMs``, 20 s at least); GetMessage and CommitOffset count too."""
        broker = self.partition.broker
        reply = self._conn.call(
            broker_pb.HeartBeatRequestC2B(
                clientId=self._client,
                groupName=self._group,
                readStatus=READ_NORMAL,
                partitionInfo=[
                    f"{broker.broker_id}:{broker.host}:{broker.port}"
                    f"#{self.partition.topic}:{self.partition.partition_id}"
                ],
            ),
            broker_pb.HeartBeatResponseB2C,
            timeout=self._timeout,
        )
        if reply.hasPartFailure:
            raise TubeMQHeartbeatNodeMissingError(
                f"partition {self.partition.key}: the broker no longer knows the "
                f"registration ({', '.join(reply.failureInfo)})"
            )

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
        if op == REGISTER:
            request.filterCondStr.extend(self._filters)
        return request


@contextlib.contextmanager
def _registered(
    connection: TubeMQConnection,
    partition: TubePartition,
    group: str,
    client: str,
    timeout: float,
    *,
    filters: tuple[str, ...] = (),
) -> Iterator[PartitionConsumer]:
    """A consumer of ``partition`` on ``connection``, unregistered when the block ends."""
    consumer = PartitionConsumer(
        connection, partition, group, client, timeout=timeout, filters=filters
    )
    try:
        yield consumer
    finally:
        consumer.unregister()


@contextlib.contextmanager
def heartbeats(consumer: PartitionConsumer, interval: float | None) -> Iterator[None]:
    """Send ``consumer``'s heartbeat every ``interval`` seconds from a thread while the block
    runs (None: never), so that the registration outlives pauses between reads, such as a
    slow consumer of :func:`read_range`'s batches. A failed heartbeat is left to the next
    read to find."""
    if interval is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            try:
                consumer.heartbeat()
            except PulsarSparkError:
                return

    thread = threading.Thread(target=beat, name="tubemq-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def offset_bounds(
    connection: TubeMQConnection,
    partition: TubePartition,
    group: str,
    client: str,
    *,
    timeout: float = 10.0,
) -> Bounds:
    """The partition's first offset and its end, by registering at both extremes."""
    with _registered(connection, partition, group, client, timeout) as consumer:
        first = consumer.register(0).currOffset
        end = consumer.register(PAST_ANY_END).currOffset
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
    retry_for: float = 0.0,
    heartbeat_interval: float | None = HEARTBEAT_INTERVAL,
    filters: tuple[str, ...] = (),
    security: TubeMQSecurity = NO_SECURITY,
) -> Generator[Batch, None, None]:
    """The messages of ``partition`` in ``[start, end)``, reply by reply (see the module
    docstring); each batch knows where its read stopped (``scanned_to``), the last one is cut
    at ``end``.

    ``on_start_moved(first)`` is called when the store no longer holds the offset where
    reading (re)starts (retention removed it) and reading starts at its first offset
    ``first`` instead. A read that stops returning replies before ``end`` for ``timeout``
    seconds raises RequestTimeoutError. When the connection fails or the broker answers with
    a retriable error, the read goes on from the first offset not yet returned on a new
    connection, for up to ``retry_for`` seconds without progress; then RetriesExhaustedError.
    A heartbeat goes to the broker every ``heartbeat_interval`` seconds (None: none).
    With ``filters``, the partition's messages of those types only, and maybe others whose
    type has the same hash (see the module docstring). ``security`` sets up each connection.
    """
    position = start
    retrier = Retrier(f"reading partition {partition.key}", retry_for, RETRY_OPTION)
    while position < end:
        try:
            with (
                connect(partition, timeout, security) as connection,
                _registered(
                    connection, partition, group, client, timeout, filters=filters
                ) as consumer,
                heartbeats(consumer, heartbeat_interval),
            ):
                taken = consumer.register(position).currOffset
                if taken != position and on_start_moved is not None:
                    on_start_moved(taken)
                for reply in _replies(consumer, end, timeout):
                    retrier.progressed()
                    batch = reply
                    if reply.scanned_to is not None and reply.scanned_to > end:
                        batch = _cut(consumer, reply, end, timeout)
                    position = batch.scanned_to if batch.scanned_to is not None else end
                    yield batch
                return
        except PulsarSparkError as exc:
            retrier.failed(exc)


def _cut(consumer: PartitionConsumer, batch: Batch, end: int, timeout: float) -> Batch:
    """``batch``, a reply that scanned past ``end``, without its messages at or after
    ``end``. When their offsets are not known, the first message of the partition at or
    after ``end`` is found by a read from ``end``, and the reply is cut before that message
    (messages carry ids unique in the store)."""
    offsets = batch.message_offsets()
    if offsets is not None:
        kept = int(np.count_nonzero(offsets < end))
    else:
        assert batch.scanned_to is not None
        boundary = _first_id_from(consumer, end, batch.scanned_to, timeout)
        ids = batch.messages.ids
        kept = ids.index(boundary) if boundary in ids else len(ids)
    return Batch(batch.offset, batch.messages.head(kept), end)


def _first_id_from(
    consumer: PartitionConsumer, offset: int, until: int, timeout: float
) -> int | None:
    """The id of the partition's first message at or after ``offset``, or None when it has
    none before ``until``."""
    consumer.register(offset)
    deadline = time.monotonic() + timeout
    while True:
        batch = consumer.fetch()
        if batch is not None and batch.messages:
            return batch.messages.ids[0]
        if batch is not None and batch.offset >= until:
            return None
        if batch is None and consumer.position() >= until:
            return None
        if time.monotonic() > deadline:
            raise RequestTimeoutError(
                f"partition {consumer.partition.key}: no reply from offset {offset} on"
            )
        if batch is None:
            time.sleep(0.05)


def _replies(consumer: PartitionConsumer, end: int, timeout: float) -> Iterator[Batch]:
    """The replies from the registered offset to ``end``, each yielded once the next read
    (or the group's offset at the end) showed where it stopped. While the caller uses one,
    the request for the reply after the next is on its way (see the module docstring)."""
    deadline = time.monotonic() + timeout
    pending: Batch | None = None

    def done(scanned_to: int) -> Iterator[Batch]:
        if pending is not None:
            yield dataclasses.replace(pending, scanned_to=scanned_to)

    asked: Submitted[broker_pb.GetMessageResponseB2C] | None = None
    while True:
        request, asked = asked, None
        try:
            batch = consumer.received(request if request is not None else consumer.ask())
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
        # ``batch`` starts before ``end``: the read goes on, at least to learn where it stops
        asked = consumer.ask()
        yield from done(batch.offset)
        pending = batch
