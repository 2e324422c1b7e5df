"""From the entries of one partition, in order, to the columns of one range: the pure middle of
reading, between the range reader's I/O and Arrow.

How this works
--------------
A :class:`ReadRange` names the messages to read by their keys ``(ledger, entry, batch index)``:
:meth:`ReadRange.bounds` gives the first and the last key, both inclusive, and
:func:`kept_indexes` is the one rule that cuts an entry to them. The range reader
(:mod:`pulsar_spark.client.reader`) clips what it decodes by that rule, and the driver's
counting of messages (:mod:`pulsar_spark.source.counting`) counts by it, so the two agree on
every message.

:class:`RangeAssembler` takes the entries the reader receives (:class:`RawEntry`, already
decrypted where a key opens them) and gives back columns. Entries of one message (not chunked,
not a marker, not partly acknowledged) are gathered in a :class:`~.single_runs.SingleRun`;
batched entries in a :class:`BatchGroup`, decoded together while every message of them is read,
else one by one. Other entries are decoded alone: a chunk goes to the chunk assembler, which
gives its message once the last chunk arrives; a marker gives nothing. Each decoded entry is
clipped to the range and loses the messages its ``ack_set`` has acknowledged. After the end
entry only the chunks of a message begun inside the range are taken. Decryption of a chunk is
injected (``decrypt``): each chunk is encrypted on its own, and only the reader holds the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.chunks import ChunkAssembler, is_chunk
from pulsar_spark.protocol.crypto import is_encrypted
from pulsar_spark.protocol.decode import (
    decode_entries,
    decode_entry,
    decode_group,
    entry_info,
    is_batch,
)
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns
from pulsar_spark.protocol.payload import PayloadSection
from pulsar_spark.protocol.single_runs import SingleRun

Key = tuple[int, int, int]
"""A message's place in a partition: (ledger id, entry id, batch index; -1 for a message not in
a batch)."""

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

Decrypt = Callable[["RawEntry"], "bytes | MessageColumns | None"]
"""An encrypted entry's payload decrypted, or what its failure action makes of it: one row left
encrypted, or None (discarded)."""


@dataclass(frozen=True, slots=True)
class ReadRange:
    """What to read from one partition: (start, end], [start, end], as the flags say."""

    topic: str
    start: MessageId
    end: MessageId
    start_inclusive: bool = True
    end_inclusive: bool = True

    def first_key(self) -> Key:
        """The key of the range's first message (inclusive)."""
        start = self.start
        return start.first_key() if self.start_inclusive else start.key_after()

    def last_key(self) -> Key:
        """The key of the range's last message (inclusive)."""
        end = self.end
        return end.last_key() if self.end_inclusive else end.key_before()

    def bounds(self) -> tuple[Key, Key]:
        """The first and last keys (an earliest start: before any key)."""
        first = (-1, -1, -1) if self.start.is_earliest else self.first_key()
        return first, self.last_key()

    @property
    def is_empty(self) -> bool:
        """Whether no message id lies in the range."""
        if self.end.is_earliest:
            return True
        if self.start.is_earliest:
            return False
        return self.first_key() > self.last_key()

    def past_end(self, entry: tuple[int, int]) -> bool:
        """Whether ``entry`` is the range's end entry or lies after it."""
        return entry >= self.end.entry


class RawEntry(NamedTuple):
    """One entry as delivered: its MESSAGE command and parsed (still compressed) payload.

    ``entry`` is the (ledger id, entry id) of the command's message id, read once: it is
    compared several times per entry. A tuple, because one is made for every entry."""

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


def kept_indexes(entry: tuple[int, int], count: int | None, first: Key, last: Key) -> range:
    """The batch indexes of ``entry`` whose keys lie in [``first``, ``last``]: among ``count``
    messages of a batch, or ``range(-1, 0)`` for a message not in a batch (``count`` None).

    Keys of one entry differ only in the index, so each bound cuts the indexes at most once:
    an entry after ``first``'s holds them from index 0, ``first``'s own from its index, one
    before it none; and symmetrically for ``last``."""
    if count is None:
        return range(-1, 0) if first <= (*entry, -1) <= last else range(0)
    if entry > first[:2]:
        low = 0
    elif entry == first[:2]:
        low = max(first[2], 0)
    else:
        return range(0)
    if entry < last[:2]:
        high = count - 1
    elif entry == last[:2]:
        high = min(last[2], count - 1)
    else:
        return range(0)
    return range(low, high + 1) if low <= high else range(0)


def clip(columns: MessageColumns, first: Key, last: Key) -> MessageColumns | None:
    """The rows of one entry's ``columns`` (in batch index order, maybe with some left out)
    whose keys lie in [``first``, ``last``]; None when none does."""
    if not columns.count:
        return None
    index = columns.batch_index
    entry = (columns.entry.ledger_id, columns.entry.entry_id)
    count = None if index[0] < 0 else int(index[-1]) + 1
    kept = kept_indexes(entry, count, first, last)
    if not kept:
        return None
    low, high = (int(i) for i in np.searchsorted(index, (kept.start, kept.stop)))
    if (low, high) == (0, columns.count):
        return columns
    return columns.slice(low, high) if low < high else None


def apply_ack_set(columns: MessageColumns, ack_set: list[int]) -> MessageColumns:
    """Drop batch indexes whose bit is cleared (java.util.BitSet words: bit i in word i/64)."""
    words = np.array(ack_set, dtype=np.int64).view(np.uint64)
    index = columns.batch_index.astype(np.int64)
    word = index // 64
    present = word < len(words)
    bits = np.zeros(len(index), dtype=np.bool_)
    bits[present] = (words[word[present]] >> (index[present] % 64).astype(np.uint64)) & 1 == 1
    return columns if bits.all() else columns.take(np.flatnonzero(bits))


