"""A loopback TCP proxy that records the bytes each way, for capturing real TubeMQ frames.

``RecordingProxy(target_host, target_port)`` listens on a free loopback port; every client
connection is forwarded to the target, and what flowed is kept per connection as
``Exchange.sent`` (client to server) and ``Exchange.received`` (server to client).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field


@dataclass
class Exchange:
    """The bytes of one proxied connection, each direction joined."""

    sent: bytearray = field(default_factory=bytearray)
    received: bytearray = field(default_factory=bytearray)


class RecordingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.exchanges: list[Exchange] = []
        self._threads: list[threading.Thread] = []
        self._closing = False
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()

    def __enter__(self) -> RecordingProxy:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target, timeout=10)
            exchange = Exchange()
            self.exchanges.append(exchange)
            for source, sink, record in (
                (client, server, exchange.sent),
                (server, client, exchange.received),
            ):
                thread = threading.Thread(target=_pump, args=(source, sink, record), daemon=True)
                thread.start()
                self._threads.append(thread)


def _pump(source: socket.socket, sink: socket.socket, record: bytearray) -> None:
    source.settimeout(None)
    try:
        while data := source.recv(65536):
            record += data
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
