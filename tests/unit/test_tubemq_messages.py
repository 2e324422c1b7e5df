"""TubeMQ message payloads: what the broker returned for messages written by the Java client and
by this package, and hand-built edge cases."""

from __future__ import annotations

import numpy as np
import pytest
from support import tubemq_golden as golden
from support.decoding import strings

from pulsar_spark.errors import ChecksumMismatchError, CorruptPayloadError, LocalProtocolError
from pulsar_spark.tubemq.wire import messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import FrameDecoder
from pulsar_spark.tubemq.wire.messages import TubeMessage

OWN_ATTRIBUTES = "$msgType$=typeA,$msgTime$=202611251450,k1=v1,k2=v2"


def reply(captured: bytes) -> broker_pb.GetMessageResponseB2C:
    (frame,) = FrameDecoder().feed(captured)
    message = rpc.decode_response(frame).message
    assert isinstance(message, broker_pb.GetMessageResponseB2C)
    return message


def test_two_messages_written_by_this_package() -> None:
    response = reply(golden.GET_TWO_MESSAGES_REPLY)
    assert (response.currOffset, response.maxOffset) == (0, 56)
    assert messages.decode_messages(response).rows() == [
        TubeMessage(2473019858267144192, b"hello tubemq", OWN_ATTRIBUTES, 1),
        TubeMessage(2473011463531266048, b"plain", None, 0),
    ]


def test_java_message_with_attributes_and_system_headers() -> None:
    response = reply(golden.GET_JAVA_FULL_REPLY)
    (message,) = messages.decode_messages(response).rows()
    assert message == TubeMessage(
        2379089522840305664,
        b"java value 1",
        "$msgType$=jtype,$msgTime$=202611251500,color=blue,size=9",
        1,
    )
    assert messages.parse_attributes(message.attributes) == {
        "$msgType$": "jtype",
        "$msgTime$": "202611251500",
        "color": "blue",
        "size": "9",
    }
    # The same string this package builds for those attributes.
    assert message.attributes == messages.format_attributes(
        {"color": "blue", "size": "9"}, msg_type="jtype", msg_time="202611251500"
    )


def test_java_plain_message_and_binary_value() -> None:
    assert messages.decode_messages(reply(golden.GET_JAVA_PLAIN_REPLY)).rows() == [
        TubeMessage(2379028388594581504, b"java value 2", None, 0)
    ]
    assert messages.decode_messages(reply(golden.GET_JAVA_ATTRIBUTES_ONLY_REPLY)).rows() == [
        TubeMessage(2379016181810987008, b"\x00\x01\x02\xff", "only=attrs", 1)
    ]


def test_empty_batch() -> None:
    response = reply(golden.GET_EMPTY_BATCH_REPLY)
    assert response.errCode == 200
    assert (response.currOffset, response.currDataDlt, response.maxOffset) == (0, 315, 140)
    assert messages.decode_messages(response).rows() == []


def test_checksums_match_the_brokers() -> None:
    for captured in (golden.GET_TWO_MESSAGES_REPLY, golden.GET_JAVA_FULL_REPLY):
        for stored in reply(captured).messages:
            assert messages.checksum(stored.payLoadData) == stored.checkSum
    assert messages.checksum(b"x") == 215750275  # what the broker reported for b"x"


def test_encode_matches_what_the_broker_stored() -> None:
    data, flag = messages.encode_payload(b"hello tubemq", OWN_ATTRIBUTES)
    assert flag == 1
    assert data == bytes.fromhex("00000032") + OWN_ATTRIBUTES.encode() + b"hello tubemq"
    first = reply(golden.GET_TWO_MESSAGES_REPLY).messages[0]
    assert (first.payLoadData, first.flag) == (data, flag)


def test_encode_without_attributes() -> None:
    assert messages.encode_payload(b"v", None) == (b"v", 0)
    assert messages.encode_payload(b"v", "") == (b"v", 0)
    assert messages.encode_payload(b"v", "  ") == (b"v", 0)


def test_encode_utf8_attributes_counts_bytes() -> None:
    data, flag = messages.encode_payload(b"", "k=é")
    assert (data, flag) == (bytes.fromhex("00000004") + "k=é".encode(), 1)


