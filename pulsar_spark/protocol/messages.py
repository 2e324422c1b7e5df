"""Columnar messages: what one entry (or several) decodes to.

The decoder never builds one Python object per message. It returns :class:`MessageColumns`:
one array per metadata field, and the variable-length fields (values, keys, property names and
values) as :class:`Spans`, (start, length) pairs that point into the bytes the entry was decoded
from. Nothing is copied until the Arrow layer lays each column out once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.byte_rows import ranges
from pulsar_spark.common.spans import BoolArray, IndexArray, Int64Array, Spans
from pulsar_spark.errors import CorruptPayloadError

Int32Array = npt.NDArray[np.int32]
Text = str | bytes
"""A protobuf string field as read: bytes when what was sent is not valid UTF-8."""
Properties = tuple[tuple[Text, Text], ...]

INT64_MAX = (1 << 63) - 1
"""The largest id an int64 column holds; uint64 wire fields above it are refused."""
MAX_MILLIS = INT64_MAX // 1000
"""The latest time (ms since the epoch) the read schema's timestamps hold: they are
microseconds in an int64."""


def out_of_range(ledger_id: int, entry_id: int, publish_time: int) -> CorruptPayloadError:
    """The error for an entry whose ids (uint64 on the wire) do not fit an int64 column, or
    whose publish time does not fit a timestamp, naming the first field that does not."""
    fields = (
        ("ledger id", ledger_id, INT64_MAX),
        ("entry id", entry_id, INT64_MAX),
        ("publish time", publish_time, MAX_MILLIS),
    )
    field, value, limit = next(f for f in fields if f[1] > f[2])
    return CorruptPayloadError(f"{field} {value} is out of range (at most {limit})")


def checked_times(sent: npt.NDArray[np.uint64], field: str) -> Int64Array:
    """Times in ms as sent (uint64) as an int64 column; CorruptPayloadError naming ``field``
    when one is past :data:`MAX_MILLIS`."""
    latest = int(sent.max(initial=0))
    if latest > MAX_MILLIS:
        raise CorruptPayloadError(f"{field} {latest} is out of range (at most {MAX_MILLIS} ms)")
    times: Int64Array = sent.view(np.int64)
    return times


class EntryInfo(NamedTuple):
    """What every message of one entry shares (a tuple: one is made for every entry).

    The ids fit an int64 and the publish time a timestamp (see :func:`out_of_range`); the
    producer name and origin are as protobuf read them: bytes when they are not valid UTF-8
    (the Arrow layer reads those as Java does)."""

    ledger_id: int
    entry_id: int
    partition: int
    producer_name: Text
    publish_time: int  # ms since epoch
    replicated_from: Text | None
    schema_version: bytes | None = None  # the writer's schema version, when the producer had one


@dataclass(frozen=True, slots=True)
class EntryRows:
    """The entry fields of the rows of several entries read as one :class:`MessageColumns`:
    entry k covers the next ``counts[k]`` rows (one row each for one-message entries, see
    :mod:`pulsar_spark.protocol.single_runs`; a batch's messages for batches decoded together,
    see :func:`pulsar_spark.protocol.decode.decode_group`). Fields are kept per entry."""

    ledger_id: Int64Array
    entry_id: Int64Array
    publish_time: Int64Array
    producer_name: tuple[Text, ...]
    replicated_from: tuple[Text | None, ...]
    schema_version: tuple[bytes | None, ...]
    counts: Int64Array

    @classmethod
    def of(cls, infos: Sequence[EntryInfo], counts: Int64Array) -> EntryRows:
        """The fields of ``infos``, entry k covering ``counts[k]`` rows."""
        ledgers, entries, _, producers, published, replicated, versions = zip(*infos, strict=True)
        return cls(
            np.array(ledgers, dtype=np.int64),
            np.array(entries, dtype=np.int64),
            np.array(published, dtype=np.int64),
            producers,
            replicated,
            versions,
            counts,
        )

    @property
    def rows(self) -> int:
        return int(self.counts.sum())

    def column(self, name: str) -> Int64Array:
        """``ledger_id``, ``entry_id`` or ``publish_time`` of every row."""
        each: Int64Array = getattr(self, name)
        return each if len(each) == self.rows else np.repeat(each, self.counts)

    def texts(self, name: str) -> tuple[tuple[Text | None, ...], Int64Array]:
        """``producer_name`` or ``replicated_from`` of each entry, and the rows each covers."""
        texts: tuple[Text | None, ...] = getattr(self, name)
        return texts, self.counts

    def versions(self) -> list[bytes | None]:
        """The schema version of every row."""
        counts = self.counts.tolist()
        return [v for v, n in zip(self.schema_version, counts, strict=True) for _ in range(n)]

    def slice(self, start: int, stop: int) -> EntryRows:
        """Rows ``start`` to ``stop`` (exclusive)."""
        if stop <= start:
            return self.take(np.arange(0))
        ends = np.cumsum(self.counts)
        first = int(np.searchsorted(ends, start, side="right"))
        last = int(np.searchsorted(ends, stop - 1, side="right"))
        counts = self.counts[first : last + 1].copy()
        counts[0] -= start - (int(ends[first]) - int(self.counts[first]))
        counts[-1] -= int(ends[last]) - stop
        return self._entries(np.arange(first, last + 1), counts)

    def take(self, rows: IndexArray) -> EntryRows:
        """Only the given rows, in the given order: neighbours of one entry stay together."""
        owner = np.repeat(np.arange(len(self.counts)), self.counts)[rows]
        starts = np.flatnonzero(np.diff(owner, prepend=-1))
        counts = np.diff(np.append(starts, len(owner))).astype(np.int64)
        return self._entries(owner[starts], counts)

    def _entries(self, which: IndexArray, counts: Int64Array) -> EntryRows:
        """The entries at indexes ``which``, covering ``counts`` rows each."""
        picked = which.tolist()
        return EntryRows(
            self.ledger_id[which],
            self.entry_id[which],
            self.publish_time[which],
            tuple(self.producer_name[i] for i in picked),
            tuple(self.replicated_from[i] for i in picked),
            tuple(self.schema_version[i] for i in picked),
            counts,
        )


@dataclass(frozen=True, slots=True)
class PropertyColumns:
    """The properties of ``len(offsets) - 1`` messages: message i has the pairs
    ``offsets[i]`` to ``offsets[i+1]`` of ``names`` and ``values``: the bytes as sent, UTF-8 or
    not, on every decode path (a batch's spans point at them where they lie; a name or value of
    a protobuf-parsed metadata that is not valid UTF-8 arrives as bytes and is kept as such).
    The Arrow layer reads them as Java does (undecodable bytes become U+FFFD)."""

    offsets: Int64Array
    names: Spans
    values: Spans

    @classmethod
    def of(cls, rows: Sequence[Properties]) -> PropertyColumns:
        """Properties over a new buffer holding every name and value end to end: text as
        UTF-8, bytes (a name or value that is not valid UTF-8) as they are."""
        try:  # text, the usual case, without a call per string
            encoded = [
                item.encode()  # type: ignore[union-attr]
                for row in rows
                for pair in row
                for item in pair
            ]
        except AttributeError:  # some are bytes
            encoded = [_utf8(item) for row in rows for pair in row for item in pair]
        lengths = np.array([len(e) for e in encoded], dtype=np.int64)
        starts = np.array([0, *accumulate(map(len, encoded))][:-1], dtype=np.int64)
        buffer = b"".join(encoded)
        return cls(
            offsets=np.array([0, *accumulate(map(len, rows))], dtype=np.int64),
            names=Spans(buffer, starts[0::2], lengths[0::2]),
            values=Spans(buffer, starts[1::2], lengths[1::2]),
        )

    def slice(self, start: int, stop: int) -> PropertyColumns:
        offsets = self.offsets[start : stop + 1]
        first, last = int(offsets[0]), int(offsets[-1])
        return PropertyColumns(
            offsets - first, self.names.slice(first, last), self.values.slice(first, last)
        )

    def take(self, rows: IndexArray) -> PropertyColumns:
        pairs, offsets = ranges(self.offsets[rows], self.offsets[rows + 1])
        return PropertyColumns(offsets, self.names.take(pairs), self.values.take(pairs))


def _utf8(sent: Text) -> bytes:
    return sent if isinstance(sent, bytes) else sent.encode()


@dataclass(frozen=True, slots=True)
class MessageColumns:
    """The messages of one entry or of several consecutive ones (see below), column by
    column; ``count`` rows in every column.

    ``batch_index`` is -1 for a message that was not batched (and for an encrypted entry
    delivered whole, still encrypted: see ``encrypted``). ``event_time`` is 0 where the
    producer set none. ``values.valid`` marks null values. ``key`` and ``properties`` are None
    when no message has one.

    Consecutive entries may share one ``MessageColumns`` (a run of one-message entries, or
    batches decoded together): then ``rows`` holds the entry fields of each row and ``entry``
    is the first entry's. Readers of per-row entry fields go through :meth:`entry_column`,
    :meth:`entry_texts` and :meth:`schema_versions`.
    """

    entry: EntryInfo
    count: int
    batch_index: Int32Array
    values: Spans
    key: Spans | None
    properties: PropertyColumns | None
    event_time: Int64Array
    sequence_id: Int64Array
    rows: EntryRows | None = None
    # True where the value is a payload left encrypted (cryptoFailureAction CONSUME); None:
    # no row is.
    encrypted: BoolArray | None = None

    def entry_column(self, name: str) -> Int64Array:
        """``ledger_id``, ``entry_id`` or ``publish_time`` of every row."""
        if self.rows is not None:
            return self.rows.column(name)
        return np.full(self.count, getattr(self.entry, name), dtype=np.int64)

    def schema_versions(self) -> list[bytes | None]:
        """The writer's schema version of every row."""
        if self.rows is not None:
            return self.rows.versions()
        return [self.entry.schema_version] * self.count

    def entry_texts(self, name: str) -> tuple[Sequence[Text | None], Int64Array]:
        """``producer_name`` or ``replicated_from``: the texts and how many rows each covers."""
        if self.rows is not None:
            return self.rows.texts(name)
        return (getattr(self.entry, name),), np.array([self.count], dtype=np.int64)

    def slice(self, start: int, stop: int) -> MessageColumns:
        """Rows ``start`` to ``stop`` (exclusive)."""
        if start == 0 and stop == self.count:
            return self
        return MessageColumns(
            entry=self.entry,
            count=stop - start,
            batch_index=self.batch_index[start:stop],
            values=self.values.slice(start, stop),
            key=None if self.key is None else self.key.slice(start, stop),
            properties=None if self.properties is None else self.properties.slice(start, stop),
            event_time=self.event_time[start:stop],
            sequence_id=self.sequence_id[start:stop],
            rows=None if self.rows is None else self.rows.slice(start, stop),
            encrypted=None if self.encrypted is None else self.encrypted[start:stop],
        )

    def take(self, rows: IndexArray) -> MessageColumns:
        """Only the given rows, in the given order."""
        return MessageColumns(
            entry=self.entry,
            count=len(rows),
            batch_index=self.batch_index[rows],
            values=self.values.take(rows),
            key=None if self.key is None else self.key.take(rows),
            properties=None if self.properties is None else self.properties.take(rows),
            event_time=self.event_time[rows],
            sequence_id=self.sequence_id[rows],
            rows=None if self.rows is None else self.rows.take(rows),
            encrypted=None if self.encrypted is None else self.encrypted[rows],
        )
