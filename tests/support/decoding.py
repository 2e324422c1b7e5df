"""Building entries for ``decode_entry`` by hand and checking what it returns.

An entry is :func:`outer` metadata plus a payload: one value, or a batch of records (a
``SingleMessageMetadata`` and a value each, :func:`record`) joined by :func:`batch`.
:func:`rows` turns decoded columns into plain dicts to compare with those :func:`row` builds;
:func:`general_only` and :func:`both_paths` hold the batch decoders to one result;
:func:`wire_varint` and :func:`wire_field` write protobuf wire format by hand.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import numpy as np

from pulsar_spark.common.spans import Spans
from pulsar_spark.protocol import decode, pb
from pulsar_spark.protocol.batch_fields import BatchFields, to_columns
from pulsar_spark.protocol.batch_scan import scan_batch
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.decode import decode_entry
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns, PropertyColumns

INFO = EntryInfo(
    ledger_id=12,
    entry_id=34,
    partition=2,
    producer_name="producer-x",
    publish_time=1_700_000_009_999,
    replicated_from=None,
)


def outer(**fields: Any) -> pb.MessageMetadata:
    base: dict[str, Any] = {
        "producer_name": "producer-x",
        "sequence_id": 1000,
        "publish_time": 1_700_000_009_999,
    }
    base.update(fields)
    return pb.MessageMetadata(**base)


def smm(**fields: Any) -> pb.SingleMessageMetadata:
    props = fields.pop("properties", None)
    message = pb.SingleMessageMetadata(**fields)
    if props:
        message.properties.extend(pb.KeyValue(key=k, value=v) for k, v in props.items())
    return message


def record(meta: pb.SingleMessageMetadata, value: bytes) -> bytes:
    raw = meta.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + value


def batch(*records: tuple[pb.SingleMessageMetadata, bytes]) -> bytes:
    return b"".join(record(m, v) for m, v in records)


def rows(columns: MessageColumns) -> list[dict[str, Any]]:
    """Every message of a MessageColumns as a plain dict, column by column."""
    values = strings(columns.values)
    keys = strings(columns.key) if columns.key is not None else [None] * columns.count
    return [
        {
            "batch_index": int(columns.batch_index[i]),
            "value": values[i],
            "key": keys[i],
            "properties": properties_of(columns)[i],
            "event_time": int(columns.event_time[i]),
            "sequence_id": int(columns.sequence_id[i]),
        }
        for i in range(columns.count)
    ]


def entry_fields(columns: MessageColumns) -> list[tuple[object, ...]]:
    """Every row's entry fields (ledger, entry, publish time, producer, origin), expanded from
    however the columns keep them."""
    producers, counts = columns.entry_texts("producer_name")
    origins, origin_counts = columns.entry_texts("replicated_from")
    assert origin_counts.tolist() == counts.tolist()
    assert sum(counts.tolist()) == columns.count
    return list(
        zip(
            columns.entry_column("ledger_id").tolist(),
            columns.entry_column("entry_id").tolist(),
            columns.entry_column("publish_time").tolist(),
            [p for p, n in zip(producers, counts.tolist(), strict=True) for _ in range(n)],
            [o for o, n in zip(origins, counts.tolist(), strict=True) for _ in range(n)],
            strict=True,
        )
    )


def strings(spans: Spans) -> list[bytes | None]:
    """The byte strings spans point at (None where one is null)."""
    valid = [True] * len(spans) if spans.valid is None else spans.valid.tolist()
    bounds = zip(spans.starts.tolist(), spans.lengths.tolist(), valid, strict=True)
    return [spans.buffer[start : start + size] if ok else None for start, size, ok in bounds]


def properties_row(properties: PropertyColumns, index: int) -> tuple[tuple[str, str], ...]:
    """One message's properties as text."""
    first, last = int(properties.offsets[index]), int(properties.offsets[index + 1])
    names = strings(properties.names.slice(first, last))
    values = strings(properties.values.slice(first, last))
    return tuple(
        ((n or b"").decode(), (v or b"").decode()) for n, v in zip(names, values, strict=True)
    )


def properties_of(columns: MessageColumns) -> list[tuple[tuple[str, str], ...]]:
    """Each message's properties (empty where it has none)."""
    if columns.properties is None:
        return [()] * columns.count
    return [properties_row(columns.properties, i) for i in range(columns.count)]


def joined_values(columns: MessageColumns) -> bytes:
    """All values end to end (a null value adds nothing)."""
    return b"".join(v or b"" for v in strings(columns.values))


