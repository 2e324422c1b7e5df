"""The payload section of SEND and MESSAGE frames: checksum, metadata and payload bytes.

After the command of a SEND or MESSAGE frame comes::

    [0x0e02][u32 size][BrokerEntryMetadata]     optional, MESSAGE only
    [0x0e01][u32 CRC32C]                        optional on MESSAGE, always sent by us
    [u32 metadata_size][MessageMetadata][payload]

The CRC32C (Castagnoli) covers exactly ``metadata_size``, the metadata and the payload: from the
byte after the checksum to the end of the frame. The broker-entry block is not covered.
"""

from __future__ import annotations

import struct
from typing import NamedTuple, TypeVar

import crc32c
from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from pulsar_spark.errors import (
    ChecksumMismatchError,
    CorruptPayloadError,
    TruncatedFrameError,
    UnsupportedCompressionError,
)
from pulsar_spark.protocol import pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_MAGIC_CRC = _U16.pack(MAGIC_CRC32C)


class PayloadSection(NamedTuple):
    """A parsed payload section. ``payload`` is still compressed as ``metadata.compression``
    (a tuple: one is made for every entry)."""

    metadata: pb.MessageMetadata
    payload: bytes
    broker_entry_metadata: pb.BrokerEntryMetadata | None = None


def parse_payload_section(section: memoryview | bytes) -> PayloadSection:
    """Parse and verify a payload section; raise on a bad checksum or short data."""
    view = memoryview(section)
    pos = 0
    broker_entry = None
    magic = _magic_at(view, pos)
    if magic == MAGIC_BROKER_ENTRY_METADATA:
        size = _u32_at(view, pos + 2, "broker entry metadata size")
        body = _slice(view, pos + 6, size, "broker entry metadata")
        broker_entry = _parse(pb.BrokerEntryMetadata, body, "broker entry metadata")
        pos += 6 + size
        magic = _magic_at(view, pos)
    if magic == MAGIC_CRC32C:
        expected = _u32_at(view, pos + 2, "checksum")
        pos += 6
        actual = crc32c.crc32c(view[pos:])
        if actual != expected:
            raise ChecksumMismatchError(
                f"payload checksum mismatch: frame says {expected:#010x}, "
                f"data hashes to {actual:#010x}"
            )
    meta_size = _u32_at(view, pos, "metadata size")
    metadata = _parse(pb.MessageMetadata, _slice(view, pos + 4, meta_size, "metadata"), "metadata")
    _check_compression(metadata)
    payload = bytes(view[pos + 4 + meta_size :])
    return PayloadSection(metadata, payload, broker_entry)


def encode_payload_section(metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    """Build ``[0x0e01][crc32c][metadata_size][metadata][payload]`` for a SEND frame."""
    meta = metadata.SerializeToString()
    covered = _U32.pack(len(meta)) + meta + payload
    return _MAGIC_CRC + _U32.pack(crc32c.crc32c(covered)) + covered


_COMPRESSION_FIELD = 8


def _check_compression(metadata: pb.MessageMetadata) -> None:
    """A codec missing from our enum lands in unknown fields and would read as NONE."""
    unknown = UnknownFieldSet(metadata)
    for index in range(len(unknown)):
        field = unknown[index]
        if field.field_number == _COMPRESSION_FIELD:
            raise UnsupportedCompressionError(
                f"unknown compression code {field.data}: this client reads "
                "NONE(0), LZ4(1), ZLIB(2), ZSTD(3) and SNAPPY(4)"
            )


def _magic_at(view: memoryview, pos: int) -> int:
    if len(view) < pos + 2:
        return -1
    return int(_U16.unpack_from(view, pos)[0])


def _u32_at(view: memoryview, pos: int, what: str) -> int:
    if len(view) < pos + 4:
        raise TruncatedFrameError(f"payload section ends before the {what}")
    return int(_U32.unpack_from(view, pos)[0])


def _slice(view: memoryview, pos: int, size: int, what: str) -> memoryview:
    if len(view) < pos + size:
        raise TruncatedFrameError(
            f"payload section ends inside the {what} ({size} bytes announced, "
            f"{max(len(view) - pos, 0)} present)"
        )
    return view[pos : pos + size]


_M = TypeVar("_M", pb.MessageMetadata, pb.BrokerEntryMetadata)


def _parse(cls: type[_M], data: memoryview, what: str) -> _M:
    message = cls()
    try:
        message.ParseFromString(bytes(data))
    except DecodeError as exc:
        raise CorruptPayloadError(f"{what} does not parse") from exc
    return message
