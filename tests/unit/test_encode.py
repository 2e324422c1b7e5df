"""Producer-side encoding, byte for byte: SingleMessageMetadata, batch layout and chunks.

The hand-written SingleMessageMetadata encoder is compared with the protobuf runtime, and
batch payloads with a layout assembled here from ``struct`` and ``pb``.
"""

from __future__ import annotations

import itertools
import os
import struct

import pytest

from pulsar_spark.errors import LocalProtocolError
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.encode import (
    BatchBuilder,
    OutgoingMessage,
    chunks,
    encode_single_message_metadata,
    routing_key,
    single_message_metadata,
)

CODECS = compression.CODEC_NAMES

PROPERTIES: list[tuple[tuple[str, str], ...]] = [
    (),
    (("a", "1"),),
    (("k", ""), ("", "v"), ("é", "ü"), ("日本", "語")),
    (("long", "x" * 300),),  # a length that needs a two-byte varint
]
KEYS: list[tuple[str | None, bool]] = [
    (None, False),
    ("", False),
    ("key-1", False),
    ("ключ-日本-\U0001f600", False),
    ("k" * 200, False),
    (*routing_key(b"\x00\xff\x10binary"),),
]
VALUES: list[bytes | None] = [None, b"", b"v", b"x" * 127, b"y" * 128, os.urandom(70000)]
EVENT_TIMES = [0, 1, 1_700_000_000_123, 2**63 - 1]
SEQUENCE_IDS = [0, 1, 127, 128, 2**31, 2**63, 2**64 - 1]


def _reference_smm(message: OutgoingMessage, sequence_id: int) -> bytes:
    """What the protobuf runtime writes for the same fields."""
    smm = pb.SingleMessageMetadata(
        properties=[pb.KeyValue(key=k, value=v) for k, v in message.properties],
        payload_size=message.size,
        sequence_id=sequence_id,
    )
    if message.key is not None:
        smm.partition_key = message.key
    if message.event_time:
        smm.event_time = message.event_time
    if message.key_is_base64:
        smm.partition_key_b64_encoded = True
    if message.value is None:
        smm.null_value = True
    return smm.SerializeToString()


@pytest.mark.parametrize("properties", PROPERTIES, ids=lambda p: f"props{len(p)}")
@pytest.mark.parametrize(("key", "key_is_base64"), KEYS, ids=lambda k: repr(k)[:12])
def test_single_message_metadata_matches_protobuf(
    properties: tuple[tuple[str, str], ...], key: str | None, key_is_base64: bool
) -> None:
    combos = itertools.product(VALUES, EVENT_TIMES, SEQUENCE_IDS)
    for value, event_time, sequence_id in combos:
        message = OutgoingMessage(value, key, key_is_base64, properties, event_time)
        assert encode_single_message_metadata(message, sequence_id) == _reference_smm(
            message, sequence_id
        ), (value and len(value), event_time, sequence_id)


def test_single_message_metadata_parses_back() -> None:
    message = OutgoingMessage(
        None,
        key="AP8=",
        key_is_base64=True,
        properties=(("a", "1"), ("b", "2")),
        event_time=1_700_000_000_000,
    )
    parsed = pb.SingleMessageMetadata.FromString(encode_single_message_metadata(message, 2**64 - 1))
    assert [(p.key, p.value) for p in parsed.properties] == [("a", "1"), ("b", "2")]
    assert parsed.partition_key == "AP8="
    assert parsed.partition_key_b64_encoded is True
    assert parsed.payload_size == 0
    assert parsed.event_time == 1_700_000_000_000
    assert parsed.sequence_id == 2**64 - 1
    assert parsed.null_value is True


def test_routing_key() -> None:
    assert routing_key(None) == (None, False)
    assert routing_key("text") == ("text", False)
    assert routing_key(b"\x00\xffbin") == ("AP9iaW4=", True)


# --- batches ---------------------------------------------------------------------------------


def _record(smm: pb.SingleMessageMetadata, value: bytes) -> bytes:
    body = smm.SerializeToString()
    return struct.pack(">I", len(body)) + body + value


