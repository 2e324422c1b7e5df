"""A message sent alone, without I/O: its one SEND, or its chunks when it does not fit an entry."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pulsar_spark.client.chunking import entry_size_limit, unbatched
from pulsar_spark.client.send_window import Sent
from pulsar_spark.errors import LocalProtocolError
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.protocol.payload import encode_payload_section

VALUE = random.Random(7).randbytes(1024)  # no codec can shrink these


def sends(
    message: OutgoingMessage,
    *,
    codec: int = compression.NONE,
    max_entry_size: int = 1 << 20,
) -> list[Sent]:
    return list(
        unbatched(
            message,
            7,
            producer_name="p",
            publish_time=1000,
            codec=codec,
            max_entry_size=max_entry_size,
        )
    )


def metadata(**fields: Any) -> pb.MessageMetadata:
    """The MessageMetadata every message here starts from, with ``fields`` added."""
    return pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1000, **fields)


@pytest.mark.parametrize(
    ("max_message_size", "expected"),
    [(5 * 1024 * 1024, 5_232_640), (10 * 1024 + 1, 1), (10 * 1024, 1), (0, 1)],
)
def test_entries_stay_a_frame_padding_below_the_maximum(
    max_message_size: int, expected: int
) -> None:
    assert entry_size_limit(max_message_size) == expected


def test_a_message_that_fits_is_one_send() -> None:
    message = OutgoingMessage(
        b"value", key="k", properties=(("a", "1"), ("b", "2")), event_time=1_700_000_000_000
    )
    expected = metadata(
        properties=[pb.KeyValue(key="a", value="1"), pb.KeyValue(key="b", value="2")],
        partition_key="k",
        partition_key_b64_encoded=False,
        event_time=1_700_000_000_000,
        compression=compression.NONE,
        uncompressed_size=5,
    )
    assert sends(message) == [Sent(7, 7, 1, 1, False, encode_payload_section(expected, b"value"))]


def test_a_binary_key_travels_as_base64() -> None:
    expected = metadata(
        partition_key="AAE=",
        partition_key_b64_encoded=True,
        compression=compression.NONE,
        uncompressed_size=1,
    )
    assert sends(OutgoingMessage(b"v", key="AAE=", key_is_base64=True)) == [
        Sent(7, 7, 1, 1, False, encode_payload_section(expected, b"v"))
    ]


@pytest.mark.parametrize("codec", [compression.LZ4, compression.ZLIB, compression.ZSTD])
def test_a_value_is_compressed_with_the_producers_codec(codec: int) -> None:
    value = b"abc" * 1000
    compressed = compression.compress(codec, value)
    assert len(compressed) < 3000
    expected = metadata(compression=codec, uncompressed_size=3000)
    assert sends(OutgoingMessage(value), codec=codec) == [
        Sent(7, 7, 1, 1, False, encode_payload_section(expected, compressed))
    ]


@pytest.mark.parametrize("value", [None, b""])
def test_an_empty_or_null_value_is_never_compressed(value: bytes | None) -> None:
    expected = metadata(compression=compression.NONE, uncompressed_size=0)
    if value is None:
        expected.null_value = True
    assert sends(OutgoingMessage(value), codec=compression.ZSTD) == [
        Sent(7, 7, 1, 1, False, encode_payload_section(expected, b""))
    ]


def test_a_message_of_exactly_the_maximum_entry_size_is_not_chunked() -> None:
    expected = metadata(compression=compression.NONE, uncompressed_size=1024)
    assert expected.ByteSize() == 13
    assert sends(OutgoingMessage(VALUE), max_entry_size=1037) == [
        Sent(7, 7, 1, 1, False, encode_payload_section(expected, VALUE))
    ]


def chunk_metadata(chunk_id: int, chunk_count: int, codec: int, total: int) -> pb.MessageMetadata:
    return metadata(
        compression=codec,
        uncompressed_size=1024,
        uuid="p-7",
        num_chunks_from_msg=chunk_count,
        total_chunk_msg_size=total,
        chunk_id=chunk_id,
    )


def test_a_message_one_byte_too_large_is_chunked() -> None:
    # 13 bytes of metadata; 37 with the chunk fields at their largest: 1036 - 37 - 64 = 935.
    pieces = [VALUE[:935], VALUE[935:]]
    assert sends(OutgoingMessage(VALUE), max_entry_size=1036) == [
        Sent(7, 7, 0, 1, True, encode_payload_section(chunk_metadata(0, 2, 0, 1024), pieces[0])),
        Sent(7, 7, 1, 1, True, encode_payload_section(chunk_metadata(1, 2, 0, 1024), pieces[1])),
    ]


def test_chunks_cut_the_payload_and_only_the_last_completes_the_message() -> None:
    # 37 bytes of metadata with the chunk fields at their largest: 400 - 37 - 64 = 299 a chunk.
    got = sends(OutgoingMessage(VALUE), max_entry_size=400)
    cuts = [(0, 299), (299, 598), (598, 897), (897, 1024)]
    assert got == [
        Sent(
            7,
            7,
            1 if index == 3 else 0,
            1,
            True,
            encode_payload_section(chunk_metadata(index, 4, 0, 1024), VALUE[start:stop]),
        )
        for index, (start, stop) in enumerate(cuts)
    ]


def test_chunks_carry_the_compressed_payload() -> None:
    compressed = compression.compress(compression.ZLIB, VALUE)
    assert len(compressed) == 1035  # ZLIB cannot shrink these bytes
    got = sends(OutgoingMessage(VALUE), codec=compression.ZLIB, max_entry_size=600)
    # 37 bytes of metadata again, the codec's field as large as NONE's: 600 - 37 - 64 = 499.
    cuts = [(0, 499), (499, 998), (998, 1035)]
    assert got == [
        Sent(
            7,
            7,
            1 if index == 2 else 0,
            1,
            True,
            encode_payload_section(
                chunk_metadata(index, 3, compression.ZLIB, 1035), compressed[start:stop]
            ),
        )
        for index, (start, stop) in enumerate(cuts)
    ]


def test_a_compressible_message_above_the_limit_is_not_chunked() -> None:
    value = b"z" * 100_000
    compressed = compression.compress(compression.ZSTD, value)
    expected = metadata(compression=compression.ZSTD, uncompressed_size=100_000)
    assert sends(OutgoingMessage(value), codec=compression.ZSTD, max_entry_size=1000) == [
        Sent(7, 7, 1, 1, False, encode_payload_section(expected, compressed))
    ]


def test_chunks_are_made_as_they_are_asked_for() -> None:
    chunks = unbatched(
        OutgoingMessage(VALUE),
        7,
        producer_name="p",
        publish_time=1000,
        codec=compression.NONE,
        max_entry_size=400,
    )
    assert next(chunks).messages == 0
    assert [sent.messages for sent in chunks] == [0, 0, 1]


def test_metadata_that_leaves_no_room_for_a_chunk_is_refused() -> None:
    message = OutgoingMessage(b"v" * 100, properties=(("big", "x" * 200),))
    with pytest.raises(LocalProtocolError) as info:
        sends(message, max_entry_size=250)
    assert str(info.value) == (
        "message metadata of 246 bytes leaves no room for a payload in 250-byte messages"
    )
