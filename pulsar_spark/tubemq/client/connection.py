"""A blocking connection to one TubeMQ master or broker.

How this works
--------------
:class:`TubeMQConnection` owns one TCP socket and makes one call at a time: it frames the
request under a fresh serial number (see :mod:`pulsar_spark.tubemq.wire.rpc`), sends it
and reads until the frame with that serial number arrives. A frame with a serial number no
call is waiting for answers a call that already timed out and is dropped. Every read waits at
most until the call's deadline, so a silent server ends in
:class:`~pulsar_spark.errors.RequestTimeoutError` rather than a hang; after a timeout or any
failure the connection is closed, because the stream may hold half a frame.

:meth:`TubeMQConnection.call_all` sends several requests back to back and waits for all
their replies (pipelining). :meth:`TubeMQConnection.submit` sends them without waiting, so the
producer keeps several windows of messages in flight; a reply read before its call asks for
it (while another call waits) is kept until then. :meth:`TubeMQConnection.submit_encoded`
takes requests its caller frames itself (a window of SendMessage built with numpy), and
:meth:`Submitted.acknowledgements` reads their replies many at a time
(:mod:`pulsar_spark.tubemq.wire.send_acks`): when it has to read again after a read that
emptied the socket, it first waits a few milliseconds, so that the next read takes hundreds.
A reader sends its next GetMessage before it uses the reply in hand, and takes that one with
:meth:`Submitted.messages`.

With :class:`TubeMQSecurity` the connection runs TLS (through
:class:`~pulsar_spark.common.tls.TlsChannel`, the Pulsar connections' record layer) and signs
every request it sends with the credentials, signed once per call or batch as it goes out
(:mod:`pulsar_spark.tubemq.wire.auth`), so that no signature outlives the master's window
for timestamps.

A reply whose ``errCode`` is not 200 raises its
:class:`~pulsar_spark.tubemq.errors.TubeMQServerError` unless the caller asks for the reply as it is
(``check=False``), which GetMessage needs: its 404 only means "nothing new yet".
"""

from __future__ import annotations

import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

from google.protobuf.message import Message

from pulsar_spark.common.tls import TlsChannel, TlsSettings
from pulsar_spark.errors import (
    BrokerUnreachableError,
    ConnectionClosedError,
    PulsarSparkError,
    RemoteProtocolError,
    RequestTimeoutError,
)
from pulsar_spark.tubemq.wire import auth, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import Frame, FrameDecoder
from pulsar_spark.tubemq.wire.messages import GetMessageReply
from pulsar_spark.tubemq.wire.send_acks import Ack, scan_acks
from pulsar_spark.tubemq.wire.send_request import SEND

R = TypeVar("R", bound=Message)

_READ_SIZE = 64 * 1024
# Before it reads acknowledgements again, a connection whose last read emptied the socket waits
# this long for more, so that each read (and scan) takes hundreds of them, not a few (a scan
# of 50 costs about what one of 1,000 does).
_ACK_PAUSE = 0.004
_TLS_PORT_HINT = "with tlsEnable, master.addresses names the masters' TLS ports (tlsPort)"


@dataclass(frozen=True, slots=True)
class TubeMQSecurity:
    """TLS for the connections (None: plain text) and the identity signed into each call
    (None: none sent)."""

    tls: TlsSettings | None = None
    credentials: auth.Credentials | None = None


NO_SECURITY = TubeMQSecurity()


@dataclass(frozen=True, slots=True)
class Submitted(Generic[R]):
    """Requests sent by :meth:`TubeMQConnection.submit` whose replies are still to be read."""

    connection: TubeMQConnection
    serials: list[int]
    calls: list[rpc.Call]
    deadline: float

    def replies(self, *, check: bool = True) -> list[R]:
        """Their replies, in request order; failures as :meth:`TubeMQConnection.call_all`."""
        return cast("list[R]", self.connection._collect(self, check))

    def acknowledgements(self) -> list[Ack | R]:
        """SendMessage replies as :meth:`replies` gives them with ``check=False``, except that
        a stored message's comes as its :data:`~pulsar_spark.tubemq.wire.send_acks.Ack`, read
        many at a time (:func:`~pulsar_spark.tubemq.wire.send_acks.scan_acks`)."""
        if self.calls.count(SEND) != len(self.calls):  # by identity first: no hashing
            raise TypeError("acknowledgements answer SendMessage requests only")
        return self.connection._collect(self, False, acks=True)

    def messages(self) -> GetMessageReply:
        """The reply to one GetMessage request with its messages decoded
        (:func:`~pulsar_spark.tubemq.wire.rpc.decode_get_message`); failures as
        :meth:`replies`, the errCode left to the caller."""
        if [call.response_type for call in self.calls] != [broker_pb.GetMessageResponseB2C]:
            raise TypeError("messages answer one GetMessage request")
        (reply,) = self.connection._collect(self, False, rpc.decode_get_message)
        return cast("GetMessageReply", reply)


