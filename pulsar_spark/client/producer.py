"""A blocking producer for one topic or one partition of a partitioned topic.

How this works
--------------
:meth:`Producer.send` gives each message the next sequence id (``initial_sequence_id`` for
the first, then +1 per message, so a task that is retried under the same producer name
re-sends the same ids and a deduplicating broker drops the repeats) and adds it to the open
batch. The batch goes out as one SEND frame once it holds ``batch_max_messages`` messages or
``batch_max_bytes`` bytes, or when a send finds it open for longer than
``batch_max_delay_ms``. There is no timer thread: a batch left open is sent by the next
:meth:`~Producer.send`, :meth:`~Producer.flush` or :meth:`~Producer.close`.
:meth:`Producer.send_columns` does the same for many messages given as columns: their batch
records are built together, and each batch takes as many as it has room for.

Flow control counts messages per SEND frame, not per message, so the per-message path takes
no lock. Every frame is recorded in a FIFO of ``(sequence_id, highest_sequence_id, messages)``
before it is written, and the broker's receipts, which arrive in order, pop it from the head
on the connection's reader thread. When ``max_pending_messages`` messages are without a
receipt, the next frame waits (under a Condition) for receipts to make room, at most
``send_timeout`` seconds. Frames are written without waiting for receipts (pipelining). A
batch frame is written at once; unbatched frames are small, so they are gathered (up to
64 KiB, ``batch_max_messages`` frames or ``batch_max_delay_ms``, checked on send) and written
with one socket write, which also happens before any wait and on flush.

A message too large to share a batch travels alone, unbatched; if even compressed it does not
fit the connection's ``max_message_size`` it is cut into chunks, each a SEND with
``is_chunk`` and the message's sequence id. Only the last chunk's receipt completes it.
Entries are kept ``FRAME_PADDING`` (10 KiB) below that maximum: a broker that advertises no
maximum (pulsar-lite) is assumed to allow 5 MiB, but the C++ client, under the official Python
one, then discards entries larger than 5 MiB - 10 KiB as corrupt.

With ``skip_stored``, messages whose sequence id is at or below the ``last_sequence_id`` the
broker confirmed the producer with are not sent: a broker with deduplication answers with the
highest id it has stored from an earlier producer of the same name, and would drop them. They
must not go out at all, because the broker judges a whole batch by its first sequence id: a
batch that mixed them with new messages would be dropped, new messages included, and batch
boundaries depend on timing, so a retry cannot be relied on to draw them where the failed
attempt did.

Failure is sticky and loud: a SEND_ERROR, a receipt that does not match the FIFO's head, a lost
connection or a timeout makes the producer failed, and the error is raised by the next
:meth:`~Producer.send`, :meth:`~Producer.flush` or :meth:`~Producer.close`. A message either
gets its receipt or its sender sees an exception.

One thread sends; receipts are handled on the connection's reader thread.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.errors import (
    ConfigurationError,
    ConnectionClosedError,
    LocalProtocolError,
    PulsarSparkError,
    RemoteProtocolError,
    RequestTimeoutError,
    server_error_for,
)
from pulsar_spark.protocol import commands, compression, pb
from pulsar_spark.protocol.encode import (
    BatchBuilder,
    MessageColumns,
    OutgoingMessage,
    chunks,
    encode_records,
    single_message_metadata,
)
from pulsar_spark.protocol.framing import FRAME_PADDING

log = logging.getLogger(__name__)

# Room kept for the metadata, keys and properties beside the payload when deciding what fits.
_METADATA_ROOM = 64 * 1024

# Unbatched SEND frames are gathered up to this many bytes for one socket write.
_OUTBOX_BYTES = 64 * 1024

# (sequence_id, highest_sequence_id, messages completed by its receipt)
_InFlight = tuple[int, int, int]


class Producer:
    """Publishes to one topic (or one partition, by its full ``-partition-N`` name).

    Create with :meth:`create`. Not thread-safe for concurrent senders; see the module
    docstring for batching, flow control and failure handling.
    """

    def __init__(
        self,
        connection: Connection,
        *,
        topic: str,
        producer_id: int,
        success: pb.CommandProducerSuccess,
        settings: _Settings,
    ) -> None:
        """Wrap a producer the broker has accepted; use :meth:`create` instead."""
        self.topic = topic
        self._connection = connection
        self._producer_id = producer_id
        self._name = success.producer_name or settings.requested_name
        self._last_sequence_id_from_broker = success.last_sequence_id
        self._settings = settings
        self._next_sequence_id = settings.initial_sequence_id
        self._stored_through = success.last_sequence_id if settings.skip_stored else -1
        self._skipped = 0
        # Copies of settings the per-message path reads, one attribute lookup each.
        self._unbatched = not settings.batching
        self._batch_messages = settings.batch_max_messages
        # Both the size at which a batch is sent and the message size above which a message
        # travels alone: together they keep a batch below the maximum message size.
        self._max_entry_size = max(connection.max_message_size - FRAME_PADDING, 1)
        limit = max((self._max_entry_size - _METADATA_ROOM) // 2, 1)
        self._batch_bytes = min(settings.batch_max_bytes, limit)
        self._batch = BatchBuilder()
        self._batch_deadline = 0.0
        self._outbox: list[bytes] = []
        self._outbox_size = 0
        self._outbox_messages = 0
        self._outbox_deadline = 0.0
        self._state = threading.Condition(threading.Lock())
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        self._pending = 0
        self._waiting = False
        self._sent = 0
        self._acknowledged = 0
        self._failure: PulsarSparkError | None = None
        self._closed = False

    @classmethod
    def create(
        cls,
        lookup: Lookup,
        topic: str,
        *,
        producer_name: str | None = None,
        initial_sequence_id: int = 0,
        skip_stored: bool = False,
        codec: int = compression.NONE,
        batching: bool = True,
        batch_max_messages: int = 1000,
        batch_max_bytes: int = 128 * 1024,
        batch_max_delay_ms: int = 10,
        max_pending_messages: int = 10000,
        send_timeout: float = 30.0,
        request_timeout: float = 30.0,
    ) -> Producer:
        """Look ``topic`` up, open a producer on its broker and wait until it is ready.

        ``topic`` is a full name and must not be the root of a partitioned topic (open each
        ``-partition-N`` instead). ``producer_name`` should be stable across retries of the
        same work for broker-side deduplication; without one the broker picks a name.
        ``skip_stored`` leaves out the messages the broker reports as stored (see the module
        docstring); it is for producers that number the same messages the same way each time.
        """
        settings = _Settings(
            requested_name=producer_name or "",
            initial_sequence_id=initial_sequence_id,
            skip_stored=skip_stored,
            codec=codec,
            batching=batching,
            batch_max_messages=batch_max_messages,
            batch_max_bytes=batch_max_bytes,
            batch_max_delay=batch_max_delay_ms / 1000.0,
            max_pending_messages=max_pending_messages,
            send_timeout=send_timeout,
            request_timeout=request_timeout,
        )
        connection = lookup.connect_to_owner(topic)
        producer_id = connection.new_id()
        response = connection.request(
            lambda rid: commands.producer(
                topic=topic, producer_id=producer_id, request_id=rid, producer_name=producer_name
            ),
            what=f"create producer on {topic}",
            timeout=request_timeout,
        )
        producer = cls(
            connection,
            topic=topic,
            producer_id=producer_id,
            success=response.producer_success,
            settings=settings,
        )
        if not producer.name:
            producer._release()
            raise RemoteProtocolError(
                f"the broker named no producer for {topic} and none was requested"
            )
        connection.register_producer(producer_id, producer)
        return producer

    # --- properties ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The producer name the broker confirmed (the requested one, or one it chose)."""
        return self._name

    @property
    def producer_id(self) -> int:
        """The id of this producer on its connection (in SEND, receipts and errors)."""
        return self._producer_id

    @property
    def last_sequence_id_from_broker(self) -> int:
        """``last_sequence_id`` from PRODUCER_SUCCESS: -1 unless the broker deduplicates."""
        return self._last_sequence_id_from_broker

    @property
    def next_sequence_id(self) -> int:
        """The sequence id the next message will get."""
        return self._next_sequence_id

    @property
    def messages_sent(self) -> int:
        """Messages written to the connection (the open batch is not counted)."""
        return self._sent

    @property
    def messages_skipped(self) -> int:
        """Messages not sent because the broker had them already (``skip_stored``)."""
        return self._skipped

    @property
    def messages_acknowledged(self) -> int:
        """Messages the broker has confirmed with a receipt."""
        return self._acknowledged

    # --- sending ---------------------------------------------------------------------------

    def send(self, message: OutgoingMessage) -> None:
        """Queue ``message``; it is written with its batch, without waiting for a receipt.

        Blocks only while ``max_pending_messages`` messages are without a receipt.
        """
        if self._failure is not None or self._closed:
            self._raise_unusable()
        sequence_id = self._next_sequence_id
        self._next_sequence_id = sequence_id + 1
        if self._stored(sequence_id, 1):
            return
        value = message.value
        if self._unbatched or (value is not None and len(value) > self._batch_bytes):
            self._send_batch()
            self._send_alone(message, sequence_id)
            return
        now = self._batch_clock()
        self._batch.add(message, sequence_id)
        self._send_batch_if_full(now)

    def send_columns(self, columns: MessageColumns) -> None:
        """Queue every row of ``columns``, in order: the same as :meth:`send` for each row's
        message, with the batch records of many rows built at once.
        """
        if self._failure is not None or self._closed:
            self._raise_unusable()
        first = self._next_sequence_id
        self._next_sequence_id = first + len(columns)
        stored = self._stored(first, len(columns))
        if stored:
            columns = columns.slice(stored, len(columns))
            first += stored
        alone = range(len(columns)) if self._unbatched else columns.larger_than(self._batch_bytes)
        start = 0
        for index in alone:
            self._batch_rows(columns.slice(start, index), first + start)
            self._send_batch()
            self._send_alone(columns.message(index), first + index)
            start = index + 1
        self._batch_rows(columns.slice(start, len(columns)), first + start)

    def flush(self) -> None:
        """Send the open batch and wait until every message sent so far has its receipt."""
        if self._failure is not None or self._closed:
            self._raise_unusable()
        self._send_batch()
        self._push()
        with self._state:
            self._wait_for(lambda: not self._in_flight, "flush")

    def close(self) -> None:
        """Flush, then close the producer on the broker. Raises if any message failed."""
        if self._closed:
            return
        try:
            self.flush()
        except BaseException:
            self._closed = True
            self._release()
            raise
        self._closed = True
        self._release(quiet=False)

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        elif not self._closed:
            # The caller is failing already: do not wait for receipts, just let go.
            self._closed = True
            self._release()

    # --- ProducerHandler, called on the connection's reader thread --------------------------

    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        with self._state:
            if not self._in_flight:
                self._fail(
                    RemoteProtocolError(
                        f"producer {self._name} on {self.topic}: receipt for sequence id "
                        f"{receipt.sequence_id} while no message is in flight"
                    )
                )
                return
            sequence_id, highest, messages = self._in_flight[0]
            if receipt.sequence_id != sequence_id or _highest_mismatch(receipt, highest):
                self._fail(
                    RemoteProtocolError(
                        f"producer {self._name} on {self.topic}: receipt for sequence id "
                        f"{_receipt_ids(receipt)} but the oldest SEND in flight has "
                        f"{sequence_id}..{highest}"
                    )
                )
                return
            self._in_flight.popleft()
            self._pending -= messages
            self._acknowledged += messages
            if self._waiting:
                self._state.notify_all()

    def on_send_error(self, error: pb.CommandSendError) -> None:
        failure = server_error_for(
            error.error,
            f"broker refused message {error.sequence_id} from producer {self._name} on "
            f"{self.topic}: {error.message}",
        )
        with self._state:
            self._fail(failure)

    def on_closed(self, error: PulsarSparkError) -> None:
        with self._state:
            failure = ConnectionClosedError(
                f"producer {self._name} on {self.topic} lost its connection with "
                f"{self._pending} message(s) without receipt: {error}"
            )
            failure.__cause__ = error
            self._fail(failure)

    # --- internals -------------------------------------------------------------------------

    def _stored(self, first_sequence_id: int, count: int) -> int:
        """How many of ``count`` messages numbered from ``first_sequence_id`` the broker
        already has (they come first); counts them as skipped."""
        stored = min(max(self._stored_through - first_sequence_id + 1, 0), count)
        self._skipped += stored
        return stored

    def _batch_rows(self, columns: MessageColumns, first_sequence_id: int) -> None:
        """Add ``columns`` to the open batch, sending each batch they fill."""
        if not len(columns):
            return
        records = encode_records(columns, first_sequence_id)
        start = 0
        while start < len(records):
            now = self._batch_clock()
            start += self._batch.add_records(
                records, start, self._batch_messages, self._batch_bytes
            )
            self._send_batch_if_full(now)

    def _batch_clock(self) -> float:
        """The time now, which starts the batch's delay if the batch is empty."""
        now = time.monotonic()
        if not self._batch.count:
            self._batch_deadline = now + self._settings.batch_max_delay
        return now

    def _send_batch_if_full(self, now: float) -> None:
        batch = self._batch
        if (
            batch.count >= self._batch_messages
            or batch.size >= self._batch_bytes
            or now >= self._batch_deadline
        ):
            self._send_batch()

    def _send_batch(self) -> None:
        """Write the open batch, if any. Any failure here loses its messages: it is sticky."""
        batch = self._batch
        count = batch.count
        if not count:
            return
        first = batch.first_sequence_id
        try:
            metadata, payload = batch.build(
                producer_name=self._name, publish_time=_now_ms(), codec=self._settings.codec
            )
            self._check_fits(metadata, payload, f"batch of {count} messages")
            frame = commands.send(
                producer_id=self._producer_id,
                sequence_id=first,
                num_messages=count,
                highest_sequence_id=first + count - 1,
                is_chunk=False,
                metadata=metadata,
                payload=payload,
            )
            self._write(frame, (first, first + count - 1, count))
        except PulsarSparkError as exc:
            with self._state:
                self._fail(exc)
            raise

    def _send_alone(self, message: OutgoingMessage, sequence_id: int) -> None:
        """Write one message unbatched, in chunks if it does not fit one message."""
        metadata = single_message_metadata(
            message, producer_name=self._name, sequence_id=sequence_id, publish_time=_now_ms()
        )
        value = message.value or b""
        codec = self._settings.codec if value else compression.NONE
        payload = compression.compress(codec, value)
        metadata.compression = codec  # type: ignore[assignment]
        metadata.uncompressed_size = len(value)
        if metadata.ByteSize() + len(payload) > self._max_entry_size:
            self._send_chunks(metadata, value, payload, sequence_id)
            return
        frame = commands.send(
            producer_id=self._producer_id,
            sequence_id=sequence_id,
            num_messages=1,
            highest_sequence_id=sequence_id,
            is_chunk=False,
            metadata=metadata,
            payload=payload,
        )
        self._write(frame, (sequence_id, sequence_id, 1))

    def _send_chunks(
        self, metadata: pb.MessageMetadata, value: bytes, compressed: bytes, sequence_id: int
    ) -> None:
        pieces = chunks(
            metadata,
            value,
            codec=self._settings.codec,
            max_message_size=self._max_entry_size,
            compressed=compressed,
        )
        for part, piece in pieces:
            last = part.chunk_id == part.num_chunks_from_msg - 1
            frame = commands.send(
                producer_id=self._producer_id,
                sequence_id=sequence_id,
                num_messages=1,
                highest_sequence_id=sequence_id,
                is_chunk=True,
                metadata=part,
                payload=piece,
            )
            self._write(frame, (sequence_id, sequence_id, 1 if last else 0))

    def _check_fits(self, metadata: pb.MessageMetadata, payload: bytes, what: str) -> None:
        size = metadata.ByteSize() + len(payload)
        if size > self._max_entry_size:
            raise LocalProtocolError(
                f"{what} for {self.topic} is {size} bytes, over the maximum entry size of "
                f"{self._max_entry_size} bytes (keys or properties too large?)"
            )

    def _write(self, frame: bytes, entry: _InFlight) -> None:
        """Record ``entry`` in flight (waiting for room if needed) and queue ``frame``."""
        messages = entry[2]
        limit = self._settings.max_pending_messages
        if self._outbox and self._pending + messages > limit:
            self._push()  # the receipts to wait for are for frames still in the outbox
        with self._state:
            if self._pending and self._pending + messages > limit:
                self._wait_for(
                    lambda: not self._pending or self._pending + messages <= limit, "send"
                )
            self._in_flight.append(entry)
            self._pending += messages
        if not self._outbox:
            self._outbox_deadline = time.monotonic() + self._settings.batch_max_delay
        self._outbox.append(frame)
        self._outbox_size += len(frame)
        self._outbox_messages += messages
        if (
            not self._unbatched
            or self._outbox_size >= _OUTBOX_BYTES
            or len(self._outbox) >= self._batch_messages
            or time.monotonic() >= self._outbox_deadline
        ):
            self._push()

    def _push(self) -> None:
        """Write the queued frames with one socket write; a failure loses them: sticky."""
        frames, messages = self._outbox, self._outbox_messages
        if not frames:
            return
        self._outbox, self._outbox_size, self._outbox_messages = [], 0, 0
        try:
            self._connection.send(frames[0] if len(frames) == 1 else b"".join(frames))
        except PulsarSparkError as exc:
            with self._state:
                self._fail(exc)
            raise
        self._sent += messages

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        """Wait (holding ``_state``) until ``ready()``, the producer fails, or send_timeout."""
        timeout = self._settings.send_timeout
        deadline = time.monotonic() + timeout
        self._waiting = True
        try:
            while not ready():
                if self._failure is not None:
                    raise self._failure
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._fail(self._timeout_error(what, timeout))
                    assert self._failure is not None
                    raise self._failure
                self._state.wait(remaining)
        finally:
            self._waiting = False
        if self._failure is not None:
            raise self._failure

    def _timeout_error(self, what: str, timeout: float) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"{what} on producer {self._name} for {self.topic}: {self._pending} message(s) "
            f"still without a receipt from broker {self._connection.address} after "
            f"{timeout:g}s (send_timeout)"
        )

    def _fail(self, error: PulsarSparkError) -> None:
        """Make the producer failed (first error wins); the caller holds ``_state``."""
        if self._failure is None:
            self._failure = error
        self._state.notify_all()

    def _raise_unusable(self) -> None:
        if self._failure is not None:
            raise self._failure
        raise LocalProtocolError(f"producer {self._name} for {self.topic} is closed")

    def _release(self, *, quiet: bool = True) -> None:
        """Close the producer on the broker and stop listening for its receipts."""
        try:
            if not self._connection.closed:
                self._connection.request(
                    lambda rid: commands.close_producer(
                        producer_id=self._producer_id, request_id=rid
                    ),
                    what=f"close producer {self._name} on {self.topic}",
                    timeout=self._settings.request_timeout,
                )
        except PulsarSparkError as exc:
            if not quiet:
                raise
            log.warning("could not close producer %s on %s: %s", self._name, self.topic, exc)
        finally:
            self._connection.unregister_producer(self._producer_id)


