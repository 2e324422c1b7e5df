"""FrameDecoder and the command builders: bytes in, exact commands out."""

from __future__ import annotations

import struct

import pytest

from pulsar_spark.client.consumer import last_entry
from pulsar_spark.errors import (
    FrameTooLargeError,
    RemoteProtocolError,
    TruncatedFrameError,
)
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    Frame,
    FrameDecoder,
    decode_frame_body,
    encode_command,
    encode_payload_frame,
    max_frame_size_for,
)
from pulsar_spark.protocol.payload import encode_payload_section, parse_payload_section

Type = pb.BaseCommand.Type
UINT64_MAX = (1 << 64) - 1


def decode_one(frame: bytes) -> Frame:
    """Decode bytes that must hold exactly one frame, leaving nothing buffered."""
    decoder = FrameDecoder()
    frames = decoder.feed(frame)
    assert len(frames) == 1
    assert decoder.buffered == 0
    decoder.eof()
    return frames[0]


def message_frame(consumer_id: int, ledger: int, entry: int, payload: bytes) -> bytes:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=entry, publish_time=1000 + entry)
    section = encode_payload_section(metadata, payload)
    command = pb.BaseCommand(
        type=Type.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=consumer_id,
            message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry),
        ),
    )
    return encode_payload_frame(command, section)


def mixed_stream() -> tuple[bytes, list[tuple[int, int, bytes | None]]]:
    """Several frames of different kinds back to back, with what each must decode to."""
    parts = [
        (commands.ping(), (Type.PING, 0, None)),
        (message_frame(7, 3, 0, b"first"), (Type.MESSAGE, 0, b"first")),
        (commands.flow(consumer_id=7, permits=1000), (Type.FLOW, 1000, None)),
        (message_frame(7, 3, 1, b""), (Type.MESSAGE, 1, b"")),
        (message_frame(7, 3, 2, bytes(range(256)) * 40), (Type.MESSAGE, 2, bytes(range(256)) * 40)),
        (commands.pong(), (Type.PONG, 0, None)),
    ]
    return b"".join(p for p, _ in parts), [e for _, e in parts]


def check_mixed(frames: list[Frame], expected: list[tuple[int, int, bytes | None]]) -> None:
    assert [f.command.type for f in frames] == [kind for kind, _, _ in expected]
    for frame, (kind, number, payload) in zip(frames, expected, strict=True):
        if kind == Type.MESSAGE:
            assert frame.command.message.consumer_id == 7
            assert frame.command.message.message_id.ledgerId == 3
            assert frame.command.message.message_id.entryId == number
            assert frame.payload is not None
            section = parse_payload_section(frame.payload)
            assert section.payload == payload
            assert section.metadata.sequence_id == number
            assert section.metadata.publish_time == 1000 + number
            assert section.metadata.producer_name == "p"
        elif kind == Type.FLOW:
            assert frame.command.flow.consumer_id == 7
            assert frame.command.flow.messagePermits == number
            assert frame.payload is None
        else:
            assert frame.payload is None


# --- FrameDecoder -----------------------------------------------------------------------------


def test_byte_by_byte_and_one_feed_give_identical_frames() -> None:
    stream, expected = mixed_stream()

    whole = FrameDecoder()
    at_once = whole.feed(stream)
    assert whole.buffered == 0

    trickle = FrameDecoder()
    byte_frames: list[Frame] = []
    for i in range(len(stream)):
        got = trickle.feed(stream[i : i + 1])
        byte_frames.extend(got)
        if got:  # a frame completes on its last byte, leaving nothing behind
            assert len(got) == 1
            assert trickle.buffered == 0
        else:
            assert trickle.buffered > 0
    assert trickle.buffered == 0
    trickle.eof()

    check_mixed(at_once, expected)
    check_mixed(byte_frames, expected)
    assert [f.command.SerializeToString() for f in at_once] == [
        f.command.SerializeToString() for f in byte_frames
    ]
    assert [None if f.payload is None else bytes(f.payload) for f in at_once] == [
        None if f.payload is None else bytes(f.payload) for f in byte_frames
    ]


def test_frames_complete_exactly_on_their_last_byte() -> None:
    stream, _ = mixed_stream()
    decoder = FrameDecoder()
    ends = []
    for i in range(len(stream)):
        if decoder.feed(stream[i : i + 1]):
            ends.append(i + 1)
    # every frame ends where its own size prefix says
    expected_ends = []
    pos = 0
    while pos < len(stream):
        (total,) = struct.unpack_from(">I", stream, pos)
        pos += 4 + total
        expected_ends.append(pos)
    assert ends == expected_ends