def _check_answered_by(calls: set[rpc.Call], response_type: type[Message]) -> None:
    for call in calls:
        if call.response_type is not response_type:
            expected = call.response_type.__name__
            raise TypeError(f"{call.request_type.__name__} is answered by {expected}")


class TubeMQConnection:
    """One socket to a TubeMQ server; see the module docstring."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        connect_timeout: float = 10.0,
        security: TubeMQSecurity = NO_SECURITY,
    ) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise BrokerUnreachableError(f"cannot connect to {self.address}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._credentials = security.credentials
        self._tls: TlsChannel | None = None
        if security.tls is not None:
            self._tls = TlsChannel(security.tls, host, port_hint=_TLS_PORT_HINT)
            try:
                self._tls.handshake(self._sock, self.address, connect_timeout)
            except BaseException:
                self._sock.close()
                raise
        self._decoder = FrameDecoder()
        self._serials_used = 0
        self._lock = threading.Lock()
        self._closed = False
        # serial numbers sent and not yet collected, and the frames of those that arrived
        self._pending: set[int] = set()
        self._arrived: dict[int, Frame | Ack] = {}
        # the last read took every byte there was (see _ACK_PAUSE)
        self._emptied = False

    def __enter__(self) -> TubeMQConnection:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran or a call failed."""
        return self._closed

    def call(
        self, request: Message, response_type: type[R], *, timeout: float = 10.0, check: bool = True
    ) -> R:
        """Send ``request`` and return its reply, of ``response_type``.

        Raises RequestTimeoutError after ``timeout`` seconds, ConnectionClosedError when the
        server closes the socket, TubeMQRemoteCallError when it answers with an exception,
        and (with ``check``) the TubeMQServerError for a reply's errCode.
        """
        return self.call_all([request], response_type, timeout=timeout, check=check)[0]

    def call_all(
        self,
        requests: Sequence[Message],
        response_type: type[R],
        *,
        timeout: float = 10.0,
        check: bool = True,
    ) -> list[R]:
        """Send ``requests`` (all of one call) back to back; their replies, in request order.

        The server handles the requests as they arrive and answers each under its serial
        number, so a batch costs one round trip instead of one per request. Failures are those
        of :meth:`call`; ``timeout`` bounds the whole batch, and with ``check`` the first reply
        (in request order) with an error code raises.
        """
        return self.submit(requests, response_type, timeout=timeout).replies(check=check)

    def submit(
        self, requests: Sequence[Message], response_type: type[R], *, timeout: float = 10.0
    ) -> Submitted[R]:
        """Send ``requests`` (all of one call) back to back and return without waiting:
        :meth:`Submitted.replies` waits for their replies, within ``timeout`` of now. Other
        calls may go out meanwhile; replies that arrive before they are asked for are kept."""
        calls = [rpc.call_for(request) for request in requests]
        _check_answered_by(set(calls), response_type)
        signed = self._identity()
        if signed is not None:
            for request in requests:
                auth.sign(request, signed)

        def frames(serials: list[int], timeout_ms: int) -> bytes:
            return b"".join(
                rpc.encode_request(serial_no, request, timeout_ms=timeout_ms)
                for serial_no, request in zip(serials, requests, strict=True)
            )

        return self._submit(calls, frames, timeout)

    def submit_encoded(
        self,
        call: rpc.Call,
        count: int,
        encode: Callable[[list[int], bytes, int], bytes],
        response_type: type[R],
        *,
        timeout: float = 10.0,
    ) -> Submitted[R]:
        """:meth:`submit` for ``count`` requests of ``call`` that ``encode`` frames: it takes
        their serial numbers, the ``authInfo`` field that signs them (empty without
        credentials; see :func:`~pulsar_spark.tubemq.wire.auth.signed_field`) and the timeout
        in milliseconds, and returns the frames, one after another."""
        _check_answered_by({call}, response_type)
        signed = self._identity()
        signature = b"" if signed is None else auth.signed_field(call.request_type, signed)

        def frames(serials: list[int], timeout_ms: int) -> bytes:
            return encode(serials, signature, timeout_ms)

        return self._submit([call] * count, frames, timeout)

    def close(self) -> None:
        """Close the socket (idempotent)."""
        self._closed = True
        self._sock.close()

    def _identity(self) -> auth.Identity | None:
        """A fresh signature of the credentials (None without): one per batch, sent at once,
        well within the master's window."""
        if self._credentials is None:
            return None
        return auth.identity(
            self._credentials, int(time.time() * 1000), secrets.randbelow(auth.NONCE_BOUND)
        )

    def _submit(
        self, calls: list[rpc.Call], frames: Callable[[list[int], int], bytes], timeout: float
    ) -> Submitted[R]:
        """Send the frames ``frames`` makes for the calls' serial numbers and timeout."""
        with self._lock:
            if self._closed:
                raise ConnectionClosedError(f"connection to {self.address} is closed")
            # positive int32 serial numbers from 1, wrapping
            first = self._serials_used + 1
            self._serials_used += len(calls)
            serials = [serial_no % (1 << 31) for serial_no in range(first, first + len(calls))]
            try:
                self._send(frames(serials, int(timeout * 1000)), timeout)
            except PulsarSparkError:
                self.close()
                raise
            self._pending.update(serials)
        return Submitted(self, serials, calls, time.monotonic() + timeout)

    def _send(self, frames: bytes, timeout: float) -> None:
        if self._tls is not None:
            frames = self._tls.encrypt(frames)
        self._sock.settimeout(timeout)
        try:
            self._sock.sendall(frames)
        except OSError as exc:
            raise ConnectionClosedError(f"send to {self.address} failed: {exc}") from exc

    def _collect(
        self,
        submitted: Submitted[R],
        check: bool,
        decode: Callable[[Frame], rpc.Response] = rpc.decode_response,
        *,
        acks: bool = False,
    ) -> list[Ack | R]:
        """The replies to ``submitted``, read until they are all here (see :meth:`submit`)
        and decoded with ``decode``; with ``acks``, acknowledgements as they are scanned."""
        with self._lock:
            try:
                items = self._frames_for(submitted.serials, submitted.deadline, acks)
                decoded = {
                    index: decode(item)
                    for index, item in enumerate(items)
                    if not isinstance(item, tuple)
                }
            except PulsarSparkError:
                self.close()
                raise
        replies: list[Ack | R] = cast("list[Ack | R]", items)
        for index, response in decoded.items():
            expected_call = submitted.calls[index]
            if response.call is not expected_call:
                self.close()
                raise RemoteProtocolError(
                    f"{self.address} answered method {expected_call.method} with method "
                    f"{response.call.method}"
                )
            if check:
                rpc.raise_for_error_code(cast("rpc.Replied", response.message))
            replies[index] = cast("R", response.message)
        return replies

    def _frames_for(self, serials: list[int], deadline: float, acks: bool) -> list[Frame | Ack]:
        arrived = self._arrived
        for serial_no in serials:
            while serial_no not in arrived:
                for frame in self._read_frames(deadline, serial_no, acks):
                    if frame.serial_no in self._pending:
                        arrived[frame.serial_no] = frame
        self._pending.difference_update(serials)
        return [arrived.pop(serial_no) for serial_no in serials]

    def _read_frames(self, deadline: float, serial_no: int, acks: bool) -> list[Frame]:
        """The frames completed by the next bytes received; with ``acks``, acknowledgements
        among them go straight to the arrived replies (only calls still waiting get any:
        a connection closes when a call times out)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeoutError(f"no reply to call {serial_no} from {self.address}")
        if acks and self._emptied:
            time.sleep(min(_ACK_PAUSE, remaining))
        self._sock.settimeout(max(deadline - time.monotonic(), _ACK_PAUSE))
        try:
            data = self._sock.recv(_READ_SIZE)
        except TimeoutError as exc:
            raise RequestTimeoutError(f"no reply to call {serial_no} from {self.address}") from exc
        except OSError as exc:
            raise ConnectionClosedError(f"lost connection to {self.address}: {exc}") from exc
        if not data:
            self._decoder.eof()
            raise ConnectionClosedError(f"{self.address} closed the connection")
        self._emptied = len(data) < _READ_SIZE
        if self._tls is not None:
            data = self._tls.decrypt(data)
        if not acks:
            return self._decoder.feed(data)
        scanned, frames = self._decoder.feed_scanned(data, scan_acks)
        self._arrived.update(scanned)
        return frames