@dataclass(frozen=True, slots=True)
class _Settings:
    """The options of :meth:`Producer.create`, validated."""

    requested_name: str
    initial_sequence_id: int
    skip_stored: bool
    codec: int
    batching: bool
    batch_max_messages: int
    batch_max_bytes: int
    batch_max_delay: float  # seconds
    max_pending_messages: int
    send_timeout: float
    request_timeout: float

    def __post_init__(self) -> None:
        _require(self.initial_sequence_id >= 0, "initial_sequence_id must be >= 0")
        _require(self.codec in compression.CODEC_NAMES.values(), "unknown compression code")
        _require(self.batch_max_messages >= 1, "batch_max_messages must be >= 1")
        _require(self.batch_max_bytes >= 1, "batch_max_bytes must be >= 1")
        _require(self.batch_max_delay >= 0, "batch_max_delay_ms must be >= 0")
        _require(self.max_pending_messages >= 1, "max_pending_messages must be >= 1")
        _require(self.send_timeout > 0, "send_timeout must be > 0")
        _require(self.request_timeout > 0, "request_timeout must be > 0")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigurationError(f"invalid producer option: {message}")


def _highest_mismatch(receipt: pb.CommandSendReceipt, highest: int) -> bool:
    """Whether the receipt names a different last sequence id (brokers may leave it unset)."""
    return receipt.highest_sequence_id not in (0, highest) and receipt.HasField(
        "highest_sequence_id"
    )


def _receipt_ids(receipt: pb.CommandSendReceipt) -> str:
    if receipt.HasField("highest_sequence_id"):
        return f"{receipt.sequence_id}..{receipt.highest_sequence_id}"
    return str(receipt.sequence_id)


def _now_ms() -> int:
    return int(time.time() * 1000)
