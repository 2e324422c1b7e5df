"""A loopback TCP proxy in front of the test broker, for what a plain broker cannot show.

The broker-to-client direction can be held (frames wait, in order, until released), commands
can be injected as if from the broker, and commands can be rewritten on their way in either
direction. :class:`ApacheAnswers` uses the last to make pulsar-lite behave the way Apache
Pulsar does where the two differ.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable

from pulsar_spark.protocol import pb
from pulsar_spark.protocol.framing import encode_command

Type = pb.BaseCommand.Type

Rewrite = Callable[[pb.BaseCommand], bool]
"""Changes a command (the broker's or the client's) in place; returns whether it changed it."""


class BrokerProxy:
    """Forwards every connection made to :attr:`url` to the broker at ``target``."""

    def __init__(self, target: tuple[str, int], rewrite: Rewrite | None = None) -> None:
        self._target = target
        self._rewrite = rewrite
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"pulsar://127.0.0.1:{self._listener.getsockname()[1]}"
        self._flowing = threading.Event()
        self._flowing.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._downstream: list[socket.socket] = []
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

    def close(self) -> None:
        """Cut every connection; held bytes are dropped, not delivered."""
        self._listener.close()
        with self._lock:
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
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, upstream]
                self._downstream.append(client)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_broker: bool) -> None:
        pending = bytearray()
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if from_broker:
                    self._flowing.wait()
                if self._rewrite is not None:
                    pending += data
                    data = self._rewritten_frames(pending)
                with self._lock:
                    sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def _rewritten_frames(self, pending: bytearray) -> bytes:
        """Take the complete frames off ``pending``, each rewritten if it is a simple command
        the rewrite changes; frames with a payload pass unchanged."""
        out = bytearray()
        while len(pending) >= 4:
            (total,) = struct.unpack_from(">I", pending)
            if len(pending) < 4 + total:
                break
            frame = bytes(pending[: 4 + total])
            del pending[: 4 + total]
            (command_size,) = struct.unpack_from(">I", frame, 4)
            if 4 + command_size == total:
                command = pb.BaseCommand.FromString(frame[8:])
                if self._rewrite is not None and self._rewrite(command):
                    frame = encode_command(command)
            out += frame
        return bytes(out)


class ApacheAnswers:
    """A rewrite making pulsar-lite's answers look like Apache Pulsar's.

    - Lookups name the proxy (``url``), so every connection, Spark tasks' included, uses it.
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
    """

    def __init__(self) -> None:
        self.url = ""
        self.batch_sizes: dict[tuple[int, int], int] = {}
        self.last_sequence_ids: dict[str, int] = {}
        self.first_ledgers: dict[str, int] = {}
        self.last_ids_answered = 0

    def __call__(self, command: pb.BaseCommand) -> bool:
        if command.type == Type.LOOKUP_RESPONSE:
            command.lookupTopicResponse.brokerServiceUrl = self.url
            return True
        if command.type == Type.GET_LAST_MESSAGE_ID_RESPONSE:
            last = command.getLastMessageIdResponse.last_message_id
            last.batch_index = self.batch_sizes.get((last.ledgerId, last.entryId), 1) - 1
            self.last_ids_answered += 1
            return True
        if command.type == Type.PRODUCER_SUCCESS:
            success = command.producer_success
            if success.producer_name in self.last_sequence_ids:
                success.last_sequence_id = self.last_sequence_ids[success.producer_name]
                return True
        if command.type == Type.SUBSCRIBE:
            return self._start_past_removed_ledgers(command.subscribe)
        return False

    def _start_past_removed_ledgers(self, subscribe: pb.CommandSubscribe) -> bool:
        first = self.first_ledgers.get(subscribe.topic)
        start = subscribe.start_message_id
        if first is None or not subscribe.HasField("start_message_id") or start.ledgerId >= first:
            return False
        start.ledgerId, start.entryId = first, 0
        return True


def apache_proxy(target: tuple[str, int]) -> tuple[BrokerProxy, ApacheAnswers]:
    """A proxy to ``target`` answering like Apache Pulsar, and its rewrite's settings."""
    answers = ApacheAnswers()
    proxy = BrokerProxy(target, answers)
    answers.url = proxy.url
    return proxy, answers
