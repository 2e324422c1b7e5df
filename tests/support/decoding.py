"""Building entries for ``decode_entry`` by hand and checking what it returns.

An entry is :func:`outer` metadata plus a payload: one value, or a batch of records (a
``SingleMessageMetadata`` and a value each, :func:`record`) joined by :func:`batch`.
:func:`rows` turns decoded columns into plain dicts to compare with those :func:`row` builds;
:func:`wire_varint` and :func:`wire_field` write protobuf wire format by hand.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from pulsar_spark.protocol import decode, pb
from pulsar_spark.protocol.decode import decode_entry
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns

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
    out = []
    for i in range(columns.count):
        null = columns.null_value is not None and bool(columns.null_value[i])
        start, stop = int(columns.value_offsets[i]), int(columns.value_offsets[i + 1])
        out.append(
            {
                "batch_index": int(columns.batch_index[i]),
                "value": None if null else columns.values[start:stop],
                "key": None if columns.key is None else columns.key[i],
                "properties": () if columns.properties is None else columns.properties[i],
                "event_time": int(columns.event_time[i]),
                "sequence_id": int(columns.sequence_id[i]),
            }
        )
    return out


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
    assert columns.value_offsets.dtype == np.int32 and columns.value_offsets.shape == (n + 1,)
    assert columns.event_time.dtype == np.int64 and columns.event_time.shape == (n,)
    assert columns.sequence_id.dtype == np.int64 and columns.sequence_id.shape == (n,)
    assert int(columns.value_offsets[0]) == 0
    assert int(columns.value_offsets[-1]) == len(columns.values)
    assert isinstance(columns.values, bytes)
    if columns.null_value is not None:
        assert columns.null_value.dtype == np.bool_ and columns.null_value.shape == (n,)
    if columns.key is not None:
        assert len(columns.key) == n
    if columns.properties is not None:
        assert len(columns.properties) == n


def assert_same_columns(a: MessageColumns, b: MessageColumns) -> None:
    """Field-by-field identity, including which columns are None."""
    assert a.entry == b.entry
    assert a.count == b.count
    assert a.values == b.values
    for name in ("batch_index", "value_offsets", "event_time", "sequence_id"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype, name
        assert left.tolist() == right.tolist(), name
    assert (a.null_value is None) == (b.null_value is None)
    if a.null_value is not None and b.null_value is not None:
        assert a.null_value.tolist() == b.null_value.tolist()
    assert a.key == b.key
    assert a.properties == b.properties


def both_paths(metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode via decode_entry, check the fast path was taken and equals the general walk."""
    count = metadata.num_messages_in_batch
    fast = decode._uniform_batch(INFO, metadata, payload, count)
    assert fast is not None, "expected the uniform fast path to apply"
    general = decode._walk_batch(INFO, metadata, payload, count)
    assert_same_columns(fast, general)
    result = decode_entry(INFO, metadata, payload)
    assert_same_columns(result, general)
    check_shape(result)
    return result


def general_only(metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode a batch that must not take the fast path."""
    count = metadata.num_messages_in_batch
    assert decode._uniform_batch(INFO, metadata, payload, count) is None
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
