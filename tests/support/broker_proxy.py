"""A loopback TCP proxy in front of the test broker, for what a plain broker cannot show.

The broker-to-client direction can be held (frames wait, in order, until released), commands
can be injected as if from the broker, and commands can be rewritten on their way in either
direction. :class:`ApacheAnswers` uses the last to make pulsar-lite behave the way Apache
Pulsar does where the two differ. Client connections can be cut while their broker side stays
open (:meth:`BrokerProxy.orphan`), as a network failure the broker does not notice.

With ``tls`` the listener speaks TLS (built on :mod:`ssl`, see :func:`server_tls_context`) and
:attr:`BrokerProxy.url` is ``pulsar+ssl://``; the broker side stays plain TCP. That serves
certificates a client must refuse, and shows the server name it sends. (Authentication is
tested against an Apache broker configured for it, tests/support/apache_secure.py.)

Without TLS and a rewrite, the proxy only pumps bytes.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pulsar_spark.protocol import pb
from pulsar_spark.protocol.framing import encode_command
from pulsar_spark.protocol.key_value import java_type_name
from pulsar_spark.topic import TopicName

Type = pb.BaseCommand.Type

Rewrite = Callable[[pb.BaseCommand], bool]
"""Changes a command (the broker's or the client's) in place; returns whether it changed it."""

Answer = Callable[[pb.BaseCommand], "pb.BaseCommand | None"]
"""Answers a client's command in the broker's place (it is then not forwarded), or returns
None to let it through."""

HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client gets to complete the TLS handshake."""

_FRAME_HEADER = struct.Struct(">II")
_RECV_SIZE = 65536


def server_tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """A server-side TLS context presenting ``cert``/``key``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def _take_frames(pending: bytearray) -> list[bytes]:
    """Remove the complete frames from the front of ``pending`` and return them."""
    frames = []
    while len(pending) >= 4:
        (total,) = struct.unpack_from(">I", pending)
        if len(pending) < 4 + total:
            break
        frames.append(bytes(pending[: 4 + total]))
        del pending[: 4 + total]
    return frames


def _command_of(frame: bytes) -> pb.BaseCommand:
    _, command_size = _FRAME_HEADER.unpack_from(frame)
    command: pb.BaseCommand = pb.BaseCommand.FromString(frame[8 : 8 + command_size])
    return command


class _TlsStream:
    """The server end of a TLS connection, with the socket interface the pumps use.

    One thread may read while others write: OpenSSL objects must not be used by two threads at
    once, so the TLS state lives in an :class:`ssl.SSLObject` over memory buffers, every use of
    it holds a lock, and the encrypted bytes go through the plain socket.
    """

    def __init__(self, sock: socket.socket, context: ssl.SSLContext) -> None:
        self.raw = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._lock = threading.Lock()

    @classmethod
    def accept(cls, sock: socket.socket, context: ssl.SSLContext, timeout: float) -> _TlsStream:
        """Run the server side of the handshake on ``sock``; raise if it fails or times out."""
        stream = cls(sock, context)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    stream._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    stream._flush()
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    data = sock.recv(_RECV_SIZE)
                    if not data:
                        raise ConnectionError("closed during the TLS handshake") from None
                    stream._incoming.write(data)
            stream._flush()
        except ssl.SSLError:
            with contextlib.suppress(OSError):
                stream._flush()  # our alert tells the client why
            raise
        sock.settimeout(None)
        return stream

    def recv(self, size: int) -> bytes:
        """Up to ``size`` decrypted bytes; ``b""`` once the client closed."""
        while True:
            with self._lock:
                try:
                    data = self._tls.read(size)
                except ssl.SSLWantReadError:
                    data = b""
                except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                    return b""
                self._flush()
            if data:
                return data
            encrypted = self.raw.recv(_RECV_SIZE)
            if not encrypted:
                return b""
            with self._lock:
                self._incoming.write(encrypted)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt and send all of ``data``."""
        view = memoryview(data)
        with self._lock:
            while view:
                written = self._tls.write(view[:_RECV_SIZE])
                view = view[written:]
                self._flush()

    def shutdown(self, how: int) -> None:
        self.raw.shutdown(how)

    def close(self) -> None:
        self.raw.close()

    def _flush(self) -> None:
        if self._outgoing.pending:
            self.raw.sendall(self._outgoing.read())


Stream = socket.socket | _TlsStream


