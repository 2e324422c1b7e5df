"""Payload sections (checksum, broker entry metadata, metadata) and the five codecs."""

from __future__ import annotations

import os
import struct
import time
import zlib

import crc32c
import pytest

from pulsar_spark.errors import (
    ChecksumMismatchError,
    ConfigurationError,
    CorruptPayloadError,
    TruncatedFrameError,
    UnsupportedCompressionError,
)
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.compression import (
    LZ4,
    NONE,
    SNAPPY,
    ZLIB,
    ZSTD,
    codec_from_name,
    compress,
    decompress,
)
from pulsar_spark.protocol.payload import (
    MAGIC_BROKER_ENTRY_METADATA,
    MAGIC_CRC32C,
    encode_payload_section,
    parse_payload_section,
)

CODECS = {"NONE": NONE, "LZ4": LZ4, "ZLIB": ZLIB, "ZSTD": ZSTD, "SNAPPY": SNAPPY}


def metadata(**fields: object) -> pb.MessageMetadata:
    base: dict[str, object] = {
        "producer_name": "producer-a",
        "sequence_id": 17,
        "publish_time": 1_700_000_000_456,
    }
    base.update(fields)
    return pb.MessageMetadata(**base)  # type: ignore[arg-type]


META = metadata(
    partition_key="key-1",
    properties=[pb.KeyValue(key="a", value="1"), pb.KeyValue(key="b", value="2")],
    event_time=1_700_000_000_000,
)
PAYLOAD = b"the payload \x00\x01\x02 bytes"


def plain_section(meta: pb.MessageMetadata, payload: bytes) -> bytes:
    """``[u32 metadata_size][metadata][payload]`` with no checksum block."""
    raw = meta.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + payload


def broker_entry_block(timestamp: int, index: int) -> bytes:
    raw = pb.BrokerEntryMetadata(broker_timestamp=timestamp, index=index).SerializeToString()
    return struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, len(raw)) + raw


# --- checksum -----------------------------------------------------------------------------


def test_encoded_section_layout_and_checksum() -> None:
    section = encode_payload_section(META, PAYLOAD)
    meta_raw = META.SerializeToString()
    covered = struct.pack(">I", len(meta_raw)) + meta_raw + PAYLOAD
    assert section == struct.pack(">HI", MAGIC_CRC32C, crc32c.crc32c(covered)) + covered
    assert section[:2] == b"\x0e\x01"


def test_good_checksum_passes() -> None:
    parsed = parse_payload_section(encode_payload_section(META, PAYLOAD))
    assert parsed.metadata == META
    assert parsed.metadata.producer_name == "producer-a"
    assert parsed.metadata.sequence_id == 17
    assert parsed.metadata.publish_time == 1_700_000_000_456
    assert parsed.metadata.partition_key == "key-1"
    assert [(kv.key, kv.value) for kv in parsed.metadata.properties] == [("a", "1"), ("b", "2")]
    assert parsed.metadata.event_time == 1_700_000_000_000
    assert parsed.payload == PAYLOAD
    assert parsed.broker_entry_metadata is None


def test_parse_accepts_memoryview_of_a_larger_buffer() -> None:
    section = encode_payload_section(META, PAYLOAD)
    buffer = b"HEADER" + section
    parsed = parse_payload_section(memoryview(buffer)[6:])
    assert parsed.metadata == META
    assert parsed.payload == PAYLOAD
    assert isinstance(parsed.payload, bytes)


def _flip_and_expect_mismatch(section: bytes, position: int) -> None:
    corrupted = bytearray(section)
    corrupted[position] ^= 0x01
    expected = struct.unpack_from(">I", section, 2)[0]
    actual = crc32c.crc32c(bytes(corrupted[6:]))
    assert expected != actual
    with pytest.raises(ChecksumMismatchError) as info:
        parse_payload_section(bytes(corrupted))
    assert str(info.value) == (
        f"payload checksum mismatch: frame says {expected:#010x}, data hashes to {actual:#010x}"
    )
    assert f"{expected:#010x}" in str(info.value)
    assert f"{actual:#010x}" in str(info.value)


