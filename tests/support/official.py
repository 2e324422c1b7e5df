"""The official Apache Pulsar client (``pulsar-client``), as the tests use it."""

from __future__ import annotations

import pulsar

from support.topics import full

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


QUIET_MS = 2000
"""How long a consumer waits for one more message before taking the list as complete."""


SUBSCRIPTION = "spark-etl"
"""The subscription name the durable-subscription tests give queries."""


def held(
    client: pulsar.Client,
    topic: str,
    subscription: str = SUBSCRIPTION,
    *,
    kind: pulsar.ConsumerType = pulsar.ConsumerType.Exclusive,
    first_only: bool = False,
) -> list[bytes]:
    """The values the broker delivers to a consumer of ``subscription`` on ``topic`` (one
    partition or a non-partitioned topic), in order; nothing is acknowledged."""
    consumer = client.subscribe(
        full(topic),
        subscription,
        consumer_type=kind,
        initial_position=pulsar.InitialPosition.Latest,
    )
    values: list[bytes] = []
    try:
        while True:
            try:
                values.append(consumer.receive(QUIET_MS).data())
            except pulsar.Timeout:
                return values
            if first_only:
                return values
    finally:
        consumer.close()


def firsts_held(service_url: str, topics: list[str], subscription: str) -> list[list[bytes]]:
    """Per topic (or partition), the first message ``subscription`` holds there, in a list
    (empty: none), read by a Shared consumer of the official client."""
    client = official_client(service_url)
    try:
        return [
            held(client, topic, subscription, kind=pulsar.ConsumerType.Shared, first_only=True)
            for topic in topics
        ]
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


def publish_keyed(service_url: str, topic: str, values: list[bytes]) -> list[bytes]:
    """``values`` sent to ``topic`` in batches of 200, keyed ``i % 97`` (so spread over a
    partitioned topic's partitions); ``values``, once every receipt has come."""
    client = official_client(service_url)
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=200, block_if_queue_full=True
        )
        failed: list[object] = []
        for i, value in enumerate(values):
            producer.send_async(
                value,
                lambda result, _id: result == pulsar.Result.Ok or failed.append(result),
                partition_key=str(i % 97),
            )
        producer.flush()
        assert not failed
    finally:
        client.close()
    return values