def test_two_message_batch_exact_bytes() -> None:
    builder = BatchBuilder()
    builder.add(OutgoingMessage(b"hello", key="k1", properties=(("p", "q"),)), 41)
    builder.add(OutgoingMessage(b"world!", event_time=1234), 42)
    expected = _record(
        pb.SingleMessageMetadata(
            properties=[pb.KeyValue(key="p", value="q")],
            partition_key="k1",
            payload_size=5,
            sequence_id=41,
        ),
        b"hello",
    ) + _record(
        pb.SingleMessageMetadata(payload_size=6, event_time=1234, sequence_id=42), b"world!"
    )
    # Spelled out once by hand, so the helper above is checked too.
    first = (
        b"\x00\x00\x00\x10"  # SingleMessageMetadata size: 16
        b"\x0a\x06\x0a\x01p\x12\x01q"  # 1: properties {p: q}
        b"\x12\x02k1"  # 2: partition_key
        b"\x18\x05"  # 3: payload_size
        b"\x40\x29"  # 8: sequence_id 41
        b"hello"
    )
    second = (
        b"\x00\x00\x00\x07"  # size: 7
        b"\x18\x06"  # 3: payload_size
        b"\x28\xd2\x09"  # 5: event_time 1234
        b"\x40\x2a"  # 8: sequence_id 42
        b"world!"
    )
    assert expected == first + second
    assert builder.count == 2
    assert builder.size == len(expected)
    assert builder.first_sequence_id == 41

    metadata, payload = builder.build(
        producer_name="prod", publish_time=1_700_000_000_000, codec=compression.NONE
    )
    assert payload == expected
    assert metadata.producer_name == "prod"
    assert metadata.publish_time == 1_700_000_000_000
    assert metadata.sequence_id == 41
    assert metadata.highest_sequence_id == 42
    assert metadata.num_messages_in_batch == 2
    assert metadata.uncompressed_size == len(expected)
    assert metadata.compression == compression.NONE
    assert metadata.partition_key == "k1"
    assert not metadata.partition_key_b64_encoded
    assert not metadata.properties  # message properties stay in each SingleMessageMetadata


def test_builder_is_empty_after_build() -> None:
    builder = BatchBuilder()
    builder.add(OutgoingMessage(b"a"), 0)
    builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    assert (builder.count, builder.size, builder.first_sequence_id) == (0, 0, -1)
    with pytest.raises(LocalProtocolError):
        builder.build(producer_name="p", publish_time=1, codec=compression.NONE)


def test_single_message_batch_is_still_a_batch() -> None:
    builder = BatchBuilder()
    builder.add(OutgoingMessage(b"only"), 7)
    metadata, payload = builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    assert metadata.HasField("num_messages_in_batch")
    assert metadata.num_messages_in_batch == 1
    assert metadata.sequence_id == metadata.highest_sequence_id == 7
    assert payload == _record(pb.SingleMessageMetadata(payload_size=4, sequence_id=7), b"only")


def test_batch_partition_key_comes_from_first_message() -> None:
    builder = BatchBuilder()
    key, is_base64 = routing_key(b"\x01\x02")
    builder.add(OutgoingMessage(b"a", key=key, key_is_base64=is_base64), 0)
    builder.add(OutgoingMessage(b"b", key="second"), 1)
    metadata, _ = builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    assert metadata.partition_key == "AQI="
    assert metadata.partition_key_b64_encoded


def test_batch_without_key_on_first_message_has_no_partition_key() -> None:
    builder = BatchBuilder()
    builder.add(OutgoingMessage(b"a"), 0)
    builder.add(OutgoingMessage(b"b", key="second"), 1)
    metadata, _ = builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    assert not metadata.HasField("partition_key")


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
def test_batch_compression_covers_the_whole_payload(codec: int) -> None:
    messages = [OutgoingMessage(b"value-%d" % i * 20, key=f"k{i}") for i in range(50)]
    messages.append(OutgoingMessage(None, key="tombstone"))
    plain = BatchBuilder()
    packed = BatchBuilder()
    for sequence_id, message in enumerate(messages, start=100):
        plain.add(message, sequence_id)
        packed.add(message, sequence_id)
    _, raw = plain.build(producer_name="p", publish_time=1, codec=compression.NONE)
    metadata, payload = packed.build(producer_name="p", publish_time=1, codec=codec)
    assert metadata.compression == codec
    assert metadata.uncompressed_size == len(raw)
    assert (metadata.sequence_id, metadata.highest_sequence_id) == (100, 150)
    assert metadata.num_messages_in_batch == 51
    assert compression.decompress(codec, payload, len(raw)) == raw
    if codec != compression.NONE:
        assert len(payload) < len(raw)


