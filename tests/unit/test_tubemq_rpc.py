"""TubeMQ RPC envelopes: frames captured from a real cluster decode to exact calls and
replies, and this package's encoder writes the Java client's bytes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest
from google.protobuf.message import DecodeError, Message
from support import tubemq_golden as golden

from pulsar_spark import errors
from pulsar_spark.common.varints import encode_varint, read_varint
from pulsar_spark.errors import RemoteProtocolError
from pulsar_spark.tubemq import errors as tubemq_errors
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb
from pulsar_spark.tubemq.wire._generated import tubemq_rpc_pb2 as rpc_pb
from pulsar_spark.tubemq.wire.framing import Frame, FrameDecoder, encode_frame

M = TypeVar("M", bound=Message)
JAVA_CLIENT_ID = "192.0.2.2-26327-782601967970-1307512199-2.4.0"


def one_frame(data: bytes) -> Frame:
    decoder = FrameDecoder()
    (frame,) = decoder.feed(data)
    assert decoder.buffered == 0
    return frame


def test_java_producer_register_decodes_exactly() -> None:
    request = rpc.decode_request(one_frame(golden.JAVA_PRODUCER_REGISTER))
    assert request.serial_no == 1
    assert request.call.method == rpc.Method.PRODUCER_REGISTER == 1
    assert request.call.service == rpc.Service.MASTER == 1
    assert request.timeout_ms == 10_000
    assert request.message == master_pb.RegisterRequestP2M(
        clientId=JAVA_CLIENT_ID,
        brokerCheckSum=-1,
        hostName="192.0.2.2",
        jdkVersion="17.0.15",
        appdConfig=master_pb.ApprovedClientConfig(configId=-2),
    )


def test_encoder_writes_the_java_clients_bytes() -> None:
    for captured in (golden.JAVA_PRODUCER_REGISTER, golden.JAVA_PRODUCER_CLOSE):
        request = rpc.decode_request(one_frame(captured))
        encoded = rpc.encode_request(
            request.serial_no, request.message, timeout_ms=request.timeout_ms
        )
        assert encoded == captured


def test_own_requests_are_what_was_sent_to_the_broker() -> None:
    assert (
        rpc.encode_request(
            4,
            broker_pb.CommitOffsetRequestC2B(
                clientId="pyprobe_consumer_1",
                topicName="pyprobe",
                partitionId=0,
                groupName="pyprobe_group",
                lastPackConsumed=True,
            ),
        )
        == golden.COMMIT
    )
    register = rpc.decode_request(one_frame(golden.CONSUMER_REGISTER))
    assert register.call.service == rpc.Service.BROKER_READ
    assert register.message == broker_pb.RegisterRequestC2B(
        opType=31,
        clientId="pyprobe_consumer_1",
        groupName="pyprobe_group",
        topicName="pyprobe",
        partitionId=0,
        readStatus=0,
    )


def test_request_envelope_layout() -> None:
    # conn header (flag 0), request header (service 3, protocol 3), body (method 13, 10000 ms)
    request = broker_pb.SendMessageRequestP2B(
        clientId="c", topicName="t", partitionId=2, data=b"v", flag=0, checkSum=-1, sentAddr=1
    )
    payload = request.SerializeToString()
    frame = one_frame(rpc.encode_request(9, request))
    assert frame.serial_no == 9
    assert frame.data == (
        bytes.fromhex("02 0800  04 0803 1003")
        + bytes([2 + 3 + 2 + len(payload)])
        + bytes.fromhex("080d 10904e 1a")
        + bytes([len(payload)])
        + payload
    )


def test_master_reply_to_java_register() -> None:
    response = rpc.decode_response(one_frame(golden.JAVA_PRODUCER_REGISTER_REPLY))
    assert response.serial_no == 1
    assert response.call.method == rpc.Method.PRODUCER_REGISTER
    assert response.message == master_pb.RegisterResponseM2P(
        success=True,
        errCode=200,
        errMsg="OK!",
        brokerCheckSum=1795617763529,
        brokerInfos=["1:127.0.0.1:19123"],
        authorizedInfo=master_pb.MasterAuthorizedInfo(visitAuthorizedToken=1795617761437),
        appdConfig=master_pb.ApprovedClientConfig(configId=-2),
    )
    rpc.raise_for_error_code(response.message)  # type: ignore[arg-type]


def test_close_reply() -> None:
    response = rpc.decode_response(one_frame(golden.JAVA_PRODUCER_CLOSE_REPLY))
    assert response.serial_no == 4
    assert response.message == master_pb.CloseResponseM2P(success=True, errCode=200, errMsg="OK!")


def test_send_reply_carries_the_message_id() -> None:
    response = rpc.decode_response(one_frame(golden.SEND_WITH_ATTRIBUTES_REPLY))
    assert response.call.method == rpc.Method.SEND_MESSAGE
    assert response.message == broker_pb.SendMessageResponseB2P(
        success=True,
        errCode=200,
        errMsg="2473019858267144192",
        requireAuth=False,
        messageId=2473019858267144192,
        appendTime=1795618113068,
        appendOffset=0,
    )


@pytest.mark.parametrize(
    ("captured", "error", "code", "text", "retriable"),
    [
        (
            golden.SEND_EMPTY_REPLY,
            tubemq_errors.TubeMQBadRequestError,
            400,
            "data length is zero!",
            False,
        ),
        (
            golden.SEND_BAD_CHECKSUM_REPLY,
            tubemq_errors.TubeMQForbiddenError,
            403,
            "Checksum msg data failure: 5 of pyprobe not equal to the data's checksum of 215750275",
            False,
        ),
        (
            golden.GET_NOTHING_NEW_REPLY,
            tubemq_errors.TubeMQNotFoundError,
            404,
            "The request offset reached maxOffset!",
            True,
        ),
    ],
    ids=["empty-data", "bad-checksum", "nothing-new"],
)
def test_error_codes_raise_their_class(
    captured: bytes,
    error: type[tubemq_errors.TubeMQServerError],
    code: int,
    text: str,
    retriable: bool,
) -> None:
    reply = rpc.decode_response(one_frame(captured)).message
    with pytest.raises(error) as info:
        rpc.raise_for_error_code(reply)  # type: ignore[arg-type]
    assert info.value.code == code
    assert info.value.server_message == text
    assert info.value.retriable is retriable
    assert isinstance(info.value, errors.ServerError)
    assert str(info.value) == f"{error.__name__} (server error {code}): {text}"


def test_nothing_new_reply_fields() -> None:
    assert rpc.decode_response(one_frame(golden.GET_NOTHING_NEW_REPLY)).message == (
        broker_pb.GetMessageResponseB2C(
            success=False,
            errCode=404,
            errMsg="The request offset reached maxOffset!",
            currOffset=-1,
            minLimitTime=-1,
            escFlowCtrl=False,
            currDataDlt=-1,
        )
    )


def test_consumer_register_and_commit_replies() -> None:
    assert rpc.decode_response(one_frame(golden.CONSUMER_REGISTER_REPLY)).message == (
        broker_pb.RegisterResponseB2C(
            success=True, errCode=200, errMsg="OK!", currOffset=0, maxOffset=56
        )
    )
    assert rpc.decode_response(one_frame(golden.COMMIT_REPLY)).message == (
        broker_pb.CommitOffsetResponseB2C(
            success=True, errCode=200, errMsg="OK!", currOffset=56, maxOffset=56
        )
    )


@pytest.mark.parametrize(
    ("captured", "serial_no", "text"),
    [
        (golden.MASTER_WRONG_METHOD_REPLY, 41, "Unsupported method 17in service type 1!"),
        (
            golden.BROKER_UNKNOWN_METHOD_REPLY,
            42,
            "IPC server handle request error :Unsupported method ID :14",
        ),
    ],
    ids=["status-error", "status-fatal"],
)
def test_exception_replies_raise_remote_call_error(
    captured: bytes, serial_no: int, text: str
) -> None:
    frame = one_frame(captured)
    assert frame.serial_no == serial_no
    with pytest.raises(tubemq_errors.TubeMQRemoteCallError) as info:
        rpc.decode_response(frame)
    assert type(info.value) is tubemq_errors.TubeMQRemoteCallError
    assert info.value.exception_name == "java.lang.Exception"
    assert info.value.remote_message == text
    assert info.value.retriable is False


@pytest.mark.parametrize(
    "name",
    [
        "org.apache.inlong.tubemq.corerpc.exception.StandbyException",
        "org.apache.inlong.tubemq.corerpc.exception.ServerNotReadyException",
        "org.apache.inlong.tubemq.corerpc.exception.ServiceStoppingException",
        "org.apache.tubemq.corerpc.exception.OverflowException",
    ],
)
def test_unavailable_server_exceptions_are_retriable(name: str) -> None:
    frame = one_frame(rpc.encode_exception(3, name, "try later"))
    with pytest.raises(tubemq_errors.TubeMQRemoteUnavailableError) as info:
        rpc.decode_response(frame)
    assert info.value.retriable is True
    assert info.value.exception_name == name
    assert str(info.value) == f"{name}: try later"


def test_encode_response_round_trips() -> None:
    call = rpc.CALLS[rpc.Method.GET_MESSAGE]
    reply = broker_pb.GetMessageResponseB2C(success=True, errCode=200, currOffset=28)
    response = rpc.decode_response(one_frame(rpc.encode_response(77, call, reply)))
    assert response == rpc.Response(77, call, reply)


def test_every_call_pairs_its_messages() -> None:
    assert {m.value: (c.service.value, c.request_type.__name__) for m, c in rpc.CALLS.items()} == {
        1: (1, "RegisterRequestP2M"),
        2: (1, "HeartRequestP2M"),
        3: (1, "CloseRequestP2M"),
        4: (1, "RegisterRequestC2M"),
        5: (1, "HeartRequestC2M"),
        6: (1, "CloseRequestC2M"),
        13: (3, "SendMessageRequestP2B"),
        15: (2, "RegisterRequestC2B"),
        16: (2, "HeartBeatRequestC2B"),
        17: (2, "GetMessageRequestC2B"),
        18: (2, "CommitOffsetRequestC2B"),
    }


def test_reply_message_is_not_a_request() -> None:
    with pytest.raises(ValueError, match="CloseResponseM2P is not a request this client sends"):
        rpc.call_for(master_pb.CloseResponseM2P())


def test_unknown_error_code_builds_the_base_class() -> None:
    error = tubemq_errors.tubemq_error_for(418, "teapot")
    assert type(error) is tubemq_errors.TubeMQServerError
    assert error.code == 418
    assert error.retriable is False


# --- malformed envelopes -----------------------------------------------------------------------


def test_unknown_method_in_a_reply() -> None:
    body = bytes.fromhex("02 0801 02 0800 04 0863 1200")  # method 99, empty data
    with pytest.raises(RemoteProtocolError, match="frame 5: unknown method id 99"):
        rpc.decode_response(one_frame(encode_frame(5, body)))


def test_envelope_cut_short() -> None:
    whole = one_frame(golden.COMMIT_REPLY).data
    with pytest.raises(
        RemoteProtocolError,
        match="frame 4: RspResponseBody of 18 bytes runs past the frame's 17 remaining bytes",
    ):
        rpc.decode_response(one_frame(encode_frame(4, whole[:-1])))
    with pytest.raises(RemoteProtocolError, match="frame 4 ends where ResponseHeader should start"):
        rpc.decode_response(one_frame(encode_frame(4, whole[:3])))


def test_undecodable_reply() -> None:
    # RspResponseBody whose first field claims 0x7f bytes.
    body = bytes.fromhex("02 0801 02 0800 03 0a7f00")
    with pytest.raises(RemoteProtocolError, match="RspResponseBody of 3 bytes does not parse"):
        rpc.decode_response(one_frame(encode_frame(1, body)))


def test_reply_missing_required_fields() -> None:
    # A ResponseHeader without its required status.
    with pytest.raises(RemoteProtocolError, match="ResponseHeader lacks required status"):
        rpc.decode_response(one_frame(encode_frame(1, bytes.fromhex("02 0801 02 1803"))))


def test_request_sent_to_the_wrong_service() -> None:
    data = one_frame(golden.COMMIT).data.replace(
        bytes.fromhex("0802 1003"), bytes.fromhex("0803 1003")
    )
    with pytest.raises(RemoteProtocolError, match="frame 4: method 18 sent to service 3"):
        rpc.decode_request(one_frame(encode_frame(4, data)))


# --- the fast path for plain successful responses -----------------------------------------------


def field_by_field(frame: Frame) -> rpc.Response:
    """A response read one delimited message at a time and parsed by the protobuf runtime, as
    decode_response reads every layout but the servers' own."""
    data = frame.data
    _, pos = delimited(rpc_pb.RpcConnHeader, data, 0)
    header, pos = delimited(rpc_pb.ResponseHeader, data, pos)
    if header.status != rpc_pb.ResponseHeader.SUCCESS:
        failure, _ = delimited(rpc_pb.RspExceptionBody, data, pos)
        raise tubemq_errors.tubemq_remote_exception_for(failure.exceptionName, failure.stackTrace)
    body, _ = delimited(rpc_pb.RspResponseBody, data, pos)
    if body.method not in {int(method) for method in rpc.CALLS}:
        raise RemoteProtocolError("unknown method")
    call = rpc.CALLS[rpc.Method(body.method)]
    return rpc.Response(frame.serial_no, call, parsed(call.response_type, body.data))


