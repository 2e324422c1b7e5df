"""The producer's open batch, without I/O: its limits, when it is full, and the SEND it becomes.

A fake clock stands in for :func:`time.monotonic`, so the delay boundary is exact.
"""

from __future__ import annotations

import pytest

from pulsar_spark.client.batching import BatchLimits, OpenBatch
from pulsar_spark.client.send_window import Sent
from pulsar_spark.client.settings import ProducerSettings
from pulsar_spark.errors import LocalProtocolError
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.encode import Blobs, OutgoingColumns, OutgoingMessage, encode_records
from pulsar_spark.protocol.payload import encode_payload_section

TOPIC = "persistent://public/default/t"
LARGE = 1 << 30


class Clock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def open_batch(
    *,
    max_messages: int = LARGE,
    max_bytes: int = LARGE,
    max_delay: float = 60.0,
    max_entry_size: int = LARGE,
    codec: int = compression.NONE,
    clock: Clock | None = None,
) -> OpenBatch:
    limits = BatchLimits(max_messages, max_bytes, max_delay, max_entry_size)
    return OpenBatch(limits, topic=TOPIC, producer_name="p", codec=codec, clock=clock or Clock())


def value(size: int) -> OutgoingMessage:
    return OutgoingMessage(b"x" * size)


def record(size: int, sequence_id: int) -> bytes:
    """The batch record of ``value(size)`` for sizes and ids under 128: 4 + 4 + size bytes."""
    return b"\x00\x00\x00\x04\x18" + bytes((size,)) + b"\x40" + bytes((sequence_id,)) + b"x" * size


# --- limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch_max_bytes", "max_entry_size", "expected_bytes"),
    [
        (128 * 1024, 5_232_640, 128 * 1024),  # the setting is below what entries allow
        (4 * 1024 * 1024, 5_232_640, 2_583_552),  # (5_232_640 - 65_536) // 2
        (128 * 1024, 65_536 + 1001, 500),
        (128 * 1024, 1, 1),  # never below one byte
    ],
)
def test_limits_keep_two_batch_halves_and_the_metadata_room_in_one_entry(
    batch_max_bytes: int, max_entry_size: int, expected_bytes: int
) -> None:
    settings = ProducerSettings(
        batch_max_messages=7, batch_max_bytes=batch_max_bytes, batch_max_delay_ms=25
    )
    assert BatchLimits.of(settings, max_entry_size) == BatchLimits(
        7, expected_bytes, 0.025, max_entry_size
    )


# --- when the batch is full ------------------------------------------------------------------


def test_full_at_max_messages() -> None:
    batch = open_batch(max_messages=3)
    assert [batch.add(value(1), n) for n in range(3)] == [False, False, True]
    assert len(batch) == 3
    batch.take(0)
    assert [batch.add(value(1), n) for n in range(3, 6)] == [False, False, True]


def test_full_at_max_bytes_counting_whole_records() -> None:
    batch = open_batch(max_bytes=36)  # two 18-byte records
    assert batch.add(value(10), 0) is False  # 18 bytes
    assert batch.add(value(9), 1) is False  # 35 bytes: one short
    assert batch.add(value(1), 2) is True  # 45 bytes: the crossing record joins
    assert len(batch) == 3


def test_full_at_exactly_max_bytes() -> None:
    batch = open_batch(max_bytes=36)
    assert [batch.add(value(10), n) for n in range(2)] == [False, True]


def test_full_once_open_for_max_delay() -> None:
    clock = Clock()
    batch = open_batch(max_delay=0.5, clock=clock)
    assert batch.add(value(1), 0) is False  # opened at 100.0: full from 100.5 on
    clock.now = 100.499
    assert batch.add(value(1), 1) is False
    clock.now = 100.5
    assert batch.add(value(1), 2) is True
    assert len(batch) == 3


def test_the_delay_starts_with_the_first_message_of_each_batch() -> None:
    clock = Clock()
    batch = open_batch(max_delay=0.5, clock=clock)
    batch.add(value(1), 0)
    clock.now = 101.0
    batch.take(0)
    assert batch.add(value(1), 1) is False  # a new batch, opened at 101.0
    clock.now = 101.4
    assert batch.add(value(1), 2) is False
    clock.now = 101.5
    assert batch.add(value(1), 3) is True


def test_without_a_delay_every_message_fills_the_batch() -> None:
    batch = open_batch(max_delay=0.0)
    assert batch.add(value(1), 0) is True


def test_an_empty_batch_is_false() -> None:
    batch = open_batch()
    assert (len(batch), bool(batch)) == (0, False)
    batch.add(value(1), 0)
    assert (len(batch), bool(batch)) == (1, True)


# --- rows given as columns -------------------------------------------------------------------


def records_of(sizes: list[int], first_sequence_id: int = 0) -> tuple[OutgoingColumns, bytes]:
    columns = OutgoingColumns(Blobs.of([b"x" * size for size in sizes]))
    expected = b"".join(record(size, first_sequence_id + i) for i, size in enumerate(sizes))
    return columns, expected


