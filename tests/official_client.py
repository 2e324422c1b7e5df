"""What the tests need to know about the official Apache Pulsar client (``pulsar-client``)."""

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