def value_offsets(columns: MessageColumns) -> list[int]:
    """Where each value would begin and end if they were laid end to end."""
    return [0, *np.cumsum(columns.values.lengths).tolist()]


def keys_of(columns: MessageColumns) -> list[bytes | None] | None:
    """The key column as a list, or None when the entry has no keys."""
    return None if columns.key is None else strings(columns.key)


def null_values(columns: MessageColumns) -> list[bool] | None:
    """Which values are null, or None when the column says none is."""
    valid = columns.values.valid
    return None if valid is None else (~valid).tolist()


def row(
    index: int,
    value: bytes | None,
    *,
    key: bytes | None = None,
    props: tuple[tuple[str, str], ...] = (),
    event_time: int = 0,
    seq: int,
) -> dict[str, Any]:
    return {
        "batch_index": index,
        "value": value,
        "key": key,
        "properties": props,
        "event_time": event_time,
        "sequence_id": seq,
    }


def check_shape(columns: MessageColumns) -> None:
    """Every column has ``count`` rows and the documented dtypes."""
    n = columns.count
    assert columns.batch_index.dtype == np.int32 and columns.batch_index.shape == (n,)
    assert columns.event_time.dtype == np.int64 and columns.event_time.shape == (n,)
    assert columns.sequence_id.dtype == np.int64 and columns.sequence_id.shape == (n,)
    check_spans(columns.values, n)
    if columns.key is not None:
        check_spans(columns.key, n)
    if columns.properties is not None:
        offsets = columns.properties.offsets
        assert offsets.shape == (n + 1,) and int(offsets[0]) == 0
        assert (np.diff(offsets) >= 0).all()
        check_spans(columns.properties.names, int(offsets[-1]))
        check_spans(columns.properties.values, int(offsets[-1]))


def check_spans(spans: Spans, n: int) -> None:
    assert spans.starts.dtype == np.int64 and spans.starts.shape == (n,)
    assert spans.lengths.dtype == np.int64 and spans.lengths.shape == (n,)
    assert isinstance(spans.buffer, bytes)
    assert ((spans.starts >= 0) & (spans.starts + spans.lengths <= len(spans.buffer))).all()
    if spans.valid is not None:
        assert spans.valid.dtype == np.bool_ and spans.valid.shape == (n,)
        assert not spans.lengths[~spans.valid].any()


def assert_same_columns(a: MessageColumns, b: MessageColumns) -> None:
    """Row-by-row identity, including which columns are None."""
    assert a.entry == b.entry
    assert a.count == b.count
    for name in ("batch_index", "event_time", "sequence_id"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype, name
        assert left.tolist() == right.tolist(), name
    assert strings(a.values) == strings(b.values)
    assert null_values(a) == null_values(b)
    assert (a.key is None) == (b.key is None)
    assert rows(a) == rows(b)
    assert (a.properties is None) == (b.properties is None)


def assert_same_fields(a: BatchFields, b: BatchFields) -> None:
    """Two decoders found the same thing in a batch, field by field."""
    for field in dataclasses.fields(BatchFields):
        left, right = getattr(a, field.name), getattr(b, field.name)
        assert left.dtype == right.dtype, field.name
        assert left.tolist() == right.tolist(), field.name


def both_paths(metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode via decode_entry, check the uniform path was taken and equals the others."""
    count = metadata.num_messages_in_batch
    fast = decode._uniform([(INFO, metadata, payload)])
    assert fast is not None, "expected the uniform fast path to apply"
    general = to_columns(INFO, payload, walk_batch(payload, count, metadata.sequence_id))
    assert_same_columns(fast[0], general)
    result = decode_entry(INFO, metadata, payload)
    assert_same_columns(result, general)
    check_shape(result)
    return result


def general_only(metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode a batch that must not take the uniform path; where the scan reads it, it must
    find what the walk finds."""
    count = metadata.num_messages_in_batch
    assert decode._uniform([(INFO, metadata, payload)]) is None
    scanned = scan_batch(payload, count, metadata.sequence_id)
    if scanned is not None:
        assert_same_fields(scanned, walk_batch(payload, count, metadata.sequence_id))
    result = decode_entry(INFO, metadata, payload)
    check_shape(result)
    return result


def wire_varint(value: int) -> bytes:
    """``value`` as a protobuf varint."""
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def wire_field(number: int, wire_type: int, body: bytes) -> bytes:
    """A protobuf field: its tag (``number``, ``wire_type``) followed by ``body``."""
    return wire_varint(number << 3 | wire_type) + body
