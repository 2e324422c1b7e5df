"""Producer-side encoding: batches and chunks, laid out exactly as Java and C++ clients do.

A batch payload is ``[u32 size][SingleMessageMetadata][payload]`` per message. Its
MessageMetadata carries the lowest sequence id, ``highest_sequence_id``, and always
``num_messages_in_batch`` (even for one message: presence is what marks a batch). Compression
applies to the whole batch payload; ``uncompressed_size`` is its size before.

A message larger than the broker's maximum is sent unbatched in chunks: the compressed payload
is cut into pieces that each fit, every piece carrying the same sequence id, ``uuid``,
``chunk_id``, ``num_chunks_from_msg`` and ``total_chunk_msg_size``.

SingleMessageMetadata is encoded by hand (fields in number order, as protobuf serializers
write them): it is the one structure built once per message, and doing so without
intermediate objects is several times faster. Unit tests compare it with the protobuf runtime.

Many messages at once travel as :class:`OutgoingColumns` (payloads, keys and properties laid
end to end in numpy arrays). :func:`encode_records` writes their batch records with numpy,
field by field for every message at once, into the same bytes :meth:`BatchBuilder.add` writes
one message at a time; :meth:`BatchBuilder.add_records` then adds as many of them as fit the
batch.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.byte_rows import Short, interleave, pack, varints
from pulsar_spark.common.varints import encode_varint
from pulsar_spark.errors import LocalProtocolError
from pulsar_spark.protocol import compression, pb

_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message to publish. ``key`` is the partition key as it travels (base64 if binary)."""

    value: bytes | None
    key: str | None = None
    key_is_base64: bool = False
    properties: tuple[tuple[str, str], ...] = ()
    event_time: int = 0  # ms since epoch; 0 = not set

    @property
    def size(self) -> int:
        return len(self.value) if self.value is not None else 0


def routing_key(key: bytes | str | None) -> tuple[str | None, bool]:
    """The partition key string for a key column value: text as is, bytes base64-encoded."""
    if key is None:
        return None, False
    if isinstance(key, str):
        return key, False
    return base64.b64encode(key).decode("ascii"), True


_CACHE_LIMIT = 4096
_properties_cache: dict[tuple[tuple[str, str], ...], bytes] = {}


def _length_delimited(tag: bytes, data: bytes) -> bytes:
    return tag + encode_varint(len(data)) + data


def _properties(properties: tuple[tuple[str, str], ...]) -> bytes:
    """Fields 1 of a SingleMessageMetadata; cached, since rows tend to repeat properties."""
    encoded = _properties_cache.get(properties)
    if encoded is None:
        encoded = b"".join(
            _length_delimited(
                b"\x0a",
                _length_delimited(b"\x0a", k.encode()) + _length_delimited(b"\x12", v.encode()),
            )
            for k, v in properties
        )
        if len(_properties_cache) >= _CACHE_LIMIT:
            _properties_cache.clear()
        _properties_cache[properties] = encoded
    return encoded


def encode_single_message_metadata(message: OutgoingMessage, sequence_id: int) -> bytes:
    """Serialize the SingleMessageMetadata for ``message`` (fields 1, 2, 3, 5, 6, 8, 9)."""
    out = _properties(message.properties) if message.properties else b""
    if message.key is not None:
        out += _length_delimited(b"\x12", message.key.encode())
    out += b"\x18" + encode_varint(message.size)
    if message.event_time:
        out += b"\x28" + encode_varint(message.event_time)
    if message.key_is_base64:
        out += b"\x30\x01"
    out += b"\x40" + encode_varint(sequence_id)
    if message.value is None:
        out += b"\x48\x01"
    return out


