"""Frames captured from the official client through pulsar-lite, decoded end to end.

Each ``tests/data/frames/*.bin`` is one broker->client MESSAGE frame and each
``tests/data/frames/send/*.bin`` the SEND frame the official producer wrote for it (see the
README there). Decoding runs the full path the reader uses: FrameDecoder ->
parse_payload_section -> decompress -> decode_entry, and every field is compared with what
was published. ``publish_time`` and the SEND checksum change whenever the frames are
regenerated, so those two values are taken from the README; everything else is spelled out.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import crc32c
import pytest
from support.decoding import (
    assert_same_columns,
    joined_values,
    keys_of,
    null_values,
    properties_of,
    value_offsets,
)

from pulsar_spark.protocol import compression, decode, pb
from pulsar_spark.protocol.batch_fields import to_columns
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.decode import decode_entry, entry_info, is_batch
from pulsar_spark.protocol.framing import Frame, FrameDecoder
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns
from pulsar_spark.protocol.payload import PayloadSection, parse_payload_section

FRAMES = Path(__file__).resolve().parents[1] / "data" / "frames"
Type = pb.BaseCommand.Type


@dataclass(frozen=True)
class Message:
    value: bytes | None
    key: str | None
    properties: tuple[tuple[str, str], ...] = ()
    event_time: int = 0


@dataclass(frozen=True)
class Golden:
    file: str
    topic: str
    ledger: int
    partition: int
    consumer_id: int
    producer_id: int
    codec: int
    batched: bool
    messages: tuple[Message, ...]
    size: int
    send_size: int
    outer_key: str | None = None
    outer_properties: tuple[tuple[str, str], ...] = ()
    outer_event_time: int | None = None
    null_value: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def producer_name(self) -> str:
        return f"producer-{self.topic}"


def _batch_of_five(
    file: str, topic: str, *, ledger: int, codec: int, size: int, send_size: int
) -> Golden:
    return Golden(
        file=file,
        topic=topic,
        ledger=ledger,
        partition=-1,
        consumer_id=ledger,
        producer_id=ledger,
        codec=codec,
        batched=True,
        messages=tuple(
            Message(f"msg-{i}".encode(), f"key-{i}", (("i", str(i)),), 1_700_000_000_000 + i)
            for i in range(5)
        ),
        size=size,
        send_size=send_size,
        outer_key="key-0",
    )


GOLDEN = [
    Golden(
        file="single_none.bin",
        topic="frames-single-none",
        ledger=0,
        partition=-1,
        consumer_id=0,
        producer_id=0,
        codec=pb.NONE,
        batched=False,
        messages=(Message(b"hello", "k1", (("a", "1"), ("b", "2")), 1_700_000_000_123),),
        size=107,
        send_size=96,
        outer_key="k1",
        outer_properties=(("a", "1"), ("b", "2")),
        outer_event_time=1_700_000_000_123,
    ),
    _batch_of_five(
        "batch_none.bin", "frames-batch-none", ledger=1, codec=pb.NONE, size=258, send_size=249
    ),
    _batch_of_five(
        "batch_lz4.bin", "frames-batch-lz4", ledger=2, codec=pb.LZ4, size=212, send_size=203
    ),
    _batch_of_five(
        "batch_zlib.bin", "frames-batch-zlib", ledger=3, codec=pb.ZLIB, size=193, send_size=184
    ),
    _batch_of_five(
        "batch_zstd.bin", "frames-batch-zstd", ledger=4, codec=pb.ZSTD, size=201, send_size=192
    ),
    _batch_of_five(
        "batch_snappy.bin",
        "frames-batch-snappy",
        ledger=5,
        codec=pb.SNAPPY,
        size=212,
        send_size=203,
    ),
    Golden(
        file="batch_unicode_key.bin",
        topic="frames-batch-unicode-key",
        ledger=6,
        partition=-1,
        consumer_id=6,
        producer_id=6,
        codec=pb.NONE,
        batched=True,
        messages=(Message(b"u0", "ключ"), Message(b"u1", "鍵"), Message(b"u2", "🔑")),
        size=144,
        send_size=135,
        outer_key="ключ",
    ),
    Golden(
        file="partition_1.bin",
        topic="frames-partitioned-partition-1",
        ledger=7,
        partition=1,
        consumer_id=7,
        producer_id=7,
        codec=pb.NONE,
        batched=False,
        messages=(Message(b"on-partition-1", "pk", (("p", "1"),), 1_700_000_000_456),),
        size=111,
        send_size=109,
        outer_key="pk",
        outer_properties=(("p", "1"),),
        outer_event_time=1_700_000_000_456,
    ),
    Golden(
        file="null_value.bin",
        topic="frames-null-value",
        ledger=8,
        partition=-1,
        consumer_id=8,
        producer_id=8,
        codec=pb.NONE,
        batched=False,
        messages=(Message(None, "nk"),),
        size=81,
        send_size=70,
        outer_key="nk",
        null_value=True,
    ),
    Golden(
        file="empty_value.bin",
        topic="frames-empty-value",
        ledger=9,
        partition=-1,
        consumer_id=9,
        producer_id=9,
        codec=pb.NONE,
        batched=False,
        messages=(Message(b"", "ek"),),
        size=79,
        send_size=68,
        outer_key="ek",
    ),
]
BY_FILE = {g.file: g for g in GOLDEN}


def readme_values() -> dict[str, dict[str, int]]:
    """publish_time and SEND crc32c of every file, from the frames README."""
    text = (FRAMES / "README.md").read_text(encoding="utf-8")
    values: dict[str, dict[str, int]] = {}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        name = re.match(r"`([^`]+)`", section)
        if not name:
            continue
        publish = re.search(r"publish_time=`(\d+)`", section)
        crc = re.search(r"crc32c `(0x[0-9a-f]{8})`", section)
        assert publish and crc, f"README section for {name.group(1)} lacks publish_time/crc32c"
        values[name.group(1)] = {
            "publish_time": int(publish.group(1)),
            "crc": int(crc.group(1), 16),
        }
    return values


README = readme_values()


def one_frame(data: bytes) -> Frame:
    decoder = FrameDecoder()
    frames = decoder.feed(data)
    assert len(frames) == 1
    assert decoder.buffered == 0
    decoder.eof()
    # byte by byte gives the same frame
    trickle = FrameDecoder()
    pieces = [f for i in range(len(data)) for f in trickle.feed(data[i : i + 1])]
    assert len(pieces) == 1
    assert pieces[0].command == frames[0].command
    assert pieces[0].payload is not None and frames[0].payload is not None
    assert bytes(pieces[0].payload) == bytes(frames[0].payload)
    return frames[0]


def check_metadata(golden: Golden, metadata: pb.MessageMetadata) -> None:
    expected = pb.MessageMetadata(
        producer_name=golden.producer_name,
        sequence_id=0,
        publish_time=README[golden.file]["publish_time"],
    )
    if golden.outer_properties:
        expected.properties.extend(pb.KeyValue(key=k, value=v) for k, v in golden.outer_properties)
    if golden.outer_key is not None:
        expected.partition_key = golden.outer_key
    if golden.codec != pb.NONE:
        expected.compression = golden.codec  # type: ignore[assignment]
        expected.uncompressed_size = 175
    if golden.batched:
        expected.num_messages_in_batch = len(golden.messages)
    if golden.outer_event_time is not None:
        expected.event_time = golden.outer_event_time
    if golden.null_value:
        expected.null_value = True
    assert metadata == expected
    # nothing the proto does not know about either
    assert metadata.SerializeToString() == expected.SerializeToString()


def check_columns(golden: Golden, columns: MessageColumns) -> None:
    assert columns.entry == EntryInfo(
        ledger_id=golden.ledger,
        entry_id=0,
        partition=golden.partition,
        producer_name=golden.producer_name,
        publish_time=README[golden.file]["publish_time"],
        replicated_from=None,
    )
    n = len(golden.messages)
    assert columns.count == n
    expected_index = list(range(n)) if golden.batched else [-1]
    assert columns.batch_index.tolist() == expected_index
    values = [m.value for m in golden.messages]
    assert joined_values(columns) == b"".join(v or b"" for v in values)
    offsets = [0]
    for v in values:
        offsets.append(offsets[-1] + len(v or b""))
    assert value_offsets(columns) == offsets
    if golden.null_value:
        assert null_values(columns) == [True]
    else:
        assert null_values(columns) is None
    assert keys_of(columns) == [
        m.key.encode() if m.key is not None else None for m in golden.messages
    ]
    props = [m.properties for m in golden.messages]
    assert properties_of(columns) == [tuple(p) for p in props]
    assert (columns.properties is None) == (not any(props))
    assert columns.event_time.tolist() == [m.event_time for m in golden.messages]
    assert columns.sequence_id.tolist() == list(range(n))


def decode_message_frame(golden: Golden) -> tuple[Frame, PayloadSection, bytes, MessageColumns]:
    data = (FRAMES / golden.file).read_bytes()
    assert len(data) == golden.size
    assert struct.unpack_from(">I", data)[0] == len(data) - 4
    frame = one_frame(data)
    assert frame.payload is not None
    section = parse_payload_section(frame.payload)
    raw = compression.decompress(
        section.metadata.compression, section.payload, section.metadata.uncompressed_size
    )
    message_id = frame.command.message.message_id
    info = entry_info(
        section.metadata, message_id.ledgerId, message_id.entryId, message_id.partition
    )
    return frame, section, raw, decode_entry(info, section.metadata, raw)


def test_readme_lists_every_file() -> None:
    on_disk = sorted(p.name for p in FRAMES.glob("*.bin"))
    assert on_disk == sorted(BY_FILE)
    assert sorted(p.name for p in (FRAMES / "send").glob("*.bin")) == sorted(BY_FILE)
    assert sorted(README) == sorted(BY_FILE)


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.file for g in GOLDEN])
def test_message_frame(golden: Golden) -> None:
    frame, section, raw, columns = decode_message_frame(golden)
    command = frame.command
    assert command.type == Type.MESSAGE
    message = command.message
    assert message.consumer_id == golden.consumer_id
    assert message.message_id.ledgerId == golden.ledger
    assert message.message_id.entryId == 0
    assert message.message_id.HasField("partition")
    assert message.message_id.partition == golden.partition
    assert not message.message_id.HasField("batch_index")
    assert message.HasField("redelivery_count") and message.redelivery_count == 0
    assert list(message.ack_set) == []
    # pulsar-lite sends no checksum: the metadata size follows the command directly
    assert frame.payload is not None
    assert bytes(frame.payload[:2]) != b"\x0e\x01"
    assert section.broker_entry_metadata is None
    check_metadata(golden, section.metadata)
    assert is_batch(section.metadata) is golden.batched
    if golden.codec == pb.NONE:
        assert raw == section.payload
    else:
        assert len(raw) == 175
        assert len(section.payload) < 175
    check_columns(golden, columns)


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.file for g in GOLDEN])
def test_send_frame_matches_the_message_frame(golden: Golden) -> None:
    data = (FRAMES / "send" / golden.file).read_bytes()
    assert len(data) == golden.send_size
    frame = one_frame(data)
    command = frame.command
    assert command.type == Type.SEND
    assert command.send.producer_id == golden.producer_id
    assert command.send.sequence_id == 0
    if golden.batched:
        assert command.send.num_messages == len(golden.messages)
    else:
        assert not command.send.HasField("num_messages")
    assert frame.payload is not None
    section_bytes = bytes(frame.payload)
    assert section_bytes[:2] == b"\x0e\x01"
    crc = struct.unpack_from(">I", section_bytes, 2)[0]
    assert crc == README[golden.file]["crc"]
    assert crc == crc32c.crc32c(section_bytes[6:])
    section = parse_payload_section(section_bytes)  # verifies the checksum
    check_metadata(golden, section.metadata)

    message_frame, message_section, raw, _ = decode_message_frame(golden)
    assert message_frame.payload is not None
    assert bytes(message_frame.payload) == section_bytes[6:]
    assert section.payload == message_section.payload
    send_raw = compression.decompress(
        section.metadata.compression, section.payload, section.metadata.uncompressed_size
    )
    assert send_raw == raw
    info = entry_info(section.metadata, golden.ledger, 0, golden.partition)
    check_columns(golden, decode_entry(info, section.metadata, send_raw))


@pytest.mark.parametrize("file", [g.file for g in GOLDEN if g.batched])
def test_batch_records(file: str) -> None:
    """The uncompressed batch, record by record, as the official producer laid it out."""
    golden = BY_FILE[file]
    _, section, raw, columns = decode_message_frame(golden)
    pos = 0
    for i, message in enumerate(golden.messages):
        (size,) = struct.unpack_from(">I", raw, pos)
        smm = pb.SingleMessageMetadata()
        smm.ParseFromString(raw[pos + 4 : pos + 4 + size])
        expected = pb.SingleMessageMetadata(payload_size=len(message.value or b""), sequence_id=i)
        expected.properties.extend(pb.KeyValue(key=k, value=v) for k, v in message.properties)
        if message.key is not None:
            expected.partition_key = message.key
        if message.event_time:
            expected.event_time = message.event_time
        assert smm == expected
        pos += 4 + size
        assert raw[pos : pos + smm.payload_size] == message.value
        pos += smm.payload_size
    assert pos == len(raw)
    # per-message keys differ, so the general path decoded it; check against a direct walk
    count = section.metadata.num_messages_in_batch
    assert decode._uniform([(columns.entry, section.metadata, raw)]) is None
    walked = to_columns(columns.entry, raw, walk_batch(raw, count, section.metadata.sequence_id))
    assert_same_columns(walked, columns)


def test_conftest_golden_frame_fixture(golden_frame: Callable[[str], bytes]) -> None:
    assert golden_frame("single_none.bin") == (FRAMES / "single_none.bin").read_bytes()
