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
no lock. Every frame is recorded in the :class:`~pulsar_spark.client.send_window.SendWindow`
before it is written, and the broker's receipts, which arrive in order, pop it from the head
on the connection's reader thread. When ``max_pending_messages`` messages are without a
receipt, the next frame waits (under a Condition) for receipts to make room, at most
``send_timeout`` seconds. Frames are written without waiting for receipts (pipelining). A
batch frame is written at once; unbatched frames are small, so they are gathered (up to
64 KiB, ``batch_max_messages`` frames or ``batch_max_delay_ms``, checked on send) and written
with one socket write, which also happens before any wait and on flush.

The open batch and its limits are :mod:`~pulsar_spark.client.batching`'s. A message too large
to share a batch travels alone, unbatched; if even compressed it does not fit the connection's
``max_message_size`` it is cut into chunks (:mod:`~pulsar_spark.client.chunking`).

With ``skip_stored``, messages whose sequence id is at or below the ``last_sequence_id`` the
broker confirmed the producer with are not sent: a broker with deduplication answers with the
highest id it has stored from an earlier producer of the same name, and would drop them. They
must not go out at all, because the broker judges a whole batch by its first sequence id: a
batch that mixed them with new messages would be dropped, new messages included, and batch
boundaries depend on timing, so a retry cannot be relied on to draw them where the failed
attempt did.

