"""The bounded range reader: every message of one partition between two positions, once.

This module does the reading's I/O (subscribing, flow, reconnects, decryption); what becomes
of the entries received, up to the columns handed on, is the pure stage of
:mod:`pulsar_spark.protocol.read_stage`.

How this works
--------------
The reader subscribes a non-durable Exclusive consumer with ``start_message_id`` = the start
position. Brokers begin delivery at the start *entry* itself (Apache Pulsar places the cursor
just before it; pulsar-lite delivers it inclusively), so the reader filters on the client:
entries before the start are dropped, and inside the start entry's batch so are indexes before
(inclusive start) or up to (exclusive start) the start's batch index.

Flow control (:mod:`pulsar_spark.client.flow_control`) keeps at most ``queue_size`` messages,
and at most 16 MiB, coming ahead of the reader, in whatever unit the broker counts permits;
with each grant the reader acknowledges cumulatively what it has read (some brokers stall or
re-send while large windows sit unacknowledged).

Brokers may deliver an entry twice (pulsar-lite re-dispatches unacknowledged entries when new
permits arrive). Within a partition ids only grow, so any entry at or below the last one
handled is a duplicate and dropped; its permits still count as consumed.

If nothing arrives for ``nudge_interval`` while the end is not reached, the reader sends one
extra permit, which restarts a stalled dispatch; while the silence lasts the wait doubles, up
to ``max_nudge_interval``, so a quiet broker is not flooded with permits. If nothing arrives
for ``poll_timeout``, it raises: a range that cannot be completed is an error, never a silently
short result.

A lost connection or a broker closing the consumer (an unload, a restart) does not end the
read: the reader looks the partition up again and subscribes at the last entry it handled,
with growing pauses (:mod:`pulsar_spark.common.retry`), until
``pulsar.client.operationTimeoutMs`` passes without a new entry.

Reading stops after the end position (inclusive; an end with batch index -1 covers its whole
entry). A chunked message is delivered once its last chunk arrives, with that chunk's id, by
the range its first chunk lies in: a range that ends inside one reads on to its last chunk,
and the range after it never assembles that message again (its first chunk lies before the
start, and later chunks without their first are discarded).
Markers (replication, transactions) and messages whose ``ack_set`` bit is cleared (already
acknowledged within a batch) are skipped. The subscription is removed when the reader is done.

An encrypted entry (its metadata names encryption keys) is decrypted as it arrives, with the
private keys of ``ReaderSettings.decryption`` (:mod:`~pulsar_spark.protocol.crypto`), and
then decompressed and decoded with its plain neighbours, as any other entry (each chunk of a
chunked message is decrypted on its own, then they are joined). One that none of the keys
opens fails the read, is skipped, or comes out as one row holding its payload still
encrypted, as the decryption's failure action says.

A start that no longer exists shows in the first entry delivered: retention removes whole
ledgers, and a broker places a cursor that points into a removed ledger at the first entry that
is left, in a later ledger. The reader reports such a first entry to ``on_start_gone``, if given,
before yielding anything, and goes on reading what is left when that returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.flow_control import FlowControl, counts_entries
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.settings import ReaderDecryption
from pulsar_spark.common.retry import Retrier
from pulsar_spark.errors import (
    CryptoError,
    PollTimeoutError,
    PulsarConnectionError,
    PulsarSparkError,
    RequestTimeoutError,
    ServerError,
)
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.chunks import is_chunk
from pulsar_spark.protocol.crypto import CryptoFailureAction, Decryptor, is_encrypted
from pulsar_spark.protocol.decode import entry_info
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.payload import parse_payload_section
from pulsar_spark.protocol.read_stage import RangeAssembler, RawEntry, ReadRange
from pulsar_spark.protocol.single_runs import single

log = logging.getLogger(__name__)


DEFAULT_QUEUE_SIZE = 50_000
"""Messages the broker may send ahead of the reader (``pulsar.reader.receiverQueueSize``)."""


@dataclass(frozen=True, slots=True)
class ReaderSettings:
    queue_size: int = DEFAULT_QUEUE_SIZE
    poll_timeout: float = 120.0
    nudge_interval: float = 0.02
    max_nudge_interval: float = 0.5
    request_timeout: float = 30.0
    # No keys: an encrypted message fails the read.
    decryption: ReaderDecryption = field(default_factory=ReaderDecryption)


StartGone = Callable[[MessageId], None]
"""Told the id of the first entry delivered, when it lies in a later ledger than the start."""


class RangeReader:
    """Iterate over the :class:`MessageColumns` of a :class:`ReadRange`: runs of one-message
    entries, groups of batched entries, or single entries, as the read stage gathers them."""

    def __init__(
        self,
        lookup: Lookup,
        read_range: ReadRange,
        settings: ReaderSettings | None = None,
        on_start_gone: StartGone | None = None,
    ) -> None:
        self.lookup = lookup
        self.range = read_range
        self.settings = settings or ReaderSettings()
        self.on_start_gone = on_start_gone
        self.duplicates_dropped = 0
        self.nudges = 0
        self.reconnects = 0
        self.undecryptable_discarded = 0  # encrypted entries skipped (cryptoFailureAction)
        self._decryptor: Decryptor | None = None  # made at the first encrypted entry

    def __iter__(self) -> Iterator[MessageColumns]:
        stage = RangeAssembler(self.range, self._decrypt)
        entries = self.entries(pending_chunks=lambda: stage.pending_chunks)
        try:
            for raw in self._decrypting(entries, self.range.end.entry):
                yield from stage.add(raw)
        except PulsarSparkError:
            yield from stage.finish()  # what was read before the failure comes first
            raise
        yield from stage.finish()

    def entries(
        self,
        pending_chunks: Callable[[], bool] = lambda: False,
        stopped: Callable[[], bool] = lambda: False,
    ) -> Generator[RawEntry, None, None]:
        """Every entry of the range once, in order, undecoded.

        After the end entry, reading goes on only while ``pending_chunks()`` says a chunked
        message that started inside the range is still incomplete. Reading ends early,
        without an error, when ``stopped()`` says so while the broker is silent (a thread
        reading ahead uses it to be stopped from another). A lost connection, or the
        broker closing the consumer (the topic moving to another broker), is ridden through:
        the reader looks the partition up again and subscribes at the last entry it handled
        (which, delivered again, is dropped as a duplicate), until the request timeout passes
        without a new entry.
        """
        if self.range.is_empty:
            return
        retrier = Retrier(f"reading {self.range.topic}", self.settings.request_timeout)
        progress = _Progress()
        while True:
            try:
                with Consumer(
                    self.lookup,
                    self.range.topic,
                    progress.resume_at(self.range.start),
                    timeout=self.settings.request_timeout,
                ) as consumer:
                    for raw in self._entries(consumer, pending_chunks, stopped, progress):
                        retrier.progressed()
                        yield raw
            except (PulsarConnectionError, ServerError, RequestTimeoutError) as exc:
                retrier.failed(exc)
                self.reconnects += 1
            else:
                return

    def _entries(
        self,
        consumer: Consumer,
        pending_chunks: Callable[[], bool],
        stopped: Callable[[], bool],
        progress: _Progress,
    ) -> Iterator[RawEntry]:
        flow = FlowControl(self.settings.queue_size, counts_entries(consumer.server_version))
        consumer.flow(flow.first_grant())
        idle_since = time.monotonic()
        wait = self.settings.nudge_interval
        while progress.ended_at is None or pending_chunks():
            if (
                progress.ended_at is not None
                and time.monotonic() - progress.ended_at >= self.settings.poll_timeout
            ):
                log.warning("%s: dropping an incomplete chunked message", self.range.topic)
                return
            delivery = consumer.receive(wait)
            if delivery is None:
                if stopped():
                    return
                if progress.ended_at is None:
                    self._on_idle(idle_since, progress.last)
                consumer.flow(flow.grant(1))
                wait = min(wait * 2, self.settings.max_nudge_interval)
                continue
            idle_since = time.monotonic()
            wait = self.settings.nudge_interval
            payload = delivery.payload or b""
            raw = RawEntry.of(delivery.message, parse_payload_section(payload))
            permits = flow.on_entry(
                raw.message_count, len(payload), consumer.queued_bytes, consumer.queued_entries
            )
            if permits:
                # The ack goes first: pulsar-lite stops dispatching when an ack reaches it
                # while a large window is open, and sends unacknowledged entries again on
                # each Flow; Apache Pulsar takes either order.
                consumer.ack_cumulative(
                    MessageId(*raw.entry, partition=raw.message.message_id.partition)
                )
                consumer.flow(permits)
            last = progress.last
            if last is not None and raw.entry <= last:
                self.duplicates_dropped += 1
                continue
            if last is None and self.on_start_gone and _start_gone(self.range.start, raw.entry):
                self.on_start_gone(MessageId(*raw.entry, -1, raw.message.message_id.partition))
            progress.handled(raw)
            if progress.ended_at is None and self.range.past_end(raw.entry):
                progress.ended_at = time.monotonic()
            yield raw
            idle_since = time.monotonic()  # time the caller spent is not the broker's silence

    def _on_idle(self, idle_since: float, last: tuple[int, int] | None) -> None:
        idle = time.monotonic() - idle_since
        if idle >= self.settings.poll_timeout:
            raise PollTimeoutError(
                f"reading {self.range.topic}: no message for {idle:.0f}s before reaching the end "
                f"position {self.range.end} (last entry read: {last}); see pollTimeoutMs"
            )
        self.nudges += 1

    def _decrypting(
        self, entries: Iterator[RawEntry], end: tuple[int, int]
    ) -> Iterator[RawEntry | MessageColumns]:
        """``entries``, each encrypted one up to ``end`` (not a chunk) decrypted so that it is
        decoded with its plain neighbours, or as its failure action says: left out, or one
        row left encrypted."""
        for raw in entries:
            metadata = raw.section.metadata
            if not is_encrypted(metadata) or raw.entry > end or is_chunk(metadata):
                yield raw
                continue
            opened = self._decrypt(raw)
            if isinstance(opened, bytes):
                yield _decrypted(raw, opened)
            elif opened is not None:
                yield opened

    def _decrypt(self, raw: RawEntry) -> bytes | MessageColumns | None:
        """An encrypted entry's payload decrypted (still compressed); when it cannot be, as
        ``cryptoFailureAction`` says: an error, None (discarded) or its one row left encrypted."""
        decryption = self.settings.decryption
        if self._decryptor is None:
            self._decryptor = _decryptor(decryption.private_keys)
        try:
            return self._decryptor.decrypt(raw.section.metadata, raw.section.payload)
        except CryptoError as exc:
            ledger_id, entry_id = raw.entry
            where = f"{self.range.topic} entry {ledger_id}:{entry_id}"
            if decryption.action is CryptoFailureAction.FAIL:
                raise CryptoError(f"{where}: {exc}") from None
            if decryption.action is CryptoFailureAction.DISCARD:
                self.undecryptable_discarded += 1
                log.warning("%s: discarded (cryptoFailureAction DISCARD): %s", where, exc)
                return None
        return _left_encrypted(raw)


_DECRYPTORS: dict[tuple[tuple[str, bytes], ...], Decryptor] = {}
_MAX_DECRYPTORS = 16


def _decryptor(private_keys: tuple[tuple[str, bytes], ...]) -> Decryptor:
    """The process's decryptor for these keys: loading an RSA private key takes tens of ms,
    and a worker reads many ranges with the same keys, whose data keys it then unwraps once."""
    found = _DECRYPTORS.get(private_keys)
    if found is None:
        if len(_DECRYPTORS) >= _MAX_DECRYPTORS:
            _DECRYPTORS.clear()
        found = _DECRYPTORS[private_keys] = Decryptor(dict(private_keys))
    return found


def _decrypted(raw: RawEntry, payload: bytes) -> RawEntry:
    """An encrypted entry (not a chunk) with its payload decrypted and its metadata without
    keys, so that it takes the plain paths."""
    metadata = pb.MessageMetadata()
    metadata.CopyFrom(raw.section.metadata)
    metadata.ClearField("encryption_keys")
    return raw._replace(section=raw.section._replace(metadata=metadata, payload=payload))


def _left_encrypted(raw: RawEntry) -> MessageColumns:
    """An encrypted entry as one row whose value is its payload as received (encrypted and
    compressed, a whole batch for a batch), flagged: the official consumers' CONSUME."""
    metadata = raw.section.metadata
    message_id = raw.message.message_id
    info = entry_info(metadata, message_id.ledgerId, message_id.entryId, message_id.partition)
    shown = pb.MessageMetadata()
    shown.CopyFrom(metadata)
    shown.ClearField("null_value")  # the payload is there, encrypted
    columns = single(info, shown, raw.section.payload)
    return replace(columns, encrypted=np.ones(1, dtype=np.bool_))


class _Progress:
    """How far a read got, across reconnects: the last entry handled and when the end was
    passed."""

    def __init__(self) -> None:
        self.last: tuple[int, int] | None = None
        self.partition = -1
        self.ended_at: float | None = None

    def handled(self, raw: RawEntry) -> None:
        self.last = raw.entry
        self.partition = raw.message.message_id.partition

    def resume_at(self, start: MessageId) -> MessageId:
        """Where to subscribe: the start, or again at the last entry handled."""
        if self.last is None:
            return _subscribe_position(start)
        return MessageId(*self.last, -1, self.partition)


def _subscribe_position(start: MessageId) -> MessageId:
    """Where to place the broker's cursor: at the start entry, never at a negative entry id
    (an exclusive start "after entry -1" of a ledger means that ledger's first entry)."""
    if start.is_earliest or start.entry_id >= 0:
        return start
    return MessageId(start.ledger_id, 0, -1, start.partition)


def _start_gone(start: MessageId, first: tuple[int, int]) -> bool:
    """Whether a read from ``start`` whose first entry delivered is ``first`` began after the
    start's ledger, which therefore no longer exists."""
    return not start.is_earliest and first[0] > start.ledger_id