def test_batch_records_walk_back_to_the_messages() -> None:
    messages = [
        OutgoingMessage(b"one", key="k", properties=(("a", "b"),)),
        OutgoingMessage(None),
        OutgoingMessage(b"", event_time=5),
    ]
    builder = BatchBuilder()
    for sequence_id, message in enumerate(messages):
        builder.add(message, sequence_id)
    _, payload = builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    pos = 0
    for sequence_id, message in enumerate(messages):
        (size,) = struct.unpack_from(">I", payload, pos)
        smm = pb.SingleMessageMetadata.FromString(payload[pos + 4 : pos + 4 + size])
        pos += 4 + size
        assert smm.sequence_id == sequence_id
        assert smm.null_value == (message.value is None)
        assert payload[pos : pos + smm.payload_size] == (message.value or b"")
        pos += smm.payload_size
    assert pos == len(payload)


def test_single_message_metadata_for_unbatched_messages() -> None:
    message = OutgoingMessage(
        None, key="AP8=", key_is_base64=True, properties=(("x", "y"),), event_time=99
    )
    metadata = single_message_metadata(message, producer_name="p", sequence_id=3, publish_time=5)
    assert not metadata.HasField("num_messages_in_batch")
    assert (metadata.producer_name, metadata.sequence_id, metadata.publish_time) == ("p", 3, 5)
    assert metadata.partition_key == "AP8="
    assert metadata.partition_key_b64_encoded
    assert metadata.event_time == 99
    assert metadata.null_value
    assert [(p.key, p.value) for p in metadata.properties] == [("x", "y")]


# --- chunks ----------------------------------------------------------------------------------


def _chunk_metadata(sequence_id: int = 12) -> pb.MessageMetadata:
    message = OutgoingMessage(b"", key="big", properties=(("kind", "blob"),))
    return single_message_metadata(
        message, producer_name="writer-1", sequence_id=sequence_id, publish_time=1_700_000_000_000
    )


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
@pytest.mark.parametrize("max_message_size", [1024, 4096, 64 * 1024])
def test_chunks_fit_and_reassemble(codec: int, max_message_size: int) -> None:
    payload = os.urandom(150_000) + b"compressible" * 5_000
    pieces = list(
        chunks(_chunk_metadata(), payload, codec=codec, max_message_size=max_message_size)
    )
    compressed = compression.compress(codec, payload)
    total = len(pieces)
    assert total == pieces[0][0].num_chunks_from_msg
    assert total > 1
    for index, (metadata, piece) in enumerate(pieces):
        assert metadata.ByteSize() + len(piece) <= max_message_size
        assert metadata.chunk_id == index
        assert metadata.num_chunks_from_msg == total
        assert metadata.sequence_id == 12
        assert metadata.uuid == "writer-1-12"
        assert metadata.total_chunk_msg_size == len(compressed)
        assert metadata.uncompressed_size == len(payload)
        assert metadata.compression == codec
        assert metadata.partition_key == "big"
        assert [(p.key, p.value) for p in metadata.properties] == [("kind", "blob")]
        assert not metadata.HasField("num_messages_in_batch")
        assert piece
    joined = b"".join(piece for _, piece in pieces)
    assert joined == compressed
    assert compression.decompress(codec, joined, len(payload)) == payload


def test_small_message_is_one_chunk() -> None:
    pieces = list(
        chunks(_chunk_metadata(5), b"tiny", codec=compression.NONE, max_message_size=1024)
    )
    assert len(pieces) == 1
    metadata, piece = pieces[0]
    assert piece == b"tiny"
    assert (metadata.chunk_id, metadata.num_chunks_from_msg) == (0, 1)
    assert metadata.total_chunk_msg_size == 4


def test_chunks_leave_the_callers_metadata_usable() -> None:
    metadata = _chunk_metadata()
    pieces = list(chunks(metadata, b"z" * 10_000, codec=compression.NONE, max_message_size=2048))
    assert [part.chunk_id for part, _ in pieces] == list(range(len(pieces)))
    assert len({id(part) for part, _ in pieces}) == len(pieces)  # one metadata object per chunk


def test_chunks_refuse_a_size_that_leaves_no_room() -> None:
    with pytest.raises(LocalProtocolError):
        list(chunks(_chunk_metadata(), b"x" * 1000, codec=compression.NONE, max_message_size=80))