def decode_one(message: broker_pb.TransferedMessage, *, verify: bool = True) -> TubeMessage:
    """``message`` decoded as the only message of a reply."""
    response = broker_pb.GetMessageResponseB2C(success=True, errCode=200)
    response.messages.append(message)
    (decoded,) = messages.decode_messages(response, verify=verify).rows()
    return decoded


def stored(
    payload: bytes, flag: int, *, checksum: int | None = None
) -> broker_pb.TransferedMessage:
    return broker_pb.TransferedMessage(
        messageId=7,
        checkSum=messages.checksum(payload) if checksum is None else checksum,
        payLoadData=payload,
        flag=flag,
    )


def test_zero_length_attributes_read_as_none() -> None:
    assert decode_one(stored(bytes(4) + b"v", 1)) == TubeMessage(7, b"v", None, 1)


def test_flag_bits_other_than_attributes_are_kept_and_ignored() -> None:
    assert decode_one(stored(b"v", 6)) == TubeMessage(7, b"v", None, 6)


def test_bad_checksum_raises_unless_not_verified() -> None:
    message = stored(b"v", 0, checksum=1)
    with pytest.raises(
        ChecksumMismatchError, match="message 7: checksum 1 does not match the payload's"
    ):
        decode_one(message)
    assert decode_one(message, verify=False) == TubeMessage(7, b"v", None, 0)


def test_attribute_length_past_the_payload() -> None:
    with pytest.raises(
        CorruptPayloadError,
        match="message 7: attribute length 9 does not fit in the 2 bytes after it",
    ):
        decode_one(stored(bytes.fromhex("00000009") + b"ab", 1))
    with pytest.raises(CorruptPayloadError, match="attribute length -1 does not fit"):
        decode_one(stored(bytes.fromhex("ffffffff") + b"ab", 1))


def test_payload_too_short_for_an_attribute_length() -> None:
    with pytest.raises(
        CorruptPayloadError, match="message 7: 3 bytes cannot hold an attribute length"
    ):
        decode_one(stored(b"abc", 1))


def test_attributes_that_are_not_utf8() -> None:
    with pytest.raises(CorruptPayloadError, match="message 7: attributes are not UTF-8"):
        decode_one(stored(bytes.fromhex("00000001ff"), 1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, {}),
        ("", {}),
        ("a=1,b=2", {"a": "1", "b": "2"}),
        ("a=1,a=2", {"a": "1"}),
        ("a=b=c", {"a": "b"}),
        ("a=,b", {}),
        ("a==", {}),
        ("a==b", {"a": ""}),
        (",,a=1,", {"a": "1"}),
        (" =1,x=y", {"x": "y"}),
    ],
)
def test_parse_attributes_like_the_java_client(text: str | None, expected: dict[str, str]) -> None:
    assert messages.parse_attributes(text) == expected


def test_format_attributes() -> None:
    assert messages.format_attributes({}) == ""
    assert messages.format_attributes({"b": "2", "a": "1"}) == "b=2,a=1"
    assert messages.format_attributes({}, msg_time="202601010000") == "$msgTime$=202601010000"
    assert messages.format_attributes({"k": "v"}, msg_type=" t ") == "$msgType$=t,k=v"


