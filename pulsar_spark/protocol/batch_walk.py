"""Reading a batch's records one by one: the reference decoder, and the one for small batches.

A batch payload is ``n`` records ``[u32 size][SingleMessageMetadata][payload]``. This loop
reads each SingleMessageMetadata (SMM) field by field by hand (field numbers as in the .proto;
unknown fields are skipped, a repeated scalar field keeps its last value, as protobuf does)
and notes where each payload, key and property lies. :mod:`batch_scan` does the same for all
records at once; the unit tests hold the two to the same result.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.varints import read_varint
from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol.batch_fields import BatchFields

_TAG_PROPERTY = 0x0A  # 1, length-delimited KeyValue
_TAG_KEY = 0x12  # 2, string
_TAG_PAYLOAD_SIZE = 0x18  # 3
_TAG_COMPACTED_OUT = 0x20  # 4
_TAG_EVENT_TIME = 0x28  # 5
_TAG_KEY_B64 = 0x30  # 6
_TAG_SEQUENCE_ID = 0x40  # 8
_TAG_NULL_VALUE = 0x48  # 9
_TAG_NULL_KEY = 0x50  # 10
_TAG_PAIR_NAME = 0x0A  # KeyValue.key
_TAG_PAIR_VALUE = 0x12  # KeyValue.value
_UINT64 = (1 << 64) - 1  # a sequence id counted up from the batch's wraps, as a long does


class _Record:
    """The fields of one SMM, as :func:`_read_record` finds them."""

    __slots__ = (
        "compacted_out",
        "event_time",
        "key",
        "key_b64",
        "null_key",
        "null_value",
        "pairs",
        "sequence_id",
        "size",
    )

    def __init__(self, sequence_id: int) -> None:
        self.key: tuple[int, int] | None = None
        self.pairs: list[tuple[int, int, int, int]] = []
        self.size = self.event_time = 0
        self.sequence_id = sequence_id
        self.key_b64 = self.null_key = self.null_value = self.compacted_out = False


def walk_batch(data: bytes, count: int, base_sequence: int) -> BatchFields:
    """The fields of the ``count`` records in ``data``; a message without a sequence id of its
    own gets ``base_sequence`` plus its index."""
    try:
        return _walk(data, count, base_sequence)
    except (IndexError, ValueError, OverflowError) as exc:
        raise CorruptPayloadError(f"batch of {count} messages is malformed: {exc}") from exc


def _walk(data: bytes, count: int, base_sequence: int) -> BatchFields:
    records: list[_Record] = []
    value_starts: list[int] = []
    pos = 0
    for index in range(count):
        start = pos + 4
        end = start + int.from_bytes(data[pos:start], "big")
        record = _read_record(data, start, end, (base_sequence + index) & _UINT64)
        if end + record.size > len(data):
            raise ValueError("a message runs past the end of its batch")
        records.append(record)
        value_starts.append(end)
        pos = end + record.size
    return _fields(records, value_starts)


def _read_record(data: bytes, p: int, end: int, sequence_id: int) -> _Record:  # noqa: PLR0912
    record = _Record(sequence_id)
    while p < end:
        tag = data[p]  # one-byte tags and numbers, the usual case, without a call
        tag, p = (tag, p + 1) if tag < 0x80 else read_varint(data, p)
        wire_type = tag & 7
        if wire_type == 0:
            value = data[p]
            value, p = (value, p + 1) if value < 0x80 else read_varint(data, p)
            if tag == _TAG_PAYLOAD_SIZE:
                record.size = value
            elif tag == _TAG_SEQUENCE_ID:
                record.sequence_id = value
            elif tag == _TAG_EVENT_TIME:
                record.event_time = value
            elif tag == _TAG_NULL_VALUE:
                record.null_value = value != 0
            elif tag == _TAG_KEY_B64:
                record.key_b64 = value != 0
            elif tag == _TAG_NULL_KEY:
                record.null_key = value != 0
            elif tag == _TAG_COMPACTED_OUT:
                record.compacted_out = value != 0
        elif wire_type == 2:
            length = data[p]
            length, p = (length, p + 1) if length < 0x80 else read_varint(data, p)
            if tag == _TAG_KEY:
                record.key = (p, length)
            elif tag == _TAG_PROPERTY:
                record.pairs.append(_read_pair(data, p, p + length))
            p += length
        else:
            p = _skip_fixed(wire_type, p)
    if p != end:
        raise ValueError("a SingleMessageMetadata runs past its size")
    return record


def _read_pair(data: bytes, p: int, end: int) -> tuple[int, int, int, int]:
    """Start and length of a KeyValue's key and value; both are required."""
    try:
        return _pair_fields(data, p, end)
    except (IndexError, ValueError) as exc:
        raise CorruptPayloadError("a message property does not parse") from exc


def _pair_fields(data: bytes, p: int, end: int) -> tuple[int, int, int, int]:
    name = item = None
    while p < end:
        tag, p = read_varint(data, p)
        wire_type = tag & 7
        if wire_type == 0:
            _, p = read_varint(data, p)
        elif wire_type == 2:
            length, p = read_varint(data, p)
            if tag == _TAG_PAIR_NAME:
                name = (p, length)
            elif tag == _TAG_PAIR_VALUE:
                item = (p, length)
            p += length
        else:
            p = _skip_fixed(wire_type, p)
    if p != end or name is None or item is None:
        raise ValueError("not a KeyValue")
    return (*name, *item)


def _skip_fixed(wire_type: int, p: int) -> int:
    if wire_type == 1:
        return p + 8
    if wire_type == 5:
        return p + 4
    raise ValueError(f"wire type {wire_type} in a SingleMessageMetadata")


def _fields(records: list[_Record], value_starts: list[int]) -> BatchFields:
    n = len(records)
    keys = [r.key or (0, 0) for r in records]
    pairs = [pair for r in records for pair in r.pairs]
    counts = np.fromiter((len(r.pairs) for r in records), np.int64, n)
    property_offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=property_offsets[1:])
    pair_array = np.array(pairs, dtype=np.int64).reshape(len(pairs), 4)
    return BatchFields(
        value_start=np.array(value_starts, dtype=np.int64),
        value_length=np.fromiter((r.size for r in records), np.int64, n),
        null_value=np.fromiter((r.null_value for r in records), np.bool_, n),
        key_start=np.fromiter((k[0] for k in keys), np.int64, n),
        key_length=np.fromiter((k[1] for k in keys), np.int64, n),
        has_key=np.fromiter((r.key is not None for r in records), np.bool_, n),
        key_b64=np.fromiter((r.key_b64 for r in records), np.bool_, n),
        null_key=np.fromiter((r.null_key for r in records), np.bool_, n),
        event_time=_as_sent([r.event_time for r in records]),
        sequence_id=_as_sent([r.sequence_id for r in records]),
        compacted_out=np.fromiter((r.compacted_out for r in records), np.bool_, n),
        property_offsets=property_offsets,
        name_start=pair_array[:, 0],
        name_length=pair_array[:, 1],
        item_start=pair_array[:, 2],
        item_length=pair_array[:, 3],
    )


def _as_sent(numbers: list[int]) -> npt.NDArray[np.int64]:
    """uint64 fields as sent, reinterpreted as int64 (OverflowError past 64 bits)."""
    as_int64: npt.NDArray[np.int64] = np.array(numbers, dtype=np.uint64).view(np.int64)
    return as_int64
