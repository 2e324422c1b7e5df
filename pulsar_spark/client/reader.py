"""The bounded range reader: every message of one partition between two positions, once.

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
with growing pauses (:mod:`pulsar_spark.client.retry`), until
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
from typing import NamedTuple

import numpy as np

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.flow_control import FlowControl, counts_entries
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.retry import Retrier
from pulsar_spark.client.settings import ReaderDecryption
from pulsar_spark.errors import (
    CryptoError,
    PollTimeoutError,
    PulsarConnectionError,
    PulsarSparkError,
    RequestTimeoutError,
    ServerError,
)
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.chunks import ChunkAssembler, is_chunk
from pulsar_spark.protocol.crypto import CryptoFailureAction, Decryptor, is_encrypted
from pulsar_spark.protocol.decode import (
    decode_entries,
    decode_entry,
    decode_group,
    entry_info,
    is_batch,
)
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns
from pulsar_spark.protocol.payload import PayloadSection, parse_payload_section
from pulsar_spark.protocol.single_runs import SingleRun, single

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ReadRange:
    """What to read from one partition: (start, end], [start, end], as the flags say."""

    topic: str
    start: MessageId
    end: MessageId
    start_inclusive: bool = True
    end_inclusive: bool = True

    @property
    def is_empty(self) -> bool:
        """Whether no message id lies in the range."""
        return _is_empty(self)


class RawEntry(NamedTuple):
    """One entry as delivered: its MESSAGE command and parsed (still compressed) payload.

    ``entry`` is the (ledger id, entry id) of the command's message id, read once: the reader
    compares it several times per entry. A tuple, because one is made for every entry."""

    message: pb.CommandMessage
    section: PayloadSection
    entry: tuple[int, int]

    @classmethod
    def of(cls, message: pb.CommandMessage, section: PayloadSection) -> RawEntry:
        message_id = message.message_id
        return cls(message, section, (message_id.ledgerId, message_id.entryId))

    @property
    def message_count(self) -> int:
        """Messages this entry holds, as flow permits count them."""
        metadata = self.section.metadata
        return metadata.num_messages_in_batch if is_batch(metadata) else 1


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
    """Iterate over :class:`MessageColumns` (one per entry) of a :class:`ReadRange`."""

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
        bounds = _bounds(self.range)
        run = SingleRun()
        group = _BatchGroup(bounds)
        try:
            yield from self._columns(run, group, bounds)
        except PulsarSparkError:
            yield from _pending(run, group)  # what was read before the failure comes first
            raise
        yield from _pending(run, group)

    def _columns(
        self, run: SingleRun, group: _BatchGroup, bounds: tuple[Key, Key]
    ) -> Iterator[MessageColumns]:
        assembler = ChunkAssembler()
        end = self.range.end.entry
        first, last = bounds
        entries = self.entries(pending_chunks=lambda: assembler.pending > 0)
        for raw in self._decrypting(entries, end):
            if isinstance(raw, MessageColumns):  # an entry left encrypted (CONSUME)
                yield from _pending(run, group)
                yield from _clipped(raw, first, last)
                continue
            past_end = raw.entry > end
            if not past_end and _plain_single(raw):
                # one message, not chunked: decoded together with its neighbours
                yield from group.take()
                if first <= (*raw.entry, -1) <= last:
                    run.add(*_decompressed(raw, raw.section.payload))
                    if len(run) >= MAX_RUN or run.size >= MAX_RUN_BYTES:
                        yield run.take()
                continue
            if len(run):
                yield run.take()
            if not past_end and _plain_batch(raw):
                group.add(raw)
                if group.full():
                    yield from group.take()
                continue
            yield from group.take()
            if past_end and not _continues_chunk(raw):
                continue
            if _chunk_before_start(raw, self.range):
                continue  # its message is the previous range's, which finished it
            columns = self._decode(raw, assembler)
            if columns is None or not columns.count:
                continue
            if past_end:
                yield columns  # a chunked message that began inside the range ends here
                continue
            yield from _clipped(columns, first, last)

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
        if _is_empty(self.range):
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
            if progress.ended_at is None and _past_end(raw.entry, self.range):
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

    def _decode(self, raw: RawEntry, assembler: ChunkAssembler) -> MessageColumns | None:
        section = raw.section
        metadata = section.metadata
        if metadata.HasField("marker_type"):
            return None
        payload = section.payload
        if is_encrypted(metadata):
            # Each entry, a chunk too, is encrypted on its own: decrypt, then join chunks.
            opened = self._decrypt(raw)
            if opened is None or isinstance(opened, MessageColumns):
                return opened
            payload = opened
        if is_chunk(metadata):
            assembled = assembler.add(metadata, payload)
            if assembled is None:
                return None
            payload = assembled.payload
        return _acknowledged(raw, decode_entry(*_decompressed(raw, payload)))

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


MAX_RUN = 8192
"""One-message entries decoded together at most (see :mod:`pulsar_spark.protocol.single_runs`)."""
MAX_RUN_BYTES = 8 * 1024 * 1024
"""Value bytes of one-message entries decoded together at most."""
GROUP_MESSAGES = 8000
"""Batched entries are decoded together (see :mod:`pulsar_spark.protocol.decode`) until they
hold this many messages: the fixed cost of decoding a group is then small per message, whatever
the size of the producer's batches (batches of one message each, from a producer sending
slowly, are read together by the thousand)."""
MAX_GROUP_BYTES = 4 * 1024 * 1024
"""Payload bytes (as received) of batched entries decoded together at most."""


def group_full(messages: int, size: int) -> bool:
    """Whether a group of batched entries holding ``messages`` messages and ``size`` payload
    bytes is to be decoded now."""
    return messages >= GROUP_MESSAGES or size >= MAX_GROUP_BYTES


class _BatchGroup:
    """Batched entries (not chunks, not markers) waiting to be decoded together. They come
    out as one :class:`MessageColumns` when every message of them is read (see
    :func:`~pulsar_spark.protocol.decode.decode_group`), else entry by entry, each clipped to
    the range and without the messages its ``ack_set`` has acknowledged."""

    def __init__(self, bounds: tuple[Key, Key]) -> None:
        self._first, self._last = bounds
        self._entries: list[RawEntry] = []
        self._messages = 0
        self._size = 0

    def add(self, raw: RawEntry) -> None:
        self._entries.append(raw)
        self._messages += raw.message_count
        self._size += len(raw.section.payload)

    def full(self) -> bool:
        return group_full(self._messages, self._size)

    def take(self) -> Iterator[MessageColumns]:
        entries, self._entries, self._messages, self._size = self._entries, [], 0, 0
        if not entries:
            return
        raws = [_decompressed(raw, raw.section.payload) for raw in entries]
        if self._whole(entries):
            group = decode_group(raws)
            if group is not None:
                yield group
                return
        decoded = decode_entries(raws)
        for raw, columns in zip(entries, decoded, strict=True):
            clipped = _clip(_acknowledged(raw, columns), self._first, self._last)
            if clipped is not None and clipped.count:
                yield clipped

    def _whole(self, entries: list[RawEntry]) -> bool:
        """Whether every message of ``entries`` is read: none lies outside the range, and none
        is acknowledged by its entry's ``ack_set``."""
        last = entries[-1]
        return (
            self._first <= (*entries[0].entry, 0)
            and (*last.entry, last.message_count - 1) <= self._last
            and not any(raw.message.ack_set for raw in entries)
        )


