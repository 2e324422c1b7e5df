"""``filterConds`` and ``minPartitions`` of the ``tubemq`` format, against a real TubeMQ 2.4.0
cluster and the official Java client.

Messages of three types and none are written by the Java producer (``putSystemHeader``) and by
``df.write`` (the ``$msgType$`` attribute); a filtered ``spark.read`` returns the messages of the
chosen types only, as the Java consumer subscribed with the same filters does. A topic of two
partitions read with ``minPartitions=8`` gives eight tasks and the same rows, each once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from support.streaming import available_now, drain
from support.tubemq_cluster import JavaProbe, TubeMQCluster
from support.tubemq_fixtures import FILTER_TOPIC, SPLIT_PARTITIONS, SPLIT_TOPIC
from support.tubemq_reading import load, rows, wait_until_flushed

from pulsar_spark.tubemq.client.cluster import connect, lookup_partitions
from pulsar_spark.tubemq.client.consumer import INDEX_ENTRY_SIZE, PartitionConsumer
from pulsar_spark.tubemq.client.producer import Outgoing, TubeMQProducer

pytestmark = [pytest.mark.integration, pytest.mark.tubemq, pytest.mark.spark]

# The message type of each message each writer sends, in order ("-": none).
TYPES = ["ta", "tb", "tc", "-"] * 3

# (value, partition key, message type or "-", the message's own store offset) of a message sent
Sent = tuple[bytes, str, str, int]


def without_offsets(found: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted((value, topic, key, attrs, time) for value, topic, key, _, attrs, time in found)


def check_offsets(found: list[tuple[Any, ...]], own: dict[bytes, int], piece: int) -> None:
    """Each row's offset is where the broker's reply that held it started: an index entry
    between the start of the row's task (the tasks cut the store's entries into runs of
    ``piece`` bytes from 0) and the message's own offset. Replies end where the broker's
    reads do, which depends on what it had flushed to its files when."""
    for value, _, _, offset, _, _ in found:
        start = own[value] // piece * piece
        assert offset % INDEX_ENTRY_SIZE == 0
        assert start <= offset <= own[value], (value, offset)


@pytest.fixture(scope="module")
def typed_messages(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    java_probe: JavaProbe,
) -> list[tuple[bytes, str, str]]:
    """Twelve messages from the Java producer, then twelve from ``df.write``, of the types of
    :data:`TYPES`, all flushed (under the broker's default consume rule a filtered read is
    served from its files only). They are the store's only messages, stored in that order."""
    sent = java_probe.run("produce-typed", tubemq_cluster.master, FILTER_TOPIC, "java", *TYPES)
    assert [line.split()[0] for line in sent] == ["SENT"] * len(TYPES)
    java = [
        (f"java {i}".encode(), f"1:{FILTER_TOPIC}:{line.split()[1]}", TYPES[i], i)
        for i, line in enumerate(sent)
    ]
    ours = spark.createDataFrame(
        [
            (f"spark {i}", {"$msgType$": kind, "n": str(i)} if kind != "-" else {"n": str(i)})
            for i, kind in enumerate(TYPES)
        ],
        "value string, attributes map<string,string>",
    ).coalesce(1)
    ours.write.format("tubemq").option("master.addresses", tubemq_cluster.master).option(
        "topic", FILTER_TOPIC
    ).mode("append").save()
    # one task, so round-robin from partition 0
    spark_rows = [
        (f"spark {i}".encode(), f"1:{FILTER_TOPIC}:{i % 3}", kind, len(TYPES) + i)
        for i, kind in enumerate(TYPES)
    ]
    wait_until_flushed(tubemq_cluster, FILTER_TOPIC, 2 * len(TYPES))
    return [(v, key, kind, n * INDEX_ENTRY_SIZE) for v, key, kind, n in java + spark_rows]


def expected(sent: list[Sent], types: set[str]) -> list[tuple[Any, ...]]:
    """The rows, without their offsets, of a read filtered on ``types``."""
    out = []
    for value, partition, kind, _ in sent:
        if kind not in types:
            continue
        attributes = {"$msgType$": kind}
        if value.startswith(b"spark"):
            attributes["n"] = value.split()[1].decode()
        out.append((value, FILTER_TOPIC, partition, attributes, None))
    return sorted(out)


def own_offsets(sent: list[Sent]) -> dict[bytes, int]:
    return {value: offset for value, *_, offset in sent}