def delimited(message_type: type[M], data: bytes, pos: int) -> tuple[M, int]:
    """The message of ``message_type`` whose size is the varint at ``pos``, and where it ends."""
    try:
        size, start = read_varint(data, pos)
    except IndexError:
        raise RemoteProtocolError("no size") from None
    if start + size > len(data):
        raise RemoteProtocolError("runs past the frame")
    return parsed(message_type, data[start : start + size]), start + size


def parsed(message_type: type[M], data: bytes) -> M:
    try:
        message = message_type.FromString(data)
    except DecodeError:
        raise RemoteProtocolError("does not parse") from None
    if not message.IsInitialized():
        raise RemoteProtocolError("lacks required fields")
    return message


def outcome(read: Callable[[Frame], rpc.Response], frame: Frame) -> rpc.Response | type:
    """What ``read`` gives for ``frame``: the response, or the class of what it raised."""
    try:
        return read(frame)
    except errors.PulsarSparkError as exc:
        return type(exc)


SEND_REPLY = broker_pb.SendMessageResponseB2P(
    success=True,
    errCode=200,
    errMsg="3713573055667109888",
    requireAuth=False,
    messageId=3713573055667109888,
    appendTime=1795921612705,
    appendOffset=28,
).SerializeToString()


def after_headers(body: bytes, *, size: bytes | None = None, tail: bytes = b"") -> bytes:
    """A successful response's frame: SUCCESS_HEADERS, the body's size (its varint unless
    given), the body, and ``tail`` after it."""
    given = encode_varint(len(body)) if size is None else size
    return encode_frame(8, rpc.SUCCESS_HEADERS + given + body + tail)