def test_flipped_metadata_byte_fails_checksum() -> None:
    section = encode_payload_section(META, PAYLOAD)
    meta_start = 6 + 4
    meta_len = len(META.SerializeToString())
    for position in (meta_start, meta_start + meta_len // 2, meta_start + meta_len - 1):
        _flip_and_expect_mismatch(section, position)


def test_flipped_payload_byte_fails_checksum() -> None:
    section = encode_payload_section(META, PAYLOAD)
    payload_start = len(section) - len(PAYLOAD)
    for position in (payload_start, len(section) - 1):
        _flip_and_expect_mismatch(section, position)


def test_flipped_metadata_size_fails_checksum() -> None:
    section = encode_payload_section(META, PAYLOAD)
    _flip_and_expect_mismatch(section, 9)


def test_flipped_checksum_byte_fails() -> None:
    section = bytearray(encode_payload_section(META, PAYLOAD))
    good = struct.unpack_from(">I", section, 2)[0]
    section[5] ^= 0x80
    bad = struct.unpack_from(">I", section, 2)[0]
    with pytest.raises(
        ChecksumMismatchError,
        match=rf"^payload checksum mismatch: frame says {bad:#010x}, data hashes to {good:#010x}$",
    ):
        parse_payload_section(bytes(section))


def test_appended_byte_fails_checksum() -> None:
    section = encode_payload_section(META, PAYLOAD)
    with pytest.raises(ChecksumMismatchError):
        parse_payload_section(section + b"!")


def test_section_without_checksum_is_accepted() -> None:
    parsed = parse_payload_section(plain_section(META, PAYLOAD))
    assert parsed.metadata == META
    assert parsed.payload == PAYLOAD
    assert parsed.broker_entry_metadata is None


def test_empty_payload_and_minimal_metadata() -> None:
    meta = metadata()
    for section in (encode_payload_section(meta, b""), plain_section(meta, b"")):
        parsed = parse_payload_section(section)
        assert parsed.metadata == meta
        assert not parsed.metadata.HasField("partition_key")
        assert not parsed.metadata.HasField("num_messages_in_batch")
        assert parsed.payload == b""


# --- broker entry metadata ---------------------------------------------------------------------


def test_broker_entry_metadata_is_parsed_and_skipped() -> None:
    section = broker_entry_block(1_700_000_001_000, 41) + encode_payload_section(META, PAYLOAD)
    parsed = parse_payload_section(section)
    assert parsed.broker_entry_metadata is not None
    assert parsed.broker_entry_metadata.broker_timestamp == 1_700_000_001_000
    assert parsed.broker_entry_metadata.index == 41
    assert parsed.metadata == META
    assert parsed.payload == PAYLOAD


def test_broker_entry_metadata_without_checksum() -> None:
    section = broker_entry_block(5, 0) + plain_section(META, PAYLOAD)
    parsed = parse_payload_section(section)
    assert parsed.broker_entry_metadata is not None
    assert parsed.broker_entry_metadata.broker_timestamp == 5
    assert parsed.broker_entry_metadata.HasField("index")
    assert parsed.broker_entry_metadata.index == 0
    assert parsed.metadata == META
    assert parsed.payload == PAYLOAD


def test_broker_entry_metadata_is_not_covered_by_the_checksum() -> None:
    # Two different broker entry blocks in front of the same checksummed section both verify.
    inner = encode_payload_section(META, PAYLOAD)
    for block in (broker_entry_block(1, 2), broker_entry_block(999_999, 123_456)):
        parsed = parse_payload_section(block + inner)
        assert parsed.payload == PAYLOAD


def test_checksum_still_verified_after_broker_entry_metadata() -> None:
    block = broker_entry_block(1, 2)
    inner = bytearray(encode_payload_section(META, PAYLOAD))
    inner[-1] ^= 0xFF
    with pytest.raises(ChecksumMismatchError, match=r"^payload checksum mismatch: frame says "):
        parse_payload_section(block + bytes(inner))


def test_empty_broker_entry_metadata() -> None:
    block = struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, 0)
    parsed = parse_payload_section(block + encode_payload_section(META, PAYLOAD))
    assert parsed.broker_entry_metadata == pb.BrokerEntryMetadata()
    assert parsed.payload == PAYLOAD


# --- truncation and corruption ------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "message"),
    [
        (b"", r"^payload section ends before the metadata size$"),
        (b"\x00\x00", r"^payload section ends before the metadata size$"),
        (b"\x0e\x01", r"^payload section ends before the checksum$"),
        (b"\x0e\x01\x12\x34\x56", r"^payload section ends before the checksum$"),
        (b"\x0e\x02\x00\x00", r"^payload section ends before the broker entry metadata size$"),
        (
            b"\x0e\x02\x00\x00\x00\x10\x08\x01",
            r"^payload section ends inside the broker entry metadata \(16 bytes announced, "
            r"2 present\)$",
        ),
        (
            b"\x00\x00\x00\x64" + b"\x0a\x01p" * 3,
            r"^payload section ends inside the metadata \(100 bytes announced, 9 present\)$",
        ),
    ],
)
def test_truncated_sections_raise(section: bytes, message: str) -> None:
    with pytest.raises(TruncatedFrameError, match=message):
        parse_payload_section(section)


