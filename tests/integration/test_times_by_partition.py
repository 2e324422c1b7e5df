"""startingOffsetsByTime / endingOffsetsByTime: each partition starts (and, in a batch read,
ends) at its own publish time, as Kafka's startingOffsetsByTimestamp gives them, found by the
same seeks as startingTime. Every partition read must be given a time, as in Kafka's source."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession
from support.streaming import QUERY_TIMEOUT, Batches, Streams, available_now, drafts
from support.topics import partition_of
from test_batch_read import Row, load, ordered, publish, read, varied

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def phases(client: Any, topic: str) -> list[dict[int, list[Row]]]:
    """Three phases of messages to partitions 0 and 1 (batched on 1), apart in publish time."""
    published = []
    for phase in range(3):
        if phase:
            time.sleep(0.05)
        published.append(
            {
                0: publish(client, partition_of(topic, 0), varied(3, f"ph{phase}p0")),
                1: publish(client, partition_of(topic, 1), varied(4, f"ph{phase}p1"), batch_size=2),
            }
        )
    for earlier, later in itertools.pairwise(published):
        last = max(r["publishTime"] for rows in earlier.values() for r in rows)
        assert last < min(r["publishTime"] for rows in later.values() for r in rows)
    return published


def start_ms(phase: dict[int, list[Row]]) -> int:
    """The earliest publish time of a phase, in ms."""
    return int(min(r["publishTime"] for rows in phase.values() for r in rows) // 1000)


def test_batch_reads_start_and_end_each_partition_at_its_own_time(
    spark: SparkSession, broker: LocalBroker, client: Any, pooled_partitioned_topic: Any
) -> None:
    topic = pooled_partitioned_topic(2)
    a, b, c = phases(client, topic)
    b_ms, c_ms = start_ms(b), start_ms(c)

    starting = json.dumps({topic: {"0": b_ms, "1": c_ms}})
    assert read(spark, broker, topic=topic, startingOffsetsByTime=starting) == ordered(
        b[0] + c[0] + c[1]
    )
    ending = json.dumps({topic: {"0": c_ms, "1": b_ms}})
    assert read(spark, broker, topic=topic, endingOffsetsByTime=ending) == ordered(
        a[0] + b[0] + a[1]
    )
    both = read(
        spark,
        broker,
        topic=topic,
        startingOffsetsByTime=json.dumps({topic: {"0": b_ms, "1": 0}}),
        endingOffsetsByTime=json.dumps({topic: {"0": c_ms, "1": c_ms}}),
    )
    assert both == ordered(b[0] + a[1] + b[1])
    # one number for a topic: all its partitions, as startingTime
    assert read(spark, broker, topic=topic, startingOffsetsByTime=json.dumps({topic: c_ms})) == (
        ordered(c[0] + c[1])
    )
    # a time after every message: that partition reads nothing
    future = int(time.time() * 1000) + 3_600_000
    late = json.dumps({topic: {"0": future, "1": c_ms}})
    assert read(spark, broker, topic=topic, startingOffsetsByTime=late) == ordered(c[1])


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (
            {"0": 5},
            "option 'startingOffsetsByTime' gives no time for {topic}-partition-1: as in "
            "Kafka's startingOffsetsByTimestamp, every partition read needs one",
        ),
        (
            {"0": 5, "1": 5, "2": 5},
            "option 'startingOffsetsByTime' names {topic}-partition-2, which the read does not "
            "include",
        ),
    ],
)
def test_every_partition_read_and_only_those_must_have_a_time(
    spark: SparkSession,
    broker: LocalBroker,
    pooled_partitioned_topic: Any,
    given: dict[str, int],
    error: str,
) -> None:
    topic = pooled_partitioned_topic(2)
    full_name = f"persistent://public/default/{topic}"
    df = load(spark, broker, topic=topic, startingOffsetsByTime=json.dumps({topic: given}))
    with pytest.raises(AnalysisException) as info:
        df.collect()
    assert error.format(topic=full_name) in str(info.value)


def test_streams_start_each_partition_at_its_own_time(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """A stream's first offsets: partition 0 from its first message published at or after
    its time (inside the second batched entry's time), partition 1 from a later time; a second
    run of the query goes on from its checkpoint, not from the times."""
    topic = pooled_partitioned_topic(2)
    p0, p1 = partition_of(topic, 0), partition_of(topic, 1)
    old = streams.publish(p0, drafts(4, "old0"), batch_size=2)
    old += streams.publish(p1, drafts(3, "old1"))
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    new0 = streams.publish(p0, drafts(5, "new0"), batch_size=2)
    new1 = streams.publish(p1, drafts(3, "new1"))
    time.sleep(0.05)
    late = int(time.time() * 1000)
    time.sleep(0.05)
    last1 = streams.publish(p1, drafts(2, "last1"))
    times = json.dumps({topic: {"0": middle, "1": late}})
    batches = Batches()
    streams.read_available_now(topic, batches, startingOffsetsByTime=times)
    assert batches.all() == new0 + last1
    assert {m.partition for m in old + new1} == {0, 1}

    more = streams.publish(p1, drafts(2, "more1"))
    batches.by_id.clear()
    streams.read_available_now(topic, batches, startingOffsetsByTime=times)
    assert batches.all() == more


def test_a_stream_refuses_a_partition_without_a_time(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    topic = pooled_partitioned_topic(2)
    full_name = f"persistent://public/default/{topic}"
    df = streams.stream(topic, startingOffsetsByTime=json.dumps({topic: {"1": 0}}))
    query = available_now(df, Batches(), streams.checkpoint)
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(QUERY_TIMEOUT)
    expected = f"option 'startingOffsetsByTime' gives no time for {full_name}-partition-0"
    assert expected in str(info.value)