def test_records_fill_up_to_max_messages() -> None:
    columns, _ = records_of([1] * 7)
    records = encode_records(columns, 0)
    batch = open_batch(max_messages=3)
    assert batch.add_records(records, 0) == (3, True)
    batch.take(0)
    assert batch.add_records(records, 3) == (3, True)
    batch.take(0)
    assert batch.add_records(records, 6) == (1, False)


def test_records_fill_up_to_the_record_that_crosses_max_bytes() -> None:
    columns, _ = records_of([10, 9, 1, 10])  # records of 18, 17, 9 and 18 bytes
    records = encode_records(columns, 0)
    batch = open_batch(max_bytes=36)
    assert batch.add_records(records, 0) == (3, True)  # 18 + 17 + 9 = 44
    batch.take(0)
    assert batch.add_records(records, 3) == (1, False)


def test_records_take_the_room_a_batch_has_left() -> None:
    columns, _ = records_of([1] * 5)
    records = encode_records(columns, 10)
    batch = open_batch(max_messages=4)
    batch.add(value(1), 9)
    assert batch.add_records(records, 0) == (3, True)
    assert len(batch) == 4


def test_records_see_the_clock_like_messages() -> None:
    columns, _ = records_of([1] * 4)
    records = encode_records(columns, 0)
    clock = Clock()
    batch = open_batch(max_delay=0.5, clock=clock)
    assert batch.add(value(1), 0) is False
    clock.now = 100.5
    assert batch.add_records(records, 1) == (3, True)


def test_records_and_messages_make_the_same_payload() -> None:
    columns, expected = records_of([3, 0, 5], first_sequence_id=4)
    by_rows, by_messages = open_batch(), open_batch()
    by_rows.add_records(encode_records(columns, 4), 0)
    for index in range(3):
        by_messages.add(columns.message(index), 4 + index)
    sent = Sent(4, 6, 3, 3, False, encode_payload_section(batch_metadata(4, 3, 32), expected))
    assert by_rows.take(7) == sent
    assert by_messages.take(7) == sent


# --- the SEND a batch becomes ----------------------------------------------------------------


def batch_metadata(first: int, count: int, size: int) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="p",
        sequence_id=first,
        highest_sequence_id=first + count - 1,
        publish_time=7,
        num_messages_in_batch=count,
        compression=compression.NONE,
        uncompressed_size=size,
    )


def test_take_makes_one_send_of_the_whole_batch() -> None:
    batch = open_batch()
    for n in range(5, 8):
        batch.add(value(n), n)
    payload = record(5, 5) + record(6, 6) + record(7, 7)
    assert len(payload) == 42
    assert batch.take(7) == Sent(
        5, 7, 3, 3, False, encode_payload_section(batch_metadata(5, 3, 42), payload)
    )
    assert len(batch) == 0


def test_take_gives_the_batch_its_first_message_key() -> None:
    batch = open_batch()
    batch.add(OutgoingMessage(b"a", key="k1"), 0)
    batch.add(OutgoingMessage(b"b", key="k2", key_is_base64=True), 1)
    metadata = batch_metadata(0, 2, 28)
    metadata.partition_key = "k1"
    metadata.partition_key_b64_encoded = False
    payload = (
        b"\x00\x00\x00\x08\x12\x02k1\x18\x01\x40\x00a"
        + b"\x00\x00\x00\x0a\x12\x02k2\x18\x01\x30\x01\x40\x01b"
    )
    assert batch.take(7) == Sent(0, 1, 2, 2, False, encode_payload_section(metadata, payload))


@pytest.mark.parametrize("codec", [compression.LZ4, compression.ZLIB, compression.ZSTD])
def test_take_compresses_the_whole_payload(codec: int) -> None:
    batch = open_batch(codec=codec)
    for n in range(4):
        batch.add(value(100), n)
    raw = b"".join(record(100, n) for n in range(4))
    metadata = batch_metadata(0, 4, 432)
    metadata.compression = codec  # type: ignore[assignment]
    compressed = compression.compress(codec, raw)
    assert len(compressed) < len(raw)
    assert batch.take(7) == Sent(0, 3, 4, 4, False, encode_payload_section(metadata, compressed))


def test_take_refuses_a_batch_over_the_maximum_entry_size() -> None:
    batch = open_batch(max_entry_size=33)
    batch.add(value(10), 0)  # 18 payload bytes and 16 of metadata
    with pytest.raises(LocalProtocolError) as info:
        batch.take(7)
    assert str(info.value) == (
        f"batch of 1 messages for {TOPIC} is 34 bytes, over the maximum entry size of 33 bytes "
        "(keys or properties too large?)"
    )


def test_take_accepts_a_batch_of_exactly_the_maximum_entry_size() -> None:
    batch = open_batch(max_entry_size=34)
    batch.add(value(10), 0)
    assert batch.take(7) == Sent(
        0, 0, 1, 1, False, encode_payload_section(batch_metadata(0, 1, 18), record(10, 0))
    )


def test_take_refuses_an_empty_batch() -> None:
    with pytest.raises(LocalProtocolError) as info:
        open_batch().take(7)
    assert str(info.value) == "cannot build an empty batch"
