"""``df.write.format("pulsar")`` to partitioned topics and to topics named per row.

Which partition a keyed row lands on is checked against Apache Pulsar's own Java producer in
``test_java_interop.py`` (``test_keyed_routing_matches_java``); here the connector's
``partition_for_key``, held to Java's partitions there, says where to read a key's rows. The
``topic`` column routes rows to topics however they are spelled, and the ``topic`` option
overrides it.
"""

from __future__ import annotations

import collections
from collections.abc import Callable

import pulsar
import pytest
from pyspark.errors import PythonException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from support.topics import full, partition_of
from support.written import read_partitioned, read_topic, write

from pulsar_spark.local import LocalBroker
from pulsar_spark.protocol.routing import partition_for_key

pytestmark = [pytest.mark.integration, pytest.mark.spark]


# --- partition routing ------------------------------------------------------------------------


def test_unkeyed_rows_spread_over_every_partition(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """Unkeyed rows rotate over the partitions one producer batch (here 500 rows) at a time,
    each task starting at its own partition number (so every attempt of a task sends the same
    rows to the same partitions): task t's run r of 500 rows goes to partition (t + r) % 4."""
    topic = pooled_partitioned_topic(4)
    df = spark.range(8000, numPartitions=2).select(F.format_string("u-%05d", "id").alias("value"))
    write(df, broker, topic=topic, **{"pulsar.producer.batchingMaxMessages": "500"})

    expected: list[list[bytes]] = [[], [], [], []]
    for task in (0, 1):
        for run in range(8):
            first = task * 4000 + run * 500
            expected[(task + run) % 4] += [f"u-{i:05d}".encode() for i in range(first, first + 500)]
    partitions = read_partitioned(client, topic, 4)
    assert [sorted(g.value for g in got) for got in partitions] == expected
    for index, got in enumerate(partitions):
        assert {(g.key, g.partition, g.null_value) for g in got} == {("", index, False)}
        per_producer = collections.Counter(g.producer_name for g in got)
        assert all(count % 500 == 0 for count in per_producer.values()), per_producer


# --- the topic column and the topic option ----------------------------------------------------


def test_topic_column_routes_rows_and_the_topic_option_wins(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    single = topic_name
    other = f"{topic_name}-other"
    partitioned = pooled_partitioned_topic(2)
    # the same topics spelled short, as namespace/topic and fully qualified
    spellings = [single, f"public/default/{other}", full(partitioned), full(single)]
    rows = [(f"v{i}", f"k{i % 9}", spellings[i % 4]) for i in range(60)]
    df = spark.createDataFrame(rows, "value string, key string, topic string").repartition(2)
    write(df, broker)

    def routed(names: list[str]) -> list[tuple[bytes, str]]:
        return sorted((v.encode(), k) for v, k, t in rows if t in names)

    def read_all() -> dict[str, list[tuple[bytes, str]]]:
        on_partitions = [g for got in read_partitioned(client, partitioned, 2) for g in got]
        return {
            "single": sorted((g.value, g.key) for g in read_topic(client, single)),
            "other": sorted((g.value, g.key) for g in read_topic(client, other)),
            "partitioned": sorted((g.value, g.key) for g in on_partitions),
        }

    first = read_all()
    assert first == {
        "single": routed([single, full(single)]),
        "other": routed([f"public/default/{other}"]),
        "partitioned": routed([full(partitioned)]),
    }

    # with the option set, every row goes to that topic whatever its column says, null too
    target = f"{topic_name}-option"
    with_null = [*rows, ("null-topic", "k", None)]
    df = spark.createDataFrame(with_null, "value string, key string, topic string")
    write(df.repartition(2), broker, topic=target)
    got = read_topic(client, target)
    assert sorted((g.value, g.key) for g in got) == sorted((v.encode(), k) for v, k, _ in with_null)
    assert read_all() == first  # nothing more reached the column's topics


def test_null_topic_without_topic_option_fails_the_write(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    df = spark.createDataFrame(
        [("a", topic_name), ("b", None)], "value string, topic string"
    ).coalesce(1)
    with pytest.raises(
        PythonException, match="a row has a null 'topic' and no 'topic' option is set"
    ):
        write(df, broker)
    # the task checks every row of a record batch before sending any of it
    assert read_topic(client, topic_name) == []


def test_rows_of_a_topic_spelled_several_ways_keep_their_order(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """One record batch names each topic short, as namespace/topic and fully qualified, in
    turn: each topic, and each partition of a partitioned one, gets its rows in row order."""
    partitioned = pooled_partitioned_topic(2)
    spellings = {
        topic_name: [topic_name, full(topic_name), f"public/default/{topic_name}"],
        partitioned: [full(partitioned), partitioned],
    }
    rows = [  # (topic, value, key, the topic column)
        (topic, f"{topic}-{i}", f"k{i % 2}", spelt[i % len(spelt)])
        for i in range(40)
        for topic, spelt in spellings.items()
    ]
    df = spark.createDataFrame(
        [row[1:] for row in rows], "value string, key string, topic string"
    ).coalesce(1)
    write(df, broker)

    def sent(topic: str, keys: tuple[str, ...]) -> list[bytes]:
        return [v.encode() for t, v, k, _ in rows if t == topic and k in keys]

    assert [g.value for g in read_topic(client, topic_name)] == sent(topic_name, ("k0", "k1"))
    assert partition_for_key("k0", 2) != partition_for_key("k1", 2)
    for key in ("k0", "k1"):
        on_partition = read_topic(client, partition_of(partitioned, partition_for_key(key, 2)))
        assert [g.value for g in on_partition] == sent(partitioned, (key,))
