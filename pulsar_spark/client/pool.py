"""Connections shared per broker address, so consumers and producers in one process reuse them.

A Spark executor's Python worker serves many tasks in turn; the module-level pool keeps
their connections open between tasks. A connection that failed is replaced on next use.
"""

from __future__ import annotations

import threading

from pulsar_spark.client.address import BrokerAddress
from pulsar_spark.client.connection import Connection


class ConnectionPool:
    """Thread-safe map from (broker address, proxied-to broker) to an open Connection."""

    def __init__(self, *, connect_timeout: float = 10.0, keepalive_interval: float = 30.0) -> None:
        self.connect_timeout = connect_timeout
        self.keepalive_interval = keepalive_interval
        self._lock = threading.Lock()
        self._connections: dict[tuple[BrokerAddress, str | None], Connection] = {}

    def get(
        self,
        address: BrokerAddress,
        *,
        proxy_to_broker_url: str | None = None,
        timeout: float | None = None,
    ) -> Connection:
        """An open connection to ``address``, made (and handshaken) if needed."""
        key = (address, proxy_to_broker_url)
        with self._lock:
            existing = self._connections.get(key)
            if existing is not None and not existing.closed:
                return existing
            connection = Connection.open(
                address,
                timeout=self.connect_timeout if timeout is None else timeout,
                keepalive_interval=self.keepalive_interval,
                proxy_to_broker_url=proxy_to_broker_url,
            )
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
