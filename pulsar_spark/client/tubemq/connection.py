"""A blocking connection to one TubeMQ master or broker.

How this works
--------------
:class:`TubeMQConnection` owns one TCP socket and makes one call at a time: it frames the
request under a fresh serial number (see :mod:`pulsar_spark.protocol.tubemq.rpc`), sends it
and reads until the frame with that serial number arrives. A frame with any other serial
number answers a call that already timed out and is dropped. Every read waits at most until
the call's deadline, so a silent server ends in :class:`~pulsar_spark.errors.RequestTimeoutError`
rather than a hang; after a timeout or any failure the connection is closed, because the
stream may hold half a frame.

A reply whose ``errCode`` is not 200 raises its
:class:`~pulsar_spark.errors.TubeMQServerError` unless the caller asks for the reply as it is
(``check=False``), which GetMessage needs: its 404 only means "nothing new yet".
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from typing import TypeVar, cast

from google.protobuf.message import Message

from pulsar_spark.errors import (
    BrokerUnreachableError,
    ConnectionClosedError,
    PulsarSparkError,
    RemoteProtocolError,
    RequestTimeoutError,
)
from pulsar_spark.protocol.tubemq import rpc
from pulsar_spark.protocol.tubemq.framing import Frame, FrameDecoder

R = TypeVar("R", bound=Message)

_READ_SIZE = 64 * 1024


class TubeMQConnection:
    """One socket to a TubeMQ server; see the module docstring."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 10.0) -> None:
        self.address = f"{host}:{port}"
        try:
            self._sock = socket.create_connection((host, port), timeout=connect_timeout)
        except OSError as exc:
            raise BrokerUnreachableError(f"cannot connect to {self.address}: {exc}") from exc
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = FrameDecoder()
        self._serial = itertools.count(1)
        self._lock = threading.Lock()
        self._closed = False

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
        call = rpc.call_for(request)
        if call.response_type is not response_type:
            expected = call.response_type.__name__
            raise TypeError(f"{type(request).__name__} is answered by {expected}")
        with self._lock:
            if self._closed:
                raise ConnectionClosedError(f"connection to {self.address} is closed")
            serial_no = next(self._serial) % (1 << 31)  # a positive int32, wrapping
            try:
                response = self._exchange(serial_no, request, timeout)
            except PulsarSparkError:
                self.close()
                raise
        if response.call is not call:
            self.close()
            raise RemoteProtocolError(
                f"{self.address} answered method {call.method} with method {response.call.method}"
            )
        if check:
            rpc.raise_for_error_code(cast("rpc.Replied", response.message))
        return cast("R", response.message)

    def close(self) -> None:
        """Close the socket (idempotent)."""
        self._closed = True
        self._sock.close()

    def _exchange(self, serial_no: int, request: Message, timeout: float) -> rpc.Response:
        deadline = time.monotonic() + timeout
        frame_bytes = rpc.encode_request(serial_no, request, timeout_ms=int(timeout * 1000))
        self._sock.settimeout(timeout)
        try:
            self._sock.sendall(frame_bytes)
        except OSError as exc:
            raise ConnectionClosedError(f"send to {self.address} failed: {exc}") from exc
        while True:
            for frame in self._read_frames(deadline, serial_no):
                if frame.serial_no == serial_no:
                    return rpc.decode_response(frame)

    def _read_frames(self, deadline: float, serial_no: int) -> list[Frame]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RequestTimeoutError(f"no reply to call {serial_no} from {self.address}")
        self._sock.settimeout(remaining)
        try:
            data = self._sock.recv(_READ_SIZE)
        except TimeoutError as exc:
            raise RequestTimeoutError(f"no reply to call {serial_no} from {self.address}") from exc
        except OSError as exc:
            raise ConnectionClosedError(f"lost connection to {self.address}: {exc}") from exc
        if not data:
            self._decoder.eof()
            raise ConnectionClosedError(f"{self.address} closed the connection")
        return self._decoder.feed(data)
