"""The ``tubemq`` format against a real TubeMQ 2.4.0 cluster and the official Java client.

Each test has a topic of its own (see ``support.tubemq_fixtures``), created with the others
once per session: the Java client writes what ``spark.read`` reads, ``df.write`` writes what
the Java client reads, and a stream reads its topic across two AvailableNow runs.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from support.readme import example, source
from support.streaming import available_now, drain
from support.tubemq_cluster import JavaProbe, TubeMQCluster
from support.tubemq_fixtures import (
    README_IN_TOPIC,
    README_OUT_TOPIC,
    SPARK_OFFSETS_TOPIC,
    SPARK_READ_TOPIC,
    SPARK_STREAM_TOPIC,
    SPARK_WRITE_TOPIC,
    TUBEMQ_PARTITIONS,
)
from support.tubemq_reading import load, rows

from pulsar_spark.tubemq.client.cluster import lookup_partitions
from pulsar_spark.tubemq.client.consumer import INDEX_ENTRY_SIZE
from pulsar_spark.tubemq.client.producer import TubeMQProducer

pytestmark = [pytest.mark.integration, pytest.mark.tubemq, pytest.mark.spark]


def partition_keys(topic: str) -> list[str]:
    return [f"1:{topic}:{p}" for p in range(TUBEMQ_PARTITIONS)]


def test_spark_reads_what_the_java_client_wrote(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    java_probe: JavaProbe,
) -> None:
    sent = [
        line.split() for line in java_probe.run("produce", tubemq_cluster.master, SPARK_READ_TOPIC)
    ]
    assert [word for word, *_ in sent] == ["SENT"] * 3
    partition = [f"1:{SPARK_READ_TOPIC}:{p}" for _, p, _ in sent]
    # The three messages are the store's first, at offsets 0, 28 and 56, in the order sent,
    # and each partition's first read starts at 0 and returns all of its messages.
    full = (
        b"java value 1",
        SPARK_READ_TOPIC,
        partition[0],
        0,
        {"$msgType$": "jtype", "$msgTime$": "202611251500", "color": "blue", "size": "9"},
        dt.datetime(2026, 11, 25, 15, 0),  # $msgTime$ as UTC, collected as naive UTC
    )
    plain = (b"java value 2", SPARK_READ_TOPIC, partition[1], 0, {}, None)
    attrs_only = (b"\x00\x01\x02\xff", SPARK_READ_TOPIC, partition[2], 0, {"only": "attrs"}, None)
    assert rows(load(spark, tubemq_cluster, SPARK_READ_TOPIC)) == sorted([full, plain, attrs_only])

    # From offset 28 on: the second and third messages, read from offset 28.
    from_second = json.dumps(dict.fromkeys(partition_keys(SPARK_READ_TOPIC), INDEX_ENTRY_SIZE))
    assert rows(
        load(spark, tubemq_cluster, SPARK_READ_TOPIC, startingOffsets=from_second)
    ) == sorted([(*plain[:3], 28, *plain[4:]), (*attrs_only[:3], 28, *attrs_only[4:])])
    # Ending at offset 0: nothing. Ending at 28: only the message at 0. Each partition's
    # only reply starts at 0 and scanned every entry, so it is cut before the partition's
    # first message at or after 28 (found by a read from 28, matched by message id).
    nothing = json.dumps(dict.fromkeys(partition_keys(SPARK_READ_TOPIC), 0))
    assert rows(load(spark, tubemq_cluster, SPARK_READ_TOPIC, endingOffsets=nothing)) == []
    to_second = json.dumps(dict.fromkeys(partition_keys(SPARK_READ_TOPIC), INDEX_ENTRY_SIZE))
    assert rows(load(spark, tubemq_cluster, SPARK_READ_TOPIC, endingOffsets=to_second)) == [full]


def test_offsets_are_exact_where_a_partition_has_the_store_alone(
    spark: SparkSession, tubemq_cluster: TubeMQCluster, tubemq_topics: tuple[str, ...]
) -> None:
    masters = tubemq_cluster.masters
    first, *_ = lookup_partitions(masters, SPARK_OFFSETS_TOPIC)
    with TubeMQProducer([first]) as producer:
        for i in range(4):
            producer.send(f"only {i}".encode())
    key = first.key

    def read(**options: str) -> list[tuple[bytes, int]]:
        df = load(spark, tubemq_cluster, SPARK_OFFSETS_TOPIC, **options)
        return [(r[0], r[3]) for r in rows(df)]

    every = [(f"only {i}".encode(), INDEX_ENTRY_SIZE * i) for i in range(4)]
    assert read() == every
    # every read scanned this partition's messages only: ranges are cut exactly
    assert read(endingOffsets=json.dumps({key: 2 * INDEX_ENTRY_SIZE})) == every[:2]
    window = {"startingOffsets": json.dumps({key: INDEX_ENTRY_SIZE})}
    assert read(**window, endingOffsets=json.dumps({key: 3 * INDEX_ENTRY_SIZE})) == every[1:3]


def test_java_client_reads_what_spark_wrote(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    java_probe: JavaProbe,
) -> None:
    binary = spark.createDataFrame(
        [
            (b"spark 0", {"$msgType$": "stype", "$msgTime$": "202611251545", "k": "v0"}),
            (b"spark 1", {"k": "v1"}),
            (b"spark 2", None),
            (bytes(range(250, 256)), {"$msgTime$": "202611251546"}),
        ],
        "value binary, attributes map<string,string>",
    ).coalesce(1)
    binary.write.format("tubemq").option("master.addresses", tubemq_cluster.master).option(
        "topic", SPARK_WRITE_TOPIC
    ).mode("append").save()
    strings = spark.createDataFrame([("text é",), ("text 2",)], "value string").coalesce(1)
    strings.write.format("tubemq").option("master.addresses", tubemq_cluster.master).option(
        "topic", SPARK_WRITE_TOPIC
    ).mode("append").save()

    lines = java_probe.run(
        "consume", tubemq_cluster.master, SPARK_WRITE_TOPIC, "java_reads_spark", "6"
    )
    assert sorted(line for line in lines if line.startswith("GOT ")) == sorted(
        [
            f"GOT {b'spark 0'.hex()} $msgType$=stype,$msgTime$=202611251545,k=v0"
            " stype 202611251545",
            f"GOT {b'spark 1'.hex()} k=v1 - -",
            f"GOT {b'spark 2'.hex()} - - -",
            f"GOT {bytes(range(250, 256)).hex()} $msgTime$=202611251546 - 202611251546",
            f"GOT {'text é'.encode().hex()} - - -",
            f"GOT {b'text 2'.hex()} - - -",
        ]
    )
    # Exactly those six, round-robin over the partitions from partition 0 (one task each).
    read_back = [(r[0], r[2]) for r in rows(load(spark, tubemq_cluster, SPARK_WRITE_TOPIC))]
    keys = partition_keys(SPARK_WRITE_TOPIC)
    assert read_back == sorted(
        [
            (b"spark 0", keys[0]),
            (b"spark 1", keys[1]),
            (b"spark 2", keys[2]),
            (bytes(range(250, 256)), keys[0]),
            ("text é".encode(), keys[0]),
            (b"text 2", keys[1]),
        ]
    )


def stream_once(spark: SparkSession, cluster: TubeMQCluster, checkpoint: Path) -> dict[int, list]:
    batches: dict[int, list] = {}

    def keep(df: DataFrame, batch_id: int) -> None:
        batches[batch_id] = sorted((bytes(r.value), r.partition) for r in df.collect())

    df = (
        spark.readStream.format("tubemq")
        .option("master.addresses", cluster.master)
        .option("topic", SPARK_STREAM_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
    )
    drain(available_now(df, keep, checkpoint))  # type: ignore[arg-type]
    return batches


def last_offsets(checkpoint: Path) -> dict[str, int]:
    last = max(
        (p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()),
        key=lambda p: int(p.name),
    )
    return json.loads(last.read_text().splitlines()[-1])


def test_available_now_stream_reads_each_message_once(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    tmp_path: Path,
) -> None:
    masters = tubemq_cluster.masters
    keys = partition_keys(SPARK_STREAM_TOPIC)
    with TubeMQProducer.open(masters, SPARK_STREAM_TOPIC) as producer:
        for i in range(6):
            producer.send(f"first {i}".encode())
    checkpoint = tmp_path / "checkpoint"

    first = stream_once(spark, tubemq_cluster, checkpoint)
    assert list(first.values()) == [sorted((f"first {i}".encode(), keys[i % 3]) for i in range(6))]
    assert last_offsets(checkpoint) == dict.fromkeys(keys, 6 * INDEX_ENTRY_SIZE)

    with TubeMQProducer.open(masters, SPARK_STREAM_TOPIC) as producer:
        for i in range(4):
            producer.send(f"second {i}".encode())
    second = stream_once(spark, tubemq_cluster, checkpoint)
    assert list(second.values()) == [
        sorted((f"second {i}".encode(), keys[i % 3]) for i in range(4))
    ]
    assert last_offsets(checkpoint) == dict.fromkeys(keys, 10 * INDEX_ENTRY_SIZE)

    third = stream_once(spark, tubemq_cluster, checkpoint)
    assert [batch for batch in third.values() if batch] == []


def test_option_errors_name_the_option(
    spark: SparkSession, tubemq_cluster: TubeMQCluster, tubemq_topics: tuple[str, ...]
) -> None:
    def fails(action: Any, message: str) -> None:
        with pytest.raises(AnalysisException) as info:
            action()
        assert message in str(info.value)

    fails(
        lambda: spark.read.format("tubemq").option("topic", SPARK_READ_TOPIC).load(),
        "option 'master.addresses' is required",
    )
    # Spark says whether a read is a batch only when it plans it: refused at the action.
    fails(
        lambda: load(spark, tubemq_cluster, SPARK_READ_TOPIC, startingOffsets="latest").collect(),
        "option 'startingOffsets': 'latest' would read nothing in a batch query",
    )
    fails(
        lambda: load(spark, tubemq_cluster, SPARK_READ_TOPIC, maxMessagesPerTrigger="5").collect(),
        "option 'maxMessagesPerTrigger' applies to streaming reads only",
    )
    no_partition = json.dumps({f"7:{SPARK_READ_TOPIC}:0": 0})
    fails(
        lambda: load(
            spark, tubemq_cluster, SPARK_READ_TOPIC, startingOffsets=no_partition
        ).collect(),
        f"option 'startingOffsets': the topic has no partition '7:{SPARK_READ_TOPIC}:0'",
    )
    fails(
        lambda: load(spark, tubemq_cluster, "no_such_topic").collect(),
        "topic 'no_such_topic' is not published on any broker",
    )
    key_column = spark.createDataFrame([(b"v", "k")], "value binary, key string")
    fails(
        lambda: (
            key_column.write.format("tubemq")
            .option("master.addresses", tubemq_cluster.master)
            .option("topic", SPARK_WRITE_TOPIC)
            .mode("append")
            .save()
        ),
        "column 'key' of type string cannot be written to TubeMQ",
    )


def test_readme_example_copies_a_topic(
    spark: SparkSession, tubemq_cluster: TubeMQCluster, tubemq_topics: tuple[str, ...]
) -> None:
    masters = tubemq_cluster.masters
    sent = [(f"readme {i}".encode(), f"n={i}" if i % 2 else None) for i in range(5)]
    with TubeMQProducer.open(masters, README_IN_TOPIC) as producer:
        for value, attributes in sent:
            producer.send(value, attributes)
    names = {
        "spark": spark,
        "masters": tubemq_cluster.master,
        "tubemq_topic": README_IN_TOPIC,
        "tubemq_copy": README_OUT_TOPIC,
    }
    exec(compile(example("tubemq"), source("tubemq"), "exec"), names)
    copied = [(r[0], r[4]) for r in rows(load(spark, tubemq_cluster, README_OUT_TOPIC))]
    assert copied == sorted(
        (value, {"n": str(i)} if i % 2 else {}) for i, (value, _) in enumerate(sent)
    )