def test_every_cut_of_an_unchecksummed_section_is_truncated_or_parses_shorter() -> None:
    section = broker_entry_block(7, 8) + plain_section(META, PAYLOAD)
    header_end = len(section) - len(PAYLOAD)  # cuts before here lose part of a header
    for cut in range(header_end):
        with pytest.raises(TruncatedFrameError):
            parse_payload_section(section[:cut])
    for cut in range(header_end, len(section) + 1):
        parsed = parse_payload_section(section[:cut])
        assert parsed.metadata == META
        assert parsed.payload == PAYLOAD[: cut - header_end]


def test_unparseable_metadata_is_corrupt() -> None:
    garbage = b"\xff\xff\xff\xff"
    with pytest.raises(CorruptPayloadError, match=r"^metadata does not parse$"):
        parse_payload_section(struct.pack(">I", len(garbage)) + garbage)
    block = struct.pack(">HI", MAGIC_BROKER_ENTRY_METADATA, len(garbage)) + garbage
    with pytest.raises(CorruptPayloadError, match=r"^broker entry metadata does not parse$"):
        parse_payload_section(block + plain_section(META, PAYLOAD))


# --- codecs -----------------------------------------------------------------------------------

SAMPLES = {
    "empty": b"",
    "one-byte": b"x",
    "text": "Pulsar сообщение 消息 🚀 ".encode() * 50,
    "random": os.urandom(10_000),
    "zeros": bytes(1 << 20),
}


@pytest.mark.parametrize("codec", list(CODECS.values()), ids=list(CODECS))
@pytest.mark.parametrize("sample", list(SAMPLES), ids=list(SAMPLES))
def test_every_codec_round_trips(codec: int, sample: str) -> None:
    data = SAMPLES[sample]
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed, len(data)) == data
    if codec != NONE and sample == "zeros":
        assert len(packed) < len(data) // 10


def test_none_is_the_identity() -> None:
    assert compress(NONE, b"abc") == b"abc"
    assert decompress(NONE, b"abc", 3) == b"abc"


