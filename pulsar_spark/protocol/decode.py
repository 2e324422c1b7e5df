"""Decoding an entry's (uncompressed) payload into :class:`MessageColumns`.

How this works
--------------
An entry is either one message, or a batch when ``MessageMetadata.num_messages_in_batch`` is
*present* (a batch of one is still a batch). A batch payload is ``n`` records::

    [u32 size][SingleMessageMetadata][payload] ... n times

Three decoders read batches, fastest first; each either gives the exact result or declines:

- the *uniform* path here: most batches without keys from one producer have records of one
  length whose SingleMessageMetadata (SMM) differ only in the ``sequence_id`` varint. numpy
  checks that eight bytes of every record at a time (strided uint64 views of the payload) and
  reads all n payloads and sequence ids at once;
- :mod:`batch_scan`: any batch whose SMMs a protobuf writer laid out in field order (keys,
  properties, varying sizes), parsed all at once with numpy;
- :mod:`batch_walk`: the reference, one record after the other, for small batches and for
  what the others decline.

:func:`decode_entries` decodes several entries at once, so that each path's fixed cost is paid
once for all of them. Consecutive batches whose records are of one length are laid end to end
and tried on the uniform path together (a producer's batches differ only in their sequence ids);
if they differ elsewhere (a key per batch), each is tried alone. The batches the uniform path
does not take are laid end to end and scanned together (the scan's fixed cost is about 0.2 ms);
if that scan declines, each is scanned or walked alone.

A reader that reads every message of such a group asks :func:`decode_group` for one
:class:`MessageColumns` of them all instead, with each row's entry fields alongside
(:class:`EntryRows`): nothing is then cut per entry, here or in the Arrow layer, and batches of
a message or a few (producers sending slowly) cost about what one-message entries do.

Values, keys and properties point into the payload (:class:`Spans`), or into the batches laid
end to end; nothing else is copied here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import replace
from itertools import groupby

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError

from pulsar_spark.common.spans import Spans
from pulsar_spark.common.varints import decode_fixed, decode_nine, read_varint
from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.batch_fields import (
    BatchFields,
    message_key,
    split_entries,
    to_columns,
    to_columns_each,
)
from pulsar_spark.protocol.batch_scan import scan_batch, scan_batches
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.messages import (
    INT64_MAX,
    MAX_MILLIS,
    EntryInfo,
    EntryRows,
    MessageColumns,
    PropertyColumns,
    checked_times,
    out_of_range,
)
from pulsar_spark.protocol.single_runs import single

_U32 = struct.Struct(">I")
_U64 = npt.NDArray[np.uint64]
_SEQUENCE_ID_TAG = 0x40  # SingleMessageMetadata field 8, varint
# Below this many messages the numpy scan costs more than walking the records: the scan has a
# fixed cost of about 40 walked messages (measured with keys and two properties per message).
SCAN_MIN_MESSAGES = 48


def entry_info(
    metadata: pb.MessageMetadata, ledger_id: int, entry_id: int, partition: int
) -> EntryInfo:
    """The fields every message of an entry shares. Ids and a publish time its columns cannot
    hold fail with :class:`CorruptPayloadError`."""
    publish_time = metadata.publish_time
    if ledger_id > INT64_MAX or entry_id > INT64_MAX or publish_time > MAX_MILLIS:
        raise out_of_range(ledger_id, entry_id, publish_time)
    # positional: made once per entry, and keywords cost a third more
    return EntryInfo(
        ledger_id,
        entry_id,
        partition,
        metadata.producer_name,
        publish_time,
        metadata.replicated_from if metadata.HasField("replicated_from") else None,
        metadata.schema_version or None,
    )


def is_batch(metadata: pb.MessageMetadata) -> bool:
    return metadata.HasField("num_messages_in_batch")


def decode_entry(info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode one entry whose payload is already decompressed (and reassembled, if chunked)."""
    return decode_entries([(info, metadata, payload)])[0]


Entry = tuple[EntryInfo, pb.MessageMetadata, bytes]
"""An entry to decode: its info, metadata and decompressed payload."""


def decode_entries(entries: Sequence[Entry]) -> list[MessageColumns]:
    """Decode several entries, in order. Batches whose records are all of one length are tried
    on the uniform path together; the batches it does not take are scanned together
    (:func:`~pulsar_spark.protocol.batch_scan.scan_batches`): each path's fixed cost is paid
    once for all of them."""
    decoded: list[MessageColumns | None] = []
    batches: list[Entry] = []
    for info, metadata, payload in entries:
        if not is_batch(metadata):
            decoded.append(single(info, metadata, payload))
            continue
        if metadata.num_messages_in_batch <= 0:
            raise CorruptPayloadError(f"batch announces {metadata.num_messages_in_batch} messages")
        decoded.append(None)
        batches.append((info, metadata, payload))
    fast = [columns for run in _one_length_runs(batches) for columns in _uniform_run(run)]
    scanned = iter(_scan([e for e, columns in zip(batches, fast, strict=True) if columns is None]))
    batched = iter([columns if columns is not None else next(scanned) for columns in fast])
    return [columns if columns is not None else next(batched) for columns in decoded]


