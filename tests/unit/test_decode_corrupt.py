"""decode_entry on malformed batches: every corruption is a CorruptPayloadError."""

from __future__ import annotations

import struct

import pytest
from support.decoding import INFO, batch, outer, record, smm

from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol.decode import decode_entry


def test_payload_size_running_past_the_end() -> None:
    payload = batch(
        (smm(payload_size=2, sequence_id=0), b"ok"), (smm(payload_size=50, sequence_id=1), b"short")
    )
    with pytest.raises(
        CorruptPayloadError,
        match=r"^batch of 2 messages is malformed: a message runs past the end of its batch$",
    ):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload)


def test_metadata_size_running_past_the_end() -> None:
    good = record(smm(payload_size=2, sequence_id=0), b"ok")
    bad = struct.pack(">I", 1000) + smm(payload_size=1).SerializeToString() + b"x"
    with pytest.raises(CorruptPayloadError):
        decode_entry(INFO, outer(num_messages_in_batch=2), good + bad)


def test_fewer_messages_than_announced() -> None:
    payload = batch(
        (smm(payload_size=2, sequence_id=0), b"ok"), (smm(payload_size=2, sequence_id=1), b"ok")
    )
    message = r"^batch of 3 messages is malformed: a message runs past the end of its batch$"
    with pytest.raises(CorruptPayloadError, match=message):
        decode_entry(INFO, outer(num_messages_in_batch=3), payload)
    with pytest.raises(CorruptPayloadError, match=message):
        decode_entry(INFO, outer(num_messages_in_batch=3), payload + b"\x00\x00")


def test_fewer_uniform_messages_than_announced() -> None:
    # four equal records announced as eight: the fast path must not split records in half
    payload = batch(*((smm(payload_size=20, sequence_id=i), bytes(20)) for i in range(4)))
    with pytest.raises(CorruptPayloadError):
        decode_entry(INFO, outer(num_messages_in_batch=8), payload)


def test_unparseable_single_message_metadata() -> None:
    payload = struct.pack(">I", 3) + b"\xff\xff\xff" + b"rest"
    with pytest.raises(
        CorruptPayloadError,
        match=r"^batch of 1 messages is malformed: wire type 7 in a SingleMessageMetadata$",
    ):
        decode_entry(INFO, outer(num_messages_in_batch=1), payload)


def test_empty_batch_payload() -> None:
    with pytest.raises(
        CorruptPayloadError,
        match=r"^batch of 2 messages is malformed: a message runs past the end of its batch$",
    ):
        decode_entry(INFO, outer(num_messages_in_batch=2), b"")


@pytest.mark.parametrize("count", [0, -1])
def test_batch_announcing_no_messages(count: int) -> None:
    with pytest.raises(CorruptPayloadError, match=rf"^batch announces {count} messages$"):
        decode_entry(INFO, outer(num_messages_in_batch=count), b"")


def test_metadata_truncated_inside_a_varint() -> None:
    raw = smm(payload_size=1, sequence_id=300).SerializeToString()[:-1]  # cut the 2-byte varint
    payload = struct.pack(">I", len(raw)) + raw
    with pytest.raises(CorruptPayloadError, match=r"^batch of 2 messages is malformed: "):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload)


def test_property_that_does_not_parse() -> None:
    raw = smm(payload_size=1).SerializeToString() + b"\x0a\x03\xff\xff\xff"
    payload = struct.pack(">I", len(raw)) + raw + b"x"
    other = record(smm(payload_size=2), b"yy")
    with pytest.raises(CorruptPayloadError, match=r"^a message property does not parse$"):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload + other)
    # a uniform batch goes through the protobuf runtime, which refuses it as a whole
    with pytest.raises(
        CorruptPayloadError, match=r"^a SingleMessageMetadata in a batch does not parse$"
    ):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload + payload)


def test_varint_longer_than_64_bits_is_corrupt() -> None:
    """A ten-byte varint whose last byte carries more than one bit does not fit in 64 bits:
    corrupt input, which must surface as CorruptPayloadError like any other malformed batch
    (not as a bare OverflowError from numpy)."""
    raw = bytes([0x18, 0x01, 0x40]) + b"\xff" * 9 + b"\x7f"  # payload_size=1, sequence_id=?
    payload = struct.pack(">I", len(raw)) + raw + b"x"
    other = record(smm(payload_size=2, sequence_id=1), b"yy")
    with pytest.raises(CorruptPayloadError):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload + other)
