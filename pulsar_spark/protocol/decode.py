"""Decoding an entry's (uncompressed) payload into :class:`MessageColumns`.

How this works
--------------
An entry is either one message, or a batch when ``MessageMetadata.num_messages_in_batch`` is
*present* (a batch of one is still a batch). A batch payload is ``n`` records::

    [u32 size][SingleMessageMetadata][payload] ... n times

Three decoders read batches, fastest first; each either gives the exact result or declines:

- the *uniform* path here: most batches without keys from one producer have records of one
  length whose SingleMessageMetadata (SMM) differ only in the ``sequence_id`` varint. numpy
  checks that on the ``n x record_length`` byte matrix and reads all n payloads and sequence
  ids at once;
- :mod:`batch_scan`: any batch whose SMMs a protobuf writer laid out in field order (keys,
  properties, varying sizes), parsed all at once with numpy;
- :mod:`batch_walk`: the reference, one record after the other, for small batches and for
  what the others decline.

:func:`decode_entries` decodes several entries at once: the batches the uniform path does not
take are laid end to end and scanned together, so that the scan's fixed cost (about 0.2 ms) is
paid once for all of them; if that scan declines, each is scanned or walked alone.

Values, keys and properties point into the payload (:class:`Spans`), or into the batches laid
end to end; nothing else is copied here.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
from google.protobuf.message import DecodeError

from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.batch_fields import message_key, to_columns, to_columns_each
from pulsar_spark.protocol.batch_scan import scan_batch, scan_batches
from pulsar_spark.protocol.batch_walk import read_varint, walk_batch
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns, PropertyColumns, Spans
from pulsar_spark.protocol.single_runs import single

_U32 = struct.Struct(">I")
_SEQUENCE_ID_TAG = 0x40  # SingleMessageMetadata field 8, varint
# Below this many messages the numpy scan costs more than walking the records: the scan has a
# fixed cost of about 40 walked messages (measured with keys and two properties per message).
SCAN_MIN_MESSAGES = 48


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
        schema_version=metadata.schema_version if metadata.schema_version else None,
    )


def is_batch(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("num_messages_in_batch")


def decode_entry(info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode one entry whose payload is already decompressed (and reassembled, if chunked)."""
    return decode_entries([(info, metadata, payload)])[0]


Entry = tuple[EntryInfo, pb.MessageMetadata, bytes]
"""An entry to decode: its info, metadata and decompressed payload."""


def decode_entries(entries: Sequence[Entry]) -> list[MessageColumns]:
    """Decode several entries, in order. The batches the uniform path does not take are
    scanned together (:func:`~pulsar_spark.protocol.batch_scan.scan_batches`): the scan's
    fixed cost is paid once for all of them."""
    decoded: list[MessageColumns | None] = []
    scanned: list[Entry] = []
    for info, metadata, payload in entries:
        if not is_batch(metadata):
            decoded.append(single(info, metadata, payload))
            continue
        count = metadata.num_messages_in_batch
        if count <= 0:
            raise CorruptPayloadError(f"batch announces {count} messages")
        fast = _uniform_batch(info, metadata, payload, count)
        decoded.append(fast)
        if fast is None:
            scanned.append((info, metadata, payload))
    found = iter(_scan(scanned))
    return [next(found) if columns is None else columns for columns in decoded]


def _scan(entries: Sequence[Entry]) -> list[MessageColumns]:
    """Batches decoded by one scan of them all, else each by its own scan or walk."""
    counts = [metadata.num_messages_in_batch for _, metadata, _ in entries]
    if len(entries) > 1 and sum(counts) >= SCAN_MIN_MESSAGES:
        data = b"".join(payload for _, _, payload in entries)
        sizes = [len(payload) for _, _, payload in entries]
        bases = [metadata.sequence_id for _, metadata, _ in entries]
        found = scan_batches(data, sizes, counts, bases)
        if found is not None:
            return to_columns_each([info for info, _, _ in entries], data, found, counts)
    return [_scan_one(*entry) for entry in entries]


def _scan_one(info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    count = metadata.num_messages_in_batch
    fields = (
        scan_batch(payload, count, metadata.sequence_id) if count >= SCAN_MIN_MESSAGES else None
    )
    if fields is None:
        fields = walk_batch(payload, count, metadata.sequence_id)
    return to_columns(info, payload, fields)


def _properties(pairs: object) -> PropertyColumns | None:
    rows = tuple((kv.key, kv.value) for kv in pairs)  # type: ignore[attr-defined]
    return PropertyColumns.of([rows]) if rows else None


def _repeated(count: int, key: bytes | None) -> Spans | None:
    """The key column of ``count`` messages that share one key (None: no key)."""
    if key is None:
        return None
    return Spans(key, np.zeros(count, dtype=np.int64), np.full(count, len(key), dtype=np.int64))


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
    data_start = 4 + smm_size + record * np.arange(count, dtype=np.int64)
    return _columns_from_first(info, first, data_start, payload, sequence_id)


def _columns_from_first(
    info: EntryInfo,
    first: pb.SingleMessageMetadata,
    value_start: np.ndarray,
    payload: bytes,
    sequence_id: np.ndarray,
) -> MessageColumns:
    count = len(value_start)
    null_value = first.null_value
    key = message_key(
        first.partition_key,
        first.HasField("partition_key"),
        first.partition_key_b64_encoded,
        first.null_partition_key,
    )
    props = _properties(first.properties)
    every_first = np.zeros(count, dtype=np.intp)
    return MessageColumns(
        entry=info,
        count=count,
        batch_index=np.arange(count, dtype=np.int32),
        values=Spans(
            payload,
            value_start,
            np.full(count, 0 if null_value else first.payload_size, dtype=np.int64),
            np.zeros(count, dtype=np.bool_) if null_value else None,
        ),
        key=_repeated(count, key),
        properties=None if props is None else props.take(every_first),
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
    """Byte range of the sequence_id varint value inside a serialized SMM, if present (the
    SMM has already been parsed by protobuf, so no varint runs past its end)."""
    pos = 0
    span = None
    while pos < len(smm):
        tag, pos = read_varint(smm, pos)
        wire_type = tag & 7
        if wire_type == 0:
            start = pos
            _, pos = read_varint(smm, pos)
            if tag == _SEQUENCE_ID_TAG:
                span = (start, pos)
        elif wire_type == 2:
            size, pos = read_varint(smm, pos)
            pos += size
        else:
            return None
    return span


def _parse_smm(raw: bytes) -> pb.SingleMessageMetadata:
    smm = pb.SingleMessageMetadata()
    try:
        smm.ParseFromString(raw)
    except DecodeError as exc:
        raise CorruptPayloadError("a SingleMessageMetadata in a batch does not parse") from exc
    return smm