def test_several_frames_in_one_feed_and_a_split_tail() -> None:
    stream, expected = mixed_stream()
    cut = len(stream) - 5  # the last frame (PONG) is cut inside
    decoder = FrameDecoder()
    first = decoder.feed(stream[:cut])
    check_mixed(first, expected[:-1])
    assert decoder.buffered == len(commands.pong()) - 5
    with pytest.raises(TruncatedFrameError, match=rf"\({len(commands.pong()) - 5} bytes pending\)"):
        decoder.eof()
    rest = decoder.feed(stream[cut:])
    check_mixed(rest, expected[-1:])
    assert decoder.buffered == 0
    decoder.eof()


def test_random_split_points_give_the_same_frames() -> None:
    stream, expected = mixed_stream()
    for step in (2, 3, 7, 100, 1000, 4096):
        decoder = FrameDecoder()
        frames: list[Frame] = []
        for i in range(0, len(stream), step):
            frames.extend(decoder.feed(memoryview(stream)[i : i + step]))
        check_mixed(frames, expected)
        assert decoder.buffered == 0


def test_oversize_frame_rejected_as_soon_as_the_size_is_seen() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    assert decoder.feed(b"\x00\x00") == []
    assert decoder.buffered == 2
    with pytest.raises(
        FrameTooLargeError,
        match=r"^frame of 1025 bytes exceeds the maximum frame size of 1024 bytes$",
    ):
        decoder.feed(b"\x04\x01")  # 0x401 = 1025: one byte over, body not sent at all
    assert decoder.buffered == 4


def test_oversize_default_limit_is_max_message_size_plus_padding() -> None:
    limit = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING
    assert limit == 5 * 1024 * 1024 + 10 * 1024
    assert max_frame_size_for(DEFAULT_MAX_MESSAGE_SIZE) == limit
    decoder = FrameDecoder()
    assert decoder.max_frame_size == limit
    with pytest.raises(FrameTooLargeError, match=rf"frame of {limit + 1} bytes"):
        decoder.feed(struct.pack(">II", limit + 1, 10) + b"\x08")
    assert decoder.buffered == 9

    huge = FrameDecoder()
    with pytest.raises(FrameTooLargeError, match=r"frame of 4294967295 bytes"):
        huge.feed(b"\xff\xff\xff\xff")
    assert huge.buffered == 4


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    body = pb.BaseCommand(type=Type.PING, ping=pb.CommandPing()).SerializeToString()
    payload = b"x" * 100
    frame = struct.pack(">II", 4 + len(body) + len(payload), len(body)) + body + payload
    decoder = FrameDecoder(max_frame_size=4 + len(body) + len(payload))
    (got,) = decoder.feed(frame)
    assert got.command.type == Type.PING
    assert got.payload is not None and bytes(got.payload) == payload


def test_oversize_frame_after_a_good_one_in_the_same_feed() -> None:
    decoder = FrameDecoder(max_frame_size=64)
    with pytest.raises(FrameTooLargeError, match=r"frame of 65 bytes"):
        decoder.feed(commands.ping() + struct.pack(">I", 65))


def test_eof_mid_frame_raises_truncated() -> None:
    frame = commands.flow(consumer_id=1, permits=5)
    decoder = FrameDecoder()
    assert decoder.feed(frame[:-1]) == []
    assert decoder.buffered == len(frame) - 1
    with pytest.raises(
        TruncatedFrameError,
        match=rf"^connection closed in the middle of a frame \({len(frame) - 1} bytes pending\)$",
    ):
        decoder.eof()


def test_eof_inside_the_size_prefix_raises_truncated() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"\x00\x00\x00") == []
    with pytest.raises(TruncatedFrameError, match=r"\(3 bytes pending\)"):
        decoder.eof()


def test_eof_on_a_clean_boundary_is_fine() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    decoder.eof()
    (frame,) = decoder.feed(commands.ping())
    assert frame.command.type == Type.PING
    decoder.eof()


def test_command_size_larger_than_the_frame_raises_truncated() -> None:
    body = pb.BaseCommand(type=Type.PING, ping=pb.CommandPing()).SerializeToString()
    frame = struct.pack(">II", 4 + len(body), len(body) + 1) + body
    with pytest.raises(
        TruncatedFrameError,
        match=rf"^command size {len(body) + 1} exceeds the {len(body)} bytes left in the frame$",
    ):
        FrameDecoder().feed(frame)


def test_frame_too_short_for_a_command_size_raises_truncated() -> None:
    with pytest.raises(TruncatedFrameError, match=r"^frame of 2 bytes has no command size$"):
        FrameDecoder().feed(b"\x00\x00\x00\x02\x00\x00")
    with pytest.raises(TruncatedFrameError, match=r"^frame of 0 bytes has no command size$"):
        decode_frame_body(b"")


