"""Decoding an entry's (uncompressed) payload into :class:`MessageColumns`.

How this works
--------------
An entry is either one message, or a batch when ``MessageMetadata.num_messages_in_batch`` is
*present* (a batch of one is still a batch). A batch payload is ``n`` records::

    [u32 size][SingleMessageMetadata][payload] ... n times

The general path walks the records one by one, parsing each SingleMessageMetadata (SMM) with a
small cache keyed by its bytes, since producers that set no per-message sequence id repeat the
same SMM. Producers usually do set one, so every SMM differs in that one field.

Most batches from one producer are *uniform*: every record has the same length and every SMM
is byte-for-byte the same except for its ``sequence_id`` varint. The fast path checks that with
numpy on the ``n x record_length`` byte matrix and then reads all n payloads and sequence ids
at once, with no per-message Python. Any difference elsewhere (keys, properties, event times,
sizes) falls back to the general path, so the result is the same either way.
"""

from __future__ import annotations

import base64
import binascii
import struct

import numpy as np
from google.protobuf.message import DecodeError

from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns, Properties

_U32 = struct.Struct(">I")
_SEQUENCE_ID_TAG = 0x40  # SingleMessageMetadata field 8, varint
_SMM_CACHE_LIMIT = 4096


def entry_info(
    metadata: pb.MessageMetadata, ledger_id: int, entry_id: int, partition: int
) -> EntryInfo:
    return EntryInfo(
        ledger_id=ledger_id,
        entry_id=entry_id,
        partition=partition,
        producer_name=metadata.producer_name,
        publish_time=metadata.publish_time,
        replicated_from=metadata.replicated_from if metadata.HasField("replicated_from") else None,
    )


