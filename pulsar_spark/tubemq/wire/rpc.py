"""The RPC envelope around each TubeMQ call, and the table of calls this client makes.

How this works
--------------
The chunks of a frame (see :mod:`.framing`), joined, hold three messages, each written with
protobuf's "delimited" form (a varint byte count, then the message)::

    request:   RpcConnHeader(flag=0)  RequestHeader(serviceType, protocolVer=3)
               RequestBody(method, timeout, request=<the call's message, serialized>)
    response:  RpcConnHeader(flag=1)  ResponseHeader(status)
               RspResponseBody(method, data=<the reply message>)   when status is SUCCESS
               RspExceptionBody(exceptionName, stackTrace)          otherwise

A call is named by its method id; the service type says which server-side service handles it
(1 master, 2 broker reads, 3 broker writes). :data:`CALLS` lists the calls made here with
their message types, so :func:`encode_request` needs only the request message.

Two layers of failure reach a caller. A server that throws answers with an exception body:
:func:`decode_response` raises
:class:`~pulsar_spark.tubemq.errors.TubeMQRemoteCallError` (retriable for a standby master or a
server that is starting, stopping or full). A call the server handled but refused answers
normally, with ``errCode`` other than 200 in the reply: :func:`raise_for_error_code` turns that
into the :class:`~pulsar_spark.tubemq.errors.TubeMQServerError` subclass for the code.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, TypeVar

from google.protobuf.message import DecodeError, Message

from pulsar_spark.common.varints import encode_varint, read_varint
from pulsar_spark.errors import RemoteProtocolError
from pulsar_spark.tubemq.errors import tubemq_error_for, tubemq_remote_exception_for
from pulsar_spark.tubemq.wire import messages
from pulsar_spark.tubemq.wire._generated import (
    tubemq_broker_pb2 as broker_pb,
)
from pulsar_spark.tubemq.wire._generated import (
    tubemq_master_pb2 as master_pb,
)
from pulsar_spark.tubemq.wire._generated import (
    tubemq_rpc_pb2 as rpc_pb,
)
from pulsar_spark.tubemq.wire.framing import Frame, encode_frame
from pulsar_spark.tubemq.wire.reply_scan import scan_messages

M = TypeVar("M", bound=Message)

# RpcProtocol.RPC_PROTOCOL_VERSION of the org.apache.inlong servers.
PROTOCOL_VERSION = 3
FLAG_REQUEST = 0
FLAG_RESPONSE = 1
SUCCESS = 200
# What the Java client waits for a reply, and sends as the request's timeout.
DEFAULT_TIMEOUT_MS = 10_000


class Service(IntEnum):
    """The server-side service a request is for (``RequestHeader.serviceType``)."""

    MASTER = 1
    BROKER_READ = 2
    BROKER_WRITE = 3


class Method(IntEnum):
    """Method ids (``RequestBody.method``) of the calls this client makes."""

    PRODUCER_REGISTER = 1
    PRODUCER_HEARTBEAT = 2
    PRODUCER_CLOSE = 3
    CONSUMER_REGISTER = 4
    CONSUMER_HEARTBEAT = 5
    CONSUMER_CLOSE = 6
    SEND_MESSAGE = 13
    BROKER_CONSUMER_REGISTER = 15
    BROKER_CONSUMER_HEARTBEAT = 16
    GET_MESSAGE = 17
    COMMIT_OFFSET = 18


@dataclass(frozen=True, slots=True)
class Call:
    """One call: its ids and the messages it sends and receives."""

    method: Method
    service: Service
    request_type: type[Message]
    response_type: type[Message]


CALLS: dict[Method, Call] = {
    call.method: call
    for call in (
        Call(
            Method.PRODUCER_REGISTER,
            Service.MASTER,
            master_pb.RegisterRequestP2M,
            master_pb.RegisterResponseM2P,
        ),
        Call(
            Method.PRODUCER_HEARTBEAT,
            Service.MASTER,
            master_pb.HeartRequestP2M,
            master_pb.HeartResponseM2P,
        ),
        Call(
            Method.PRODUCER_CLOSE,
            Service.MASTER,
            master_pb.CloseRequestP2M,
            master_pb.CloseResponseM2P,
        ),
        Call(
            Method.CONSUMER_REGISTER,
            Service.MASTER,
            master_pb.RegisterRequestC2M,
            master_pb.RegisterResponseM2C,
        ),
        Call(
            Method.CONSUMER_HEARTBEAT,
            Service.MASTER,
            master_pb.HeartRequestC2M,
            master_pb.HeartResponseM2C,
        ),
        Call(
            Method.CONSUMER_CLOSE,
            Service.MASTER,
            master_pb.CloseRequestC2M,
            master_pb.CloseResponseM2C,
        ),
        Call(
            Method.SEND_MESSAGE,
            Service.BROKER_WRITE,
            broker_pb.SendMessageRequestP2B,
            broker_pb.SendMessageResponseB2P,
        ),
        Call(
            Method.BROKER_CONSUMER_REGISTER,
            Service.BROKER_READ,
            broker_pb.RegisterRequestC2B,
            broker_pb.RegisterResponseB2C,
        ),
        Call(
            Method.BROKER_CONSUMER_HEARTBEAT,
            Service.BROKER_READ,
            broker_pb.HeartBeatRequestC2B,
            broker_pb.HeartBeatResponseB2C,
        ),
        Call(
            Method.GET_MESSAGE,
            Service.BROKER_READ,
            broker_pb.GetMessageRequestC2B,
            broker_pb.GetMessageResponseB2C,
        ),
        Call(
            Method.COMMIT_OFFSET,
            Service.BROKER_READ,
            broker_pb.CommitOffsetRequestC2B,
            broker_pb.CommitOffsetResponseB2C,
        ),
    )
}
_BY_REQUEST_TYPE = {call.request_type: call for call in CALLS.values()}
_BY_METHOD: dict[int, Call] = {int(method): call for method, call in CALLS.items()}
# The tag of RequestBody.request: field 3, length-delimited.
_REQUEST_TAG = bytes([3 << 3 | 2])
# The tags of RspResponseBody's method (field 1, varint) and data (field 2, length-delimited).
_METHOD_TAG = 1 << 3
_DATA_TAG = 2 << 3 | 2


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded request frame (what a server, or a test standing in for one, reads)."""

    serial_no: int
    call: Call
    timeout_ms: int
    message: Message