def test_garbage_command_raises_remote_protocol_error() -> None:
    garbage = b"\xff\xff\xff"
    frame = struct.pack(">II", 4 + len(garbage), len(garbage)) + garbage
    with pytest.raises(RemoteProtocolError, match=r"^command of 3 bytes does not parse$") as info:
        FrameDecoder().feed(frame)
    assert type(info.value) is RemoteProtocolError


def test_payload_follows_the_command() -> None:
    command = pb.BaseCommand(
        type=Type.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=3, message_id=pb.MessageIdData(ledgerId=1, entryId=2)
        ),
    )
    frame = encode_payload_frame(command, b"\x01\x02\x03section")
    body = command.SerializeToString()
    assert frame[:8] == struct.pack(">II", 4 + len(body) + 10, len(body))
    got = decode_one(frame)
    assert got.command == command
    assert got.payload is not None and bytes(got.payload) == b"\x01\x02\x03section"


def test_encode_command_layout() -> None:
    command = pb.BaseCommand(type=Type.PING, ping=pb.CommandPing())
    body = command.SerializeToString()
    assert encode_command(command) == struct.pack(">II", len(body) + 4, len(body)) + body


def test_buffer_is_compacted_while_streaming() -> None:
    decoder = FrameDecoder()
    frame = commands.flow(consumer_id=1, permits=1)
    for i in range(10_000):
        frames = decoder.feed(frame + frame[:3] if i == 0 else frame[3:] + frame[:3])
        assert len(frames) == 1
        assert frames[0].command.flow.messagePermits == 1
        assert decoder.buffered == 3
    assert len(decoder._buffer) < 4 * len(frame)


def test_connect() -> None:
    frame = decode_one(commands.connect())
    assert frame.payload is None
    cmd = frame.command
    assert cmd.type == Type.CONNECT
    assert cmd.connect.client_version == commands.CLIENT_VERSION
    assert cmd.connect.client_version.startswith("pulsar-spark-")
    assert cmd.connect.protocol_version == 19
    assert cmd.connect.feature_flags.supports_broker_entry_metadata is True
    assert not cmd.connect.HasField("proxy_to_broker_url")
    assert not cmd.connect.HasField("auth_method_name")

    proxied = decode_one(commands.connect(proxy_to_broker_url="broker-1:6650")).command
    assert proxied.connect.proxy_to_broker_url == "broker-1:6650"
    assert proxied.connect.protocol_version == 19


def test_ping_pong() -> None:
    ping = decode_one(commands.ping())
    assert ping.command.type == Type.PING
    assert ping.command.HasField("ping")
    pong = decode_one(commands.pong())
    assert pong.command.type == Type.PONG
    assert pong.command.HasField("pong")


def test_partitioned_metadata() -> None:
    cmd = decode_one(
        commands.partitioned_metadata(topic="persistent://public/default/a", request_id=11)
    ).command
    assert cmd.type == Type.PARTITIONED_METADATA
    assert cmd.partitionMetadata.topic == "persistent://public/default/a"
    assert cmd.partitionMetadata.request_id == 11


def test_lookup() -> None:
    for authoritative in (False, True):
        cmd = decode_one(
            commands.lookup(topic="t/ns/x", request_id=12, authoritative=authoritative)
        ).command
        assert cmd.type == Type.LOOKUP
        assert cmd.lookupTopic.topic == "t/ns/x"
        assert cmd.lookupTopic.request_id == 12
        assert cmd.lookupTopic.authoritative is authoritative


def test_topics_of_namespace() -> None:
    cmd = decode_one(commands.topics_of_namespace(namespace="public/default", request_id=13))
    body = cmd.command.getTopicsOfNamespace
    assert cmd.command.type == Type.GET_TOPICS_OF_NAMESPACE
    assert body.namespace == "public/default"
    assert body.request_id == 13
    assert body.mode == pb.CommandGetTopicsOfNamespace.ALL


