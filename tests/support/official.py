"""The official Apache Pulsar client (``pulsar-client``), as the tests use it."""

from __future__ import annotations

import pulsar

COMPRESSION: dict[str, pulsar.CompressionType] = {
    "none": pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}
"""The official producer's compression setting for each of our option values."""

OPERATION_TIMEOUT = 15
"""Seconds an official client waits for the broker before an operation fails."""


def official_client(service_url: str) -> pulsar.Client:
    """An official client of ``service_url`` that logs errors only, to the console."""
    return pulsar.Client(
        service_url,
        operation_timeout_seconds=OPERATION_TIMEOUT,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