class BrokerProxy:
    """Forwards every connection made to :attr:`url` to the broker at ``target``.

    Args:
        target: The broker's ``(host, port)``.
        rewrite: Changes commands in both directions (frames are then forwarded whole).
        tls: Terminate TLS with this server context; :attr:`url` is then ``pulsar+ssl://``.
            The handshake runs in the connection's own thread; a failed one just closes it.
        answer: Answers some client commands itself (needs ``rewrite``, which frames the
            stream); what it answers never reaches the broker.
    """

    def __init__(
        self,
        target: tuple[str, int],
        rewrite: Rewrite | None = None,
        *,
        tls: ssl.SSLContext | None = None,
        answer: Answer | None = None,
    ) -> None:
        self._target = target
        self._rewrite = rewrite
        self._answer = answer
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        scheme = "pulsar+ssl" if tls is not None else "pulsar"
        self.url = f"{scheme}://127.0.0.1:{self._listener.getsockname()[1]}"
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        self._downstream: list[Stream] = []
        self._upstream: list[socket.socket] = []
        self._orphans: set[socket.socket] = set()
        self._orphans_answer_pings = False
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        """Stop passing broker bytes on (they wait, in order, until :meth:`release`)."""
        self._flowing.clear()

    def release(self) -> None:
        self._flowing.set()

    def inject(self, command: pb.BaseCommand) -> None:
        """Send ``command`` to the client as if from the broker.

        Only call it while no broker frame is half forwarded: when the stream is idle or
        held since it last was.
        """
        with self._lock:
            for client in self._downstream:
                client.sendall(encode_command(command))

    def inject_upstream(self, command: pb.BaseCommand) -> None:
        """Send ``command`` to the broker as if from the client (on every connection).

        Only with a rewrite (which forwards whole frames) or while the client is idle.
        """
        with self._lock:
            for broker in self._upstream:
                broker.sendall(encode_command(command))

    def orphan(self, *, answer_pings: bool) -> None:
        """Cut every client connection but keep its broker connection open: a network failure
        the broker does not see, so it keeps the client's producers and consumers. With
        ``answer_pings`` the proxy answers the broker's pings there, and the broker takes the
        client for alive; else they go unanswered. :meth:`close_orphans` ends them."""
        with self._lock:
            self._orphans_answer_pings = answer_pings
            self._orphans.update(self._upstream)
            clients = list(self._downstream)
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)

    def close_orphans(self) -> None:
        """Close the broker connections :meth:`orphan` kept open."""
        with self._lock:
            orphans, self._orphans = self._orphans, set()
        for upstream in orphans:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """Cut every connection and stop listening; held bytes are dropped, not delivered."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(), so the port closes
        self._listener.close()
        with self._lock:
            self._closed = True
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the pumps' recv
                sock.close()
        self._flowing.set()  # lets a held pump run into the closed socket and end

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._tls is not None:
                threading.Thread(target=self._serve, args=(client,), daemon=True).start()
                continue
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, upstream]
                self._downstream.append(client)
                self._upstream.append(upstream)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _register(self, sock: socket.socket) -> bool:
        """Track ``sock`` so :meth:`close` cuts it; close it instead if the proxy is closed."""
        with self._lock:
            if not self._closed:
                self._sockets.append(sock)
                return True
        sock.close()
        return False

    def _serve(self, client: socket.socket) -> None:
        """One connection, in its own thread: TLS handshake, then pumping."""
        if not self._register(client):
            return
        stream: Stream = client
        if self._tls is not None:
            try:
                stream = _TlsStream.accept(client, self._tls, HANDSHAKE_TIMEOUT)
            except (OSError, ValueError):
                _cut(client)
                return
        upstream = self._connect_upstream(client)
        if upstream is None:
            return
        with self._lock:
            self._downstream.append(stream)
        threading.Thread(target=self._pump, args=(upstream, stream, True), daemon=True).start()
        self._pump(stream, upstream, False)

    def _connect_upstream(self, client: socket.socket) -> socket.socket | None:
        try:
            upstream = socket.create_connection(self._target)
        except OSError:
            _cut(client)
            return None
        if not self._register(upstream):
            _cut(client)
            return None
        with self._lock:
            self._upstream.append(upstream)
        return upstream

    def _send_to_client(self, stream: Stream, command: pb.BaseCommand) -> None:
        """Write a command of the proxy's own between two forwarded broker frames."""
        with self._lock:
            stream.sendall(encode_command(command))

    def _pump(self, source: Stream, sink: Stream, from_broker: bool) -> None:
        """Copy ``source`` to ``sink``; whole frames only if rewriting."""
        framed = self._rewrite is not None
        pending = bytearray()
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if from_broker:
                    self._flowing.wait()
                if source in self._orphans:
                    pending += data
                    self._answer_as_orphan(source, pending)
                    continue
                if framed:
                    pending += data
                    data = self._rewritten_frames(pending, None if from_broker else source)
                    if not data:
                        continue
                try:
                    with self._lock:
                        sink.sendall(data)
                except OSError:
                    if source not in self._orphans:  # else orphan() cut the client meanwhile
                        raise
        for sock in (source, sink):
            if sock in self._orphans and not self._closed:
                continue  # kept open by orphan()
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _answer_as_orphan(self, upstream: Stream, pending: bytearray) -> None:
        """The broker's frames to a client :meth:`orphan` cut: PINGs answered or not, the
        rest dropped."""
        for frame in _take_frames(pending):
            if self._orphans_answer_pings and _command_of(frame).type == Type.PING:
                pong = pb.BaseCommand(type=Type.PONG, pong=pb.CommandPong())
                with self._lock:
                    upstream.sendall(encode_command(pong))

    def _rewritten_frames(self, pending: bytearray, client: Stream | None = None) -> bytes:
        """Take the complete frames off ``pending``, each rewritten if it is a simple command
        the rewrite changes; frames with a payload pass unchanged. Frames from ``client`` that
        the proxy answers itself are dropped."""
        out = bytearray()
        for frame in _take_frames(pending):
            if client is not None and self._answered(frame, client):
                continue
            out += self._rewritten_frame(frame) if self._rewrite is not None else frame
        return bytes(out)

    def _answered(self, frame: bytes, client: Stream) -> bool:
        """Whether the proxy answered this client frame (a payload's too: a SEND) itself."""
        if self._answer is None:
            return False
        reply = self._answer(_command_of(frame))
        if reply is None:
            return False
        self._send_to_client(client, reply)
        return True

    def _rewritten_frame(self, frame: bytes, command: pb.BaseCommand | None = None) -> bytes:
        total, command_size = _FRAME_HEADER.unpack_from(frame)
        if self._rewrite is None or 4 + command_size != total:
            return frame
        command = command if command is not None else _command_of(frame)
        return encode_command(command) if self._rewrite(command) else frame