def decode_group(entries: Sequence[Entry]) -> MessageColumns | None:
    """Consecutive batches as one :class:`MessageColumns` whose ``rows`` say which entry each
    row is of, read at once on the uniform path or by one scan and never cut per entry (here
    or in the Arrow layer). None when one is not a batch, when neither path takes them all
    together, or when a batch has compacted-out messages: :func:`decode_entries` then decodes
    them entry by entry."""
    if len(entries) < 2 or not all(is_batch(metadata) for _, metadata, _ in entries):
        return None
    counts = np.array([m.num_messages_in_batch for _, m, _ in entries], dtype=np.int64)
    if (counts <= 0).any():
        return None
    whole = None
    lengths = {_record_length(entry) for entry in entries}
    if len(lengths) == 1 and None not in lengths:
        whole = _uniform_whole(entries)
    if whole is None:
        together = _scan_together(entries)
        if together is None or together[1].compacted_out.any():
            return None
        whole = to_columns(entries[0][0], *together)
    rows = EntryRows.of([info for info, _, _ in entries], counts)
    return replace(whole, batch_index=_within_batch(counts).astype(np.int32), rows=rows)


def _within_batch(counts: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Each row's index in its batch, for batches of ``counts`` rows laid end to end."""
    sizes = np.asarray(counts, dtype=np.int64)
    firsts = np.cumsum(sizes) - sizes
    within: npt.NDArray[np.int64] = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(
        firsts, sizes
    )
    return within


def _scan(entries: Sequence[Entry]) -> list[MessageColumns]:
    """Batches decoded by one scan of them all, else each by its own scan or walk."""
    together = _scan_together(entries)
    if together is None:
        return [_scan_one(*entry) for entry in entries]
    data, found = together
    counts = [metadata.num_messages_in_batch for _, metadata, _ in entries]
    return to_columns_each([info for info, _, _ in entries], data, found, counts)


def _scan_together(entries: Sequence[Entry]) -> tuple[bytes, BatchFields] | None:
    """Several batches laid end to end and the fields one scan finds in them all; None when
    they are too few messages for a scan, or the scan declines."""
    counts = [metadata.num_messages_in_batch for _, metadata, _ in entries]
    if len(entries) < 2 or sum(counts) < SCAN_MIN_MESSAGES:
        return None
    data = b"".join(payload for _, _, payload in entries)
    sizes = [len(payload) for _, _, payload in entries]
    bases = [metadata.sequence_id for _, metadata, _ in entries]
    found = scan_batches(data, sizes, counts, bases)
    return None if found is None else (data, found)


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


def _one_length_runs(batches: Sequence[Entry]) -> Iterator[list[Entry]]:
    """Consecutive batches whose records are all of one length (the same for each), together;
    a batch that is not of such records alone."""
    for record, run in groupby(batches, key=_record_length):
        if record is None:
            yield from ([entry] for entry in run)
        else:
            yield list(run)


def _record_length(entry: Entry) -> int | None:
    """The length of each record of a batch whose records could all be of one length, else
    None."""
    _, metadata, payload = entry
    count = metadata.num_messages_in_batch
    if count < 2 or len(payload) % count:
        return None
    record = len(payload) // count
    return record if record >= 8 else None  # too short to read eight bytes of each at once


def _uniform_run(run: list[Entry]) -> list[MessageColumns | None]:
    """Each batch of ``run`` (see :func:`_one_length_runs`) on the uniform path, or None where
    it declines. The first is tried alone: when it is not uniform, no run that holds it is, and
    each of the others is tried alone (messages with keys of one length); when it is, the
    others together, else again each alone (batches with a key each)."""
    head = _uniform(run[:1])
    if head is not None and len(run) > 1:
        rest = _uniform(run[1:])
        if rest is not None:
            return [*head, *rest]
    return [None if head is None else head[0], *(_uniform_alone(entry) for entry in run[1:])]


def _uniform_alone(entry: Entry) -> MessageColumns | None:
    columns = _uniform([entry])
    return None if columns is None else columns[0]


def _uniform(entries: Sequence[Entry]) -> list[MessageColumns] | None:
    """Batches whose records are all of one length and differ from the very first record only
    in the ``sequence_id`` value, read at once over their payloads laid end to end, one
    :class:`MessageColumns` each; None when they are not such batches."""
    whole = _uniform_whole(entries)
    if whole is None or len(entries) == 1:
        return None if whole is None else [whole]
    infos = [info for info, _, _ in entries]
    return split_entries(
        whole, infos, [metadata.num_messages_in_batch for _, metadata, _ in entries]
    )


def _uniform_whole(entries: Sequence[Entry]) -> MessageColumns | None:
    """What :func:`_uniform` reads, as the messages of its first entry (not yet cut)."""
    record = _record_length(entries[0])
    if record is None:
        return None
    payload = entries[0][2] if len(entries) == 1 else b"".join(e[2] for e in entries)
    count = len(payload) // record
    (smm_size,) = _U32.unpack_from(payload, 0)
    header = 4 + smm_size
    if header > record:
        return None
    smm = payload[4:header]
    first = _parse_smm(smm)
    if header + first.payload_size != record or first.compacted_out:
        return None
    seq_span = _sequence_id_span(smm)
    varies = None if seq_span is None else (4 + seq_span[0], 4 + seq_span[1])
    if _differ_elsewhere(payload, count, record, header, varies):
        return None
    counts = [metadata.num_messages_in_batch for _, metadata, _ in entries]
    if varies is not None:
        sequence_id = _varint_rows(payload, count, record, varies)
        if sequence_id is None:
            return None
    else:  # each batch counts up from its own sequence id
        bases = np.array([metadata.sequence_id for _, metadata, _ in entries], dtype=np.uint64)
        within = _within_batch(counts).astype(np.uint64)
        sequence_id = (within + np.repeat(bases, counts)).view(np.int64)  # wraps, as a long does
    value_start = header + record * np.arange(count, dtype=np.int64)
    return _columns_from_first(entries[0][0], first, value_start, payload, sequence_id)


def _columns_from_first(
    info: EntryInfo,
    first: pb.SingleMessageMetadata,
    value_start: np.ndarray,
    payload: bytes,
    sequence_id: np.ndarray,
) -> MessageColumns:
    """The columns of the records at ``value_start``, where all but the value and sequence id
    are the first record's, as the messages of one entry (``info``)."""
    count = len(value_start)
    null_value = first.null_value
    key = message_key(
        first.partition_key,
        first.HasField("partition_key"),
        first.partition_key_b64_encoded,
        first.null_partition_key,
    )
    props = _properties(first.properties)
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
        properties=None if props is None else props.take(np.zeros(count, dtype=np.intp)),
        event_time=checked_times(np.full(count, first.event_time, dtype=np.uint64), "event time"),
        sequence_id=sequence_id.astype(np.int64, copy=False),
    )


