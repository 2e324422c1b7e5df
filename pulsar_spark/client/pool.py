"""Connections shared per broker, so consumers and producers in one process reuse them.

A Spark executor's Python worker serves many tasks in turn; the module-level pool keeps
their connections open between tasks. A connection that failed is replaced on next use. The
key includes the connection settings (TLS trust, credentials, timeouts), so queries with
different settings never share a connection. A connection is opened outside the pool's lock:
a broker that does not answer holds up only the callers that want that same connection.
"""

from __future__ import annotations

import threading

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.settings import ConnectionSettings
from pulsar_spark.common.address import BrokerAddress

_Key = tuple[BrokerAddress, str | None, ConnectionSettings]


class ConnectionPool:
    """Thread-safe map from (broker address, proxied-to broker, settings) to a Connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: dict[_Key, Connection] = {}
        self._opening: dict[_Key, threading.Lock] = {}

    def get(
        self,
        address: BrokerAddress,
        settings: ConnectionSettings,
        *,
        proxy_to_broker_url: str | None = None,
    ) -> Connection:
        """An open connection to ``address``, made (and handshaken) if needed."""
        key = (address, proxy_to_broker_url, settings)
        with self._lock:
            existing = self._connections.get(key)
            if existing is not None and not existing.closed:
                return existing
            opening = self._opening.setdefault(key, threading.Lock())
        with opening:
            with self._lock:
                existing = self._connections.get(key)
            if existing is not None and not existing.closed:
                return existing
            connection = Connection.open(address, settings, proxy_to_broker_url=proxy_to_broker_url)
            with self._lock:
                self._connections[key] = connection
            return connection

    def close(self) -> None:
        with self._lock:
            connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            connection.close()


_default_pool = ConnectionPool()


def default_pool() -> ConnectionPool:
    """The process-wide pool (one per Python worker)."""
    return _default_pool
