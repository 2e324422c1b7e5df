"""The sans-IO connection: handshake, requests, keep-alive, challenges and notices, byte for
byte, without a socket."""

from __future__ import annotations

import pytest

from pulsar_spark.errors import (
    AuthenticationError,
    ConnectionClosedError,
    FrameTooLargeError,
    ServiceNotReadyError,
    TopicNotFoundError,
    TruncatedFrameError,
)
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.connection import (
    AuthChallenged,
    ClientConnection,
    Connected,
    ConnectionFailed,
    MessageReceived,
    ReceiptReceived,
    ResourceClosed,
    Response,
    SendFailed,
    State,
)
from pulsar_spark.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FrameDecoder,
    encode_command,
    encode_payload_frame,
)

Type = pb.BaseCommand.Type


def frame(kind: int, **fields: object) -> bytes:
    return encode_command(pb.BaseCommand(type=kind, **fields))  # type: ignore[arg-type]


def connected_frame(max_message_size: int | None = None) -> bytes:
    connected = pb.CommandConnected(server_version="broker-1", protocol_version=19)
    if max_message_size is not None:
        connected.max_message_size = max_message_size
    return frame(Type.CONNECTED, connected=connected)


def commands_in(data: bytes) -> list[pb.BaseCommand]:
    return [f.command for f in FrameDecoder().feed(data)]


def connected(**kwargs: object) -> ClientConnection:
    connection = ClientConnection(**kwargs)  # type: ignore[arg-type]
    connection.data_to_send()
    assert connection.receive_data(connected_frame()) == [
        Connected("broker-1", 19, DEFAULT_MAX_MESSAGE_SIZE)
    ]
    return connection


# --- handshake ---------------------------------------------------------------------------------


def test_connect_without_credentials() -> None:
    connection = ClientConnection()
    [connect] = commands_in(connection.data_to_send())
    assert connect.type == Type.CONNECT
    assert connect.connect.protocol_version == commands.PROTOCOL_VERSION
    assert connect.connect.client_version == commands.CLIENT_VERSION
    assert not connect.connect.HasField("auth_method_name")
    assert not connect.connect.HasField("auth_data")
    assert connect.connect.feature_flags.supports_broker_entry_metadata
    assert not connect.connect.feature_flags.supports_auth_refresh
    assert connection.state is State.AWAITING_CONNECTED
    assert connection.data_to_send() == b""


def test_connect_with_credentials_and_proxy() -> None:
    connection = ClientConnection(
        auth_method="token", credentials=b"jwt", proxy_to_broker_url="broker-2:6650"
    )
    [connect] = commands_in(connection.data_to_send())
    assert connect.connect.auth_method_name == "token"
    assert connect.connect.auth_data == b"jwt"
    assert connect.connect.proxy_to_broker_url == "broker-2:6650"
    assert connect.connect.feature_flags.supports_auth_refresh


def test_connected_sets_the_frame_limit_and_frames_behind_it_are_events() -> None:
    connection = ClientConnection()
    connection.data_to_send()
    message = pb.BaseCommand(
        type=Type.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=7, message_id=pb.MessageIdData(ledgerId=1, entryId=2)
        ),
    )
    data = connected_frame(1024) + encode_payload_frame(message, b"payload-section")
    [first, second] = connection.receive_data(data)
    assert first == Connected("broker-1", 19, 1024)
    assert isinstance(second, MessageReceived)
    assert (second.consumer_id, second.message.message_id.entryId) == (7, 2)
    assert second.payload is not None and bytes(second.payload) == b"payload-section"
    assert connection.state is State.CONNECTED
    [failed] = connection.receive_data(b"\x00\x00\x30\x00" + b"\x00" * 8)  # 12288 > 1024 + pad
    assert isinstance(failed, ConnectionFailed)
    assert isinstance(failed.error, FrameTooLargeError)


def test_auth_challenge_during_the_handshake() -> None:
    connection = ClientConnection(auth_method="token", credentials=b"old")
    connection.data_to_send()
    challenge = pb.CommandAuthChallenge(
        challenge=pb.AuthData(auth_method_name="token", auth_data=b"PulsarAuthRefresh")
    )
    assert connection.receive_data(frame(Type.AUTH_CHALLENGE, authChallenge=challenge)) == [
        AuthChallenged("token", b"PulsarAuthRefresh")
    ]
    [answer] = commands_in(connection.answer_challenge(b"new"))
    assert answer.type == Type.AUTH_RESPONSE
    assert answer.authResponse.response.auth_method_name == "token"
    assert answer.authResponse.response.auth_data == b"new"
    assert answer.authResponse.protocol_version == commands.PROTOCOL_VERSION