PLAIN_DIFFERENTIAL = {
    "register": golden.JAVA_PRODUCER_REGISTER_REPLY,
    "heartbeat": golden.JAVA_PRODUCER_HEARTBEAT_REPLY,
    "close": golden.JAVA_PRODUCER_CLOSE_REPLY,
    "send": golden.SEND_WITH_ATTRIBUTES_REPLY,
    "send-refused": golden.SEND_BAD_CHECKSUM_REPLY,
    "consumer-register": golden.CONSUMER_REGISTER_REPLY,
    "get-messages": golden.GET_TWO_MESSAGES_REPLY,
    "get-java": golden.GET_JAVA_FULL_REPLY,
    "get-nothing": golden.GET_NOTHING_NEW_REPLY,
    "commit": golden.COMMIT_REPLY,
    "encoded-send": after_headers(b"\x08\x0d\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY),
    "unknown-field-after": after_headers(
        b"\x08\x0d\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY + b"\x18\x05"
    ),
    "unknown-field-before": after_headers(
        b"\x18\x05\x08\x0d\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY
    ),
    "data-first": after_headers(b"\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY + b"\x08\x0d"),
    "method-twice": after_headers(b"\x08\x11\x08\x0d\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY),
    "data-twice": after_headers(
        b"\x08\x0d\x12\x02\x08\x01\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY
    ),
    "method-of-two-bytes": after_headers(
        b"\x08\x8d\x00\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY
    ),
    "method-141": after_headers(b"\x08\x8d\x01\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY),
    "method-99": after_headers(b"\x08\x63\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY),
    "data-size-of-five-bytes": after_headers(
        b"\x08\x0d\x12" + bytes([len(SEND_REPLY) | 0x80]) + b"\x80\x80\x80\x00" + SEND_REPLY
    ),
    "body-size-of-two-bytes": after_headers(
        b"\x08\x0d\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY,
        size=bytes([(len(SEND_REPLY) + 4) | 0x80, 0x00]),
    ),
    "bytes-after-the-body": after_headers(
        b"\x08\x0d\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY, tail=b"\x00\x01"
    ),
    "empty-data": after_headers(b"\x08\x0d\x12\x00"),
    "no-data": after_headers(b"\x08\x0d"),
    "empty-body": after_headers(b""),
    "data-past-the-body": after_headers(
        b"\x08\x0d\x12" + bytes([len(SEND_REPLY) + 1]) + SEND_REPLY
    ),
    "data-short-of-the-body": after_headers(
        b"\x08\x0d\x12" + bytes([len(SEND_REPLY) - 1]) + SEND_REPLY
    ),
    "body-past-the-frame": after_headers(
        b"\x08\x0d\x12" + bytes([len(SEND_REPLY)]) + SEND_REPLY, size=b"\x7f"
    ),
    "data-size-cut": after_headers(b"\x08\x0d\x12\x80", size=b"\x04"),
    "body-size-cut": encode_frame(8, rpc.SUCCESS_HEADERS + b"\x80"),
    "headers-only": encode_frame(8, rpc.SUCCESS_HEADERS),
    "headers-cut": encode_frame(8, rpc.SUCCESS_HEADERS[:5]),
    "nothing": encode_frame(8, b""),
    "exception": rpc.encode_exception(8, "java.lang.Exception", "boom"),
    "unavailable": rpc.encode_exception(
        8, "org.apache.inlong.tubemq.corerpc.exception.StandbyException", "standby"
    ),
    "master-wrong-method": golden.MASTER_WRONG_METHOD_REPLY,
    "broker-unknown-method": golden.BROKER_UNKNOWN_METHOD_REPLY,
}


@pytest.mark.parametrize("captured", PLAIN_DIFFERENTIAL.values(), ids=PLAIN_DIFFERENTIAL.keys())
def test_decode_response_reads_as_field_by_field(captured: bytes) -> None:
    """The same response, or the same exception class, as reading every delimited message
    with the protobuf runtime."""
    frame = one_frame(captured)
    assert outcome(rpc.decode_response, frame) == outcome(field_by_field, frame)


def test_the_differential_covers_both_outcomes() -> None:
    """Most frames above read as a response, the others raise, each in a known way."""
    read = {
        name: outcome(rpc.decode_response, one_frame(captured))
        for name, captured in PLAIN_DIFFERENTIAL.items()
    }
    raised = {name: value for name, value in read.items() if isinstance(value, type)}
    assert raised == {
        "method-141": RemoteProtocolError,
        "method-99": RemoteProtocolError,
        "empty-data": RemoteProtocolError,
        "no-data": RemoteProtocolError,
        "empty-body": RemoteProtocolError,
        "data-past-the-body": RemoteProtocolError,
        "data-short-of-the-body": RemoteProtocolError,
        "body-past-the-frame": RemoteProtocolError,
        "data-size-cut": RemoteProtocolError,
        "body-size-cut": RemoteProtocolError,
        "headers-only": RemoteProtocolError,
        "headers-cut": RemoteProtocolError,
        "nothing": RemoteProtocolError,
        "exception": tubemq_errors.TubeMQRemoteCallError,
        "unavailable": tubemq_errors.TubeMQRemoteUnavailableError,
        "master-wrong-method": tubemq_errors.TubeMQRemoteCallError,
        "broker-unknown-method": tubemq_errors.TubeMQRemoteCallError,
    }
    send = rpc.Response(
        8,
        rpc.CALLS[rpc.Method.SEND_MESSAGE],
        broker_pb.SendMessageResponseB2P.FromString(SEND_REPLY),
    )
    for name in (
        "encoded-send",
        "unknown-field-after",
        "unknown-field-before",
        "data-first",
        "method-twice",
        "data-twice",
        "method-of-two-bytes",
        "data-size-of-five-bytes",
        "body-size-of-two-bytes",
        "bytes-after-the-body",
    ):
        assert read[name] == send, name


def test_an_overlong_data_size_is_refused_as_field_by_field() -> None:
    frame = one_frame(
        after_headers(
            b"\x08\x0d\x12" + bytes([len(SEND_REPLY) | 0x80]) + b"\x80\x80\x80\x80\x00" + SEND_REPLY
        )
    )
    assert outcome(field_by_field, frame) is RemoteProtocolError
    assert outcome(rpc.decode_response, frame) is RemoteProtocolError