def is_batch(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("num_messages_in_batch")


def decode_entry(info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode one entry whose payload is already decompressed (and reassembled, if chunked)."""
    if not is_batch(metadata):
        return _single(info, metadata, payload)
    count = metadata.num_messages_in_batch
    if count <= 0:
        raise CorruptPayloadError(f"batch announces {count} messages")
    fast = _uniform_batch(info, metadata, payload, count)
    return fast if fast is not None else _walk_batch(info, metadata, payload, count)


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


def _properties(pairs: object) -> Properties:
    return tuple((kv.key, kv.value) for kv in pairs)  # type: ignore[attr-defined]


def _single(info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    null_value = metadata.null_value
    key = message_key(
        metadata.partition_key,
        metadata.HasField("partition_key"),
        metadata.partition_key_b64_encoded,
        metadata.null_partition_key,
    )
    props = _properties(metadata.properties)
    return MessageColumns(
        entry=info,
        count=1,
        batch_index=np.array([-1], dtype=np.int32),
        values=b"" if null_value else payload,
        value_offsets=np.array([0, 0 if null_value else len(payload)], dtype=np.int32),
        null_value=np.array([True]) if null_value else None,
        key=None if key is None else [key],
        properties=[props] if props else None,
        event_time=np.array([metadata.event_time], dtype=np.int64),
        sequence_id=np.array([metadata.sequence_id], dtype=np.int64),
    )


# --- the uniform fast path -----------------------------------------------------------------


def _uniform_batch(
    info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes, count: int
) -> MessageColumns | None:
    if count < 2 or len(payload) % count:
        return None
    record = len(payload) // count
    if record < 4:
        return None
    (smm_size,) = _U32.unpack_from(payload, 0)
    if 4 + smm_size > record:
        return None
    first = _parse_smm(payload[4 : 4 + smm_size])
    payload_size = first.payload_size
    if 4 + smm_size + payload_size != record or first.compacted_out:
        return None
    rows = np.frombuffer(payload, dtype=np.uint8).reshape(count, record)
    header = rows[:, : 4 + smm_size]
    varying = np.flatnonzero((header != header[0]).any(axis=0))
    seq_span = _sequence_id_span(payload[4 : 4 + smm_size])
    if varying.size and (seq_span is None or not _within(varying - 4, seq_span)):
        return None
    if seq_span is not None:
        start, stop = seq_span
        sequence_id = _varint_column(header[:, 4 + start : 4 + stop])
        if sequence_id is None:
            return None
    else:
        sequence_id = metadata.sequence_id + np.arange(count, dtype=np.int64)
    return _columns_from_first(
        info,
        first=first,
        count=count,
        values=rows[:, 4 + smm_size :].tobytes(),
        payload_size=payload_size,
        sequence_id=sequence_id,
    )


def _columns_from_first(
    info: EntryInfo,
    *,
    first: pb.SingleMessageMetadata,
    count: int,
    values: bytes,
    payload_size: int,
    sequence_id: np.ndarray,
) -> MessageColumns:
    null_value = first.null_value
    key = message_key(
        first.partition_key,
        first.HasField("partition_key"),
        first.partition_key_b64_encoded,
        first.null_partition_key,
    )
    props = _properties(first.properties)
    step = 0 if null_value else payload_size
    return MessageColumns(
        entry=info,
        count=count,
        batch_index=np.arange(count, dtype=np.int32),
        values=b"" if null_value else values,
        value_offsets=np.arange(count + 1, dtype=np.int32) * step,
        null_value=np.ones(count, dtype=np.bool_) if null_value else None,
        key=None if key is None else [key] * count,
        properties=[props] * count if props else None,
        event_time=np.full(count, first.event_time, dtype=np.int64),
        sequence_id=sequence_id.astype(np.int64, copy=False),
    )


def _within(columns: np.ndarray, span: tuple[int, int]) -> bool:
    return bool(columns.min() >= span[0] and columns.max() < span[1])


def _varint_column(block: np.ndarray) -> np.ndarray | None:
    """Decode one fixed-width varint per row of ``block`` (a uint8 matrix), or None if invalid."""
    width = block.shape[1]
    continuation = (block & 0x80) != 0
    if continuation[:, -1].any() or (width > 1 and not continuation[:, :-1].all()):
        return None
    if width > 9:
        return None
    shifts = (7 * np.arange(width, dtype=np.uint64)).astype(np.uint64)
    values: np.ndarray = ((block & 0x7F).astype(np.uint64) << shifts).sum(axis=1)
    return values.astype(np.int64)


def _sequence_id_span(smm: bytes) -> tuple[int, int] | None:
    """Byte range of the sequence_id varint value inside a serialized SMM, if present."""
    pos = 0
    span = None
    while pos < len(smm):
        tag, pos = _read_varint(smm, pos)
        wire_type = tag & 7
        if wire_type == 0:
            start = pos
            _, pos = _read_varint(smm, pos)
            if tag == _SEQUENCE_ID_TAG:
                span = (start, pos)
        elif wire_type == 2:
            size, pos = _read_varint(smm, pos)
            pos += size
        else:
            return None
    return span


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise CorruptPayloadError("varint runs past the end of a SingleMessageMetadata")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


# --- the general path ----------------------------------------------------------------------
#
# SingleMessageMetadata is parsed by hand here: it is the one structure read once per message,
# and a dedicated loop over its few fields is several times faster than building a protobuf
# object per message. Field numbers are those of ``SingleMessageMetadata`` in the .proto;
# the unit tests compare the result with the protobuf runtime's parse.

_smm_cache: dict[bytes, pb.SingleMessageMetadata] = {}
_kv_cache: dict[bytes, tuple[str, str]] = {}

_TAG_PROPERTY = 0x0A  # 1, length-delimited KeyValue
_TAG_KEY = 0x12  # 2, string
_TAG_PAYLOAD_SIZE = 0x18  # 3
_TAG_COMPACTED_OUT = 0x20  # 4
_TAG_EVENT_TIME = 0x28  # 5
_TAG_KEY_B64 = 0x30  # 6
_TAG_SEQUENCE_ID = 0x40  # 8
_TAG_NULL_VALUE = 0x48  # 9
_TAG_NULL_KEY = 0x50  # 10


def _parse_smm(raw: bytes) -> pb.SingleMessageMetadata:
    smm = _smm_cache.get(raw)
    if smm is None:
        smm = pb.SingleMessageMetadata()
        try:
            smm.ParseFromString(raw)
        except DecodeError as exc:
            raise CorruptPayloadError("a SingleMessageMetadata in a batch does not parse") from exc
        if len(_smm_cache) >= _SMM_CACHE_LIMIT:
            _smm_cache.clear()
        _smm_cache[raw] = smm
    return smm


def _key_value(raw: bytes) -> tuple[str, str]:
    pair = _kv_cache.get(raw)
    if pair is None:
        kv = pb.KeyValue()
        try:
            kv.ParseFromString(raw)
        except DecodeError as exc:
            raise CorruptPayloadError("a message property does not parse") from exc
        pair = (kv.key, kv.value)
        if len(_kv_cache) >= _SMM_CACHE_LIMIT:
            _kv_cache.clear()
        _kv_cache[raw] = pair
    return pair


def _walk_batch(
    info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes, count: int
) -> MessageColumns:
    try:
        return _walk(info, metadata.sequence_id, payload, count)
    except (IndexError, ValueError, OverflowError) as exc:
        raise CorruptPayloadError(f"batch of {count} messages is malformed: {exc}") from exc


def _walk(info: EntryInfo, base_sequence: int, data: bytes, count: int) -> MessageColumns:  # noqa: PLR0912, PLR0915
    view = memoryview(data)
    end_of_batch = len(data)
    chunks: list[memoryview] = []
    lengths: list[int] = []
    keys: list[bytes | None] = []
    props: list[Properties] = []
    events: list[int] = []
    sequences: list[int] = []
    nulls: list[bool] = []
    dropped: list[int] = []
    pos = 0
    for index in range(count):
        p = pos + 4
        end = p + int.from_bytes(data[pos:p], "big")
        key: bytes | None = None
        key_b64 = null_key = null_value = False
        pairs: Properties = ()
        event = size = 0
        sequence = base_sequence + index
        while p < end:
            tag = data[p]
            p += 1
            if tag & 0x80:  # field 16 and up: a multi-byte tag, never a field read here
                tag &= 0x7F
                shift = 7
                while True:
                    byte = data[p]
                    p += 1
                    tag |= (byte & 0x7F) << shift
                    if not byte & 0x80:
                        break
                    shift += 7
            wire_type = tag & 7
            if wire_type == 0:
                value = data[p]
                p += 1
                if value & 0x80:
                    value &= 0x7F
                    shift = 7
                    while True:
                        byte = data[p]
                        p += 1
                        value |= (byte & 0x7F) << shift
                        if not byte & 0x80:
                            break
                        shift += 7
                if tag == _TAG_PAYLOAD_SIZE:
                    size = value
                elif tag == _TAG_SEQUENCE_ID:
                    sequence = value
                elif tag == _TAG_EVENT_TIME:
                    event = value
                elif tag == _TAG_NULL_VALUE:
                    null_value = value != 0
                elif tag == _TAG_KEY_B64:
                    key_b64 = value != 0
                elif tag == _TAG_NULL_KEY:
                    null_key = value != 0
                elif tag == _TAG_COMPACTED_OUT and value:
                    dropped.append(index)
            elif wire_type == 2:
                length = data[p]
                p += 1
                if length & 0x80:
                    length &= 0x7F
                    shift = 7
                    while True:
                        byte = data[p]
                        p += 1
                        length |= (byte & 0x7F) << shift
                        if not byte & 0x80:
                            break
                        shift += 7
                if tag == _TAG_KEY:
                    key = data[p : p + length]
                elif tag == _TAG_PROPERTY:
                    pairs = (*pairs, _key_value(data[p : p + length]))
                p += length
            elif wire_type == 5:
                p += 4
            elif wire_type == 1:
                p += 8
            else:
                raise ValueError(f"wire type {wire_type} in a SingleMessageMetadata")
        if p != end or end + size > end_of_batch:
            raise ValueError("a message runs past the end of its batch")
        if null_value:
            lengths.append(0)
        else:
            chunks.append(view[end : end + size])
            lengths.append(size)
        if key is not None and not null_key:
            keys.append(message_key(key, True, True) if key_b64 else key)
        else:
            keys.append(None)
        props.append(pairs)
        events.append(event)
        sequences.append(sequence)
        nulls.append(null_value)
        pos = end + size
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    columns = MessageColumns(
        entry=info,
        count=count,
        batch_index=np.arange(count, dtype=np.int32),
        values=b"".join(chunks),
        value_offsets=offsets,
        null_value=np.array(nulls) if any(nulls) else None,
        key=keys if any(k is not None for k in keys) else None,
        properties=props if any(props) else None,
        event_time=np.array(events, dtype=np.int64),
        sequence_id=np.array(sequences, dtype=np.uint64).astype(np.int64),
    )
    if not dropped:
        return columns
    keep = np.setdiff1d(np.arange(count), dropped)
    return columns.take(keep)
