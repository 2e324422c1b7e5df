"""GetMessage replies decoded the way reads decode them: the messages found in the reply's
bytes at once (reply_scan), and the protobuf runtime for what the scan declines. Captured
replies from the broker, and hand-built ones the scan must decline."""

from __future__ import annotations

import pytest
from support import tubemq_golden as golden
from support.decoding import strings

from pulsar_spark.common.varints import encode_varint, read_varint
from pulsar_spark.errors import ChecksumMismatchError, CorruptPayloadError
from pulsar_spark.tubemq.wire import messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire._generated import tubemq_rpc_pb2 as rpc_pb
from pulsar_spark.tubemq.wire.framing import FrameDecoder, encode_frame
from pulsar_spark.tubemq.wire.messages import GetMessageReply, TubeMessage
from pulsar_spark.tubemq.wire.reply_scan import scan_messages

CALL = rpc.CALLS[rpc.Method.GET_MESSAGE]
NINE_BYTE_ID = 2379089522840305664  # a broker's id: its varint takes nine bytes


def read(captured: bytes) -> GetMessageReply:
    (frame,) = FrameDecoder().feed(captured)
    reply = rpc.decode_get_message(frame).message
    assert isinstance(reply, GetMessageReply)
    return reply


def body(captured: bytes) -> bytes:
    """The GetMessage reply's own bytes in a response frame: the data of its third delimited
    message, RspResponseBody."""
    (frame,) = FrameDecoder().feed(captured)
    data, pos = frame.data, 0
    for _ in range(2):
        size, pos = read_varint(data, pos)
        pos += size
    size, pos = read_varint(data, pos)
    return rpc_pb.RspResponseBody.FromString(data[pos : pos + size]).data


def framed(response: broker_pb.GetMessageResponseB2C | bytes) -> bytes:
    """The response frame of a reply, given as a message or as its bytes exactly."""
    data = response if isinstance(response, bytes) else response.SerializeToString()
    parts = (
        rpc_pb.RpcConnHeader(flag=rpc.FLAG_RESPONSE),
        rpc_pb.ResponseHeader(
            status=rpc_pb.ResponseHeader.SUCCESS, protocolVer=rpc.PROTOCOL_VERSION
        ),
        rpc_pb.RspResponseBody(method=CALL.method, data=data),
    )
    delimited = [part.SerializeToString() for part in parts]
    return encode_frame(7, b"".join(encode_varint(len(d)) + d for d in delimited))


def many(*entries: tuple[int, bytes, int]) -> broker_pb.GetMessageResponseB2C:
    """A reply of (id, payload, flag) messages, with their right checksums."""
    response = broker_pb.GetMessageResponseB2C(success=True, errCode=200, currOffset=280)
    for message_id, payload, flag in entries:
        response.messages.add(
            messageId=message_id,
            checkSum=messages.checksum(payload),
            payLoadData=payload,
            flag=flag,
        )
    return response


def same_as_the_runtime(response: broker_pb.GetMessageResponseB2C) -> GetMessageReply:
    """The reply read as reads do, checked against the protobuf runtime's reading."""
    reply = read(framed(response))
    runtime = messages.decode_messages(response)
    assert reply.messages.rows() == runtime.rows()
    assert (reply.messages.texts, reply.messages.codes.tolist()) == (
        runtime.texts,
        runtime.codes.tolist(),
    )
    expected = broker_pb.GetMessageResponseB2C()
    expected.CopyFrom(response)
    del expected.messages[:]
    assert reply.response == expected
    return reply


@pytest.mark.parametrize(
    ("captured", "rows"),
    [
        (
            golden.GET_TWO_MESSAGES_REPLY,
            [
                TubeMessage(
                    2473019858267144192,
                    b"hello tubemq",
                    "$msgType$=typeA,$msgTime$=202611251450,k1=v1,k2=v2",
                    1,
                ),
                TubeMessage(2473011463531266048, b"plain", None, 0),
            ],
        ),
        (
            golden.GET_JAVA_FULL_REPLY,
            [
                TubeMessage(
                    2379089522840305664,
                    b"java value 1",
                    "$msgType$=jtype,$msgTime$=202611251500,color=blue,size=9",
                    1,
                )
            ],
        ),
        (golden.GET_JAVA_PLAIN_REPLY, [TubeMessage(2379028388594581504, b"java value 2", None, 0)]),
        (
            golden.GET_JAVA_ATTRIBUTES_ONLY_REPLY,
            [TubeMessage(2379016181810987008, b"\x00\x01\x02\xff", "only=attrs", 1)],
        ),
    ],
)
def test_broker_replies_are_scanned(captured: bytes, rows: list[TubeMessage]) -> None:
    assert scan_messages(body(captured)) is not None  # the fast way, not the fallback
    reply = read(captured)
    assert reply.messages.rows() == rows
    assert not reply.response.messages
    assert (reply.errCode, reply.errMsg) == (200, "OK!")