class BatchBuilder:
    """Accumulates messages into one batch payload (pure: no I/O, no clock)."""

    def __init__(self) -> None:
        self._parts: list[bytes | memoryview] = []
        self._key: str | None = None
        self._key_is_base64 = False
        self.count = 0
        self.size = 0
        self.first_sequence_id = -1

    def _reset(self) -> None:
        self._parts = []
        self.count = self.size = 0
        self.first_sequence_id = -1

    def add(self, message: OutgoingMessage, sequence_id: int) -> None:
        smm = encode_single_message_metadata(message, sequence_id)
        record = _U32.pack(len(smm)) + smm + (message.value or b"")
        self._append(record, 1, sequence_id, message.key, message.key_is_base64)

    def add_records(self, records: Records, start: int, max_messages: int, max_bytes: int) -> int:
        """Add records from ``start`` on, as many as :meth:`add` would before the batch is full.

        That is, until the batch holds ``max_messages`` messages or ``max_bytes`` bytes or
        more (the record that crosses the byte limit is added too), and at least one. Returns
        how many were added.
        """
        stop = records.stop_for(start, max_messages - self.count, max_bytes - self.size)
        key, key_is_base64 = records.columns.key(start)
        span = records.span(start, stop)
        self._append(span, stop - start, records.first_sequence_id + start, key, key_is_base64)
        return stop - start

    def _append(
        self,
        records: bytes | memoryview,
        count: int,
        first_sequence_id: int,
        key: str | None,
        key_is_base64: bool,
    ) -> None:
        if not self.count:
            self.first_sequence_id = first_sequence_id
            self._key = key
            self._key_is_base64 = key_is_base64
        self._parts.append(records)
        self.count += count
        self.size += len(records)

    def build(
        self,
        *,
        producer_name: str,
        publish_time: int,
        codec: int,
        schema_version: bytes | None = None,
    ) -> tuple[pb.MessageMetadata, bytes]:
        """The batch's MessageMetadata and (compressed) payload; the builder is then empty.

        ``schema_version`` is the version the broker gave the producer's schema, if any."""
        if not self.count:
            raise LocalProtocolError("cannot build an empty batch")
        raw = b"".join(self._parts)
        metadata = pb.MessageMetadata(
            producer_name=producer_name,
            sequence_id=self.first_sequence_id,
            highest_sequence_id=self.first_sequence_id + self.count - 1,
            publish_time=publish_time,
            num_messages_in_batch=self.count,
            compression=codec,  # type: ignore[arg-type]
            uncompressed_size=len(raw),
        )
        if self._key is not None:
            metadata.partition_key = self._key
            metadata.partition_key_b64_encoded = self._key_is_base64
        if schema_version:
            metadata.schema_version = schema_version
        payload = compression.compress(codec, raw)
        self._reset()
        return metadata, payload


# --- many messages at once -------------------------------------------------------------------

_Bytes = npt.NDArray[np.uint8]
_Ints = npt.NDArray[np.int64]
_Flags = npt.NDArray[np.bool_]
_T = TypeVar("_T", bound=np.generic)


@dataclass(frozen=True, slots=True)
class Blobs:
    """Byte strings laid end to end: string ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    data: _Bytes
    offsets: _Ints  # one more than there are strings; need not start at 0

    @classmethod
    def of(cls, items: Sequence[bytes]) -> Blobs:
        offsets = np.zeros(len(items) + 1, dtype=np.int64)
        np.cumsum([len(item) for item in items], out=offsets[1:])
        return cls(np.frombuffer(b"".join(items), dtype=np.uint8), offsets)

    @property
    def lengths(self) -> _Ints:
        return np.diff(self.offsets)

    def joined(self) -> _Bytes:
        """Every string, one after the other."""
        return self.data[self.offsets[0] : self.offsets[-1]]

    def __getitem__(self, index: int) -> bytes:
        return self.data[self.offsets[index] : self.offsets[index + 1]].tobytes()

    def slice(self, start: int, stop: int) -> Blobs:
        return Blobs(self.data, self.offsets[start : stop + 1])


@dataclass(frozen=True, slots=True)
class PropertyBlobs:
    """The properties of messages, as UTF-8: message ``i`` has the pairs ``offsets[i]`` to
    ``offsets[i + 1]`` of ``names`` and ``values``, in order."""

    offsets: _Ints  # one more than there are messages; need not start at 0
    names: Blobs  # one per pair
    values: Blobs

    @classmethod
    def of(cls, rows: Sequence[tuple[tuple[str, str], ...]]) -> PropertyBlobs:
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum([len(row) for row in rows], out=offsets[1:])
        return cls(
            offsets,
            Blobs.of([name.encode() for row in rows for name, _ in row]),
            Blobs.of([value.encode() for row in rows for _, value in row]),
        )

    def __getitem__(self, index: int) -> tuple[tuple[str, str], ...]:
        pairs = range(int(self.offsets[index]), int(self.offsets[index + 1]))
        return tuple((self.names[j].decode(), self.values[j].decode()) for j in pairs)

    def slice(self, start: int, stop: int) -> PropertyBlobs:
        return PropertyBlobs(self.offsets[start : stop + 1], self.names, self.values)

    def encoded(self) -> Blobs | None:
        """Every message's SingleMessageMetadata field 1 (one KeyValue per pair), as
        :func:`encode_single_message_metadata` writes it; None when no message has a pair.

        A pair is ``0x0a varint(len(kv)) kv`` with ``kv = 0x0a varint(len(name)) name 0x12
        varint(len(value)) value``: every pair's pieces are built at once and interleaved, pair
        after pair, and a message's field is its pairs, which lie next to each other."""
        first, last = int(self.offsets[0]), int(self.offsets[-1])
        if first == last:
            return None
        names, values = self.names.slice(first, last), self.values.slice(first, last)
        name_head = varints(names.lengths, 0x0A)
        value_head = varints(values.lengths, 0x12)
        pair_sizes = name_head.lengths + names.lengths + value_head.lengths + values.lengths
        pieces = _pieces([varints(pair_sizes, 0x0A), name_head, names, value_head, values])
        data, ends = interleave(pieces, last - first)
        pair_offsets = np.zeros(last - first + 1, dtype=np.int64)
        pair_offsets[1:] = ends
        return Blobs(np.frombuffer(data, dtype=np.uint8), pair_offsets[self.offsets - first])


