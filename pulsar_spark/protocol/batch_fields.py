"""What a batch decoder finds in a batch's records, and how that becomes :class:`MessageColumns`.

Two decoders read batches (:mod:`batch_walk` message by message, :mod:`batch_scan` all messages
at once with numpy); both fill a :class:`BatchFields` with positions into the batch's bytes and
the numeric fields, and :func:`to_columns` applies the rules once: null values and keys, base64
keys, compacted-out messages, batch indexes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from pulsar_spark.common.spans import BoolArray, Int64Array, Spans
from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol.messages import (
    EntryInfo,
    Int32Array,
    MessageColumns,
    PropertyColumns,
    checked_times,
)


@dataclass(frozen=True, slots=True)
class BatchFields:
    """Per message of a batch (arrays of ``count``), positions relative to the batch's bytes.

    Properties: message i has pairs ``property_offsets[i]`` to ``property_offsets[i+1]``.
    """

    value_start: Int64Array
    value_length: Int64Array
    null_value: BoolArray
    key_start: Int64Array
    key_length: Int64Array
    has_key: BoolArray
    key_b64: BoolArray
    null_key: BoolArray
    event_time: Int64Array  # as sent (uint64), reinterpreted as int64
    sequence_id: Int64Array  # as sent (uint64), reinterpreted as int64
    compacted_out: BoolArray
    property_offsets: Int64Array
    name_start: Int64Array
    name_length: Int64Array
    item_start: Int64Array
    item_length: Int64Array

    def rows(self, start: int, stop: int) -> BatchFields:
        """The fields of messages ``start`` to ``stop`` (views, not copies)."""
        first, last = int(self.property_offsets[start]), int(self.property_offsets[stop])
        return BatchFields(
            value_start=self.value_start[start:stop],
            value_length=self.value_length[start:stop],
            null_value=self.null_value[start:stop],
            key_start=self.key_start[start:stop],
            key_length=self.key_length[start:stop],
            has_key=self.has_key[start:stop],
            key_b64=self.key_b64[start:stop],
            null_key=self.null_key[start:stop],
            event_time=self.event_time[start:stop],
            sequence_id=self.sequence_id[start:stop],
            compacted_out=self.compacted_out[start:stop],
            property_offsets=self.property_offsets[start : stop + 1] - first,
            name_start=self.name_start[first:last],
            name_length=self.name_length[first:last],
            item_start=self.item_start[first:last],
            item_length=self.item_length[first:last],
        )

    def split(self, counts: Sequence[int]) -> list[BatchFields]:
        """The fields of each of consecutive batches: batch k is the next ``counts[k]``
        records."""
        return [self.rows(first, first + count) for first, count in _bounds(counts)]


def _bounds(counts: Sequence[int]) -> Iterator[tuple[int, int]]:
    """(first record, count) of each of consecutive batches of ``counts`` records."""
    first = 0
    for count in counts:
        yield first, count
        first += count


def message_key(
    partition_key: str | bytes, present: bool, b64: bool, null_key: bool = False
) -> bytes | None:
    """The key column for a message: UTF-8 of a string key, decoded bytes of a base64 key.

    A key that is not valid UTF-8 arrives as bytes and is kept as it was sent."""
    if not present or null_key:
        return None
    raw = partition_key if isinstance(partition_key, bytes) else partition_key.encode()
    if not b64:
        return raw
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error as exc:
        raise CorruptPayloadError(f"partition key {partition_key!r} is not valid base64") from exc


def to_columns(info: EntryInfo, data: bytes, fields: BatchFields) -> MessageColumns:
    """The columns of a batch whose records are described by ``fields``."""
    count = len(fields.value_start)
    null_value = fields.null_value
    values = Spans(
        data,
        fields.value_start,
        np.where(null_value, 0, fields.value_length),
        ~null_value if null_value.any() else None,
    )
    columns = MessageColumns(
        entry=info,
        count=count,
        batch_index=np.arange(count, dtype=np.int32),
        values=values,
        key=_keys(data, fields),
        properties=_properties(data, fields),
        event_time=checked_times(fields.event_time.view(np.uint64), "event time"),
        sequence_id=fields.sequence_id,
    )
    if not fields.compacted_out.any():
        return columns
    return columns.take(np.flatnonzero(~fields.compacted_out))


def to_columns_each(
    infos: Sequence[EntryInfo], data: bytes, fields: BatchFields, counts: Sequence[int]
) -> list[MessageColumns]:
    """The columns of consecutive batches whose records ``fields`` describes together (batch
    k, entry ``infos[k]``, is the next ``counts[k]`` records): the rules of :func:`to_columns`
    applied to all records at once, then cut per batch."""
    if len(infos) == 1 or fields.compacted_out.any():  # rows are removed batch by batch
        return [
            to_columns(info, data, part)
            for info, part in zip(infos, fields.split(counts), strict=True)
        ]
    return split_entries(to_columns(infos[0], data, fields), infos, counts)


def split_entries(
    whole: MessageColumns, infos: Sequence[EntryInfo], counts: Sequence[int]
) -> list[MessageColumns]:
    """The rows of ``whole``, the records of consecutive batches read together (batch k, entry
    ``infos[k]``, is the next ``counts[k]`` rows), cut per batch as :func:`to_columns` makes
    each alone: its own entry and batch indexes, no validity where all are valid, no keys or
    properties where it has none."""
    indexes = np.arange(max(counts), dtype=np.int32)
    return [
        _cut(whole, info, first, count, indexes[:count])
        for info, (first, count) in zip(infos, _bounds(counts), strict=True)
    ]


def _cut(
    whole: MessageColumns, info: EntryInfo, first: int, count: int, batch_index: Int32Array
) -> MessageColumns:
    stop = first + count
    key = None if whole.key is None else _some_keys(whole.key.slice(first, stop))
    properties = None if whole.properties is None else whole.properties.slice(first, stop)
    return MessageColumns(
        entry=info,
        count=count,
        batch_index=batch_index,
        values=_validity_needed(whole.values.slice(first, stop)),
        key=key,
        properties=None if properties is None or properties.offsets[-1] == 0 else properties,
        event_time=whole.event_time[first:stop],
        sequence_id=whole.sequence_id[first:stop],
    )


def _validity_needed(spans: Spans) -> Spans:
    """``spans`` without a validity array when every string is valid."""
    if spans.valid is None or not spans.valid.all():
        return spans
    return Spans(spans.buffer, spans.starts, spans.lengths)


def _some_keys(keys: Spans) -> Spans | None:
    """None when no message has a key, else the keys, with validity only where some have none."""
    if keys.valid is not None and not keys.valid.any():
        return None
    return _validity_needed(keys)


def _keys(data: bytes, fields: BatchFields) -> Spans | None:
    present = fields.has_key & ~fields.null_key
    if not present.any():
        return None
    if (fields.key_b64 & present).any():
        return Spans.of([_key(data, fields, i, bool(p)) for i, p in enumerate(present)])
    lengths = np.where(present, fields.key_length, 0)
    return Spans(data, fields.key_start, lengths, None if present.all() else present)


def _key(data: bytes, fields: BatchFields, index: int, present: bool) -> bytes | None:
    start = int(fields.key_start[index])
    raw = data[start : start + int(fields.key_length[index])]
    return message_key(raw, present, bool(fields.key_b64[index]))


def _properties(data: bytes, fields: BatchFields) -> PropertyColumns | None:
    if not len(fields.name_start):
        return None
    return PropertyColumns(
        offsets=fields.property_offsets,
        names=Spans(data, fields.name_start, fields.name_length),
        values=Spans(data, fields.item_start, fields.item_length),
    )