A lost connection, the broker closing the producer (the topic unloaded or moved, the broker
restarting), or a SEND_ERROR whose server error is retriable (an Apache broker refuses the
messages in flight with PersistenceError "fenced" while it unloads the topic; the producer is
then closed on the broker first, to free its name) is ridden through by the sending thread
at its next step: it looks the topic up again, creates the producer again under the same
name, learns the highest sequence id the broker stored under it (a deduplicating broker
reports it) and sends what is still without a receipt again, in order, with the original
sequence ids (:mod:`~pulsar_spark.client.send_window`), retrying with growing pauses until
``pulsar.client.operationTimeoutMs`` passes without success.
With an :class:`~pulsar_spark.client.failover.ActiveCluster` (a write given
``failover.secondaryServiceUrls``) those retries stop at the failover delay, and once the
cluster has been unreachable that long the producer is created on the next cluster under the
same name and sends there what is still without a receipt; what had one is never sent again.
A broker that still holds the producer on its previous connection (a connection lost on the
client's side only) refuses the name with ProducerBusy until it drops that connection: Apache
Pulsar pings it and drops it if unanswered. Java's client retries that refusal when it
reconnects, and so does this one (when creating a producer it stays final).

Any other failure is sticky and loud: any other SEND_ERROR (TopicTerminated, for one), a
receipt that does not match the oldest frame in flight, a timeout or a reconnect that gave up
makes the producer failed, and the error is raised by the next :meth:`~Producer.send`,
:meth:`~Producer.flush` or :meth:`~Producer.close`. A message either gets its receipt or
its sender sees an exception.

A producer given a ``schema`` registers it with the topic (CommandProducer's ``schema``) and
stamps the version the broker answers with on every message, as Java's producer does. A topic
whose schema does not accept it refuses the producer: :class:`IncompatibleSchemaError`, raised
by :meth:`Producer.create` before any message is sent and never retried.

With ``ProducerSettings.encryption`` each entry's compressed payload (a batch, a message
sent alone, or each chunk of one) is encrypted before it is sent
(:mod:`~pulsar_spark.protocol.crypto`), under one data key for the producer's life, and the
broker is told the producer encrypts.

One thread sends; receipts are handled on the connection's reader thread.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from types import TracebackType

from pulsar_spark.client.batching import BatchLimits, OpenBatch
from pulsar_spark.client.chunking import entry_size_limit, unbatched
from pulsar_spark.client.connection import Connection
from pulsar_spark.client.failover import FAILOVER_DELAY_OPTION, ActiveCluster
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.send_window import SendWindow, Sent
from pulsar_spark.client.settings import ProducerSettings
from pulsar_spark.common.retry import Retrier
from pulsar_spark.errors import (
    IncompatibleSchemaError,
    LocalProtocolError,
    ProducerBusyError,
    PulsarConnectionError,
    PulsarSparkError,
    RemoteProtocolError,
    RequestTimeoutError,
    RetriesExhaustedError,
    ServerError,
    server_error_for,
)
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.crypto import Encryptor
from pulsar_spark.protocol.encode import OutgoingColumns, OutgoingMessage, encode_records
from pulsar_spark.protocol.transactions import TxnId, in_transaction

log = logging.getLogger(__name__)

# Unbatched SEND frames are gathered up to this many bytes for one socket write.
_OUTBOX_BYTES = 64 * 1024


class Producer:
    """Publishes to one topic (or one partition, by its full ``-partition-N`` name).

    Create with :meth:`create`. Not thread-safe for concurrent senders; see the module
    docstring for batching, flow control, reconnects and failure handling.
    """

    def __init__(
        self,
        lookup: Lookup,
        topic: str,
        settings: ProducerSettings,
        opened: _Opened,
        *,
        initial_sequence_id: int,
        skip_stored: bool,
        schema: pb.Schema | None = None,
        txn: TxnId | None = None,
        failover: ActiveCluster | None = None,
    ) -> None:
        """Wrap a producer the broker has accepted; use :meth:`create` instead."""
        self.topic = topic
        self._txn = txn
        self._failover = failover
        self._schema = schema
        self._lookup = lookup
        self._settings = settings
        self._connection = opened.connection
        self._producer_id = opened.producer_id
        self._name = opened.name
        self._last_sequence_id_from_broker = opened.last_sequence_id
        self._next_sequence_id = initial_sequence_id
        self._window = SendWindow(
            f"producer {self._name} on {topic}",
            opened.last_sequence_id if skip_stored else -1,
        )
        self.reconnects = 0
        limits = BatchLimits.of(settings, entry_size_limit(opened.connection.max_message_size))
        encryption = settings.encryption
        self._encryptor = (
            None
            if encryption is None
            else Encryptor(dict(encryption.public_keys), random_bytes=os.urandom)
        )
        self._schema_version = opened.schema_version
        self._batch = OpenBatch(
            limits,
            topic=topic,
            producer_name=self._name,
            codec=settings.codec,
            schema_version=opened.schema_version,
            encryptor=self._encryptor,
        )
        # Copies of settings the per-message path reads, one attribute lookup each.
        self._unbatched = not settings.batching
        self._batch_messages = limits.max_messages
        self._batch_delay = limits.max_delay
        self._batch_bytes = limits.max_bytes
        self._outbox: list[bytes] = []
        self._outbox_size = 0
        self._outbox_messages = 0
        self._outbox_deadline = 0.0
        self._state = threading.Condition(threading.Lock())
        self._waiting = False
        self._sent = 0
        self._failure: PulsarSparkError | None = None
        self._lost: PulsarSparkError | None = None  # the connection is gone: reconnect
        self._closed = False

    @classmethod
    def create(
        cls,
        lookup: Lookup,
        topic: str,
        settings: ProducerSettings | None = None,
        *,
        name: str | None = None,
        initial_sequence_id: int = 0,
        skip_stored: bool = False,
        schema: pb.Schema | None = None,
        txn: TxnId | None = None,
        failover: ActiveCluster | None = None,
    ) -> Producer:
        """Look ``topic`` up, open a producer on its broker and wait until it is ready,
        retrying as a reconnect does.

        ``topic`` is a full name and must not be the root of a partitioned topic (open each
        ``-partition-N`` instead). ``name`` should be stable across retries of the same work
        for broker-side deduplication; without one the broker picks a name. ``skip_stored``
        leaves out the messages the broker reports as stored (see the module docstring); it
        is for producers that number the same messages the same way each time. ``schema`` is
        registered with the topic (None: bytes, no schema). With ``txn`` every message is
        published in that transaction, whose coordinator must already know the topic
        (ADD_PARTITION_TO_TXN, :mod:`~pulsar_spark.client.transactions`). With ``failover``
        the producer is created on its cluster (``lookup`` is not used), and moves on with it.
        """
        if initial_sequence_id < 0:
            raise ValueError("initial_sequence_id must be >= 0")
        settings = settings or ProducerSettings()
        encrypted = settings.encryption is not None
        if failover is None:
            opened = _open_retrying(lookup, topic, name, schema, encrypted)
        else:
            lookup, opened = failover.run(
                lambda on: (on, _open(on, topic, name, schema, encrypted)),
                f"creating producer {name or '(unnamed)'} on {topic}",
            )
        producer = cls(
            lookup,
            topic,
            settings,
            opened,
            initial_sequence_id=initial_sequence_id,
            skip_stored=skip_stored,
            schema=schema,
            txn=txn,
            failover=failover,
        )
        opened.connection.register_producer(opened.producer_id, producer)
        return producer

    # --- properties ------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The producer name the broker confirmed (the requested one, or one it chose)."""
        return self._name

    @property
    def producer_id(self) -> int:
        """The id of this producer on its current connection (in SEND, receipts, errors)."""
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
        return self._window.skipped

    @property
    def messages_acknowledged(self) -> int:
        """Messages the broker has confirmed with a receipt (or reported as stored)."""
        return self._window.confirmed

    # --- sending ---------------------------------------------------------------------------

    def send(self, message: OutgoingMessage) -> None:
        """Queue ``message``; it is written with its batch, without waiting for a receipt.

        Blocks only while ``max_pending_messages`` messages are without a receipt.
        """
        self._check_usable()
        sequence_id = self._next_sequence_id
        self._next_sequence_id = sequence_id + 1
        if self._window.stored(sequence_id, 1):
            return
        value = message.value
        if self._unbatched or (value is not None and len(value) > self._batch_bytes):
            self._send_batch()
            self._send_alone(message, sequence_id)
            return
        if self._batch.add(message, sequence_id):
            self._send_batch()

    def send_columns(self, columns: OutgoingColumns) -> None:
        """Queue every row of ``columns``, in order: the same as :meth:`send` for each row's
        message, with the batch records of many rows built at once.
        """
        self._check_usable()
        first = self._next_sequence_id
        self._next_sequence_id = first + len(columns)
        stored = self._window.stored(first, len(columns))
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
        self._check_usable()
        self._send_batch()
        self._push()
        self._wait_for(lambda: not self._window, "flush")

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
        highest = receipt.highest_sequence_id if receipt.HasField("highest_sequence_id") else None
        with self._state:
            try:
                self._window.confirm(receipt.sequence_id, highest)
            except RemoteProtocolError as exc:
                self._fail(exc)
                return
            if self._waiting:
                self._state.notify_all()

    def on_send_error(self, error: pb.CommandSendError) -> None:
        failure = server_error_for(
            error.error,
            f"broker refused message {error.sequence_id} from producer {self._name} on "
            f"{self.topic}: {error.message}",
        )
        with self._state:
            if failure.retriable:
                self._lost = self._lost or failure  # the sending thread reconnects
                self._state.notify_all()
                return
            self._fail(failure)

    def on_closed(self, error: PulsarSparkError) -> None:
        with self._state:
            if error.retriable:
                self._lost = error  # the sending thread reconnects at its next step
                self._state.notify_all()
                return
            self._fail(error)

    # --- internals -------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._failure is not None or self._closed:
            self._raise_unusable()
        if self._lost is not None:
            self._reconnect()

    def _batch_rows(self, columns: OutgoingColumns, first_sequence_id: int) -> None:
        """Add ``columns`` to the open batch, sending each batch they fill."""
        if not len(columns):
            return
        records = encode_records(columns, first_sequence_id)
        start = 0
        while start < len(records):
            added, full = self._batch.add_records(records, start)
            start += added
            if full:
                self._send_batch()

    def _send_batch(self) -> None:
        """Write the open batch, if any. Any failure here loses its messages: it is sticky."""
        if not self._batch:
            return
        try:
            self._write(self._batch.take(_now_ms()))
        except PulsarSparkError as exc:
            with self._state:
                self._fail(exc)
            raise

    def _send_alone(self, message: OutgoingMessage, sequence_id: int) -> None:
        """Write one message unbatched, in chunks if it does not fit one entry."""
        for sent in unbatched(
            message,
            sequence_id,
            producer_name=self._name,
            publish_time=_now_ms(),
            codec=self._settings.codec,
            max_entry_size=self._batch.limits.max_entry_size,
            schema_version=self._schema_version,
            encryptor=self._encryptor,
        ):
            self._write(sent)

    def _frame(self, sent: Sent) -> bytes:
        return commands.send(
            producer_id=self._producer_id,
            sequence_id=sent.sequence_id,
            num_messages=sent.num_messages,
            highest_sequence_id=sent.highest_sequence_id,
            is_chunk=sent.is_chunk,
            section=sent.section,
            txn=self._txn,
        )

    def _write(self, sent: Sent) -> None:
        """Record ``sent`` in flight (waiting for room if needed) and queue its frame."""
        messages = sent.messages
        limit = self._settings.max_pending_messages
        window = self._window
        if self._outbox and window.pending + messages > limit:
            self._push()  # the receipts to wait for are for frames still in the outbox
        if window.pending and window.pending + messages > limit:
            self._wait_for(lambda: not window.pending or window.pending + messages <= limit, "send")
        if self._txn is not None:
            sent = dataclasses.replace(sent, section=in_transaction(sent.section, self._txn))
        with self._state:
            window.add(sent)
        if not self._outbox:
            self._outbox_deadline = time.monotonic() + self._batch_delay
        self._outbox.append(self._frame(sent))
        self._outbox_size += len(self._outbox[-1])
        self._outbox_messages += messages
        if (
            not self._unbatched
            or self._outbox_size >= _OUTBOX_BYTES
            or len(self._outbox) >= self._batch_messages
            or time.monotonic() >= self._outbox_deadline
        ):
            self._push()

    def _push(self) -> None:
        """Write the queued frames with one socket write. A lost connection leads to a
        reconnect that sends them again; any other failure is sticky."""
        frames, messages = self._outbox, self._outbox_messages
        if not frames:
            return
        self._outbox, self._outbox_size, self._outbox_messages = [], 0, 0
        try:
            self._connection.send(frames[0] if len(frames) == 1 else b"".join(frames))
        except PulsarSparkError as exc:
            if not exc.retriable:
                with self._state:
                    self._fail(exc)
                raise
            with self._state:
                self._lost = self._lost or exc
            self._reconnect()  # sends everything in the window again, these frames too
            return
        self._sent += messages

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        """Wait until ``ready()``, reconnecting if the connection is lost meanwhile; raise if
        the producer fails or ``send_timeout`` passes."""
        timeout = self._settings.send_timeout
        deadline = time.monotonic() + timeout
        while True:
            with self._state:
                self._waiting = True
                try:
                    while not ready() and self._lost is None:
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
                if self._lost is None:
                    return
            self._reconnect()
            deadline = time.monotonic() + timeout

    def _reconnect(self) -> None:
        """Create the producer again and send what has no receipt (see the module docstring);
        a failure here is sticky."""
        retrier = self._reconnect_retrier()
        log.warning("producer %s on %s: reconnecting after: %s", self._name, self.topic, self._lost)
        if isinstance(self._lost, ServerError) and not self._connection.closed:
            # Refused a message: the broker still holds the producer, and its name.
            self._release()
        while True:
            self._connection.unregister_producer(self._producer_id)
            self._outbox, self._outbox_size, self._outbox_messages = [], 0, 0
            try:
                encrypted = self._encryptor is not None
                self._resend(_open(self._lookup, self.topic, self._name, self._schema, encrypted))
            except PulsarSparkError as exc:
                with self._state:
                    self._lost = exc
                try:
                    # ProducerBusy: the broker still holds this producer on its previous
                    # connection, which it checks and drops if dead (Apache Pulsar), or which
                    # goes when the broker notices; Java's client retries it on reconnect too.
                    retrier.failed(
                        exc, retriable=exc.retriable or isinstance(exc, ProducerBusyError)
                    )
                except RetriesExhaustedError as final:
                    if self._failover is None or not self._failover.leave(self._lookup):
                        with self._state:
                            self._fail(final)
                        raise
                    self._lookup = self._failover.lookup
                    retrier = self._reconnect_retrier()
                except PulsarSparkError as final:
                    with self._state:
                        self._fail(final)
                    raise
                continue
            self.reconnects += 1
            return

    def _reconnect_retrier(self) -> Retrier:
        what = (
            f"reconnecting producer {self._name} on {self.topic} with "
            f"{self._window.pending} message(s) without receipt"
        )
        if self._failover is None:
            return Retrier(what, self._lookup.timeout)
        limit = self._failover.clusters.retry_limit(self._lookup.timeout)
        return Retrier(what, limit, FAILOVER_DELAY_OPTION)

    def _resend(self, opened: _Opened) -> None:
        """Switch to the new producer and send again what the broker does not have."""
        with self._state:
            resend = self._window.resend_after(opened.last_sequence_id)
            self._connection, self._producer_id = opened.connection, opened.producer_id
            self._lost = None
        opened.connection.register_producer(opened.producer_id, self)
        if resend:
            opened.connection.send(b"".join(self._frame(sent) for sent in resend))
            self._sent += sum(sent.messages for sent in resend)

    def _timeout_error(self, what: str, timeout: float) -> RequestTimeoutError:
        return RequestTimeoutError(
            f"{what} on producer {self._name} for {self.topic}: {self._window.pending} "
            f"message(s) still without a receipt from broker {self._connection.address} after "
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
                    timeout=self._lookup.timeout,
                )
        except PulsarConnectionError as exc:
            # The broker drops a producer with its connection: closed either way.
            log.info(
                "producer %s on %s closed with its connection: %s", self._name, self.topic, exc
            )
        except PulsarSparkError as exc:
            if not quiet:
                raise
            log.warning("could not close producer %s on %s: %s", self._name, self.topic, exc)
        finally:
            self._connection.unregister_producer(self._producer_id)


class _Opened:
    """A producer the broker accepted: where, under which id and name, what it stored, and the
    version of its schema (None without one, or from a broker that keeps no schemas)."""

    def __init__(
        self,
        connection: Connection,
        producer_id: int,
        name: str,
        last: int,
        schema_version: bytes | None = None,
    ) -> None:
        self.connection = connection
        self.producer_id = producer_id
        self.name = name
        self.last_sequence_id = last
        self.schema_version = schema_version


def _open(
    lookup: Lookup, topic: str, name: str | None, schema: pb.Schema | None, encrypted: bool
) -> _Opened:
    connection = lookup.connect_to_owner(topic)
    producer_id = connection.new_id()
    try:
        success = connection.request(
            lambda rid: commands.producer(
                topic=topic,
                producer_id=producer_id,
                request_id=rid,
                producer_name=name,
                schema=schema,
                encrypted=encrypted,
            ),
            what=f"create producer on {topic}",
            timeout=lookup.timeout,
        ).producer_success
    except IncompatibleSchemaError as exc:
        kind = pb.Schema.Type.Name(schema.type) if schema is not None else "no"
        raise IncompatibleSchemaError(
            f"topic {topic} refused the {kind} schema of this write, so nothing was sent to it "
            f"(the broker said: {exc.server_message})"
        ) from exc
    confirmed = success.producer_name or name
    if not confirmed:
        raise RemoteProtocolError(
            f"the broker named no producer for {topic} and none was requested"
        )
    version = success.schema_version if schema is not None and success.schema_version else None
    return _Opened(connection, producer_id, confirmed, success.last_sequence_id, version)


def _open_retrying(
    lookup: Lookup, topic: str, name: str | None, schema: pb.Schema | None, encrypted: bool
) -> _Opened:
    retrier = Retrier(f"creating producer {name or '(unnamed)'} on {topic}", lookup.timeout)
    while True:
        try:
            return _open(lookup, topic, name, schema, encrypted)
        except PulsarSparkError as exc:
            retrier.failed(exc)


def _now_ms() -> int:
    return int(time.time() * 1000)
