"""One connection to a broker: the socket, a reader thread, and callers waiting for answers.

How this works
--------------
The protocol itself lives in :class:`~pulsar_spark.protocol.connection.ClientConnection`
(sans-IO: handshake, request ids, ping/pong, events). This module only moves bytes and wakes
the right waiter:

- ``Connection.open`` connects, runs the TLS handshake when the connection uses TLS, writes the
  CONNECT the protocol object prepared, and feeds it what arrives until it reports
  :class:`Connected`, answering any AUTH_CHALLENGE on the way, all within the connect timeout.
- One daemon reader thread then owns the receive side. It feeds every chunk to the protocol
  object and acts on the events: completes waiting requests, hands messages to the registered
  consumer and receipts to the registered producer (handlers only queue work; decoding happens
  on the caller's thread), and writes what the protocol object queued itself (a PONG at once,
  whatever the callers are doing). When the socket is silent for ``keepalive_interval`` it asks
  the protocol object, which pings, and declares the connection dead if nothing arrives for
  another interval.
- A broker's AUTH_CHALLENGE after the handshake (Apache sends one when the credentials it holds
  expire) is answered with fresh credentials from a short-lived thread, since getting them may
  take a request to an OAuth2 issuer; an authentication error then fails the connection.

Every request has a timeout: a broker that never answers (pulsar-lite ignores commands it does
not know) raises :class:`RequestTimeoutError`. When the connection fails, every pending request
and every registered consumer and producer is told, so nothing waits on a dead socket.

The reader thread can run code it did not call: Python's garbage collector finalizes objects
in whichever thread allocates when a collection is due, and a reader generator dropped unfinished
closes its consumer (unsubscribe) when finalized. The locks are therefore re-entrant, and a
request made on the reader thread fails at once instead of waiting for an answer that only that
thread could read.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from pulsar_spark.client.auth import Authentication
from pulsar_spark.client.settings import ConnectionSettings
from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.tls import TlsChannel
from pulsar_spark.errors import (
    AuthenticationError,
    BrokerUnreachableError,
    ConnectionClosedError,
    CredentialsError,
    LocalProtocolError,
    PulsarConnectionError,
    PulsarSparkError,
    RequestTimeoutError,
    ResourceClosedError,
    ServerError,
    TlsError,
)
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.connection import (
    AuthChallenged,
    ClientConnection,
    Connected,
    ConnectionFailed,
    Event,
    MessageReceived,
    ReceiptReceived,
    ResourceClosed,
    Response,
    SendFailed,
)

log = logging.getLogger(__name__)

_RECV_BUFFER = 1 << 20


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
        if data:
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
        protocol: ClientConnection,
        *,
        keepalive_interval: float,
        auth: Authentication,
        credentials: bytes | None,
        early: list[Event],
    ) -> None:
        self.address = address
        self.server_version = protocol.server_version
        self.protocol_version = protocol.protocol_version
        self.max_message_size = protocol.max_message_size
        self._transport = transport
        self._protocol = protocol
        self._keepalive = keepalive_interval
        self._auth = auth
        self._credentials = credentials  # what the broker holds, replaced at a challenge
        # Re-entrant: see the module docstring (finalizers run on the reader thread too).
        self._send_lock = threading.RLock()  # taken before _lock
        self._lock = threading.RLock()
        self._pending: dict[int, _Pending] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._producers: dict[int, ProducerHandler] = {}
        # A broker may close a producer between its PRODUCER_SUCCESS and the producer's
        # registration (a topic unloaded just then): the close waits here for the handler.
        self._closed_before_registered: dict[int, PulsarSparkError] = {}
        self._failure: PulsarSparkError | None = None
        self._reader = threading.Thread(
            target=self._read_loop, args=(early,), name=f"pulsar-conn-{address}", daemon=True
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
        deadline = time.monotonic() + timeout
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
            auth = settings.auth
            credentials = auth.credentials(timeout) if auth.method else None
            protocol = ClientConnection(
                auth_method=auth.method,
                credentials=credentials,
                proxy_to_broker_url=proxy_to_broker_url,
                tls=tls is not None,
            )
            handshake = _Handshake(transport, protocol, address, auth, credentials)
            early = handshake.run(deadline, timeout)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(settings.keepalive_interval)
        return cls(
            address,
            transport,
            protocol,
            keepalive_interval=settings.keepalive_interval,
            auth=auth,
            credentials=handshake.credentials,
            early=early,
        )

    # --- public API ------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._failure is not None

    def new_id(self) -> int:
        """A fresh id for a consumer or producer on this connection."""
        with self._lock:
            return self._protocol.next_id()

    def send(self, frame: bytes) -> None:
        """Write one frame; raise if the connection is closed."""
        with self._send_lock:
            with self._lock:
                self._raise_if_failed()
                data = self._protocol.send(frame)
            self._write(data)

    def request(
        self, build: Callable[[int], bytes], *, what: str, timeout: float
    ) -> pb.BaseCommand:
        """Send ``build(request_id)`` and wait for its response; CommandError raises."""
        if threading.current_thread() is self._reader:
            raise LocalProtocolError(
                f"{what}: cannot wait for an answer on the thread that reads {self.address}"
            )
        pending = _Pending(what)
        with self._send_lock:
            with self._lock:
                self._raise_if_failed()
                request_id, data = self._protocol.start_request(build, what)
                self._pending[request_id] = pending
            try:
                self._write(data)
            except BaseException:
                self._forget(request_id)
                raise
        try:
            if not pending.done.wait(timeout):
                raise RequestTimeoutError(
                    f"{what}: no response from broker {self.address} within {timeout:g}s"
                )
        finally:
            self._forget(request_id)
        if pending.error is not None:
            raise pending.error
        assert pending.response is not None
        return pending.response

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        with self._lock:
            self._raise_if_failed()
            self._consumers[consumer_id] = handler

    def unregister_consumer(self, consumer_id: int) -> None:
        with self._lock:
            self._consumers.pop(consumer_id, None)

    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        with self._lock:
            self._raise_if_failed()
            closed = self._closed_before_registered.pop(producer_id, None)
            if closed is None:
                self._producers[producer_id] = handler
        if closed is not None:
            handler.on_closed(closed)

    def unregister_producer(self, producer_id: int) -> None:
        with self._lock:
            self._producers.pop(producer_id, None)

    def close(self) -> None:
        """Close the socket; pending work fails with ConnectionClosedError."""
        self._fail(ConnectionClosedError(f"connection to {self.address} was closed"))

    # --- the reader thread -----------------------------------------------------------------

    def _read_loop(self, early: list[Event]) -> None:
        try:
            self._handle(early)
            self._flush()  # a PONG for a PING that came in right behind CONNECTED
            while self._failure is None:
                try:
                    received = self._transport.receive()
                except TimeoutError:
                    with self._lock:
                        events = self._protocol.silence(str(self.address), self._keepalive)
                else:
                    with self._lock:
                        if received:
                            events = self._protocol.receive_data(received)
                        else:
                            events = self._protocol.receive_eof(str(self.address))
                self._handle(events)
                self._flush()
        except PulsarSparkError as exc:
            self._fail(exc)
        except OSError as exc:
            self._fail(ConnectionClosedError(f"lost connection to {self.address}: {exc}"))
        except Exception as exc:  # a bug must not leave callers waiting forever
            log.exception("unexpected failure reading from %s", self.address)
            self._fail(ConnectionClosedError(f"reader for {self.address} failed: {exc!r}"))

    def _handle(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, MessageReceived):
                consumer = self._consumers.get(event.consumer_id)
                if consumer is not None:
                    consumer.on_message(event.message, event.payload)
            elif isinstance(event, Response):
                self._complete(event)
            elif isinstance(event, ReceiptReceived):
                producer = self._producers.get(event.producer_id)
                if producer is not None:
                    producer.on_receipt(event.receipt)
            elif isinstance(event, SendFailed):
                producer = self._producers.get(event.producer_id)
                if producer is not None:
                    producer.on_send_error(event.error)
            elif isinstance(event, ResourceClosed):
                self._resource_closed(event)
            elif isinstance(event, AuthChallenged):
                threading.Thread(
                    target=self._answer_challenge, name=f"pulsar-auth-{self.address}", daemon=True
                ).start()
            elif isinstance(event, ConnectionFailed):
                raise _failure(event.error, self.address, self._auth)

    def _complete(self, response: Response) -> None:
        with self._lock:
            pending = self._pending.get(response.request_id)
        if pending is None:
            return
        pending.response, pending.error = response.command, response.error
        pending.done.set()

    def _resource_closed(self, event: ResourceClosed) -> None:
        handlers: dict[int, ConsumerHandler] | dict[int, ProducerHandler] = (
            self._consumers if event.kind == "consumer" else self._producers
        )
        error: PulsarSparkError
        if event.final:
            error = ConnectionClosedError(event.reason)
        else:
            error = ResourceClosedError(event.reason, broker_url=event.broker_url)
        with self._lock:
            handler = handlers.pop(event.resource_id, None)
            if handler is None and event.kind == "producer":
                self._closed_before_registered[event.resource_id] = error
        if handler is not None:
            handler.on_closed(error)

    def _answer_challenge(self) -> None:
        """Send fresh credentials; failing to get them fails the connection."""
        try:
            data = self._auth.credentials(self._keepalive, stale=self._credentials)
            self._credentials = data
            with self._send_lock:
                with self._lock:
                    self._raise_if_failed()
                    frame = self._protocol.answer_challenge(data)
                self._write(frame)
        except PulsarSparkError as exc:
            self._fail(exc)

    def _flush(self) -> None:
        """Write what the protocol object queued itself (a PONG, a PING)."""
        with self._send_lock:
            with self._lock:
                data = self._protocol.data_to_send()
            self._write(data)

    def _write(self, data: bytes) -> None:
        """Write under the send lock; a failed write fails the connection."""
        try:
            self._transport.send(data)
        except OSError as exc:
            error = ConnectionClosedError(f"lost connection to {self.address}: {exc}")
            self._fail(error)
            raise error from exc

    def _forget(self, request_id: int) -> None:
        with self._lock:
            self._pending.pop(request_id, None)
            self._protocol.abandon_request(request_id)

    # --- failure ---------------------------------------------------------------------------

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise ConnectionClosedError(str(self._failure)) from self._failure

    def _fail(self, error: PulsarSparkError) -> None:
        with self._lock:
            if self._failure is not None:
                return
            self._failure = error
            self._protocol.fail(error)
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


class _Handshake:
    """Feed the protocol object until CONNECTED, within the connect timeout."""

    def __init__(
        self,
        transport: _Transport,
        protocol: ClientConnection,
        address: BrokerAddress,
        auth: Authentication,
        credentials: bytes | None,
    ) -> None:
        self.transport = transport
        self.protocol = protocol
        self.address = address
        self.auth = auth
        self.credentials = credentials

    def run(self, deadline: float, timeout: float) -> list[Event]:
        """Events that arrived behind CONNECTED, for the reader thread to handle first."""
        self.transport.send(self.protocol.data_to_send())
        while True:
            events = self._next_events(deadline, timeout)
            for index, event in enumerate(events):
                if isinstance(event, Connected):
                    return events[index + 1 :]
                if isinstance(event, ConnectionFailed):
                    raise _failure(event.error, self.address, self.auth)
                if isinstance(event, AuthChallenged):
                    remaining = max(deadline - time.monotonic(), 0.1)
                    self.credentials = self.auth.credentials(remaining, stale=self.credentials)
                    self.transport.send(self.protocol.answer_challenge(self.credentials))

    def _next_events(self, deadline: float, timeout: float) -> list[Event]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrokerUnreachableError(
                f"broker at {self.address} accepted TCP but did not complete the Pulsar "
                f"handshake within {timeout:g}s"
            )
        self.transport.sock.settimeout(remaining)
        try:
            data = self.transport.receive()
        except TimeoutError:
            return []
        except ssl.SSLError as exc:  # e.g. the broker wanted a client certificate
            raise TlsError(
                f"TLS with {self.address} failed during CONNECT: {exc.reason or exc}"
            ) from exc
        except OSError as exc:
            raise BrokerUnreachableError(f"handshake with {self.address} failed: {exc}") from exc
        if self.transport.tls is None and bytes(data[:2]) in (b"\x15\x03", b"\x16\x03"):
            raise TlsError(
                f"{self.address} answered CONNECT with TLS: it is a TLS port, use pulsar+ssl://"
            )
        if not data:
            events = self.protocol.receive_eof(str(self.address))
            failure = events[0]
            assert isinstance(failure, ConnectionFailed)
            raise BrokerUnreachableError(str(failure.error))
        return self.protocol.receive_data(data)


def _failure(
    error: PulsarSparkError, address: BrokerAddress, auth: Authentication
) -> PulsarSparkError:
    """The error to raise for a failed connection: credentials refused name broker and plugin."""
    if isinstance(error, AuthenticationError) and auth.method is None:
        return AuthenticationError(
            f"broker {address} requires authentication and none is configured (set "
            f"pulsar.client.authPluginClassName and pulsar.client.authParams): "
            f"{error.server_message}"
        )
    if isinstance(error, AuthenticationError):
        return AuthenticationError(
            f"broker {address} rejected the credentials of {auth.describe()}: "
            f"{error.server_message}"
        )
    return error