@dataclass(frozen=True, slots=True)
class Response:
    """A decoded successful response: the serial number it answers and the reply message."""

    serial_no: int
    call: Call
    message: Message | messages.GetMessageReply


class Replied(Protocol):
    """What every TubeMQ reply message has."""

    errCode: int  # noqa: N815 (the wire's name)
    errMsg: str  # noqa: N815


def call_for(request: Message) -> Call:
    """The call a request message belongs to (ValueError for a message no call sends)."""
    try:
        return _BY_REQUEST_TYPE[type(request)]
    except KeyError:
        raise ValueError(f"{type(request).__name__} is not a request this client sends") from None


def encode_request(
    serial_no: int, request: Message, *, timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> bytes:
    """The frame that carries ``request`` under ``serial_no``.

    Everything before the request's own bytes depends only on the call and the timeout, and
    is serialized once for each: the body's method and timeout come first and its request
    last, the order protobuf writes them in, so the frame is byte for byte the same.
    """
    headers, start = envelope(call_for(request), timeout_ms)
    data = request.SerializeToString()
    body = start + encode_varint(len(data)) + data
    return encode_frame(serial_no, headers + encode_varint(len(body)) + body)


def envelope(call: Call, timeout_ms: int) -> tuple[bytes, bytes]:
    """What comes before a request's own bytes, but for two sizes: the delimited headers (then
    the body's size), and the body up to the request (then the request's size)."""
    return _headers(call.service), _body_start(call.method, timeout_ms)


@functools.cache
def _headers(service: int) -> bytes:
    """The delimited RpcConnHeader and RequestHeader of a request to ``service``."""
    return _delimited(rpc_pb.RpcConnHeader(flag=FLAG_REQUEST)) + _delimited(
        rpc_pb.RequestHeader(serviceType=service, protocolVer=PROTOCOL_VERSION)
    )


@functools.lru_cache(maxsize=64)
def _body_start(method: int, timeout_ms: int) -> bytes:
    """A RequestBody's method and timeout, and the tag of its ``request`` field."""
    return rpc_pb.RequestBody(method=method, timeout=timeout_ms).SerializeToString() + _REQUEST_TAG


def encode_response(serial_no: int, call: Call, reply: Message) -> bytes:
    """The frame a server sends for a successful ``call`` (used by tests and fakes)."""
    body = rpc_pb.RspResponseBody(method=call.method, data=reply.SerializeToString())
    return encode_frame(serial_no, SUCCESS_HEADERS + _delimited(body))


def encode_exception(serial_no: int, exception_name: str, message: str) -> bytes:
    """The frame a server sends when a call threw (used by tests and fakes)."""
    header = rpc_pb.ResponseHeader(status=rpc_pb.ResponseHeader.ERROR, protocolVer=PROTOCOL_VERSION)
    body = rpc_pb.RspExceptionBody(exceptionName=exception_name, stackTrace=message)
    return encode_frame(serial_no, _RESPONSE_START + _delimited(header) + _delimited(body))


def decode_request(frame: Frame) -> Request:
    """Read a request frame; RemoteProtocolError when it is not one this table knows."""
    reader = _DelimitedReader(frame.data, frame.serial_no)
    reader.read(rpc_pb.RpcConnHeader)
    header = reader.read(rpc_pb.RequestHeader)
    body = reader.read(rpc_pb.RequestBody)
    call = _call_for_method(body.method, frame.serial_no)
    if header.serviceType != call.service:
        raise RemoteProtocolError(
            f"frame {frame.serial_no}: method {body.method} sent to service {header.serviceType}"
        )
    return Request(frame.serial_no, call, body.timeout, _parse(call.request_type, body.request))


def decode_response(frame: Frame) -> Response:
    """Read a response frame.

    Raises :class:`~pulsar_spark.tubemq.errors.TubeMQRemoteCallError` when the server answered with
    an exception, and RemoteProtocolError when the frame is not a valid response. The reply's
    ``errCode`` is not looked at: see :func:`raise_for_error_code`.
    """
    call, data = _response_body(frame)
    return Response(frame.serial_no, call, _parse(call.response_type, data))


def decode_get_message(frame: Frame) -> Response:
    """:func:`decode_response` for a read: a GetMessage reply comes as a
    :class:`~.messages.GetMessageReply`, its messages decoded and checked (a checksum that does
    not match raises ChecksumMismatchError). They are found in the reply's bytes all at once
    (:mod:`.reply_scan`) where the scan allows, otherwise through the protobuf runtime. A reply
    to another call is decoded as :func:`decode_response` does."""
    call, data = _response_body(frame)
    if call.method is not Method.GET_MESSAGE:
        return Response(frame.serial_no, call, _parse(call.response_type, data))
    return Response(frame.serial_no, call, _get_message_reply(data))


def _get_message_reply(data: bytes) -> messages.GetMessageReply:
    scanned = scan_messages(data)
    if scanned is not None:
        # the reply's other fields, parsed without its messages
        others = data[: scanned.first] + data[scanned.after :]
        rest = _parse(broker_pb.GetMessageResponseB2C, others)
        found = messages.decode_scanned(data, scanned)
        if found is not None and not rest.messages:
            return messages.GetMessageReply(rest, found)
    response = _parse(broker_pb.GetMessageResponseB2C, data)
    decoded = messages.decode_messages(response)
    del response.messages[:]
    return messages.GetMessageReply(response, decoded)


def _response_body(frame: Frame) -> tuple[Call, bytes]:
    """The call a response frame answers and its reply's bytes; raises for an exception body."""
    data = frame.data
    if data.startswith(SUCCESS_HEADERS):
        found = _plain_body(data)
        if found is not None:
            return _call_for_method(found[0], frame.serial_no), found[1]
    reader = _DelimitedReader(data, frame.serial_no)
    reader.read(rpc_pb.RpcConnHeader)
    header = reader.read(rpc_pb.ResponseHeader)
    if header.status != rpc_pb.ResponseHeader.SUCCESS:
        failure = reader.read(rpc_pb.RspExceptionBody)
        raise tubemq_remote_exception_for(_text(failure.exceptionName), _text(failure.stackTrace))
    body = reader.read(rpc_pb.RspResponseBody)
    return _call_for_method(body.method, frame.serial_no), body.data


def _plain_body(data: bytes) -> tuple[int, bytes] | None:
    """The method and reply bytes of a successful response laid out as the servers write it:
    after :data:`SUCCESS_HEADERS`, the RspResponseBody's size, then its method (tag 1, below
    128) and its data (tag 2) to the end of the frame. None for any other layout, which
    :class:`_DelimitedReader` reads (and judges) field by field."""
    try:
        body_size, at = read_varint(data, len(SUCCESS_HEADERS))
        if at + body_size != len(data) or body_size < 4:
            return None
        method, tag = data[at + 1], data[at + 2]
        if data[at] != _METHOD_TAG or method >= 0x80 or tag != _DATA_TAG:
            return None
        size, start = read_varint(data, at + 3)
    except IndexError:
        return None
    # protobuf takes a length of at most five bytes
    return (method, data[start:]) if start + size == len(data) and start <= at + 8 else None


def raise_for_error_code(reply: Replied) -> None:
    """Raise the TubeMQServerError for the reply's errCode, unless it is 200 (success)."""
    if reply.errCode != SUCCESS:
        raise tubemq_error_for(reply.errCode, reply.errMsg)


def _text(value: str | bytes) -> str:
    """A string field as text: the protobuf runtime hands a proto2 string that is not valid
    UTF-8 over as bytes."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _delimited(message: Message) -> bytes:
    data = message.SerializeToString()
    return encode_varint(len(data)) + data


# How every response starts: RpcConnHeader(flag=1). A successful one goes on with
# ResponseHeader(status=SUCCESS, protocolVer=3).
_RESPONSE_START = _delimited(rpc_pb.RpcConnHeader(flag=FLAG_RESPONSE))
SUCCESS_HEADERS = _RESPONSE_START + _delimited(
    rpc_pb.ResponseHeader(status=rpc_pb.ResponseHeader.SUCCESS, protocolVer=PROTOCOL_VERSION)
)


def _call_for_method(method: int, serial_no: int) -> Call:
    try:
        return _BY_METHOD[method]
    except KeyError:
        raise RemoteProtocolError(f"frame {serial_no}: unknown method id {method}") from None


def _parse(message_type: type[M], data: bytes) -> M:
    try:
        message = message_type.FromString(data)
    except DecodeError as exc:
        raise RemoteProtocolError(
            f"{message_type.__name__} of {len(data)} bytes does not parse"
        ) from exc
    # The runtime accepts a message without its required fields; the Java peers never send one.
    if not message.IsInitialized():
        missing = [
            field.name
            for field in message.DESCRIPTOR.fields
            if field.is_required and not message.HasField(field.name)
        ]
        where = ", ".join(missing) or "fields of a nested message"
        raise RemoteProtocolError(f"{message_type.__name__} lacks required {where}")
    return message


class _DelimitedReader:
    """Reads consecutive delimited messages from the joined chunks of one frame."""

    def __init__(self, data: bytes, serial_no: int) -> None:
        self._data = data
        self._pos = 0
        self._serial_no = serial_no

    def read(self, message_type: type[M]) -> M:
        try:
            size, start = read_varint(self._data, self._pos)
        except IndexError:
            raise RemoteProtocolError(
                f"frame {self._serial_no} ends where {message_type.__name__} should start"
            ) from None
        end = start + size
        if end > len(self._data):
            raise RemoteProtocolError(
                f"frame {self._serial_no}: {message_type.__name__} of {size} bytes runs past "
                f"the frame's {len(self._data) - start} remaining bytes"
            )
        self._pos = end
        return _parse(message_type, self._data[start:end])