def _pending(run: SingleRun, group: _BatchGroup) -> Iterator[MessageColumns]:
    """What ``run`` and ``group`` hold (at most one of them holds anything)."""
    yield from group.take()
    if len(run):
        yield run.take()


def _acknowledged(raw: RawEntry, columns: MessageColumns) -> MessageColumns:
    """``columns`` without the messages the entry's ``ack_set`` says are acknowledged."""
    ack_set = raw.message.ack_set
    return _apply_ack_set(columns, list(ack_set)) if ack_set else columns


def _plain_batch(raw: RawEntry) -> bool:
    """A batched entry that is not a chunk or a marker (nor encrypted: those up to the end are
    decrypted before, see :meth:`RangeReader._decrypting`)."""
    metadata = raw.section.metadata
    return is_batch(metadata) and not (is_chunk(metadata) or metadata.HasField("marker_type"))


def _plain_single(raw: RawEntry) -> bool:
    """An entry of one message that is not a chunk, a marker or partly acknowledged (nor
    encrypted: those up to the end are decrypted before)."""
    metadata = raw.section.metadata
    return not (
        is_batch(metadata)
        or is_chunk(metadata)
        or metadata.HasField("marker_type")
        or raw.message.ack_set
    )


def _decompressed(raw: RawEntry, payload: bytes) -> tuple[EntryInfo, pb.MessageMetadata, bytes]:
    """The entry's fields, metadata and ``payload`` (its own or a reassembled one) decompressed."""
    metadata = raw.section.metadata
    message_id = raw.message.message_id
    info = entry_info(metadata, message_id.ledgerId, message_id.entryId, message_id.partition)
    data = compression.decompress(metadata.compression, payload, metadata.uncompressed_size)
    return info, metadata, data


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


