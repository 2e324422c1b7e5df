"""One TCP connection to a broker: handshake, requests with timeouts, keep-alive, dispatch.

How this works
--------------
``Connection.open`` connects, runs the TLS handshake when the connection uses TLS, sends
CONNECT with the auth plugin's credentials and waits (bounded) for CONNECTED, answering any
AUTH_CHALLENGE on the way. It then starts one daemon reader thread that owns the socket's
receive side. That thread decodes frames and

- answers the broker's PING with PONG at once, whatever the callers are doing;
- completes pending requests by request id (a response or a CommandError);
- hands MESSAGE frames to the registered consumer and SEND_RECEIPT / SEND_ERROR frames to the
  registered producer (handlers only queue work; decoding happens on the caller's thread);
- sends its own PING when the socket has been silent for ``keepalive_interval`` and declares
  the connection dead if nothing arrives for another interval;
- answers a broker's AUTH_CHALLENGE (Apache sends one when the credentials it holds expire)
  with fresh credentials, from a short-lived thread since getting them may take a request to
  an OAuth2 issuer; an authentication error the broker sends then fails the connection.

Every request has a timeout: a broker that never answers (pulsar-lite ignores commands it does
not know) raises :class:`RequestTimeoutError`. When the connection fails, every pending request
and every registered consumer and producer is told, so nothing waits on a dead socket.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pulsar_spark.client.address import BrokerAddress
from pulsar_spark.client.auth import Authentication
from pulsar_spark.client.settings import ConnectionSettings
from pulsar_spark.client.tls import TlsChannel
from pulsar_spark.errors import (
    AuthenticationError,
    BrokerUnreachableError,
    ConnectionClosedError,
    CredentialsError,
    PulsarConnectionError,
    PulsarSparkError,
    RequestTimeoutError,
    ServerError,
    TlsError,
    server_error_for,
)
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    Frame,
    FrameDecoder,
    max_frame_size_for,
)

log = logging.getLogger(__name__)
Type = pb.BaseCommand.Type

_RECV_BUFFER = 1 << 20

# Frames (and a partial frame's bytes) that came in behind CONNECTED during the handshake.
_Early = tuple[list[Frame], bytes]

# Responses that complete a request, and the BaseCommand field that holds each.
_RESPONSE_FIELDS: dict[int, str] = {
    Type.SUCCESS: "success",
    Type.ERROR: "error",
    Type.PRODUCER_SUCCESS: "producer_success",
    Type.PARTITIONED_METADATA_RESPONSE: "partitionMetadataResponse",
    Type.LOOKUP_RESPONSE: "lookupTopicResponse",
    Type.GET_LAST_MESSAGE_ID_RESPONSE: "getLastMessageIdResponse",
    Type.GET_TOPICS_OF_NAMESPACE_RESPONSE: "getTopicsOfNamespaceResponse",
    Type.ACK_RESPONSE: "ackResponse",
}


class ConsumerHandler(Protocol):
    def on_message(self, message: pb.CommandMessage, payload: memoryview | None) -> None: ...
    def on_closed(self, error: PulsarSparkError) -> None: ...


class ProducerHandler(Protocol):
    def on_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def on_send_error(self, error: pb.CommandSendError) -> None: ...
    def on_closed(self, error: PulsarSparkError) -> None: ...


class _Transport:
    """The socket, with TLS records in between when the connection uses TLS."""

    def __init__(self, sock: socket.socket, tls: TlsChannel | None) -> None:
        self.sock = sock
        self.tls = tls
        self._buffer = bytearray(_RECV_BUFFER)
        self._view = memoryview(self._buffer)

    def send(self, data: bytes) -> None:
        """Write ``data``; callers serialise sends (TLS records must leave in order)."""
        self.sock.sendall(data if self.tls is None else self.tls.encrypt(data))

    def receive(self) -> memoryview | bytes:
        """The next bytes from the peer, empty when it closed; TimeoutError when silent."""
        while True:
            received = self.sock.recv_into(self._buffer)
            if self.tls is None or not received:
                return self._view[:received]
            plain = self.tls.decrypt(self._view[:received])
            if plain:
                return plain

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


@dataclass(slots=True)
class _Pending:
    what: str
    done: threading.Event = field(default_factory=threading.Event)
    response: pb.BaseCommand | None = None
    error: PulsarSparkError | None = None


class Connection:
    """A handshaken connection; create with :meth:`open`."""

    def __init__(
        self,
        address: BrokerAddress,
        transport: _Transport,
        connected: pb.CommandConnected,
        *,
        keepalive_interval: float,
        auth: Authentication,
        credentials: bytes | None = None,
        early: _Early = ([], b""),
    ) -> None:
        self.address = address
        self._early = early
        self._auth = auth
        self._credentials = credentials  # what the broker holds, replaced at a challenge
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        self.max_message_size = (
            connected.max_message_size
            if connected.HasField("max_message_size")
            else DEFAULT_MAX_MESSAGE_SIZE
        )
        self._transport = transport
        self._decoder = FrameDecoder(max_frame_size_for(self.max_message_size))
        self._keepalive = keepalive_interval
        self._send_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._producers: dict[int, ProducerHandler] = {}
        self._failure: PulsarSparkError | None = None
        self._reader = threading.Thread(
            target=self._read_loop, name=f"pulsar-conn-{address}", daemon=True
        )
        self._reader.start()

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        address: BrokerAddress,
        settings: ConnectionSettings,
        *,
        proxy_to_broker_url: str | None = None,
    ) -> Connection:
        """Connect, run the TLS handshake if ``settings.tls``, then CONNECT/CONNECTED, all
        within ``settings.connect_timeout`` seconds."""
        timeout = settings.connect_timeout
        via = settings.sni_proxy or address
        try:
            sock = socket.create_connection((via.host, via.port), timeout=timeout)
        except OSError as exc:
            proxy = f" through the SNI proxy {via}" if settings.sni_proxy else ""
            raise BrokerUnreachableError(
                f"cannot connect to Pulsar broker at {address}{proxy} within {timeout:g}s: {exc}"
            ) from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            tls = None
            if settings.tls is not None:
                tls = TlsChannel(settings.tls, address.host)
                tls.handshake(sock, address, timeout)
            transport = _Transport(sock, tls)
            connected, credentials, early = _handshake(
                transport, address, timeout, settings.auth, proxy_to_broker_url
            )
        except BaseException:
            sock.close()
            raise
        sock.settimeout(settings.keepalive_interval)
        return cls(
            address,
            transport,
            connected,
            keepalive_interval=settings.keepalive_interval,
            auth=settings.auth,
            credentials=credentials,
            early=early,
        )

    # --- public API ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._failure is not None

    def new_id(self) -> int:
        """A fresh id for a request, consumer or producer on this connection."""
        return next(self._ids)

    def send(self, frame: bytes) -> None:
        """Write one frame; raise if the connection is closed."""
        self._raise_if_failed()
        try:
            with self._send_lock:
                self._transport.send(frame)
        except OSError as exc:
            error = ConnectionClosedError(f"lost connection to {self.address}: {exc}")
            self._fail(error)
            raise error from exc

    def request(
        self, build: Callable[[int], bytes], *, what: str, timeout: float
    ) -> pb.BaseCommand:
        """Send ``build(request_id)`` and wait for its response; CommandError raises."""
        request_id = self.new_id()
        pending = _Pending(what)
        with self._state_lock:
            self._raise_if_failed()
            self._pending[request_id] = pending
        try:
            self.send(build(request_id))
            if not pending.done.wait(timeout):
                raise RequestTimeoutError(
                    f"{what}: no response from broker {self.address} within {timeout:g}s"
                )
        finally:
            with self._state_lock:
                self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        assert pending.response is not None
        return pending.response

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        with self._state_lock:
            self._raise_if_failed()
            self._consumers[consumer_id] = handler

    def unregister_consumer(self, consumer_id: int) -> None:
        with self._state_lock:
            self._consumers.pop(consumer_id, None)

    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        with self._state_lock:
            self._raise_if_failed()
            self._producers[producer_id] = handler

    def unregister_producer(self, producer_id: int) -> None:
        with self._state_lock:
            self._producers.pop(producer_id, None)

    def close(self) -> None:
        """Close the socket; pending work fails with ConnectionClosedError."""
        self._fail(ConnectionClosedError(f"connection to {self.address} was closed"))

    # --- the reader thread -----------------------------------------------------------------

    def _read_loop(self) -> None:
        awaiting_pong = False
        try:
            early_frames, early_bytes = self._early
            for frame in (*early_frames, *self._decoder.feed(early_bytes)):
                self._dispatch(frame)
            while self._failure is None:
                try:
                    received = self._transport.receive()
                except TimeoutError:
                    if awaiting_pong:
                        raise ConnectionClosedError(
                            f"broker {self.address} did not answer keep-alive pings for "
                            f"{2 * self._keepalive:g}s"
                        ) from None
                    awaiting_pong = True
                    self.send(commands.ping())
                    continue
                if not received:
                    self._decoder.eof()
                    raise ConnectionClosedError(f"broker {self.address} closed the connection")
                awaiting_pong = False
                for frame in self._decoder.feed(received):
                    self._dispatch(frame)
        except PulsarSparkError as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(ConnectionClosedError(f"lost connection to {self.address}: {exc}"))
        except Exception as exc:  # a bug must not leave callers waiting forever
            log.exception("unexpected failure reading from %s", self.address)
            self._fail(ConnectionClosedError(f"reader for {self.address} failed: {exc!r}"))

    def _dispatch(self, frame: Frame) -> None:
        command = frame.command
        kind = command.type
        if kind == Type.MESSAGE:
            consumer = self._consumers.get(command.message.consumer_id)
            if consumer is not None:
                consumer.on_message(command.message, frame.payload)
        elif kind in _RESPONSE_FIELDS:
            self._complete(command, getattr(command, _RESPONSE_FIELDS[kind]))
        elif kind == Type.PING:
            self.send(commands.pong())
        elif kind == Type.SEND_RECEIPT:
            producer = self._producers.get(command.send_receipt.producer_id)
            if producer is not None:
                producer.on_receipt(command.send_receipt)
        elif kind == Type.SEND_ERROR:
            producer = self._producers.get(command.send_error.producer_id)
            if producer is not None:
                producer.on_send_error(command.send_error)
        else:
            self._dispatch_notice(command)

    def _dispatch_notice(self, command: pb.BaseCommand) -> None:
        kind = command.type
        if kind == Type.CLOSE_CONSUMER:
            consumer = self._consumers.pop(command.close_consumer.consumer_id, None)
            if consumer is not None:
                consumer.on_closed(ConnectionClosedError("the broker closed the consumer"))
        elif kind == Type.CLOSE_PRODUCER:
            producer = self._producers.pop(command.close_producer.producer_id, None)
            if producer is not None:
                producer.on_closed(ConnectionClosedError("the broker closed the producer"))
        elif kind == Type.REACHED_END_OF_TOPIC:
            consumer = self._consumers.get(command.reachedEndOfTopic.consumer_id)
            if consumer is not None:
                consumer.on_closed(ConnectionClosedError("the topic was terminated"))
        elif kind == Type.TOPIC_MIGRATED:
            raise ConnectionClosedError("the broker migrated a topic away from this connection")
        elif kind == Type.AUTH_CHALLENGE:
            threading.Thread(
                target=self._answer_challenge, name=f"pulsar-auth-{self.address}", daemon=True
            ).start()

    def _answer_challenge(self) -> None:
        """Send fresh credentials; failing to get them fails the connection."""
        auth = self._auth
        try:
            data = auth.credentials(self._keepalive, stale=self._credentials)
            self._credentials = data
            self.send(commands.auth_response(auth_method_name=auth.method or "", auth_data=data))
        except PulsarSparkError as exc:
            self._fail(exc)

    def _complete(self, command: pb.BaseCommand, body: object) -> None:
        if command.type == Type.PRODUCER_SUCCESS and not command.producer_success.producer_ready:
            return  # the broker sends another PRODUCER_SUCCESS once the producer is ready
        request_id = body.request_id  # type: ignore[attr-defined]
        with self._state_lock:
            pending = self._pending.get(request_id)
        if pending is None:
            if command.type == Type.ERROR and command.error.error == pb.AuthenticationError:
                raise _rejected(self.address, self._auth, command.error.message)
            return
        if command.type == Type.ERROR:
            pending.error = server_error_for(
                command.error.error, f"{pending.what}: {command.error.message}"
            )
        else:
            pending.response = command
        pending.done.set()

    # --- failure ---------------------------------------------------------------------------

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ConnectionClosedError(str(self._failure)) from self._failure

    def _fail(self, error: PulsarSparkError) -> None:
        with self._state_lock:
            if self._failure is not None:
                return
            self._failure = error
            pending, self._pending = list(self._pending.values()), {}
            consumers, self._consumers = list(self._consumers.values()), {}
            producers, self._producers = list(self._producers.values()), {}
        self._transport.close()
        for request in pending:
            request.error = (
                error
                if isinstance(error, PulsarConnectionError | ServerError | CredentialsError)
                else ConnectionClosedError(f"{request.what}: {error}")
            )
            request.done.set()
        for consumer in consumers:
            consumer.on_closed(error)
        for producer in producers:
            producer.on_closed(error)


def _handshake(
    transport: _Transport,
    address: BrokerAddress,
    timeout: float,
    auth: Authentication,
    proxy_to: str | None,
) -> tuple[pb.CommandConnected, bytes | None, _Early]:
    """CONNECT, then wait for CONNECTED; return it, the credentials the broker accepted, and
    whatever arrived right behind CONNECTED."""
    deadline = time.monotonic() + timeout
    credentials = auth.credentials(timeout) if auth.method else None
    transport.send(
        commands.connect(
            auth_method_name=auth.method, auth_data=credentials, proxy_to_broker_url=proxy_to
        )
    )
    decoder = FrameDecoder()
    while True:
        data = _handshake_bytes(transport, address, deadline, timeout)
        if data is None:
            continue
        frames = decoder.feed(data)
        for index, frame in enumerate(frames):
            command = frame.command
            if command.type == Type.CONNECTED:
                early = (frames[index + 1 :], decoder.take_buffered())
                return command.connected, credentials, early
            if command.type == Type.ERROR:
                if command.error.error == pb.AuthenticationError:
                    raise _rejected(address, auth, command.error.message)
                raise server_error_for(command.error.error, f"CONNECT: {command.error.message}")
            if command.type == Type.AUTH_CHALLENGE:
                remaining = max(deadline - time.monotonic(), 0.1)
                credentials = auth.credentials(remaining, stale=credentials)
                transport.send(
                    commands.auth_response(
                        auth_method_name=auth.method or "", auth_data=credentials
                    )
                )


def _handshake_bytes(
    transport: _Transport, address: BrokerAddress, deadline: float, timeout: float
) -> memoryview | bytes | None:
    """The next bytes of the handshake (None: none yet), or a clear error."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise BrokerUnreachableError(
            f"broker at {address} accepted TCP but did not complete the Pulsar handshake "
            f"within {timeout:g}s"
        )
    transport.sock.settimeout(remaining)
    try:
        data = transport.receive()
    except TimeoutError:
        return None
    except ssl.SSLError as exc:  # e.g. the broker wanted a client certificate we did not send
        raise TlsError(f"TLS with {address} failed during CONNECT: {exc.reason or exc}") from exc
    except OSError as exc:
        raise BrokerUnreachableError(f"handshake with {address} failed: {exc}") from exc
    if transport.tls is None and bytes(data[:2]) in (b"\x15\x03", b"\x16\x03"):
        raise TlsError(f"{address} answered CONNECT with TLS: it is a TLS port, use pulsar+ssl://")
    if not data:
        hint = "" if transport.tls else " (if that port expects TLS, use pulsar+ssl://)"
        raise BrokerUnreachableError(f"broker at {address} closed the connection on CONNECT{hint}")
    return data


def _rejected(address: BrokerAddress, auth: Authentication, message: str) -> ServerError:
    return AuthenticationError(
        f"broker {address} rejected the credentials of {auth.describe()}: {message}"
    )
