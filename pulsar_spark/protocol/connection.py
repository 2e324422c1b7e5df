"""The client side of one Pulsar connection as a state machine, without I/O.

How this works
--------------
:class:`ClientConnection` knows the protocol's rules for one connection and nothing about
sockets or threads (the h11 shape). The caller feeds it the bytes that arrived with
:meth:`~ClientConnection.receive_data`, which returns what they meant as events, and writes
whatever :meth:`~ClientConnection.data_to_send` (or :meth:`~ClientConnection.send`) hands back.

- **Handshake**: it starts in ``AWAITING_CONNECTED`` with CONNECT (and the credentials) queued.
  CONNECTED moves it to ``CONNECTED`` (:class:`Connected`); an AUTH_CHALLENGE on the way is an
  :class:`AuthChallenged` event the caller answers with :meth:`answer_challenge`; an ERROR
  fails the handshake.
- **Requests**: :meth:`start_request` gives each request an id and remembers it; a response or
  CommandError with that id becomes a :class:`Response` (with the mapped exception for an
  error). Responses to ids it does not know (answered too late, say) are dropped.
- **Keep-alive**: a PING from the broker is answered with a PONG without the caller seeing it.
  :meth:`silence` is called when nothing arrived for a keep-alive interval: the first time it
  queues a PING, the second time in a row the connection is declared dead.
- **Everything else** becomes an event for the consumer or producer it names: messages,
  receipts, send errors, the broker closing a consumer or producer, end of topic, a topic
  migrated elsewhere, and an authentication error outside any request (a refresh refused).
- **Failure** is final: :meth:`fail` (or a protocol error while decoding) moves it to
  ``CLOSED`` and returns the ids of the requests that will never be answered.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from pulsar_spark.errors import (
    AuthenticationError,
    ConnectionClosedError,
    LocalProtocolError,
    PulsarSparkError,
    ServerError,
    server_error_for,
)
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    Frame,
    FrameDecoder,
    max_frame_size_for,
)

Type = pb.BaseCommand.Type
# Looked up once: reading a protobuf enum's member by attribute takes close to a microsecond.
_MESSAGE, _SEND_RECEIPT = Type.MESSAGE, Type.SEND_RECEIPT

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
    Type.GET_SCHEMA_RESPONSE: "getSchemaResponse",
    Type.TC_CLIENT_CONNECT_RESPONSE: "tcClientConnectResponse",
    Type.NEW_TXN_RESPONSE: "newTxnResponse",
    Type.ADD_PARTITION_TO_TXN_RESPONSE: "addPartitionToTxnResponse",
    Type.END_TXN_RESPONSE: "endTxnResponse",
}


class State(enum.Enum):
    AWAITING_CONNECTED = "awaiting CONNECTED"
    CONNECTED = "connected"
    CLOSED = "closed"


# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connected:
    """The handshake is complete."""

    server_version: str
    protocol_version: int
    max_message_size: int


def is_pulsar_lite(server_version: str) -> bool:
    """Whether the broker that answered CONNECTED with ``server_version`` is pulsar-lite, whose
    differences from Apache Pulsar clients adapt to: Flow permits count entries, a batch-index
    acknowledgement takes the whole entry, there is no schema registry."""
    return server_version.lower().startswith("pulsar-lite")


@dataclass(frozen=True, slots=True)
class AuthChallenged:
    """The broker wants fresh credentials: answer with :meth:`ClientConnection.answer_challenge`."""

    method: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Response:
    """The answer to request ``request_id``: the command, or the error it carried."""

    request_id: int
    command: pb.BaseCommand | None
    error: PulsarSparkError | None = None


# The events of every message and every receipt are tuples, which are three times as quick to
# make as frozen dataclasses: that counts where each entry holds one message.


class MessageReceived(NamedTuple):
    consumer_id: int
    message: pb.CommandMessage
    payload: memoryview | None


class ReceiptReceived(NamedTuple):
    producer_id: int
    receipt: pb.CommandSendReceipt


@dataclass(frozen=True, slots=True)
class SendFailed:
    producer_id: int
    error: pb.CommandSendError


@dataclass(frozen=True, slots=True)
class ResourceClosed:
    """The broker closed a consumer or producer (topic unloaded, broker shutting down, topic
    terminated, migrated): its owner should look the topic up again, or at ``broker_url``
    (the broker's TLS or plain URL, as the connection uses) when one is given."""

    kind: str  # "consumer" or "producer"
    resource_id: int
    reason: str
    broker_url: str = ""
    final: bool = False  # the topic was terminated: reconnecting cannot help


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """The connection cannot be used any more; every pending request fails with ``error``."""

    error: PulsarSparkError


Event = (
    Connected
    | AuthChallenged
    | Response
    | MessageReceived
    | ReceiptReceived
    | SendFailed
    | ResourceClosed
    | ConnectionFailed
)


class ClientConnection:
    """One connection's protocol state; see the module docstring."""

    def __init__(
        self,
        *,
        auth_method: str | None = None,
        credentials: bytes | None = None,
        proxy_to_broker_url: str | None = None,
        tls: bool = False,
    ) -> None:
        self.state = State.AWAITING_CONNECTED
        self.tls = tls
        self.auth_method = auth_method
        self.server_version = ""
        self.protocol_version = 0
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self._decoder = FrameDecoder()
        self._outgoing = bytearray(
            commands.connect(
                auth_method_name=auth_method,
                auth_data=credentials,
                proxy_to_broker_url=proxy_to_broker_url,
            )
        )
        self._ids = itertools.count(1)
        self._pending: dict[int, str] = {}
        self._awaiting_pong = False
        self.failure: PulsarSparkError | None = None

    # --- sending -----------------------------------------------------------------------------

    def next_id(self) -> int:
        """A fresh id for a request, consumer or producer on this connection."""
        return next(self._ids)

    def start_request(self, build: Callable[[int], bytes], what: str) -> tuple[int, bytes]:
        """Allocate a request id, remember the request and return (id, bytes to write)."""
        request_id = self.next_id()
        frame = build(request_id)
        data = self.send(frame)
        self._pending[request_id] = what
        return request_id, data

    def abandon_request(self, request_id: int) -> None:
        """Forget a request the caller stopped waiting for (a late answer is dropped)."""
        self._pending.pop(request_id, None)

    def send(self, frame: bytes) -> bytes:
        """The bytes to write for ``frame``: any queued control frames first, then it."""
        self._require_usable()
        if not self._outgoing:
            return frame
        data = bytes(self._outgoing) + frame
        self._outgoing.clear()
        return data

    def data_to_send(self) -> bytes:
        """Control frames queued by the connection itself (CONNECT, PONG, PING)."""
        data = bytes(self._outgoing)
        self._outgoing.clear()
        return data

    def answer_challenge(self, credentials: bytes) -> bytes:
        """The bytes answering an AUTH_CHALLENGE with ``credentials``."""
        frame = commands.auth_response(
            auth_method_name=self.auth_method or "", auth_data=credentials
        )
        return self.send(frame)

    def pending_requests(self) -> dict[int, str]:
        """The requests still waiting for an answer, by id: what each was."""
        return dict(self._pending)

    # --- receiving ---------------------------------------------------------------------------

    def receive_data(self, data: bytes | memoryview) -> list[Event]:
        """Events for the bytes that arrived (the caller then writes :meth:`data_to_send`)."""
        if self.state is State.CLOSED:
            return []
        self._awaiting_pong = False
        try:
            frames = self._decoder.feed(data)
            return [event for frame in frames for event in self._handle(frame)]
        except PulsarSparkError as exc:
            return [ConnectionFailed(self._close(exc))]

    def receive_eof(self, peer: str) -> list[Event]:
        """The peer closed the connection."""
        if self.state is State.CLOSED:
            return []
        try:
            self._decoder.eof()
        except PulsarSparkError as exc:
            return [ConnectionFailed(self._close(exc))]
        if self.state is State.AWAITING_CONNECTED:
            hint = "" if self.tls else " (if that port expects TLS, use pulsar+ssl://)"
            error: PulsarSparkError = ConnectionClosedError(
                f"broker at {peer} closed the connection on CONNECT{hint}"
            )
        else:
            error = ConnectionClosedError(f"broker {peer} closed the connection")
        return [ConnectionFailed(self._close(error))]

    def silence(self, peer: str, interval: float) -> list[Event]:
        """Nothing arrived for ``interval`` seconds: ping, or give up after a second time."""
        if self.state is State.CLOSED:
            return []
        if self._awaiting_pong:
            error = ConnectionClosedError(
                f"broker {peer} did not answer keep-alive pings for {2 * interval:g}s"
            )
            return [ConnectionFailed(self._close(error))]
        self._awaiting_pong = True
        self._outgoing += commands.ping()
        return []

    def fail(self, error: PulsarSparkError) -> list[int]:
        """Close with ``error``; return the ids of the requests that were still pending."""
        pending = list(self._pending)
        self._close(error)
        return pending

    # --- internals ---------------------------------------------------------------------------

    def _handle(self, frame: Frame) -> list[Event]:
        command = frame.command
        kind = command.type
        if kind == _MESSAGE:
            message = command.message
            return [MessageReceived(message.consumer_id, message, frame.payload)]
        if kind == _SEND_RECEIPT:
            return [ReceiptReceived(command.send_receipt.producer_id, command.send_receipt)]
        if kind in _RESPONSE_FIELDS:
            return self._response(command, getattr(command, _RESPONSE_FIELDS[kind]))
        if kind == Type.PING:
            self._outgoing += commands.pong()
            return []
        if kind == Type.PONG:
            return []
        if kind == Type.CONNECTED:
            return [self._connected(command.connected)]
        if kind == Type.AUTH_CHALLENGE:
            challenge = command.authChallenge.challenge
            return [AuthChallenged(challenge.auth_method_name, challenge.auth_data)]
        return self._notice(command)

    def _connected(self, connected: pb.CommandConnected) -> Connected:
        if self.state is not State.AWAITING_CONNECTED:
            raise LocalProtocolError("the broker sent CONNECTED twice")
        self.state = State.CONNECTED
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        if connected.HasField("max_message_size"):
            self.max_message_size = connected.max_message_size
        self._decoder.max_frame_size = max_frame_size_for(self.max_message_size)
        return Connected(self.server_version, self.protocol_version, self.max_message_size)

    def _response(self, command: pb.BaseCommand, body: object) -> list[Event]:
        if command.type == Type.PRODUCER_SUCCESS and not command.producer_success.producer_ready:
            return []  # the broker sends another PRODUCER_SUCCESS once the producer is ready
        request_id = body.request_id  # type: ignore[attr-defined]
        what = self._pending.pop(request_id, None)
        if command.type == Type.ERROR:
            error = command.error
            if what is None:
                if error.error == pb.AuthenticationError:  # refused at CONNECT or at a refresh
                    return [ConnectionFailed(self._close(AuthenticationError(error.message)))]
                if self.state is State.AWAITING_CONNECTED:
                    return [ConnectionFailed(self._close(_server_error(error, "CONNECT")))]
                return []
            return [Response(request_id, None, _server_error(error, what))]
        if what is None:
            return []
        return [Response(request_id, command)]

    def _notice(self, command: pb.BaseCommand) -> list[Event]:
        kind = command.type
        if kind == Type.SEND_ERROR:
            return [SendFailed(command.send_error.producer_id, command.send_error)]
        if kind == Type.CLOSE_CONSUMER:
            consumer = command.close_consumer
            return [self._closed_by_broker("consumer", consumer.consumer_id, consumer)]
        if kind == Type.CLOSE_PRODUCER:
            producer = command.close_producer
            return [self._closed_by_broker("producer", producer.producer_id, producer)]
        if kind == Type.REACHED_END_OF_TOPIC:
            consumer_id = command.reachedEndOfTopic.consumer_id
            return [ResourceClosed("consumer", consumer_id, "the topic was terminated", final=True)]
        if kind == Type.TOPIC_MIGRATED:
            migrated = command.topicMigrated
            url = migrated.brokerServiceUrlTls if self.tls else migrated.brokerServiceUrl
            what = "producer" if migrated.resource_type == migrated.Producer else "consumer"
            reason = f"the topic migrated to another cluster ({url or 'no address given'})"
            return [ResourceClosed(what, migrated.resource_id, reason, url)]
        return []

    def _closed_by_broker(
        self, kind: str, resource_id: int, close: pb.CommandCloseConsumer | pb.CommandCloseProducer
    ) -> ResourceClosed:
        url = close.assignedBrokerServiceUrlTls if self.tls else close.assignedBrokerServiceUrl
        reason = f"the broker closed the {kind} (topic unloaded or moved)"
        return ResourceClosed(kind, resource_id, reason, url)

    def _require_usable(self) -> None:
        if self.state is State.CLOSED:
            assert self.failure is not None
            raise ConnectionClosedError(str(self.failure)) from self.failure

    def _close(self, error: PulsarSparkError) -> PulsarSparkError:
        if self.failure is None:
            self.failure = error
        self.state = State.CLOSED
        self._pending.clear()
        return self.failure


def _server_error(error: pb.CommandError, what: str) -> ServerError:
    return server_error_for(error.error, f"{what}: {error.message}")