def _cut(*socks: socket.socket) -> None:
    """Shut ``socks`` down both ways (waking their readers) and close them."""
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


class ApacheAnswers:
    """A rewrite making pulsar-lite's answers look like Apache Pulsar's.

    - Lookups name the proxy (``url``), so every connection, Spark tasks' included, uses it.
      Behind TLS (``url`` is ``pulsar+ssl://``) the proxy goes into ``brokerServiceUrlTls``,
      and ``brokerServiceUrl`` stays the broker's plain URL, as a broker with both listeners
      answers; with ``advertise_tls_url`` false the TLS URL is left out instead.
    - A GetLastMessageId answer carries the entry's largest batch index, as Apache Pulsar's
      does: ``batch_sizes[(ledger, entry)] - 1``, and 0 for an entry not listed (an unbatched
      message counts as a batch of one).
    - A PRODUCER_SUCCESS for a producer named in ``last_sequence_ids`` carries that
      ``last_sequence_id``, as a broker with deduplication answers a producer whose earlier
      messages it has stored.
    - A SUBSCRIBE to a topic in ``first_ledgers`` whose start lies in an earlier ledger starts
      at the first entry of ``first_ledgers[topic]`` instead: Apache Pulsar places a cursor
      that points into a ledger retention removed at the first entry left (pulsar-lite, which
      never removes anything, delivers nothing from a start in a ledger it does not have).
    - With ``server_version`` set, CONNECTED names the broker so (pulsar-lite names itself,
      and clients adapt to it: permits per entry, no batch-index acks).
    - Every ACK a client sends is kept in ``acks``, as sent.
    - A schema a producer registers (CommandProducer's ``schema``) is kept per topic (a
      partition's schema is its parent topic's), in ``schemas``: a new version when its type or
      data differ from every version kept, else the matching version. PRODUCER_SUCCESS carries
      that version (an 8-byte big-endian number from 0, as Apache's schema storage numbers
      them), so the producer stamps it on every message. :meth:`answer` answers GET_SCHEMA
      from ``schemas`` (the latest, or the version asked for), and a topic without one, or a
      version it does not have, with TopicNotFound "Topic not found or no-schema".
    - A producer whose schema the topic's kept schemas do not accept is refused, before the
      broker sees it, with the CommandError an Apache broker sends: IncompatibleSchema, and
      Apache's words. The rule is simpler than Apache's compatibility strategies, and only
      refuses what they all refuse (but ALWAYS_COMPATIBLE): a schema equal to a kept version is
      accepted; otherwise it must have the latest version's type (Apache does not compare
      record names: a renamed record with the same fields is a new version). A producer
      without a schema (or with None, bytes) is accepted, as Apache does unless
      ``schemaValidationEnforced`` is set. Refusals are counted in ``schemas_refused``.
    - Every topic a producer opens through the proxy (a partition's own name for a partitioned
      topic) is kept in ``topics``; :meth:`answer` answers GET_TOPICS_OF_NAMESPACE with those
      of the namespace asked for, as an Apache broker lists the topics it has (pulsar-lite never
      answers it).
    """

    def __init__(self, *, advertise_tls_url: bool = True) -> None:
        self.url = ""
        self.advertise_tls_url = advertise_tls_url
        self.batch_sizes: dict[tuple[int, int], int] = {}
        self.last_sequence_ids: dict[str, int] = {}
        self.first_ledgers: dict[str, int] = {}
        self.last_ids_answered = 0
        self.server_version: str | None = None
        self.acks: list[pb.CommandAck] = []
        self.schemas: dict[str, list[pb.Schema]] = {}
        self.schema_requests = 0
        self.schemas_refused = 0
        self.topics: set[str] = set()
        self._producer_versions: dict[int, bytes] = {}

    def __call__(self, command: pb.BaseCommand) -> bool:
        if command.type == Type.CONNECTED and self.server_version is not None:
            command.connected.server_version = self.server_version
            return True
        if command.type == Type.ACK:
            kept = pb.CommandAck()
            kept.CopyFrom(command.ack)
            self.acks.append(kept)
            return False
        if command.type == Type.LOOKUP_RESPONSE:
            response = command.lookupTopicResponse
            if not self.url.startswith("pulsar+ssl://"):
                response.brokerServiceUrl = self.url
            elif self.advertise_tls_url:
                response.brokerServiceUrlTls = self.url
            else:
                response.ClearField("brokerServiceUrlTls")
            return True
        if command.type == Type.GET_LAST_MESSAGE_ID_RESPONSE:
            last = command.getLastMessageIdResponse.last_message_id
            last.batch_index = self.batch_sizes.get((last.ledgerId, last.entryId), 1) - 1
            self.last_ids_answered += 1
            return True
        if command.type == Type.PRODUCER:
            self._producer_schema(command.producer)
            return False
        if command.type == Type.PRODUCER_SUCCESS:
            return self._producer_success(command.producer_success)
        if command.type == Type.SUBSCRIBE:
            return self._start_past_removed_ledgers(command.subscribe)
        return False

    def _producer_schema(self, producer: pb.CommandProducer) -> None:
        self.topics.add(TopicName.parse(producer.topic).full_name)
        if producer.HasField("schema"):
            version = self._register(producer.topic, producer.schema)
            if version is not None:
                self._producer_versions[producer.request_id] = version

    def _producer_success(self, success: pb.CommandProducerSuccess) -> bool:
        changed = False
        version = self._producer_versions.pop(success.request_id, None)
        if version is not None:
            success.schema_version = version
            changed = True
        if success.producer_name in self.last_sequence_ids:
            success.last_sequence_id = self.last_sequence_ids[success.producer_name]
            changed = True
        return changed

    def answer(self, command: pb.BaseCommand) -> pb.BaseCommand | None:
        """GET_SCHEMA and GET_TOPICS_OF_NAMESPACE answered as an Apache broker answers them
        (pulsar-lite answers neither), and a PRODUCER with an incompatible schema refused as
        Apache refuses it."""
        if command.type == Type.PRODUCER:
            return self._refuse_incompatible(command.producer)
        if command.type == Type.GET_TOPICS_OF_NAMESPACE:
            return self._topics_of_namespace(command.getTopicsOfNamespace)
        if command.type != Type.GET_SCHEMA:
            return None
        self.schema_requests += 1
        request = command.getSchema
        versions = self.schemas.get(_schema_topic(request.topic), [])
        index = len(versions) - 1
        if request.HasField("schema_version"):
            index = int.from_bytes(request.schema_version, "big")
        response = pb.CommandGetSchemaResponse(request_id=request.request_id)
        if 0 <= index < len(versions):
            response.schema.CopyFrom(versions[index])
            response.schema_version = index.to_bytes(8, "big")
        else:
            response.error_code = pb.TopicNotFound
            response.error_message = "Topic not found or no-schema"
        return pb.BaseCommand(type=Type.GET_SCHEMA_RESPONSE, getSchemaResponse=response)

    def _refuse_incompatible(self, producer: pb.CommandProducer) -> pb.BaseCommand | None:
        """The CommandError refusing ``producer``'s schema; None when the topic accepts it."""
        schema = producer.schema
        if not producer.HasField("schema") or schema.type == pb.Schema.Type.Value("None"):
            return None
        versions = self.schemas.get(_schema_topic(producer.topic), [])
        if not versions or any(
            (known.type, known.schema_data) == (schema.type, schema.schema_data)
            for known in versions
        ):
            return None
        latest = versions[-1]
        if latest.type == schema.type:
            return None
        self.schemas_refused += 1
        refusal = (
            "org.apache.pulsar.broker.service.schema.exceptions.IncompatibleSchemaException: "
            f"Incompatible schema: exists schema type {java_type_name(latest.type)}, new schema "
            f"type {java_type_name(schema.type)}"
        )
        error = pb.CommandError(
            request_id=producer.request_id,
            error=pb.IncompatibleSchema,
            message=f"{refusal} caused by {refusal}",  # as Apache words it, cause and all
        )
        return pb.BaseCommand(type=Type.ERROR, error=error)

    def _topics_of_namespace(self, request: pb.CommandGetTopicsOfNamespace) -> pb.BaseCommand:
        listed = sorted(
            topic
            for topic in self.topics
            if TopicName.parse(topic).namespace_name == request.namespace
            and (
                request.mode == pb.CommandGetTopicsOfNamespace.ALL
                or topic.startswith("persistent://")
                == (request.mode == pb.CommandGetTopicsOfNamespace.PERSISTENT)
            )
        )
        response = pb.CommandGetTopicsOfNamespaceResponse(
            request_id=request.request_id, topics=listed
        )
        return pb.BaseCommand(
            type=Type.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=response
        )

    def _register(self, topic: str, schema: pb.Schema) -> bytes | None:
        """The version of ``schema`` on ``topic``, added if new; None for no schema (bytes)."""
        if schema.type == pb.Schema.Type.Value("None"):
            return None
        name = _schema_topic(topic)
        versions = self.schemas.setdefault(name, [])
        for index, known in enumerate(versions):
            if (known.type, known.schema_data) == (schema.type, schema.schema_data):
                return index.to_bytes(8, "big")
        kept = pb.Schema()
        kept.CopyFrom(schema)
        kept.name = name.partition("://")[2]  # Apache names a schema tenant/namespace/topic
        versions.append(kept)
        return (len(versions) - 1).to_bytes(8, "big")

    def _start_past_removed_ledgers(self, subscribe: pb.CommandSubscribe) -> bool:
        first = self.first_ledgers.get(subscribe.topic)
        start = subscribe.start_message_id
        if first is None or not subscribe.HasField("start_message_id") or start.ledgerId >= first:
            return False
        start.ledgerId, start.entryId = first, 0
        return True


APACHE_VERSION = "Pulsar Server4.0.1"
"""A server version an Apache broker names in CONNECTED, for ``apache_proxy(named=True)``."""


def apache_proxy(
    target: tuple[str, int],
    *,
    tls: ssl.SSLContext | None = None,
    named: bool = False,
) -> tuple[BrokerProxy, ApacheAnswers]:
    """A proxy to ``target`` answering like Apache Pulsar, and its rewrite's settings; with
    ``named``, its CONNECTED names it as Apache Pulsar too (else the broker's own name)."""
    answers = ApacheAnswers()
    if named:
        answers.server_version = APACHE_VERSION
    proxy = BrokerProxy(target, answers, tls=tls, answer=answers.answer)
    answers.url = proxy.url
    return proxy, answers


def _schema_topic(topic: str) -> str:
    """The name a topic's schema is kept under: fully qualified, without ``-partition-N``."""
    return TopicName.parse(topic).base_name
