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


def first_unacknowledged(
    service_url: str, topics: list[str], subscription: str
) -> list[bytes | None]:
    """Per topic (or partition), the first message ``subscription`` still holds there, read
    by an official Shared consumer that acknowledges nothing (None: none within 1.5 s)."""
    client = official_client(service_url)
    try:
        firsts: list[bytes | None] = []
        for topic in topics:
            consumer = client.subscribe(
                topic, subscription, consumer_type=pulsar.ConsumerType.Shared
            )
            try:
                firsts.append(consumer.receive(1500).data())
            except pulsar.Timeout:
                firsts.append(None)
            finally:
                consumer.close()
        return firsts
    finally:
        client.close()


def send_one_to_each(service_url: str, topics: list[str], tag: str) -> list[bytes]:
    """One message, ``<tag>-<i>``, to each of ``topics`` in order; the values sent."""
    client = official_client(service_url)
    values = [f"{tag}-{i}".encode() for i in range(len(topics))]
    try:
        for topic, value in zip(topics, values, strict=True):
            producer = client.create_producer(topic)
            producer.send(value)
            producer.close()
    finally:
        client.close()
    return values
