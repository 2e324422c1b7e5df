"""``df.write.format("pulsar")`` to partitioned topics and to topics named per row.

Partition routing is checked against an implementation of Java's ``String.hashCode`` written
in ``tests/java_routing.py``, independently of the connector's; the ``topic`` column routes
rows to topics however they are spelled, and the ``topic`` option overrides it.
"""

from __future__ import annotations

import base64
import collections
from collections.abc import Callable
from typing import Any

import pulsar
import pytest
from java_routing import java_partition, java_string_hash
from pyspark.errors import PythonException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from support.topics import full, partition_of
from support.written import read_partitioned, read_topic, write

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]


# --- Java's String.hashCode (tests/java_routing.py) ------------------------------------------


def test_java_string_hash_reference_values() -> None:
    """The test helper agrees with values Java prints for ``"...".hashCode()``."""
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00 == 1772899
    assert java_partition("polygenelubricants", 4) == 0  # MIN_VALUE & 0x7FFFFFFF == 0


# --- partition routing ------------------------------------------------------------------------


ROUTED_STRING_KEYS: list[str] = [
    *(f"key-{i}" for i in range(200)),
    "",
    "Aa",
    "BB",  # same hash as "Aa"
    "polygenelubricants",  # hashCode() == Integer.MIN_VALUE
    "\u043a\u043b\u044e\u0447",
    "\u65e5\u672c\u8a9e-\u00fc",
    "\U0001f600",  # outside the BMP: two UTF-16 units
    "a\U0001f600b\U0001d11ec",
    *(f"\U0001f680-{i}-\u00e9" for i in range(20)),
    "L" * 1000 + "\U0001f600",  # longer than any block the connector hashes at once
    "\U0001f600" * 100,
]


def test_keyed_rows_land_on_the_java_partition(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """Each keyed row is on partition ``(String.hashCode(key) & 0x7FFFFFFF) % 4``, a binary
    key hashed as its base64 text. Many keys per task and few (the connector routes large and
    small groups of keys differently), string and binary keys, one topic."""
    topic = pooled_partitioned_topic(4)
    few_strings = ROUTED_STRING_KEYS[200:]  # fewer than 64 keys per task
    binary_keys = [bytes([i, 255 - i, (i * 37) % 256]) * (1 + i % 3) for i in range(150)]
    writes: list[tuple[str, list[tuple[str, Any]]]] = [
        ("value string, key string", [(f"s{i}", k) for i, k in enumerate(ROUTED_STRING_KEYS)]),
        ("value string, key string", [(f"f{i}", k) for i, k in enumerate(few_strings)]),
        ("value string, key binary", [(f"b{i}", k) for i, k in enumerate(binary_keys)]),
        ("value string, key binary", [(f"c{i}", k) for i, k in enumerate(binary_keys[:40])]),
    ]
    expected: dict[bytes, tuple[str, int]] = {}
    for schema, rows in writes:
        write(spark.createDataFrame(rows, schema).repartition(2), broker, topic=topic)
        for value, key in rows:
            text = key if isinstance(key, str) else base64.b64encode(key).decode("ascii")
            expected[value.encode()] = (text, java_partition(text, 4))

    partitions = read_partitioned(client, topic, 4)
    found = {g.value: (g.key, g.partition) for got in partitions for g in got}
    assert sum(len(got) for got in partitions) == len(found) == len(expected)
    assert found == expected
    for index, got in enumerate(partitions):
        assert {g.topic for g in got} == {partition_of(topic, index)}
        assert got, f"no key routed to partition {index}"
        # producers are named after the partition they write to
        assert {g.producer_name.rsplit("-", 1)[1] for g in got} == {str(index)}
    assert found[b"s203"] == ("polygenelubricants", 0)
    assert found[b"s201"][1] == found[b"s202"][1]  # "Aa" and "BB" collide in Java too


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
    assert java_partition("k0", 2) != java_partition("k1", 2)
    for key in ("k0", "k1"):
        on_partition = read_topic(client, partition_of(partitioned, java_partition(key, 2)))
        assert [g.value for g in on_partition] == sent(partitioned, (key,))