def test_reply_fields_come_through_with_and_without_messages() -> None:
    two = read(golden.GET_TWO_MESSAGES_REPLY)
    assert (two.currOffset, two.response.maxOffset) == (0, 56)
    empty = read(golden.GET_EMPTY_BATCH_REPLY)
    assert (empty.errCode, empty.currOffset, empty.response.currDataDlt) == (200, 0, 315)
    assert empty.messages.rows() == []
    nothing = read(golden.GET_NOTHING_NEW_REPLY)
    assert (nothing.errCode, nothing.errMsg, nothing.currOffset) == (
        404,
        "The request offset reached maxOffset!",
        -1,
    )


def test_where_the_scan_finds_each_field() -> None:
    data = many((5, b"abc", 0), (6, b"", 1)).SerializeToString()
    scanned = scan_messages(data)
    assert scanned is not None
    # success and errCode (200) take 5 bytes; currOffset (280) takes 3 after the messages
    assert (scanned.first, scanned.after) == (5, len(data) - 3)
    assert scanned.ids == [5, 6]
    assert scanned.checksums.tolist() == [messages.checksum(b"abc"), messages.checksum(b"")]
    assert scanned.flags.tolist() == [0, 1]
    value_at = data.index(b"abc")
    assert (scanned.starts[0], scanned.ends[0]) == (value_at, value_at + 3)
    # message 1's flag (2 bytes), then message 2's tag and length, id, checksum (0) and the
    # value's tag and length, 2 bytes each, before its empty value
    assert scanned.starts[1] == scanned.ends[1] == value_at + 3 + 2 + 8


def test_columns_match_the_runtime_for_plain_and_attribute_messages() -> None:
    with_attributes, _ = messages.encode_payload(b"second", "$msgType$=t,k=v")
    response = many(
        (NINE_BYTE_ID, b"first", 0),
        (NINE_BYTE_ID + 1, with_attributes, 1),
        (NINE_BYTE_ID + 2, bytes(4) + b"third", 1),
        (NINE_BYTE_ID + 3, b"x" * 300, 0),  # a two-byte length
    )
    assert scan_messages(response.SerializeToString()) is not None
    reply = same_as_the_runtime(response)
    assert strings(reply.messages.values) == [b"first", b"second", b"third", b"x" * 300]
    assert reply.messages.attributes == [None, "$msgType$=t,k=v", None, None]
    assert reply.currOffset == 280


@pytest.mark.parametrize(
    "entries",
    [
        # ids of eight bytes and of nine in one reply
        [(2**50, b"a", 0), (NINE_BYTE_ID, b"b", 0)],
        # a value of 16 KiB: its length takes three bytes
        [(1, b"v" * 16384, 0), (2, b"w", 0)],
        # a flag over 127
        [(1, b"a", 200)],
        # a value that holds what looks like the next message
        [(1, b"\x22\x07\x08\x01\x10\x00\x1a\x00\x20\x00", 0), (2, b"b", 0)],
    ],
)
def test_replies_the_scan_declines_read_the_same(entries: list[tuple[int, bytes, int]]) -> None:
    response = many(*entries)
    assert scan_messages(response.SerializeToString()) is None
    reply = same_as_the_runtime(response)
    assert reply.messages.ids == [message_id for message_id, _, _ in entries]


def test_a_message_after_the_trailing_fields_is_not_lost() -> None:
    # Messages written apart (another field between them), as no broker does but protobuf
    # allows: the scan finds the first run only, and the runtime reads them all.
    first = many((1, b"a", 0)).SerializeToString()
    later = many((2, b"b", 0))
    later.ClearField("currOffset")
    tail = later.SerializeToString()[5:]  # its message, without success and errCode
    data = first + tail
    reply = read(framed(data))
    assert reply.messages.ids == [1, 2]
    assert strings(reply.messages.values) == [b"a", b"b"]


def test_a_bad_checksum_names_its_message() -> None:
    response = many((21, b"fine", 0), (22, b"bad", 0), (23, b"fine too", 0))
    response.messages[1].checkSum = 5
    with pytest.raises(
        ChecksumMismatchError, match="message 22: checksum 5 does not match the payload's"
    ):
        read(framed(response))


def test_a_corrupt_attribute_length_names_its_message() -> None:
    response = many((31, b"fine", 0), (32, bytes.fromhex("00000009") + b"ab", 1))
    with pytest.raises(CorruptPayloadError, match="message 32: attribute length 9 does not fit"):
        read(framed(response))


def test_a_length_past_the_reply_declines() -> None:
    data = many((1, b"abc", 0)).SerializeToString()
    assert scan_messages(data[: data.index(b"abc") + 2]) is None  # ends inside the value
    assert scan_messages(b"") is None
    assert scan_messages(b"\x08\x01\x10\xc8\x01") is None  # success, errCode 200, no messages
