"""TubeMQConnection against loopback servers scripted by the tests: replies are matched by
serial number, and every failure ends the call within its timeout. The producer and a read
over the same servers."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from google.protobuf.message import Message
from support.decoding import strings
from support.fake_broker import closed_port

from pulsar_spark import errors
from pulsar_spark.tubemq import errors as tubemq_errors
from pulsar_spark.tubemq.client.cluster import TubePartition
from pulsar_spark.tubemq.client.connection import TubeMQConnection
from pulsar_spark.tubemq.client.consumer import read_range
from pulsar_spark.tubemq.client.producer import Outgoing, TubeMQProducer
from pulsar_spark.tubemq.wire import messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import FrameDecoder
from pulsar_spark.tubemq.wire.metadata import BrokerInfo

# What the handler does with each request: the bytes to send back, or None to close.
Handler = Callable[[rpc.Request], bytes | None]

COMMIT = broker_pb.CommitOffsetRequestC2B(
    clientId="c", topicName="t", partitionId=1, groupName="g", lastPackConsumed=True
)


def commit_reply(serial_no: int, *, code: int = 200, offset: int = 28) -> bytes:
    reply = broker_pb.CommitOffsetResponseB2C(
        success=code == 200, errCode=code, errMsg="OK!" if code == 200 else "no", currOffset=offset
    )
    return rpc.encode_response(serial_no, rpc.CALLS[rpc.Method.COMMIT_OFFSET], reply)


@contextlib.contextmanager
def scripted_server(handler: Handler) -> Iterator[tuple[int, list[rpc.Request]]]:
    """A one-connection server that decodes each request and answers with ``handler``."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[rpc.Request] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:  # closed before the client connected
            return
        decoder = FrameDecoder()
        with conn:
            while data := conn.recv(65536):
                for frame in decoder.feed(data):
                    request = rpc.decode_request(frame)
                    seen.append(request)
                    answer = handler(request)
                    if answer is None:
                        return
                    conn.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        listener.close()
        thread.join(timeout=5)


def test_call_returns_the_reply_with_its_serial_number() -> None:
    with (
        scripted_server(lambda r: commit_reply(r.serial_no, offset=r.serial_no * 28)) as (
            port,
            seen,
        ),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        first = conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C)
        second = conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C, timeout=2.5)
    assert (first.currOffset, second.currOffset) == (28, 56)
    assert [(r.serial_no, r.timeout_ms, r.message) for r in seen] == [
        (1, 10_000, COMMIT),
        (2, 2_500, COMMIT),
    ]


def test_replies_to_other_serial_numbers_are_dropped() -> None:
    def stale_first(request: rpc.Request) -> bytes:
        return commit_reply(99, offset=1) + commit_reply(request.serial_no, offset=2)

    with scripted_server(stale_first) as (port, _), TubeMQConnection("127.0.0.1", port) as conn:
        assert conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C).currOffset == 2