Key = tuple[int, int, int]


def _first_key(read_range: ReadRange) -> Key:
    start = read_range.start
    return start.first_key() if read_range.start_inclusive else start.key_after()


def _last_key(read_range: ReadRange) -> Key:
    end = read_range.end
    return end.last_key() if read_range.end_inclusive else end.key_before()


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


def _continues_chunk(raw: RawEntry) -> bool:
    metadata = raw.section.metadata
    return is_chunk(metadata) and metadata.chunk_id > 0


def _chunk_before_start(raw: RawEntry, read_range: ReadRange) -> bool:
    """Whether ``raw`` is a chunk (never batched) that lies before the range's first message.

    Such a chunk must not reach the assembler: the range that ended on it completed its
    message, and assembling it here would deliver that message a second time.
    """
    if read_range.start.is_earliest or not is_chunk(raw.section.metadata):
        return False
    return (*raw.entry, -1) < _first_key(read_range)


def _is_empty(read_range: ReadRange) -> bool:
    if read_range.end.is_earliest:
        return True
    if read_range.start.is_earliest:
        return False
    return _first_key(read_range) > _last_key(read_range)


def _past_end(entry: tuple[int, int], read_range: ReadRange) -> bool:
    return entry >= read_range.end.entry


def _bounds(read_range: ReadRange) -> tuple[Key, Key]:
    """The keys of the range's first and last messages (an earliest start: before any key)."""
    first = (-1, -1, -1) if read_range.start.is_earliest else _first_key(read_range)
    return first, _last_key(read_range)


def _clip(columns: MessageColumns, first: Key, last: Key) -> MessageColumns | None:
    """Keep only the rows from key ``first`` to ``last`` (only the first and last entries of
    a range need it)."""
    entry = (columns.entry.ledger_id, columns.entry.entry_id)
    if entry < first[:2] or entry > last[:2]:
        return None
    index = columns.batch_index
    lo = int(np.searchsorted(index, first[2], side="left")) if entry == first[:2] else 0
    hi = int(np.searchsorted(index, last[2], side="right")) if entry == last[:2] else columns.count
    return columns.slice(lo, hi) if lo < hi else None


def _clipped(columns: MessageColumns, first: Key, last: Key) -> Iterator[MessageColumns]:
    clipped = _clip(columns, first, last)
    if clipped is not None and clipped.count:
        yield clipped


def _apply_ack_set(columns: MessageColumns, ack_set: list[int]) -> MessageColumns:
    """Drop batch indexes whose bit is cleared (java.util.BitSet words: bit i in word i/64)."""
    words = np.array(ack_set, dtype=np.int64).view(np.uint64)
    index = columns.batch_index.astype(np.int64)
    word = index // 64
    present = word < len(words)
    bits = np.zeros(len(index), dtype=np.bool_)
    bits[present] = (words[word[present]] >> (index[present] % 64).astype(np.uint64)) & 1 == 1
    return columns if bits.all() else columns.take(np.flatnonzero(bits))
