"""Client settings for tests that drive the client layer directly, without Spark options."""

from __future__ import annotations

from pulsar_spark.client.settings import ClientSettings, ConnectionSettings


def settings_for(
    url: str, *, timeout: float = 10.0, connect_timeout: float = 5.0, keepalive: float = 30.0
) -> ClientSettings:
    """Plain-text settings for ``url`` with these timeouts (seconds)."""
    return ClientSettings(
        service_url=url,
        operation_timeout=timeout,
        connection=ConnectionSettings(
            connect_timeout=connect_timeout, keepalive_interval=keepalive
        ),
    )
