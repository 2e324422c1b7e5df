"""Spark jobs through broker restarts, with no failed task.

Spark in local mode does not retry a failed task (``spark.task.maxFailures`` is 1), so a job
that succeeds here had no failed task: every restart was ridden through inside the tasks and
the driver. The broker is killed (SIGKILL) and started again on the same port and data while
a streaming read copies a topic and while a batch write sends one.
"""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from support.official import firsts_held, publish_keyed, send_one_to_each

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "persistent://public/default/restarts"


@pytest.fixture
def restartable() -> Iterator[LocalBroker]:
    broker = LocalBroker.start(partitioned_topics={"restarts": 4})
    yield broker
    broker.stop()


class Restarter:
    """Kills and restarts the broker ``times`` times, ``every`` seconds apart, in a thread."""

    def __init__(self, broker: LocalBroker, times: int, every: float) -> None:
        self.broker = broker
        self.times = times
        self.every = every
        self.outages: list[float] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Restarter:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._thread.join()

    def _run(self) -> None:
        for _ in range(self.times):
            time.sleep(self.every)
            started = time.monotonic()
            assert self.broker.pid is not None
            os.kill(self.broker.pid, signal.SIGKILL)
            self.broker.restart()
            self.outages.append(time.monotonic() - started)


def publish(url: str, count: int) -> list[bytes]:
    return publish_keyed(url, TOPIC, [b"s-%06d" % i for i in range(count)])


def stored(spark: SparkSession, url: str) -> list[bytes]:
    df = spark.read.format("pulsar").option("service.url", url).option("topic", TOPIC).load()
    return [bytes(r["value"]) for r in df.select("value").collect()]


@pytest.mark.parametrize("subscription", [None, "through-restarts"])
def test_streaming_read_through_restarts(
    spark: SparkSession, restartable: LocalBroker, tmp_path: Path, subscription: str | None
) -> None:
    """With ``subscriptionName`` too: the durable subscription's acknowledgements ride through
    the restarts, and afterwards it stands exactly after the last message read."""
    url = restartable.service_url
    published = publish(url, 60_000)
    seen: list[bytes] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        seen.extend(bytes(r["value"]) for r in batch.select("value").collect())
        time.sleep(0.2)  # spread the query over the restarts

    options = {"subscriptionName": subscription} if subscription else {}
    with Restarter(restartable, times=3, every=1.5) as restarter:
        query = (
            spark.readStream.format("pulsar")
            .option("service.url", url)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", "5000")
            .option("pulsar.client.operationTimeoutMs", "20000")
            .options(**options)
            .load()
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(180), "the query did not finish"
    assert query.exception() is None
    assert len(restarter.outages) == 3
    assert sorted(seen) == sorted(published)  # every message exactly once
    if subscription:
        partitions = [f"{TOPIC}-partition-{p}" for p in range(4)]
        assert firsts_held(url, partitions, subscription) == [[]] * 4
        later = send_one_to_each(url, partitions, "later")
        assert firsts_held(url, partitions, subscription) == [[v] for v in later]


def test_batch_write_through_restarts(spark: SparkSession, restartable: LocalBroker) -> None:
    url = restartable.service_url
    rows = 200_000
    df = spark.range(rows, numPartitions=4).selectExpr(
        "cast(id % 97 as string) as key", "format_string('w-%07d', id) as value"
    )
    with Restarter(restartable, times=2, every=1.0) as restarter:
        (
            df.write.format("pulsar")
            .option("service.url", url)
            .option("topic", TOPIC)
            .option("pulsar.client.operationTimeoutMs", "20000")
            .option("pulsar.producer.maxPendingMessages", "2000")
            .mode("append")
            .save()
        )
    assert len(restarter.outages) == 2
    counts = collections.Counter(stored(spark, url))
    assert set(counts) == {b"w-%07d" % i for i in range(rows)}  # nothing lost
    duplicates = sum(n - 1 for n in counts.values())
    # at most what every producer (4 tasks x 4 partitions) had in flight, per outage
    assert duplicates <= 2 * 16 * 2000, duplicates