def acknowledged(raw: RawEntry, columns: MessageColumns) -> MessageColumns:
    """``columns`` without the messages the entry's ``ack_set`` says are acknowledged."""
    ack_set = raw.message.ack_set
    return apply_ack_set(columns, list(ack_set)) if ack_set else columns


def decompressed(raw: RawEntry, payload: bytes) -> tuple[EntryInfo, pb.MessageMetadata, bytes]:
    """The entry's fields, metadata and ``payload`` (its own or a reassembled one) decompressed."""
    metadata = raw.section.metadata
    message_id = raw.message.message_id
    info = entry_info(metadata, message_id.ledgerId, message_id.entryId, message_id.partition)
    data = compression.decompress(metadata.compression, payload, metadata.uncompressed_size)
    return info, metadata, data


def group_full(messages: int, size: int) -> bool:
    """Whether a group of batched entries holding ``messages`` messages and ``size`` payload
    bytes is to be decoded now."""
    return messages >= GROUP_MESSAGES or size >= MAX_GROUP_BYTES


class BatchGroup:
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
        raws = [decompressed(raw, raw.section.payload) for raw in entries]
        if self._whole(entries):
            group = decode_group(raws)
            if group is not None:
                yield group
                return
        decoded = decode_entries(raws)
        for raw, columns in zip(entries, decoded, strict=True):
            clipped = clip(acknowledged(raw, columns), self._first, self._last)
            if clipped is not None:
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


class RangeAssembler:
    """The entries of one range, in order, as columns (see the module docstring)."""

    def __init__(self, read_range: ReadRange, decrypt: Decrypt) -> None:
        self.range = read_range
        self._first, self._last = self._bounds = read_range.bounds()
        self._end = read_range.end.entry
        self._decrypt = decrypt
        self._run = SingleRun()
        self._group = BatchGroup(self._bounds)
        self._chunks = ChunkAssembler()

    @property
    def pending_chunks(self) -> bool:
        """Whether a chunked message is still waiting for chunks."""
        return self._chunks.pending > 0

    def add(self, raw: RawEntry | MessageColumns) -> Iterator[MessageColumns]:
        """Take the next entry (or an entry left encrypted, as its one row) and give what is
        ready to be handed on."""
        if isinstance(raw, MessageColumns):
            yield from self.finish()
            yield from _kept(raw, self._first, self._last)
            return
        past_end = raw.entry > self._end
        if not past_end and plain_single(raw):
            yield from self._group.take()
            if self._first <= (*raw.entry, -1) <= self._last:
                self._run.add(*decompressed(raw, raw.section.payload))
                if len(self._run) >= MAX_RUN or self._run.size >= MAX_RUN_BYTES:
                    yield self._run.take()
            return
        if len(self._run):
            yield self._run.take()
        if not past_end and plain_batch(raw):
            self._group.add(raw)
            if self._group.full():
                yield from self._group.take()
            return
        yield from self._group.take()
        yield from self._alone(raw, past_end)

    def finish(self) -> Iterator[MessageColumns]:
        """What is still gathered (a run or a group: at most one of them holds anything)."""
        yield from self._group.take()
        if len(self._run):
            yield self._run.take()

    def _alone(self, raw: RawEntry, past_end: bool) -> Iterator[MessageColumns]:
        """An entry decoded on its own: a chunk, a marker, an encrypted or partly acknowledged
        one, or one after the end entry."""
        if past_end and not continues_chunk(raw):
            return
        if chunk_before_start(raw, self.range):
            return  # its message is the previous range's, which finished it
        columns = self._decode(raw)
        if columns is None or not columns.count:
            return
        if past_end:
            yield columns  # a chunked message that began inside the range ends here
            return
        yield from _kept(columns, self._first, self._last)

    def _decode(self, raw: RawEntry) -> MessageColumns | None:
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
            assembled = self._chunks.add(metadata, payload)
            if assembled is None:
                return None
            payload = assembled.payload
        return acknowledged(raw, decode_entry(*decompressed(raw, payload)))


def _kept(columns: MessageColumns, first: Key, last: Key) -> Iterator[MessageColumns]:
    clipped = clip(columns, first, last)
    if clipped is not None:
        yield clipped


def plain_batch(raw: RawEntry) -> bool:
    """A batched entry that is not a chunk or a marker (nor encrypted: the reader decrypts
    those up to the end before they come here)."""
    metadata = raw.section.metadata
    return is_batch(metadata) and not (is_chunk(metadata) or metadata.HasField("marker_type"))


def plain_single(raw: RawEntry) -> bool:
    """An entry of one message that is not a chunk, a marker or partly acknowledged (nor
    encrypted: the reader decrypts those up to the end before)."""
    metadata = raw.section.metadata
    return not (
        is_batch(metadata)
        or is_chunk(metadata)
        or metadata.HasField("marker_type")
        or raw.message.ack_set
    )


def continues_chunk(raw: RawEntry) -> bool:
    """A chunk of a message after its first."""
    metadata = raw.section.metadata
    return is_chunk(metadata) and metadata.chunk_id > 0


def chunk_before_start(raw: RawEntry, read_range: ReadRange) -> bool:
    """Whether ``raw`` is a chunk (never batched) that lies before the range's first message.

    Such a chunk must not reach the assembler: the range that ended on it completed its
    message, and assembling it here would deliver that message a second time.
    """
    if read_range.start.is_earliest or not is_chunk(raw.section.metadata):
        return False
    return (*raw.entry, -1) < read_range.first_key()