@dataclass(frozen=True, slots=True)
class OutgoingColumns:
    """Messages to publish, column by column; row ``i`` is what :meth:`message` returns.

    ``values`` holds every payload, a null one as empty and flagged in ``null_values``.
    ``keys`` holds the partition keys as UTF-8 (empty where ``has_key`` is False), base64
    text if ``keys_are_base64``. A column no row uses is None (``properties`` may also be there
    with no pair at all).
    """

    values: Blobs
    null_values: _Flags | None = None
    keys: Blobs | None = None
    has_key: _Flags | None = None
    keys_are_base64: bool = False
    properties: PropertyBlobs | None = None
    event_times: _Ints | None = None  # ms since epoch; 0 = not set

    def __len__(self) -> int:
        return len(self.values.offsets) - 1

    def key(self, index: int) -> tuple[str | None, bool]:
        """The partition key of row ``index`` and whether it is base64, as in OutgoingMessage."""
        if self.keys is None or self.has_key is None or not self.has_key[index]:
            return None, False
        return self.keys[index].decode(), self.keys_are_base64

    def message(self, index: int) -> OutgoingMessage:
        """Row ``index`` as one message."""
        key, key_is_base64 = self.key(index)
        null = self.null_values is not None and bool(self.null_values[index])
        return OutgoingMessage(
            None if null else self.values[index],
            key,
            key_is_base64,
            self.properties[index] if self.properties is not None else (),
            int(self.event_times[index]) if self.event_times is not None else 0,
        )

    def sizes(self) -> _Ints:
        """The payload size of every row."""
        return self.values.lengths

    def larger_than(self, size: int) -> list[int]:
        """The rows whose payload is larger than ``size`` bytes."""
        rows: list[int] = np.flatnonzero(self.sizes() > size).tolist()
        return rows

    def slice(self, start: int, stop: int) -> OutgoingColumns:
        """Rows ``start`` to ``stop`` (exclusive), sharing the arrays."""
        return OutgoingColumns(
            self.values.slice(start, stop),
            _rows(self.null_values, start, stop),
            self.keys.slice(start, stop) if self.keys is not None else None,
            _rows(self.has_key, start, stop),
            self.keys_are_base64,
            self.properties.slice(start, stop) if self.properties is not None else None,
            _rows(self.event_times, start, stop),
        )


def _rows(column: npt.NDArray[_T] | None, start: int, stop: int) -> npt.NDArray[_T] | None:
    return column[start:stop] if column is not None else None


@dataclass(frozen=True, slots=True)
class Records:
    """The batch records of consecutive messages, from :func:`encode_records`."""

    data: memoryview
    ends: _Ints  # where each record ends in ``data``
    first_sequence_id: int
    columns: OutgoingColumns

    def __len__(self) -> int:
        return len(self.ends)

    def _offset(self, index: int) -> int:
        return int(self.ends[index - 1]) if index else 0

    def span(self, start: int, stop: int) -> memoryview:
        """Records ``start`` to ``stop`` (exclusive), as one piece of a batch payload."""
        return self.data[self._offset(start) : self._offset(stop)]

    def stop_for(self, start: int, room_messages: int, room_bytes: int) -> int:
        """Where a run from ``start`` ends when at most ``room_messages`` fit, and it may
        cross ``room_bytes`` with its last record only; the run has one record at least."""
        crossing = int(np.searchsorted(self.ends, self._offset(start) + room_bytes))
        return min(len(self), start + max(room_messages, 1), max(crossing + 1, start + 1))


def encode_records(columns: OutgoingColumns, first_sequence_id: int) -> Records:
    """The batch record of every row of ``columns``, numbered from ``first_sequence_id``.

    Byte for byte what :meth:`BatchBuilder.add` writes for each row as a message. Each field
    is built for all rows at once (a short one, a tag and a varint or a flag, as a byte matrix
    with a row per message), then the fields and payloads are interleaved, message after
    message, into one buffer.
    """
    count = len(columns)
    fields = _metadata_fields(columns, first_sequence_id)
    metadata_sizes = np.sum([field.lengths for field in fields], axis=0, dtype=np.int64)
    size_prefix = metadata_sizes.astype(">u4").view(np.uint8).reshape(count, 4)
    prefix = Short(size_prefix, np.full(count, 4, dtype=np.int64))
    data, ends = interleave(_pieces([prefix, *fields, columns.values]), count)
    return Records(data, ends, first_sequence_id, columns)