@pytest.mark.parametrize(
    ("start", "ledger", "entry", "partition", "batch_index"),
    [
        (MessageId.earliest(), UINT64_MAX, UINT64_MAX, None, None),
        (MessageId.latest(), (1 << 63) - 1, (1 << 63) - 1, None, None),
        (MessageId(4, 17), 4, 17, None, None),
        (MessageId(4, 17, 3, partition=2), 4, 17, 2, 3),
    ],
)
def test_subscribe_reader(
    start: MessageId, ledger: int, entry: int, partition: int | None, batch_index: int | None
) -> None:
    cmd = decode_one(
        commands.subscribe_reader(
            topic="persistent://public/default/x-partition-2",
            subscription="sub-1",
            consumer_id=21,
            request_id=22,
            start=start,
        )
    ).command
    sub = cmd.subscribe
    assert cmd.type == Type.SUBSCRIBE
    assert sub.topic == "persistent://public/default/x-partition-2"
    assert sub.subscription == "sub-1"
    assert sub.consumer_name == "sub-1"
    assert sub.subType == pb.CommandSubscribe.Exclusive
    assert sub.consumer_id == 21
    assert sub.request_id == 22
    assert sub.HasField("durable") and sub.durable is False
    assert sub.initialPosition == pb.CommandSubscribe.Earliest
    assert sub.HasField("force_topic_creation") and sub.force_topic_creation is False
    assert sub.start_message_id.ledgerId == ledger
    assert sub.start_message_id.entryId == entry
    assert sub.start_message_id.HasField("partition") is (partition is not None)
    assert sub.start_message_id.partition == (-1 if partition is None else partition)
    assert sub.start_message_id.HasField("batch_index") is (batch_index is not None)
    assert sub.start_message_id.batch_index == (-1 if batch_index is None else batch_index)
    back = MessageId.from_wire(
        sub.start_message_id.ledgerId,
        sub.start_message_id.entryId,
        sub.start_message_id.batch_index,
        sub.start_message_id.partition,
    )
    assert back == start
    assert back.partition == start.partition


def test_flow() -> None:
    cmd = decode_one(commands.flow(consumer_id=5, permits=50_000)).command
    assert cmd.type == Type.FLOW
    assert cmd.flow.consumer_id == 5
    assert cmd.flow.messagePermits == 50_000


def test_ack_cumulative() -> None:
    cmd = decode_one(
        commands.ack_cumulative(consumer_id=5, message_id=MessageId(9, 99, partition=1))
    ).command
    assert cmd.type == Type.ACK
    assert cmd.ack.consumer_id == 5
    assert cmd.ack.ack_type == pb.CommandAck.Cumulative
    assert len(cmd.ack.message_id) == 1
    ack_id = cmd.ack.message_id[0]
    assert (ack_id.ledgerId, ack_id.entryId, ack_id.partition) == (9, 99, 1)
    assert not ack_id.HasField("batch_index")
    assert list(ack_id.ack_set) == []


def test_seek() -> None:
    cmd = decode_one(
        commands.seek(consumer_id=6, request_id=7, publish_time=1_700_000_000_000)
    ).command
    assert cmd.type == Type.SEEK
    assert cmd.seek.consumer_id == 6
    assert cmd.seek.request_id == 7
    assert cmd.seek.message_publish_time == 1_700_000_000_000
    assert not cmd.seek.HasField("message_id")


def test_seek_to_a_message_id() -> None:
    cmd = decode_one(
        commands.seek(consumer_id=6, request_id=7, message_id=MessageId(3, 41, partition=2))
    ).command
    assert cmd.type == Type.SEEK
    assert (cmd.seek.consumer_id, cmd.seek.request_id) == (6, 7)
    seek_id = cmd.seek.message_id
    assert (seek_id.ledgerId, seek_id.entryId, seek_id.partition) == (3, 41, 2)
    assert not seek_id.HasField("batch_index")
    assert not cmd.seek.HasField("message_publish_time")


def test_get_last_message_id() -> None:
    cmd = decode_one(commands.get_last_message_id(consumer_id=8, request_id=9)).command
    assert cmd.type == Type.GET_LAST_MESSAGE_ID
    assert cmd.getLastMessageId.consumer_id == 8
    assert cmd.getLastMessageId.request_id == 9


# GET_LAST_MESSAGE_ID_RESPONSE as Apache Pulsar sends it for a batch of 5 in entry 7:3 of
# partition 2: {type: 30, getLastMessageIdResponse: {last_message_id: {ledgerId: 7,
# entryId: 3, partition: 2, batch_index: 4}, request_id: 9}}
LAST_ID_WITH_BATCH_INDEX = bytes.fromhex(
    "00000015 00000011 081e f2010c 0a08 0807 1003 1802 2004 1009"
)


