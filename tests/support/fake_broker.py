"""Loopback servers that stand in for a broker where pulsar-lite cannot show a failure.

- :class:`FakeBroker` decodes the frames a client sends and hands each to a handler written by
  the test, which answers (or not) by hand; :func:`connected_frame`, :func:`ping_frame`,
  :func:`handshake_only` and :func:`serve_one_consumer` are the usual answers.
- :func:`silent_server` accepts TCP connections and never says anything.
- :func:`closed_port` is a port nothing listens on: connections are refused at once.

Every socket here is bound to 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator

from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.framing import Frame, FrameDecoder, encode_command

Type = pb.BaseCommand.Type


def closed_port() -> int:
    """A loopback port that was free a moment ago: nothing listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says anything."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


Handler = Callable[["FakeBroker", socket.socket, Frame], None]


class FakeBroker:
    """A loopback TCP server that hands every frame it receives to ``handler``.

    Every socket operation has a short timeout and :meth:`close` stops everything, so a
    test that goes wrong cannot hang.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.received: list[pb.BaseCommand] = []
        self.got = threading.Condition()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port = int(self._server.getsockname()[1])
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.address = BrokerAddress("127.0.0.1", self.port)
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(0.1)
            self._sockets.append(sock)
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        decoder = FrameDecoder()
        while not self._stop.is_set():
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            for frame in decoder.feed(data):
                with self.got:
                    self.received.append(frame.command)
                    self.got.notify_all()
                self.handler(self, sock, frame)

    def wait_for(self, kind: int, timeout: float) -> bool:
        """Whether a command of type ``kind`` arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self.got:
            while not any(c.type == kind for c in self.received):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.got.wait(remaining)
            return True

    def kinds(self) -> list[str]:
        """The type names of the commands received so far, in order."""
        return [pb.BaseCommand.Type.Name(c.type) for c in self.received]

    def close(self) -> None:
        """Stop serving and close every socket."""
        self._stop.set()
        self._server.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            thread.join(2)


def connected_frame() -> bytes:
    """CONNECTED from ``fake-broker``, speaking protocol version 19."""
    return encode_command(
        pb.BaseCommand(
            type=Type.CONNECTED,
            connected=pb.CommandConnected(server_version="fake-broker", protocol_version=19),
        )
    )


def ping_frame() -> bytes:
    """A PING, as a broker sends it to check the client is alive."""
    return encode_command(pb.BaseCommand(type=Type.PING, ping=pb.CommandPing()))


def handshake_only(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
    """A handler that completes the handshake and answers nothing else."""
    if frame.command.type == Type.CONNECT:
        sock.sendall(connected_frame())


def serve_one_consumer(server: FakeBroker, sock: socket.socket, frame: Frame) -> bool:
    """Answer the handshake, lookup and subscription commands a reader sends; False for others."""
    command = frame.command
    kind = command.type
    if kind == Type.CONNECT:
        sock.sendall(connected_frame())
    elif kind == Type.LOOKUP:
        response = pb.CommandLookupTopicResponse(
            brokerServiceUrl=server.url,
            response=pb.CommandLookupTopicResponse.Connect,
            request_id=command.lookupTopic.request_id,
        )
        sock.sendall(
            encode_command(pb.BaseCommand(type=Type.LOOKUP_RESPONSE, lookupTopicResponse=response))
        )
    elif kind in (Type.SUBSCRIBE, Type.UNSUBSCRIBE, Type.CLOSE_CONSUMER):
        body = {
            Type.SUBSCRIBE: command.subscribe,
            Type.UNSUBSCRIBE: command.unsubscribe,
            Type.CLOSE_CONSUMER: command.close_consumer,
        }[kind]
        success = pb.CommandSuccess(request_id=body.request_id)
        sock.sendall(encode_command(pb.BaseCommand(type=Type.SUCCESS, success=success)))
    else:
        return False
    return True