def _metadata_fields(columns: OutgoingColumns, first_sequence_id: int) -> list[Short | Blobs]:
    """SingleMessageMetadata fields 1, 2, 3, 5, 6, 8 and 9 of every row, in that order."""
    fields: list[Short | Blobs] = []
    properties = columns.properties.encoded() if columns.properties is not None else None
    if properties is not None:
        fields.append(properties)
    if columns.keys is not None:
        fields.append(varints(columns.keys.lengths, 0x12, columns.has_key))
        fields.append(columns.keys)
    fields.append(varints(columns.sizes(), 0x18))
    if columns.event_times is not None:
        fields.append(varints(columns.event_times, 0x28, columns.event_times != 0))
    if columns.keys_are_base64 and columns.has_key is not None:
        fields.append(_flag(0x30, columns.has_key))
    sequence_ids = np.arange(len(columns), dtype=np.uint64) + np.uint64(first_sequence_id)
    fields.append(varints(sequence_ids, 0x40))
    if columns.null_values is not None:
        fields.append(_flag(0x48, columns.null_values))
    return fields


def _flag(tag: int, present: _Flags) -> Short:
    """``tag`` and a varint 1 (true) where ``present``."""
    matrix = np.empty((len(present), 2), dtype=np.uint8)
    matrix[:, 0] = tag
    matrix[:, 1] = 1
    return Short(matrix, present.astype(np.int64) * 2)


def _pieces(fields: list[Short | Blobs]) -> list[tuple[_Bytes, _Ints]]:
    """Every field's bytes laid end to end, with each message's length; short fields next to
    each other are packed together."""
    pieces: list[tuple[_Bytes, _Ints]] = []
    shorts: list[Short] = []
    for field in fields:
        if isinstance(field, Short):
            shorts.append(field)
            continue
        if shorts:
            pieces.append(pack(shorts))
            shorts = []
        pieces.append((field.joined(), field.lengths))
    if shorts:
        pieces.append(pack(shorts))
    return pieces


def single_message_metadata(
    message: OutgoingMessage,
    *,
    producer_name: str,
    sequence_id: int,
    publish_time: int,
    schema_version: bytes | None = None,
) -> pb.MessageMetadata:
    """MessageMetadata for an unbatched message (used for chunked sends)."""
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=publish_time,
        properties=[pb.KeyValue(key=k, value=v) for k, v in message.properties],
    )
    if message.key is not None:
        metadata.partition_key = message.key
        metadata.partition_key_b64_encoded = message.key_is_base64
    if message.event_time:
        metadata.event_time = message.event_time
    if message.value is None:
        metadata.null_value = True
    if schema_version:
        metadata.schema_version = schema_version
    return metadata


def chunks(
    metadata: pb.MessageMetadata,
    payload: bytes,
    *,
    codec: int,
    max_message_size: int,
    compressed: bytes | None = None,
) -> Iterator[tuple[pb.MessageMetadata, bytes]]:
    """Cut one unbatched message into chunks that each fit ``max_message_size``.

    ``metadata`` must already carry producer_name and sequence_id. The payload is compressed
    once, before cutting, as the official clients do: here, unless the caller passes it
    already compressed with ``codec`` as ``compressed``.
    """
    if compressed is None:
        compressed = compression.compress(codec, payload)
    metadata.compression = codec  # type: ignore[assignment]
    metadata.uncompressed_size = len(payload)
    metadata.uuid = f"{metadata.producer_name}-{metadata.sequence_id}"
    metadata.total_chunk_msg_size = len(compressed)
    # Room left for the payload once the metadata (with its largest chunk fields) is counted.
    metadata.num_chunks_from_msg = 1 << 30
    metadata.chunk_id = 1 << 30
    room = max_message_size - metadata.ByteSize() - 64
    if room <= 0:
        raise LocalProtocolError(
            f"message metadata of {metadata.ByteSize()} bytes leaves no room for a payload in "
            f"{max_message_size}-byte messages"
        )
    total = max(1, -(-len(compressed) // room))
    metadata.num_chunks_from_msg = total
    for index in range(total):
        part = pb.MessageMetadata()
        part.CopyFrom(metadata)
        part.chunk_id = index
        yield part, compressed[index * room : (index + 1) * room]