def test_formats_match_the_official_clients() -> None:
    data = b"hello hello hello hello hello hello"
    # LZ4: a raw block, no frame magic (04 22 4d 18) and no size prefix.
    assert not compress(LZ4, data).startswith(b"\x04\x22\x4d\x18")
    assert decompress(LZ4, b"\x50hello", 5) == b"hello"  # token 5 literals, no match
    # SNAPPY: raw block (varint length, literal tag), not the framing format.
    assert decompress(SNAPPY, b"\x05\x10hello", 5) == b"hello"
    assert compress(SNAPPY, b"hello") == b"\x05\x10hello"
    # ZLIB: zlib-wrapped (RFC 1950), header 0x78.
    assert compress(ZLIB, data)[:1] == b"\x78"
    assert zlib.decompress(compress(ZLIB, data)) == data
    # ZSTD: a standard zstd frame.
    assert compress(ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"


def test_java_style_zlib_sync_flush_without_finish_decodes() -> None:
    data = b"".join(f"message-{i:05d};".encode() for i in range(5000))
    deflater = zlib.compressobj()
    java = deflater.compress(data) + deflater.flush(zlib.Z_SYNC_FLUSH)
    assert java.endswith(b"\x00\x00\xff\xff")  # sync-flush marker, no final block or Adler-32
    with pytest.raises(zlib.error):
        zlib.decompress(java)
    assert decompress(ZLIB, java, len(data)) == data


def test_java_style_zlib_in_several_flushes_decodes() -> None:
    parts = [os.urandom(100) + b"z" * 1000 for _ in range(5)]
    deflater = zlib.compressobj()
    java = b"".join(deflater.compress(p) + deflater.flush(zlib.Z_SYNC_FLUSH) for p in parts)
    assert decompress(ZLIB, java, sum(map(len, parts))) == b"".join(parts)


@pytest.mark.parametrize("codec", [LZ4, ZLIB, ZSTD, SNAPPY], ids=["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_uncompressed_size_too_large_is_corrupt(codec: int) -> None:
    data = b"abcdefgh" * 200
    packed = compress(codec, data)
    name = pb.CompressionType.Name(codec)
    with pytest.raises(
        CorruptPayloadError,
        match=rf"^{name} payload decompressed to 1600 bytes, metadata says 1601$",
    ):
        decompress(codec, packed, 1601)


@pytest.mark.parametrize("codec", [LZ4, ZLIB, ZSTD, SNAPPY], ids=["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_uncompressed_size_too_small_is_corrupt(codec: int) -> None:
    data = b"abcdefgh" * 200
    packed = compress(codec, data)
    name = pb.CompressionType.Name(codec)
    with pytest.raises(CorruptPayloadError, match=rf"^{name} payload ") as info:
        decompress(codec, packed, 1599)
    text = str(info.value)
    if codec == LZ4:  # the block decoder refuses to write past the announced size
        assert text.startswith(f"LZ4 payload of {len(packed)} bytes does not decompress: ")
    elif codec == ZLIB:  # bounded at one byte past the announced size
        assert text == "ZLIB payload decompressed to 1600 bytes, metadata says 1599"
    else:
        assert text == f"{name} payload decompressed to 1600 bytes, metadata says 1599"


def test_zlib_bomb_is_bounded_by_the_announced_size() -> None:
    bomb = zlib.compress(bytes(200 * 1024 * 1024), 9)
    started = time.monotonic()
    with pytest.raises(
        CorruptPayloadError, match=r"^ZLIB payload decompressed to 11 bytes, metadata says 10$"
    ):
        decompress(ZLIB, bomb, 10)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("codec", [LZ4, ZLIB, ZSTD, SNAPPY], ids=["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_garbage_does_not_decompress(codec: int) -> None:
    name = pb.CompressionType.Name(codec)
    garbage = b"\xff" * 64
    with pytest.raises(
        CorruptPayloadError, match=rf"^{name} payload of 64 bytes does not decompress: "
    ) as info:
        decompress(codec, garbage, 1000)
    assert info.value.__cause__ is not None


@pytest.mark.parametrize("code", [5, 6, 42, 255])
def test_unknown_compression_code_is_named(code: int) -> None:
    with pytest.raises(
        UnsupportedCompressionError,
        match=rf"^unknown compression code {code}: this client reads "
        r"NONE\(0\), LZ4\(1\), ZLIB\(2\), ZSTD\(3\) and SNAPPY\(4\)$",
    ):
        decompress(code, b"data", 4)
    with pytest.raises(UnsupportedCompressionError, match=rf"^unknown compression code {code}$"):
        compress(code, b"data")


def test_unknown_compression_code_on_the_wire_is_not_read_as_none() -> None:
    """A metadata carrying a codec this client does not know (field 8 = 5) must not decode
    as an uncompressed payload: returning the still-compressed bytes would be silent
    corruption. Either parsing or decompressing has to refuse it, naming the code."""
    raw = metadata(uncompressed_size=4).SerializeToString() + b"\x40\x05"  # compression = 5
    section = struct.pack(">I", len(raw)) + raw + b"\x93\x11\x00\x7f"
    with pytest.raises(UnsupportedCompressionError, match=r"unknown compression code 5"):
        parsed = parse_payload_section(section)
        decompress(parsed.metadata.compression, parsed.payload, parsed.metadata.uncompressed_size)


def test_known_compression_code_on_the_wire() -> None:
    data = b"payload " * 100
    meta = metadata(compression=pb.ZSTD, uncompressed_size=len(data))
    parsed = parse_payload_section(encode_payload_section(meta, compress(ZSTD, data)))
    assert parsed.metadata.compression == ZSTD
    assert parsed.metadata.uncompressed_size == 800
    got = decompress(parsed.metadata.compression, parsed.payload, parsed.metadata.uncompressed_size)
    assert got == data


def test_codec_names() -> None:
    assert compression.CODEC_NAMES == {"none": 0, "lz4": 1, "zlib": 2, "zstd": 3, "snappy": 4}
    assert codec_from_name("LZ4") == LZ4
    assert codec_from_name(" zstd ") == ZSTD
    assert codec_from_name("Snappy") == SNAPPY
    assert codec_from_name("zlib") == ZLIB
    assert codec_from_name("NONE") == NONE
    with pytest.raises(
        ConfigurationError,
        match=r"^unknown compression 'gzip': use one of none, lz4, zlib, zstd, snappy$",
    ):
        codec_from_name("gzip")