def test_last_message_id_means_its_whole_entry() -> None:
    cmd = decode_one(LAST_ID_WITH_BATCH_INDEX).command
    assert cmd.type == Type.GET_LAST_MESSAGE_ID_RESPONSE
    answer = cmd.getLastMessageIdResponse
    assert answer.request_id == 9
    assert answer.last_message_id.batch_index == 4
    last = last_entry(answer.last_message_id)
    assert last == MessageId(7, 3, -1, 2)
    assert last is not None and (last.batch_index, last.partition) == (-1, 2)
    # without a batch index (pulsar-lite, older brokers): the same
    assert last_entry(pb.MessageIdData(ledgerId=7, entryId=3, partition=2)) == last
    # entry -1 (uint64 on the wire): the topic is empty
    empty = pb.MessageIdData(ledgerId=(1 << 64) - 1, entryId=(1 << 64) - 1, batch_index=-1)
    assert last_entry(empty) is None
    assert last_entry(pb.MessageIdData(ledgerId=7, entryId=(1 << 64) - 1)) is None


def test_unsubscribe_and_close_consumer() -> None:
    cmd = decode_one(commands.unsubscribe(consumer_id=8, request_id=10)).command
    assert cmd.type == Type.UNSUBSCRIBE
    assert (cmd.unsubscribe.consumer_id, cmd.unsubscribe.request_id) == (8, 10)
    cmd = decode_one(commands.close_consumer(consumer_id=8, request_id=11)).command
    assert cmd.type == Type.CLOSE_CONSUMER
    assert (cmd.close_consumer.consumer_id, cmd.close_consumer.request_id) == (8, 11)


def test_producer() -> None:
    named = decode_one(
        commands.producer(topic="x", producer_id=1, request_id=2, producer_name="writer-a")
    ).command
    assert named.type == Type.PRODUCER
    assert named.producer.topic == "x"
    assert named.producer.producer_id == 1
    assert named.producer.request_id == 2
    assert named.producer.producer_name == "writer-a"
    assert not named.producer.HasField("user_provided_producer_name")

    anonymous = decode_one(
        commands.producer(topic="y", producer_id=3, request_id=4, producer_name=None)
    ).command
    assert anonymous.producer.topic == "y"
    assert anonymous.producer.producer_id == 3
    assert anonymous.producer.request_id == 4
    assert not anonymous.producer.HasField("producer_name")
    assert anonymous.producer.HasField("user_provided_producer_name")
    assert anonymous.producer.user_provided_producer_name is False


def test_close_producer() -> None:
    cmd = decode_one(commands.close_producer(producer_id=3, request_id=4)).command
    assert cmd.type == Type.CLOSE_PRODUCER
    assert (cmd.close_producer.producer_id, cmd.close_producer.request_id) == (3, 4)


def test_send_single() -> None:
    metadata = pb.MessageMetadata(
        producer_name="w", sequence_id=41, publish_time=1234, partition_key="k"
    )
    frame = decode_one(
        commands.send(
            producer_id=2,
            sequence_id=41,
            num_messages=1,
            highest_sequence_id=41,
            is_chunk=False,
            section=encode_payload_section(metadata, b"value"),
        )
    )
    send = frame.command.send
    assert frame.command.type == Type.SEND
    assert send.producer_id == 2
    assert send.sequence_id == 41
    assert not send.HasField("num_messages")
    assert not send.HasField("highest_sequence_id")
    assert not send.HasField("is_chunk")
    assert frame.payload is not None
    assert bytes(frame.payload[:2]) == b"\x0e\x01"
    section = parse_payload_section(frame.payload)
    assert section.metadata == metadata
    assert section.payload == b"value"
    assert section.broker_entry_metadata is None


def test_send_batch_chunk() -> None:
    metadata = pb.MessageMetadata(
        producer_name="w", sequence_id=50, publish_time=99, num_messages_in_batch=10
    )
    frame = decode_one(
        commands.send(
            producer_id=2,
            sequence_id=50,
            num_messages=10,
            highest_sequence_id=59,
            is_chunk=True,
            section=encode_payload_section(metadata, b""),
        )
    )
    send = frame.command.send
    assert send.num_messages == 10
    assert send.highest_sequence_id == 59
    assert send.is_chunk is True
    assert frame.payload is not None
    section = parse_payload_section(frame.payload)
    assert section.metadata == metadata
    assert section.payload == b""


def test_message_id_data() -> None:
    plain = commands.message_id_data(MessageId(1, 2))
    assert (plain.ledgerId, plain.entryId) == (1, 2)
    assert not plain.HasField("partition")
    assert not plain.HasField("batch_index")
    full = commands.message_id_data(MessageId(1, 2, 0, partition=0))
    assert (full.ledgerId, full.entryId, full.batch_index, full.partition) == (1, 2, 0, 0)
    assert full.HasField("partition") and full.HasField("batch_index")
    earliest = commands.message_id_data(MessageId.earliest())
    assert (earliest.ledgerId, earliest.entryId) == (UINT64_MAX, UINT64_MAX)