@pytest.mark.parametrize(
    ("properties", "kwargs", "message"),
    [
        ({"a,b": "1"}, {}, "attribute key 'a,b' contains ',' or '='"),
        ({"a": "1=2"}, {}, "attribute value '1=2' contains ',' or '='"),
        ({"a": " "}, {}, "attribute value is blank"),
        ({"$msgType$": "x"}, {}, "attribute '\\$msgType\\$' uses a reserved system key"),
        ({}, {"msg_time": "2026-01-01"}, "msgTime '2026-01-01' is not yyyyMMddHHmm"),
        ({}, {"msg_type": "a,b"}, "attribute msgType 'a,b' contains"),
    ],
)
def test_format_attributes_refuses_what_the_format_cannot_carry(
    properties: dict[str, str], kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(LocalProtocolError, match=message):
        messages.format_attributes(properties, **kwargs)


def many(*entries: tuple[int, bytes, int, int | None]) -> broker_pb.GetMessageResponseB2C:
    """A reply of (id, payload, flag, checksum or None for the right one) messages."""
    response = broker_pb.GetMessageResponseB2C(success=True, errCode=200)
    for message_id, payload, flag, checksum in entries:
        response.messages.add(
            messageId=message_id,
            checkSum=messages.checksum(payload) if checksum is None else checksum,
            payLoadData=payload,
            flag=flag,
        )
    return response


def test_a_reply_decodes_to_columns_message_by_message() -> None:
    with_attributes, _ = messages.encode_payload(b"second", "k=v")
    response = many(
        (11, b"first", 0, None),
        (12, with_attributes, 1, None),
        (13, bytes(4) + b"third", 1, None),
        (14, b"fourth", 4, None),
    )
    decoded = messages.decode_messages(response)
    assert decoded.ids == [11, 12, 13, 14]
    assert strings(decoded.values) == [b"first", b"second", b"third", b"fourth"]
    assert (decoded.texts, decoded.codes.tolist()) == ([None, "k=v"], [0, 1, 0, 0])
    assert decoded.attributes == [None, "k=v", None, None]
    assert decoded.flags == [0, 1, 1, 4]
    assert decoded.take(np.array([3, 1])).rows() == [
        TubeMessage(14, b"fourth", None, 4),
        TubeMessage(12, b"second", "k=v", 1),
    ]
    assert decoded.head(1).rows() == [TubeMessage(11, b"first", None, 0)]
    rebuilt = messages.TubeMessages.of(decoded.rows())
    assert rebuilt.rows() == decoded.rows()
    assert (rebuilt.texts, rebuilt.codes.tolist()) == ([None, "k=v"], [0, 1, 0, 0])


def test_repeated_attribute_strings_are_kept_once() -> None:
    typed = [messages.encode_payload(b"v", f"$msgType$=t{i % 2}") for i in range(4)]
    response = many(
        *((40 + i, data, flag, None) for i, (data, flag) in enumerate(typed)),
        (44, bytes(4) + b"w", 1, None),
        (45, b"x", 0, None),
    )
    decoded = messages.decode_messages(response)
    assert decoded.texts == [None, "$msgType$=t0", "$msgType$=t1"]
    assert decoded.codes.tolist() == [1, 2, 1, 2, 0, 0]
    assert strings(decoded.values) == [b"v", b"v", b"v", b"v", b"w", b"x"]


def test_a_bad_checksum_in_a_reply_names_its_message() -> None:
    response = many((21, b"fine", 0, None), (22, b"bad", 0, 5), (23, b"fine too", 0, None))
    with pytest.raises(
        ChecksumMismatchError, match="message 22: checksum 5 does not match the payload's"
    ):
        messages.decode_messages(response)
    assert strings(messages.decode_messages(response, verify=False).values) == [
        b"fine",
        b"bad",
        b"fine too",
    ]


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [(41, b"fine", 0), (42, bytes.fromhex("00000009") + b"ab", 1), (43, b"ab", 1)],
            "message 42: attribute length 9 does not fit in the 2 bytes after it",
        ),
        (
            [(51, b"ab", 1), (52, bytes.fromhex("00000009") + b"ab", 1)],
            "message 51: 2 bytes cannot hold an attribute length",
        ),
        (
            [(61, bytes.fromhex("00000001") + b"k", 1), (62, bytes.fromhex("00000001ff"), 1)],
            "message 62: attributes are not UTF-8",
        ),
    ],
)
def test_the_first_corrupt_payload_of_a_reply_is_named(
    entries: list[tuple[int, bytes, int]], message: str
) -> None:
    response = many(*((message_id, data, flag, None) for message_id, data, flag in entries))
    with pytest.raises(CorruptPayloadError, match=f"^{message}$"):
        messages.decode_messages(response)


def test_a_corrupt_attribute_length_in_a_reply_names_its_message() -> None:
    response = many((31, b"fine", 0, None), (32, bytes.fromhex("00000009") + b"ab", 1, None))
    with pytest.raises(CorruptPayloadError, match="message 32: attribute length 9 does not fit"):
        messages.decode_messages(response)


def test_only_the_wanted_types_are_kept() -> None:
    texts = ["$msgType$=Aa,k=v", "$msgType$=BB", None, "$msgType$=Aa,k=v", "k=Aa"]
    columns = messages.TubeMessages.of(
        [TubeMessage(i + 1, b"%d" % (i + 1), text, 1) for i, text in enumerate(texts)]
    )
    assert messages.of_types(columns, ("Aa",)).tolist() == [0, 3]
    assert messages.of_types(columns, ("Aa", "BB")).tolist() == [0, 1, 3]
    assert messages.of_types(columns, ("C",)).tolist() == []
