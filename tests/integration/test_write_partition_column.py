"""Choosing the partition on write: a ``partition`` column sends each row to that partition
(whatever its key), and ``pulsar.producer.messageRoutingMode=SinglePartition`` keeps a task's
unkeyed rows on one partition. What landed where is read back partition by partition with the
official client (``pulsar-client``)."""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest
from pyspark.errors import PythonException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812
from support.streaming import Streams, drafts, drain
from support.topics import full, partition_of
from support.written import read_partitioned, read_topic, write

from pulsar_spark.local import LocalBroker
from pulsar_spark.protocol.routing import partition_for_key

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROUTING_MODE = "pulsar.producer.messageRoutingMode"


def landed(client: pulsar.Client, topic: str, partitions: int) -> list[list[tuple[bytes, str]]]:
    """(value, key) of every message of each partition, sorted; each one on its partition."""
    found = read_partitioned(client, topic, partitions)
    for index, got in enumerate(found):
        assert {g.partition for g in got} <= {index}
    return [sorted((g.value, g.key) for g in got) for got in found]


def test_the_partition_column_sends_each_row_to_its_partition(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """120 keyed rows over two tasks, two in three with a partition (i % 4) that is not their
    key's: those land on it; the others (null partition) go by the hash of their key."""
    topic = pooled_partitioned_topic(4)
    rows = [(f"v{i:03d}", f"k{i % 7}", None if i % 3 == 0 else i % 4) for i in range(120)]
    df = spark.createDataFrame(rows, "value string, key string, partition int").repartition(2)
    write(df, broker, topic=topic)

    expected: list[list[tuple[bytes, str]]] = [[], [], [], []]
    for value, key, partition in rows:
        chosen = partition_for_key(key, 4) if partition is None else partition
        expected[chosen].append((value.encode(), key))
    assert landed(client, topic, 4) == [sorted(e) for e in expected]
    # the column overrode the key for some rows: not every row sits where its key hashes
    assert any(p is not None and p != partition_for_key(k, 4) for _, k, p in rows)


def test_unkeyed_rows_with_a_partition_in_single_partition_mode(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """SinglePartition: task t's unkeyed rows all go to partition t % 3 (tasks 0 and 1 here),
    keyed rows by their key's hash as in Java, rows with a partition to it."""
    topic = pooled_partitioned_topic(3)
    df = spark.range(90, numPartitions=2).select(
        F.format_string("s-%02d", "id").alias("value"),
        F.when(F.col("id") % 3 == 1, F.format_string("k%d", F.col("id") % 5)).alias("key"),
        F.when(F.col("id") % 3 == 2, F.lit(2)).cast("int").alias("partition"),
    )
    write(df, broker, topic=topic, **{ROUTING_MODE: "singlepartition"})

    expected: list[list[tuple[bytes, str]]] = [[], [], []]
    for i in range(90):
        task = 0 if i < 45 else 1
        key = f"k{i % 5}" if i % 3 == 1 else ""
        chosen = {0: task, 1: partition_for_key(key, 3), 2: 2}[i % 3]
        expected[chosen].append((f"s-{i:02d}".encode(), key))
    assert landed(client, topic, 3) == [sorted(e) for e in expected]


@pytest.mark.parametrize("partition", [4, -1])
def test_a_partition_the_topic_does_not_have_fails_the_write_naming_it(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    partition: int,
) -> None:
    topic = pooled_partitioned_topic(4)
    rows = [("a", 0), ("b", partition), ("c", 3)]
    df = spark.createDataFrame(rows, "value string, partition int").coalesce(1)
    message = (
        f"column 'partition': a row asks for partition {partition} of {full(topic)}, which has "
        "4 partitions (0 to 3)"
    )
    with pytest.raises(PythonException) as info:
        write(df, broker, topic=topic)
    assert message in str(info.value)
    # the task checks every row of a record batch before sending any of it
    assert landed(client, topic, 4) == [[], [], [], []]


def test_a_non_partitioned_topic_takes_null_partitions_only(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    df = spark.createDataFrame([("a", None)], "value string, partition int")
    write(df, broker, topic=topic_name)
    assert [g.value for g in read_topic(client, topic_name)] == [b"a"]
    zero = spark.createDataFrame([("b", 0)], "value string, partition int")
    with pytest.raises(PythonException) as info:
        write(zero, broker, topic=topic_name)
    assert (
        f"column 'partition': a row asks for partition 0 of {full(topic_name)}, which is not "
        "partitioned; leave 'partition' null for its rows"
    ) in str(info.value)
    assert [g.value for g in read_topic(client, topic_name)] == [b"a"]


def test_a_streaming_write_routes_by_the_partition_column(
    streams: Streams,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """A stream copies a 2-partition topic to a 4-partition one, each message to the source
    partition's number + 2 (not where its key would go)."""
    source, target = pooled_partitioned_topic(2), pooled_partitioned_topic(4)
    sent = streams.publish(partition_of(source, 0), drafts(7, "s0"), batch_size=3)
    sent += streams.publish(partition_of(source, 1), drafts(5, "s1"))
    df = streams.stream(source, startingOffsets="earliest").selectExpr(
        "value", "CAST(key AS STRING) AS key", "partition + 2 AS partition"
    )
    query = (
        df.writeStream.format("pulsar")
        .option("service.url", broker.service_url)
        .option("topic", target)
        .option("checkpointLocation", str(streams.checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    drain(query)
    expected = [[], [], sorted((m.value, m.key or "") for m in sent if m.partition == 0)]
    expected.append(sorted((m.value, m.key or "") for m in sent if m.partition == 1))
    assert landed(client, target, 4) == expected