@pytest.mark.parametrize(
    ("code", "cls", "text"),
    [
        (pb.AuthenticationError, AuthenticationError, "Failed to authenticate"),
        (pb.ServiceNotReady, ServiceNotReadyError, "CONNECT: not ready"),
    ],
)
def test_error_instead_of_connected(code: int, cls: type, text: str) -> None:
    connection = ClientConnection(auth_method="token", credentials=b"bad")
    connection.data_to_send()
    message = "Failed to authenticate" if code == pb.AuthenticationError else "not ready"
    error = pb.CommandError(request_id=2**64 - 1, error=code, message=message)  # type: ignore[arg-type]
    [failed] = connection.receive_data(frame(Type.ERROR, error=error))
    assert isinstance(failed, ConnectionFailed)
    assert type(failed.error) is cls
    assert failed.error.server_message == text  # type: ignore[attr-defined]
    assert connection.state is State.CLOSED


@pytest.mark.parametrize("tls", [False, True])
def test_peer_closing_during_the_handshake(tls: bool) -> None:
    connection = ClientConnection(tls=tls)
    [failed] = connection.receive_eof("127.0.0.1:6650")
    assert isinstance(failed, ConnectionFailed)
    hint = "" if tls else " (if that port expects TLS, use pulsar+ssl://)"
    assert str(failed.error) == f"broker at 127.0.0.1:6650 closed the connection on CONNECT{hint}"


# --- requests ----------------------------------------------------------------------------------


def lookup_response(request_id: int) -> bytes:
    response = pb.CommandLookupTopicResponse(
        request_id=request_id, brokerServiceUrl="pulsar://b:6650", response=1
    )  # type: ignore[arg-type]
    return frame(Type.LOOKUP_RESPONSE, lookupTopicResponse=response)


def test_request_and_response() -> None:
    connection = connected()
    request_id, data = connection.start_request(
        lambda rid: commands.lookup(topic="t", request_id=rid, authoritative=False), "lookup of t"
    )
    [sent] = commands_in(data)
    assert sent.lookupTopic.request_id == request_id
    assert connection.pending_requests() == {request_id: "lookup of t"}
    [response] = connection.receive_data(lookup_response(request_id))
    assert isinstance(response, Response)
    assert response.request_id == request_id and response.error is None
    assert response.command is not None
    assert response.command.lookupTopicResponse.brokerServiceUrl == "pulsar://b:6650"
    assert connection.pending_requests() == {}
    assert connection.receive_data(lookup_response(request_id)) == []  # a repeat is dropped


def test_error_response_is_the_mapped_exception() -> None:
    connection = connected()
    request_id, _ = connection.start_request(
        lambda rid: commands.partitioned_metadata(topic="t", request_id=rid), "metadata of t"
    )
    error = pb.CommandError(request_id=request_id, error=pb.TopicNotFound, message="no t")  # type: ignore[arg-type]
    [response] = connection.receive_data(frame(Type.ERROR, error=error))
    assert isinstance(response, Response)
    assert isinstance(response.error, TopicNotFoundError)
    assert str(response.error) == "TopicNotFoundError (server error 11): metadata of t: no t"


def test_abandoned_request_and_unknown_error_are_dropped() -> None:
    connection = connected()
    request_id, _ = connection.start_request(
        lambda rid: commands.lookup(topic="t", request_id=rid, authoritative=False), "lookup"
    )
    connection.abandon_request(request_id)
    assert connection.receive_data(lookup_response(request_id)) == []
    error = pb.CommandError(request_id=99, error=pb.ServiceNotReady, message="late")  # type: ignore[arg-type]
    assert connection.receive_data(frame(Type.ERROR, error=error)) == []
    assert connection.state is State.CONNECTED


def test_producer_success_not_ready_waits_for_the_next_one() -> None:
    connection = connected()
    request_id, _ = connection.start_request(
        lambda rid: commands.producer(topic="t", producer_id=1, request_id=rid, producer_name="p"),
        "producer",
    )
    waiting = pb.CommandProducerSuccess(
        request_id=request_id, producer_name="p", producer_ready=False
    )
    ready = pb.CommandProducerSuccess(request_id=request_id, producer_name="p")
    assert connection.receive_data(frame(Type.PRODUCER_SUCCESS, producer_success=waiting)) == []
    [response] = connection.receive_data(frame(Type.PRODUCER_SUCCESS, producer_success=ready))
    assert isinstance(response, Response) and response.request_id == request_id


def test_refused_refresh_fails_the_connection_and_pending_requests_are_returned() -> None:
    connection = connected(auth_method="token", credentials=b"x")
    first, _ = connection.start_request(
        lambda rid: commands.lookup(topic="a", request_id=rid, authoritative=False), "a"
    )
    error = pb.CommandError(request_id=2**64 - 1, error=pb.AuthenticationError, message="no")  # type: ignore[arg-type]
    [failed] = connection.receive_data(frame(Type.ERROR, error=error))
    assert isinstance(failed, ConnectionFailed)
    assert isinstance(failed.error, AuthenticationError)
    assert connection.state is State.CLOSED
    with pytest.raises(ConnectionClosedError):
        connection.send(commands.ping())
    assert connection.receive_data(lookup_response(first)) == []