def test_a_filtered_read_returns_the_chosen_types_as_the_java_consumer_does(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    java_probe: JavaProbe,
    typed_messages: list[Sent],
) -> None:
    whole_store = own_offsets(typed_messages)[b"spark 11"] + INDEX_ENTRY_SIZE
    chosen = rows(load(spark, tubemq_cluster, FILTER_TOPIC, filterConds="tc, ta"))
    assert without_offsets(chosen) == expected(typed_messages, {"ta", "tc"})
    assert len(chosen) == 12
    check_offsets(chosen, own_offsets(typed_messages), whole_store)
    one_type = rows(load(spark, tubemq_cluster, FILTER_TOPIC, filterConds="tb"))
    assert without_offsets(one_type) == expected(typed_messages, {"tb"})
    check_offsets(one_type, own_offsets(typed_messages), whole_store)
    assert rows(load(spark, tubemq_cluster, FILTER_TOPIC, filterConds="nothing_of_this")) == []
    # unfiltered: all 24
    assert len(load(spark, tubemq_cluster, FILTER_TOPIC).collect()) == 2 * len(TYPES)

    lines = java_probe.run(
        "consume", tubemq_cluster.master, FILTER_TOPIC, "java_filtered", "12", "ta,tc"
    )
    got = sorted(line for line in lines if line.startswith("GOT "))
    assert got == sorted(
        f"GOT {value.hex()} {','.join(f'{k}={v}' for k, v in attributes.items())} "
        f"{attributes['$msgType$']} -"
        for value, _, _, attributes, _ in expected(typed_messages, {"ta", "tc"})
    )


def test_filtered_and_split_reads_together(
    spark: SparkSession, tubemq_cluster: TubeMQCluster, typed_messages: list[Sent]
) -> None:
    df = load(spark, tubemq_cluster, FILTER_TOPIC, filterConds="ta,tb", minPartitions="9")
    assert df.rdd.getNumPartitions() == 9
    found = rows(df)
    assert without_offsets(found) == expected(typed_messages, {"ta", "tb"})
    # each partition's 24 entries in three tasks of 8 (224 bytes of index)
    check_offsets(found, own_offsets(typed_messages), 8 * INDEX_ENTRY_SIZE)


def test_filter_errors(
    spark: SparkSession, tubemq_cluster: TubeMQCluster, tubemq_topics: tuple[str, ...]
) -> None:
    # refused when the DataFrame is defined, naming the option
    with pytest.raises(AnalysisException, match="option 'filterConds' takes message types"):
        load(spark, tubemq_cluster, FILTER_TOPIC, filterConds="ta,,tc")
    too_many = ",".join(f"t{i}" for i in range(501))
    with pytest.raises(AnalysisException, match="TubeMQ takes at most 500 filter items"):
        load(spark, tubemq_cluster, FILTER_TOPIC, filterConds=too_many)
    # The limit is the Java client's (and the web APIs'): the broker's register call takes more.
    first = lookup_partitions(tubemq_cluster.masters, FILTER_TOPIC)[0]
    with connect(first, 10.0) as connection:
        consumer = PartitionConsumer(
            connection,
            first,
            "filter_limit",
            "filter_limit_client",
            filters=tuple(f"t{i}" for i in range(600)),
        )
        assert consumer.register(0).errCode == 200
        consumer.unregister()


def test_min_partitions_cuts_each_partition_into_tasks(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    tmp_path: Path,
) -> None:
    count = 40
    with TubeMQProducer.open(tubemq_cluster.masters, SPLIT_TOPIC) as producer:
        producer.send_all([Outgoing(f"split {i}".encode()) for i in range(count)])
    # flushed, so that every read below gets one reply from the files
    wait_until_flushed(tubemq_cluster, SPLIT_TOPIC, count)
    keys = [f"1:{SPLIT_TOPIC}:{p}" for p in range(SPLIT_PARTITIONS)]
    # message i is the store's i-th (offset 28 i), on partition i % 2
    own = {f"split {i}".encode(): i * INDEX_ENTRY_SIZE for i in range(count)}
    every = sorted(
        (f"split {i}".encode(), SPLIT_TOPIC, keys[i % 2], {}, None) for i in range(count)
    )
    whole = load(spark, tubemq_cluster, SPLIT_TOPIC)
    assert whole.rdd.getNumPartitions() == SPLIT_PARTITIONS
    found = rows(whole)
    assert without_offsets(found) == every
    check_offsets(found, own, count * INDEX_ENTRY_SIZE)

    split = load(spark, tubemq_cluster, SPLIT_TOPIC, minPartitions="8")
    assert split.rdd.getNumPartitions() == 8
    found = rows(split)
    assert without_offsets(found) == every  # each message once
    # each partition's 40 entries in 4 tasks of 10 (280 bytes of index)
    check_offsets(found, own, 10 * INDEX_ENTRY_SIZE)
    assert load(spark, tubemq_cluster, SPLIT_TOPIC, minPartitions="2").rdd.getNumPartitions() == 2

    # a stream's micro-batch is cut the same way
    tasks: list[int] = []
    seen: list[bytes] = []

    def keep(df: DataFrame, batch_id: int) -> None:
        tasks.append(df.rdd.getNumPartitions())
        seen.extend(bytes(r.value) for r in df.collect())

    stream = (
        spark.readStream.format("tubemq")
        .option("master.addresses", tubemq_cluster.master)
        .option("topic", SPLIT_TOPIC)
        .option("startingOffsets", "earliest")
        .option("minPartitions", "8")
        .load()
    )
    drain(available_now(stream, keep, tmp_path / "checkpoint"))  # type: ignore[arg-type]
    assert tasks[:1] == [8]
    assert sorted(seen) == sorted(f"split {i}".encode() for i in range(count))
