"""TubeMQ RPC envelopes: frames captured from a real cluster decode to exact calls and
replies, and this package's encoder writes the Java client's bytes."""

from __future__ import annotations

import pytest
from support import tubemq_golden as golden

from pulsar_spark import errors
from pulsar_spark.errors import RemoteProtocolError
from pulsar_spark.tubemq import errors as tubemq_errors
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb
from pulsar_spark.tubemq.wire.framing import Frame, FrameDecoder, encode_frame

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