def test_fail_returns_the_pending_request_ids() -> None:
    connection = connected()
    ids = [
        connection.start_request(
            lambda rid, t=t: commands.lookup(topic=t, request_id=rid, authoritative=False), t
        )[0]
        for t in ("a", "b")
    ]
    assert connection.fail(ConnectionClosedError("gone")) == ids
    assert connection.fail(ConnectionClosedError("again")) == []
    assert str(connection.failure) == "gone"


# --- keep-alive --------------------------------------------------------------------------------


def test_ping_is_answered_and_queued_frames_go_first() -> None:
    connection = connected()
    assert connection.receive_data(frame(Type.PING, ping=pb.CommandPing())) == []
    data = connection.send(commands.flow(consumer_id=1, permits=5))
    assert [c.type for c in commands_in(data)] == [Type.PONG, Type.FLOW]
    assert connection.data_to_send() == b""
    assert connection.send(b"raw") == b"raw"


def test_silence_pings_then_gives_up() -> None:
    connection = connected()
    assert connection.silence("b:6650", 30.0) == []
    assert [c.type for c in commands_in(connection.data_to_send())] == [Type.PING]
    assert connection.receive_data(frame(Type.PONG, pong=pb.CommandPong())) == []
    assert connection.silence("b:6650", 30.0) == []  # the pong reset it: ping again
    connection.data_to_send()
    [failed] = connection.silence("b:6650", 30.0)
    assert isinstance(failed, ConnectionFailed)
    assert str(failed.error) == "broker b:6650 did not answer keep-alive pings for 60s"


def test_eof_inside_a_frame_is_truncation() -> None:
    connection = connected()
    connection.receive_data(b"\x00\x00\x00\x10\x00")
    [failed] = connection.receive_eof("b:6650")
    assert isinstance(failed, ConnectionFailed)
    assert isinstance(failed.error, TruncatedFrameError)


# --- notices -----------------------------------------------------------------------------------


def test_receipts_and_send_errors() -> None:
    connection = connected()
    receipt = pb.CommandSendReceipt(producer_id=3, sequence_id=10)
    send_error = pb.CommandSendError(
        producer_id=3, sequence_id=11, error=pb.PersistenceError, message="disk"
    )  # type: ignore[arg-type]
    assert connection.receive_data(
        frame(Type.SEND_RECEIPT, send_receipt=receipt)
        + frame(Type.SEND_ERROR, send_error=send_error)
    ) == [ReceiptReceived(3, receipt), SendFailed(3, send_error)]


@pytest.mark.parametrize("tls", [False, True])
def test_broker_closing_consumers_and_producers(tls: bool) -> None:
    connection = connected(tls=tls)
    consumer = pb.CommandCloseConsumer(
        consumer_id=4,
        request_id=1,
        assignedBrokerServiceUrl="pulsar://b2:6650",
        assignedBrokerServiceUrlTls="pulsar+ssl://b2:6651",
    )
    producer = pb.CommandCloseProducer(producer_id=5, request_id=2)
    url = "pulsar+ssl://b2:6651" if tls else "pulsar://b2:6650"
    assert connection.receive_data(
        frame(Type.CLOSE_CONSUMER, close_consumer=consumer)
        + frame(Type.CLOSE_PRODUCER, close_producer=producer)
        + frame(
            Type.REACHED_END_OF_TOPIC, reachedEndOfTopic=pb.CommandReachedEndOfTopic(consumer_id=4)
        )
    ) == [
        ResourceClosed(
            "consumer", 4, "the broker closed the consumer (topic unloaded or moved)", url
        ),
        ResourceClosed(
            "producer", 5, "the broker closed the producer (topic unloaded or moved)", ""
        ),
        ResourceClosed("consumer", 4, "the topic was terminated", final=True),
    ]


def test_topic_migrated() -> None:
    connection = connected()
    migrated = pb.CommandTopicMigrated(
        resource_id=6,
        resource_type=pb.CommandTopicMigrated.Producer,
        brokerServiceUrl="pulsar://green:6650",
        brokerServiceUrlTls="pulsar+ssl://green:6651",
    )
    assert connection.receive_data(frame(Type.TOPIC_MIGRATED, topicMigrated=migrated)) == [
        ResourceClosed(
            "producer",
            6,
            "the topic migrated to another cluster (pulsar://green:6650)",
            "pulsar://green:6650",
        )
    ]


def test_nothing_after_close() -> None:
    connection = connected()
    connection.fail(ConnectionClosedError("closed"))
    assert connection.receive_data(frame(Type.PING, ping=pb.CommandPing())) == []
    assert connection.receive_eof("b") == []
    assert connection.silence("b", 1.0) == []
    assert connection.data_to_send() == b""
