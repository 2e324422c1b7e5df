"""Streams of the ``tubemq`` format into Parquet while a writer publishes, against a real
TubeMQ 2.4.0 cluster: exactly once across query restarts and across the broker being killed
and restarted, and micro-batches limited by ``maxMessagesPerTrigger``; and a read whose
heartbeats keep its registration through a pause longer than the broker's timeout.

The writer sends round-robin over the three partitions of one store, so every GetMessage
reply scans other partitions' index entries and the messages' own offsets are unknown: the
case where a micro-batch's last reply runs past its planned end and must be cut there.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from support.decoding import strings
from support.streaming import QUERY_TIMEOUT, drain, to_parquet
from support.tubemq_cluster import TubeMQCluster
from support.tubemq_fixtures import (
    HEARTBEAT_TOPIC,
    STREAM_LIMIT_TOPIC,
    STREAM_ONCE_TOPIC,
    STREAM_RESTART_TOPIC,
)
from support.waiting import wait_until

from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.tubemq.client.cluster import connect, lookup_partitions
from pulsar_spark.tubemq.client.consumer import PartitionConsumer, heartbeats
from pulsar_spark.tubemq.client.producer import Outgoing, TubeMQProducer
from pulsar_spark.tubemq.errors import TubeMQHeartbeatNodeMissingError

pytestmark = [pytest.mark.integration, pytest.mark.tubemq, pytest.mark.spark]

Row = tuple[bytes, tuple[tuple[str, str], ...], str]
"""value, attributes (sorted items), partition key."""


class Writer(threading.Thread):
    """Publishes ``count`` messages in groups of ``group`` from a thread, remembering each as
    a :data:`Row` once the broker acknowledged it."""

    def __init__(
        self, cluster: TubeMQCluster, topic: str, tag: str, count: int, *, pause: float = 0.0
    ) -> None:
        super().__init__(daemon=True)
        self.masters = cluster.masters
        self.topic, self.tag, self.count, self.pause = topic, tag, count, pause
        self.sent: list[Row] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with TubeMQProducer.open(self.masters, self.topic) as producer:
                for first in range(0, self.count, 10):
                    numbers = range(first, min(first + 10, self.count))
                    group = [
                        Outgoing(f"{self.tag}-{i:05d}".encode(), f"i={i},tag={self.tag}")
                        for i in numbers
                    ]
                    for i, sent in zip(numbers, producer.send_all(group), strict=True):
                        attributes = (("i", str(i)), ("tag", self.tag))
                        self.sent.append(
                            (f"{self.tag}-{i:05d}".encode(), attributes, sent.partition.key)
                        )
                    time.sleep(self.pause)
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def publish(self) -> list[Row]:
        """Publish every message now; what was sent."""
        self.start()
        return self.finish()

    def finish(self) -> list[Row]:
        self.join(QUERY_TIMEOUT)
        assert not self.is_alive(), "the writer did not finish"
        assert self.error is None, self.error
        assert len(self.sent) == self.count
        return self.sent


@dataclass(frozen=True)
class Stage:
    """What the stream tests share: Spark, the cluster (its topics created), a folder."""

    spark: SparkSession
    cluster: TubeMQCluster
    tmp_path: Path


@pytest.fixture
def stage(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    tmp_path: Path,
) -> Stage:
    return Stage(spark, tubemq_cluster, tmp_path)


def as_row(row: Any) -> Row:
    return (bytes(row.value), tuple(sorted(row.attributes.items())), row.partition)


def wait_until_published(cluster: TubeMQCluster, topic: str) -> Row:
    """Send one message as soon as the (restarted) broker takes it; that message."""
    masters = cluster.masters
    deadline = time.monotonic() + QUERY_TIMEOUT
    while True:
        try:
            with TubeMQProducer.open(masters, topic) as producer:
                sent = producer.send(b"ready", "tag=ready")
        except PulsarSparkError:
            assert time.monotonic() < deadline, "the restarted broker takes no messages"
            time.sleep(1)
        else:
            return (b"ready", (("tag", "ready"),), sent.partition.key)


def stream(cluster: TubeMQCluster, spark: SparkSession, topic: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("tubemq").option("master.addresses", cluster.master)
    return (
        reader.option("topic", topic)
        .option("startingOffsets", "earliest")
        .options(**options)
        .load()
    )


def written(spark: SparkSession, out: Path) -> list[Row]:
    """Every row of the Parquet output, sorted (duplicates kept)."""
    return sorted(as_row(r) for r in spark.read.parquet(str(out)).collect())


def run_for(query: StreamingQuery, seconds: float) -> None:
    """Let ``query`` run for ``seconds``, then stop it (it must not have failed)."""
    time.sleep(seconds)
    assert query.exception() is None
    query.stop()


# The broker drops a consumer registration that sent nothing for consumerRegTimeoutMs (35 s
# in the cluster's broker.ini; the broker takes no less than 20 s).
REGISTRATION_TIMEOUT = 35


def test_heartbeats_keep_a_paused_read_registered(
    tubemq_cluster: TubeMQCluster, tubemq_topics: tuple[str, ...]
) -> None:
    sent = Writer(tubemq_cluster, HEARTBEAT_TOPIC, "beat", 30).publish()
    masters = tubemq_cluster.masters
    first, second, _ = lookup_partitions(masters, HEARTBEAT_TOPIC)
    with connect(first, 10) as one, connect(second, 10) as other:
        beating = PartitionConsumer(one, first, "heartbeat_group", "heartbeat-0")
        silent = PartitionConsumer(other, second, "heartbeat_group", "heartbeat-1")
        beating.register(0)
        silent.register(0)
        with heartbeats(beating, 5.0):
            time.sleep(REGISTRATION_TIMEOUT + 10)  # a reader that takes its time
            # with heartbeats the registration stayed: the read goes on; without, it is gone
            got = []
            while (batch := beating.fetch()) is not None:
                got += strings(batch.messages.values)
        assert got == [value for value, _, key in sent if key == first.key]
        with pytest.raises(TubeMQHeartbeatNodeMissingError):
            silent.fetch()


def test_stream_is_exactly_once_while_a_writer_publishes_across_restarts(
    stage: Stage,
) -> None:
    spark, tubemq_cluster, tmp_path = stage.spark, stage.cluster, stage.tmp_path
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    writer = Writer(tubemq_cluster, STREAM_ONCE_TOPIC, "once", 3000, pause=0.05)
    writer.start()
    df = stream(tubemq_cluster, spark, STREAM_ONCE_TOPIC)
    for _ in range(2):  # two runs stopped while the writer publishes, then a restart
        run_for(to_parquet(df, out, checkpoint, processingTime="200 milliseconds"), 6)
    sent = writer.finish()
    drain(to_parquet(df, out, checkpoint, availableNow=True))
    assert written(spark, out) == sorted(sent)
    assert len(set(sent)) == 3000


def test_maximum_messages_per_trigger_limits_each_micro_batch(
    stage: Stage,
) -> None:
    spark, tubemq_cluster, tmp_path = stage.spark, stage.cluster, stage.tmp_path
    sent = Writer(tubemq_cluster, STREAM_LIMIT_TOPIC, "limit", 300).publish()
    sizes: list[int] = []
    rows: list[Row] = []

    def keep(df: DataFrame, batch_id: int) -> None:
        found = [as_row(r) for r in df.collect()]
        sizes.append(len(found))
        rows.extend(found)

    df = stream(tubemq_cluster, spark, STREAM_LIMIT_TOPIC, maxMessagesPerTrigger="100")
    query = (
        df.writeStream.foreachBatch(keep)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    drain(query)
    assert sorted(rows) == sorted(sent)
    # 100 messages a micro-batch, each partition's share planned from the offsets
    assert sizes == [100, 100, 100]


def test_stream_is_exactly_once_across_a_broker_killed_and_restarted(
    stage: Stage,
) -> None:
    spark, tubemq_cluster, tmp_path = stage.spark, stage.cluster, stage.tmp_path
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    before = Writer(tubemq_cluster, STREAM_RESTART_TOPIC, "before", 2000).publish()
    # The broker keeps new messages in memory and writes them to its files within
    # memCacheFlushIntvl (20 s by default, later on a busy machine); what SIGKILL finds only
    # in memory is lost, so the kill waits until they are in the files.
    wait_until(
        lambda: tubemq_cluster.flushed_messages(STREAM_RESTART_TOPIC) >= len(before),
        "the broker to write the messages to its files",
        timeout=180,
    )
    df = stream(tubemq_cluster, spark, STREAM_RESTART_TOPIC, maxMessagesPerTrigger="200")
    query = to_parquet(df, out, checkpoint, processingTime="200 milliseconds")
    deadline = time.monotonic() + QUERY_TIMEOUT
    while not (out / "_spark_metadata" / "0").exists():
        assert time.monotonic() < deadline and query.exception() is None
        time.sleep(0.1)
    command = tubemq_cluster.kill_broker()
    time.sleep(3)
    tubemq_cluster.restart_broker(command)
    ready = wait_until_published(tubemq_cluster, STREAM_RESTART_TOPIC)
    after = Writer(tubemq_cluster, STREAM_RESTART_TOPIC, "after", 500).publish()
    sent = [*before, ready, *after]
    query.awaitTermination(10)
    if query.isActive:
        query.stop()
    drain(to_parquet(df, out, checkpoint, availableNow=True))
    assert written(spark, out) == sorted(sent)