def _row_words(payload: bytes, count: int, record: int, at: int) -> _U64:
    """The eight bytes at offset ``at`` of each of ``count`` records of ``record`` bytes, as
    little-endian uint64 (a strided view; ``at + 8`` must not pass a record's end)."""
    words: _U64 = np.ndarray(
        shape=(count,), dtype="<u8", buffer=payload, offset=at, strides=(record,)
    )
    return words


def _differ_elsewhere(
    payload: bytes, count: int, record: int, size: int, varies: tuple[int, int] | None
) -> bool:
    """Whether any record's first ``size`` bytes differ from the first record's outside the
    byte range ``varies``, compared eight bytes of every record at a time."""
    mask = bytearray(b"\xff" * size) + bytes(8)
    if varies is not None:
        mask[varies[0] : varies[1]] = bytes(varies[1] - varies[0])
    for at in sorted({min(start, record - 8) for start in range(0, size, 8)}):
        compared = int.from_bytes(mask[at : at + 8], "little")
        if compared:
            words = _row_words(payload, count, record, at)
            if int(np.bitwise_or.reduce(words ^ words[0])) & compared:
                return True
    return False


def _varint_rows(
    payload: bytes, count: int, record: int, span: tuple[int, int]
) -> npt.NDArray[np.int64] | None:
    """The varint filling byte range ``span`` of each record; None if one is not exactly
    that long, or longer than nine bytes (a value over 2**63)."""
    start, stop = span
    if stop - start > 9:
        return None
    at = min(start, record - 8)
    words = _row_words(payload, count, record, at)
    if start > at:
        words = words >> np.uint64(8 * (start - at))
    if stop - start == 9:
        ninth = np.frombuffer(payload, dtype=np.uint8)[start + 8 :: record]
        values = decode_nine(words, ninth)
    else:
        values = decode_fixed(words, stop - start)
    return None if values is None else values.view(np.int64)


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