@contextlib.contextmanager
def one_shot_server(pieces: Callable[[int], list[bytes]]) -> Iterator[int]:
    """A server that reads one request and sends ``pieces(serial_no)`` one by one, then closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            (frame,) = FrameDecoder().feed(conn.recv(65536))
            for piece in pieces(frame.serial_no):
                conn.sendall(piece)
                time.sleep(0.001)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(timeout=5)


def test_reply_split_into_single_bytes_is_reassembled() -> None:
    def single_bytes(serial_no: int) -> list[bytes]:
        return [bytes([b]) for b in commit_reply(serial_no, offset=84)]

    with one_shot_server(single_bytes) as port, TubeMQConnection("127.0.0.1", port) as conn:
        assert conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C).currOffset == 84


def test_error_code_raises_unless_asked_for_the_reply() -> None:
    with (
        scripted_server(lambda r: commit_reply(r.serial_no, code=410)) as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        reply = conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C, check=False)
        assert (reply.errCode, reply.errMsg) == (410, "no")
        with pytest.raises(tubemq_errors.TubeMQPartitionOccupiedError, match="server error 410"):
            conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C)
        assert not conn.closed  # a refusal is an answer: the connection stays usable


def test_exception_reply_raises_and_closes() -> None:
    name = "org.apache.inlong.tubemq.corerpc.exception.StandbyException"
    with (
        scripted_server(lambda r: rpc.encode_exception(r.serial_no, name, "standby")) as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        with pytest.raises(tubemq_errors.TubeMQRemoteUnavailableError, match="standby"):
            conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C)
        assert conn.closed
        with pytest.raises(errors.ConnectionClosedError, match="is closed"):
            conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C)


def test_silent_server_times_out() -> None:
    with (
        scripted_server(lambda r: b"") as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        started = time.monotonic()
        with pytest.raises(errors.RequestTimeoutError, match="no reply to call 1 from"):
            conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C, timeout=0.3)
        assert 0.3 <= time.monotonic() - started < 2
        assert conn.closed


def test_server_closing_cleanly_fails_the_call() -> None:
    with (
        scripted_server(lambda r: None) as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
        pytest.raises(errors.ConnectionClosedError, match="closed the connection"),
    ):
        conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C, timeout=5)


def test_server_closing_mid_frame_is_a_truncated_frame() -> None:
    with (
        one_shot_server(lambda serial_no: [commit_reply(serial_no)[:20]]) as port,
        TubeMQConnection("127.0.0.1", port) as conn,
        pytest.raises(errors.TruncatedFrameError, match=r"\(20 bytes pending\)"),
    ):
        conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C, timeout=5)


def test_garbage_from_the_server_is_a_protocol_error() -> None:
    with (
        scripted_server(lambda r: b"HTTP/1.1 400 Bad Request\r\n\r\n") as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
        pytest.raises(tubemq_errors.BadFrameTokenError, match="0x48545450"),
    ):
        conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C, timeout=5)


def test_reply_for_another_method_is_refused() -> None:
    def wrong(request: rpc.Request) -> bytes:
        call = rpc.CALLS[rpc.Method.GET_MESSAGE]
        reply = broker_pb.GetMessageResponseB2C(success=True, errCode=200)
        return rpc.encode_response(request.serial_no, call, reply)

    with (
        scripted_server(wrong) as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
        pytest.raises(errors.RemoteProtocolError, match="answered method 18 with method 17"),
    ):
        conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C, timeout=5)


def test_wrong_response_type_is_a_caller_error() -> None:
    with (
        scripted_server(lambda r: None) as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
        pytest.raises(TypeError, match="CommitOffsetRequestC2B is answered by"),
    ):
        conn.call(COMMIT, broker_pb.GetMessageResponseB2C)


def test_nothing_listening_is_unreachable() -> None:
    with pytest.raises(errors.BrokerUnreachableError, match=r"cannot connect to 127\.0\.0\.1:"):
        TubeMQConnection("127.0.0.1", closed_port(), connect_timeout=2)


def test_call_all_matches_replies_answered_out_of_order() -> None:
    held: list[rpc.Request] = []

    def answer_in_reverse(request: rpc.Request) -> bytes:
        held.append(request)
        if len(held) < 3:
            return b""
        return b"".join(commit_reply(r.serial_no, offset=r.serial_no * 28) for r in held[::-1])

    with (
        scripted_server(answer_in_reverse) as (port, seen),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        replies = conn.call_all([COMMIT] * 3, broker_pb.CommitOffsetResponseB2C)
    assert [r.currOffset for r in replies] == [28, 56, 84]
    assert [r.serial_no for r in seen] == [1, 2, 3]


def test_call_all_raises_the_first_error_code_in_request_order() -> None:
    def second_refused(request: rpc.Request) -> bytes:
        return commit_reply(request.serial_no, code=410 if request.serial_no == 2 else 200)

    with (
        scripted_server(second_refused) as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
        pytest.raises(tubemq_errors.TubeMQPartitionOccupiedError),
    ):
        conn.call_all([COMMIT] * 3, broker_pb.CommitOffsetResponseB2C)


def test_submitted_calls_are_in_flight_together_and_collected_in_any_order() -> None:
    held: list[rpc.Request] = []

    def answer_when_all_five_came(request: rpc.Request) -> bytes:
        held.append(request)
        if len(held) < 5:
            return b""
        # a stale reply first, then the four submitted in reverse, then the fifth
        order = [*held[-2::-1], held[-1]]
        stale = commit_reply(999, offset=1)
        return stale + b"".join(commit_reply(r.serial_no, offset=r.serial_no * 28) for r in order)

    with (
        scripted_server(answer_when_all_five_came) as (port, seen),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        first = conn.submit([COMMIT] * 2, broker_pb.CommitOffsetResponseB2C)
        second = conn.submit([COMMIT] * 2, broker_pb.CommitOffsetResponseB2C)
        # a call made meanwhile reads the others' replies and keeps them
        alone = conn.call(COMMIT, broker_pb.CommitOffsetResponseB2C)
        assert alone.currOffset == 5 * 28
        assert sorted(conn._arrived) == [1, 2, 3, 4]
        assert [r.currOffset for r in second.replies()] == [3 * 28, 4 * 28]
        assert [r.currOffset for r in first.replies()] == [28, 56]
        assert conn._arrived == {}
    assert [r.serial_no for r in seen] == [1, 2, 3, 4, 5]


def test_a_submitted_call_not_answered_times_out_from_its_submission() -> None:
    with (
        scripted_server(lambda r: b"") as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        submitted = conn.submit([COMMIT], broker_pb.CommitOffsetResponseB2C, timeout=0.3)
        time.sleep(0.3)
        started = time.monotonic()
        with pytest.raises(errors.RequestTimeoutError, match="no reply to call 1"):
            submitted.replies()
        assert time.monotonic() - started < 0.2
        assert conn.closed


def test_acknowledgements_and_messages_refuse_other_calls() -> None:
    with (
        scripted_server(lambda r: commit_reply(r.serial_no)) as (port, _),
        TubeMQConnection("127.0.0.1", port) as conn,
    ):
        submitted = conn.submit([COMMIT, COMMIT], broker_pb.CommitOffsetResponseB2C)
        with pytest.raises(TypeError, match="acknowledgements answer SendMessage requests only"):
            submitted.acknowledgements()
        with pytest.raises(TypeError, match="messages answer one GetMessage request"):
            submitted.messages()
        assert [reply.currOffset for reply in submitted.replies()] == [28, 28]


# The producer over the same scripted server: what a broker refuses for now is sent again.


def producer_on(port: int, timeout: float = 5.0) -> TubeMQProducer:
    partition = TubePartition(BrokerInfo(1, "127.0.0.1", port), "t", 0)
    return TubeMQProducer([partition], timeout=timeout)


def storing(refuse: Callable[[bytes, int], int]) -> tuple[Handler, list[bytes]]:
    """A handler answering SendMessage with ``refuse(data, times seen)``'s code, the stored
    messages numbered in order; and the data of every request it saw."""
    seen: list[bytes] = []
    stored: list[bytes] = []

    def handler(request: rpc.Request) -> bytes:
        assert isinstance(request.message, broker_pb.SendMessageRequestP2B)
        data = request.message.data
        seen.append(data)
        code = refuse(data, seen.count(data))
        if code == 200:
            stored.append(data)
        reply = broker_pb.SendMessageResponseB2P(
            success=code == 200,
            errCode=code,
            errMsg="OK" if code == 200 else "server receive message overflow!",
            messageId=len(stored),
            appendOffset=28 * len(stored),
        )
        return rpc.encode_response(request.serial_no, rpc.CALLS[rpc.Method.SEND_MESSAGE], reply)

    return handler, seen


def test_a_message_refused_for_overflow_is_sent_again() -> None:
    handler, seen = storing(lambda data, times: 419 if data == b"m1" and times < 3 else 200)
    with scripted_server(handler) as (port, _), producer_on(port) as producer:
        first = producer.submit_all([Outgoing(b"m0"), Outgoing(b"m1")])
        second = producer.submit_all([Outgoing(b"m2")])
        stored = first.wait() + second.wait()
    assert [(s.message_id, s.offset) for s in stored] == [(1, 28), (3, 84), (2, 56)]
    assert seen == [b"m0", b"m1", b"m2", b"m1", b"m1"]


def test_confirm_counts_the_window_once_every_message_is_stored() -> None:
    handler, seen = storing(lambda data, times: 419 if data == b"m1" and times < 2 else 200)
    with scripted_server(handler) as (port, _), producer_on(port) as producer:
        sending = producer.submit_all([Outgoing(b"m0"), Outgoing(b"m1"), Outgoing(b"m2")])
        assert sending.confirm() == 3
    assert seen == [b"m0", b"m1", b"m2", b"m1"]


def test_a_lasting_refusal_raises() -> None:
    handler, _ = storing(lambda data, times: 400 if data == b"bad" else 200)
    with (
        scripted_server(handler) as (port, _),
        producer_on(port) as producer,
        pytest.raises(tubemq_errors.TubeMQBadRequestError),
    ):
        producer.send_all([Outgoing(b"fine"), Outgoing(b"bad")])


def test_resending_gives_up_after_the_timeout_without_progress() -> None:
    handler, seen = storing(lambda data, times: 419)
    started = time.monotonic()
    with (
        scripted_server(handler) as (port, _),
        producer_on(port, timeout=0.5) as producer,
        pytest.raises(errors.RetriesExhaustedError, match=r"requestTimeoutMs is 0\.5s"),
    ):
        producer.send_all([Outgoing(b"never")])
    assert time.monotonic() - started < 2.0
    assert len(seen) > 1


# A read over the same scripted server: the next request is out while the caller holds a reply.


def reading_broker() -> Handler:
    """A broker whose partition holds messages 1-4 in two replies of two, at offsets 0 and
    56, and ends at offset 112."""
    replies = {0: (0, [1, 2]), 1: (56, [3, 4]), 2: (112, [])}
    asked = 0

    def handler(request: rpc.Request) -> bytes:
        nonlocal asked
        if isinstance(request.message, broker_pb.RegisterRequestC2B):
            reply: Message = broker_pb.RegisterResponseB2C(
                success=True, errCode=200, errMsg="OK!", currOffset=0
            )
        else:
            assert isinstance(request.message, broker_pb.GetMessageRequestC2B)
            offset, ids = replies[asked]
            asked += 1
            reply = broker_pb.GetMessageResponseB2C(
                success=True, errCode=200, errMsg="OK!", currOffset=offset
            )
            for message_id in ids:
                data, flag = messages.encode_payload(b"value-%d" % message_id, None)
                reply.messages.add(
                    messageId=message_id,
                    checkSum=messages.checksum(data),
                    payLoadData=data,
                    flag=flag,
                )
        return rpc.encode_response(request.serial_no, request.call, reply)

    return handler


def test_a_read_asks_for_the_next_reply_before_handing_one_over() -> None:
    def get_messages(seen: list[rpc.Request]) -> int:
        return sum(isinstance(r.message, broker_pb.GetMessageRequestC2B) for r in seen)

    with scripted_server(reading_broker()) as (port, seen):
        partition = TubePartition(BrokerInfo(1, "127.0.0.1", port), "t", 0)
        batches = read_range(partition, "g", "c", 0, 112, timeout=5.0, heartbeat_interval=None)
        first = next(batches)
        # the first reply is handed over once the second showed where it stopped; the third
        # request reaches the broker while the caller holds the first
        deadline = time.monotonic() + 5.0
        while get_messages(seen) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert get_messages(seen) == 3
        rest = list(batches)

    assert (first.offset, first.scanned_to, first.messages.ids) == (0, 56, [1, 2])
    assert strings(first.messages.values) == [b"value-1", b"value-2"]
    assert [(b.offset, b.scanned_to, b.messages.ids, strings(b.messages.values)) for b in rest] == [
        (56, 112, [3, 4], [b"value-3", b"value-4"])
    ]
    operations = [
        ("register", r.message.opType, r.message.currOffset)
        if isinstance(r.message, broker_pb.RegisterRequestC2B)
        else ("get", r.message.partitionId, r.message.lastPackConsumed)
        for r in seen
    ]
    assert operations == [
        ("register", 31, 0),
        ("get", 0, True),
        ("get", 0, True),
        ("get", 0, True),
        ("register", 32, 0),
    ]
