"""minMessagesPerTrigger and maxTriggerDelay (a micro-batch waits for that many messages, or
until that long has passed since the last one, as in Spark's Kafka source), and
maxMessagesPerTrigger together with maxBytesPerTrigger (whichever is tighter ends each
micro-batch), on each broker, across query restarts."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from pyspark.sql.streaming import StreamingQuery
from support.streaming import QUERY_TIMEOUT, Batches, Streams, drafts
from support.topics import partition_of
from support.waiting import wait_until
from test_stream_bytes_limit import split

from pulsar_spark.source.offsets import NOTHING_CONSUMED

pytestmark = [pytest.mark.integration, pytest.mark.spark]

QUIET = 4.0
"""Seconds a waiting query is watched to start no micro-batch (it polls every few ms)."""


def test_a_micro_batch_waits_for_the_minimum_across_a_restart(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """minMessagesPerTrigger=20 with a delay far beyond the test: the query's first trigger
    reads what is there at once (5 messages); 12 more start no micro-batch; 8 more make 20, read
    in one micro-batch over both partitions. Started again, the query reads the 3 messages
    published meanwhile at once (its first trigger), then waits for 20 again."""
    topic = pooled_partitioned_topic(2)
    p0, p1 = partition_of(topic, 0), partition_of(topic, 1)
    batches = Batches()

    def start() -> StreamingQuery:
        df = streams.stream(
            topic, startingOffsets="earliest", minMessagesPerTrigger="20", maxTriggerDelay="10m"
        )
        return (
            df.writeStream.foreachBatch(batches)
            .option("checkpointLocation", str(streams.checkpoint))
            .start()
        )

    def batch(number: int) -> None:
        wait_until(lambda: len(batches.by_id) > number, f"micro-batch {number}", QUERY_TIMEOUT)
        assert query.exception() is None

    def quiet(count: int) -> None:
        time.sleep(QUIET)
        assert query.exception() is None
        assert len(batches.by_id) == count

    first = streams.publish(p0, drafts(5, "a"))
    query = start()
    try:
        batch(0)
        assert batches.by_id[0] == first
        few = streams.publish(p0, drafts(6, "b")) + streams.publish(p1, drafts(6, "c"))
        quiet(1)
        enough = few + streams.publish(p1, drafts(8, "d"), batch_size=4)
        batch(1)
        assert batches.by_id[1] == sorted(enough)
        quiet(2)
    finally:
        query.stop()
    meanwhile = streams.publish(p1, drafts(3, "e"))
    query = start()
    try:
        batch(2)
        assert batches.by_id[2] == meanwhile
        short = streams.publish(p0, drafts(19, "f"), batch_size=5)
        quiet(3)
        last = short + streams.publish(p1, drafts(1, "g"))
        batch(3)
        assert batches.by_id[3] == sorted(last)
        quiet(4)
    finally:
        query.stop()
    assert split(batches) == [(5, 0), (6, 14), (0, 3), (19, 1)]


def test_the_delay_since_the_last_trigger_ends_the_wait(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """The driver on a clock the test moves, minMessagesPerTrigger=50 and maxTriggerDelay=30s:
    after the first trigger, 10 messages wait until 30 s have passed, then are read; the
    clock restarts then, and 49 more wait until 50 are there or 30 s pass again."""
    topic = pooled_partitioned_topic(2)
    p0, p1 = partition_of(topic, 0), partition_of(topic, 1)
    reader = streams.driver(topic, minMessagesPerTrigger="50", maxTriggerDelay="30s")
    now = [100.0]
    assert reader._wait is not None
    reader._wait._clock = lambda: now[0]
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    nothing = NOTHING_CONSUMED.to_json()
    assert start == {p0: nothing, p1: nothing}
    assert reader.latestOffset(start, limit) == start  # the first trigger: nothing there

    sent = streams.publish(p0, drafts(6, "a"), batch_size=3) + streams.publish(p1, drafts(4, "b"))
    now[0] += 29.5
    assert reader.latestOffset(start, limit) == start
    now[0] += 0.5
    end = reader.latestOffset(start, limit)
    assert end == {
        p0: sent[5].position(-1),
        p1: sent[9].position(-1),
    }

    more = streams.publish(p1, drafts(49, "c", first=4), batch_size=7)
    now[0] += 29.9
    assert reader.latestOffset(end, limit) == end
    one = streams.publish(p0, drafts(1, "d", first=6))
    assert reader.latestOffset(end, limit) == {
        p0: one[0].position(-1),
        p1: more[-1].position(-1),
    }
    reader.stop()


def test_the_minimum_goes_with_a_maximum(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """minMessagesPerTrigger=5 with maxMessagesPerTrigger=3 (Spark hands the reader the
    maximum; the reader adds the minimum): 4 messages wait, a fifth lets a micro-batch of 3
    run, and the 2 left wait again for 5."""
    topic = pooled_partitioned_topic(2)
    p0 = partition_of(topic, 0)
    reader = streams.driver(
        topic, minMessagesPerTrigger="5", maxMessagesPerTrigger="3", maxTriggerDelay="1h"
    )
    limit = reader.getDefaultReadLimit()
    start = reader.initialOffset()
    assert reader.latestOffset(start, limit) == start  # the first trigger: nothing there
    sent = streams.publish(p0, drafts(4, "a"), batch_size=2)
    assert reader.latestOffset(start, limit) == start
    sent += streams.publish(p0, drafts(1, "b"))
    end = reader.latestOffset(start, limit)
    assert end == {**start, p0: sent[2].position()}
    assert reader.latestOffset(end, limit) == end
    reader.stop()


def test_available_now_does_not_wait_for_the_minimum(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Under Trigger.AvailableNow nothing more will arrive, so minMessagesPerTrigger does not
    hold micro-batches back: 5 messages in micro-batches of at most 2, all read."""
    topic = pooled_partitioned_topic(2)
    sent = streams.publish(partition_of(topic, 0), drafts(5, "a"))
    batches = Batches()
    streams.read_available_now(
        topic,
        batches,
        startingOffsets="earliest",
        minMessagesPerTrigger="100",
        maxMessagesPerTrigger="2",
    )
    assert batches.sizes() == [2, 2, 1]
    assert batches.all() == sent


def test_max_messages_and_max_bytes_the_tighter_ends_each_micro_batch(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """60 and 30 messages of 9 bytes in batches of 7, at most 14 messages and 180 bytes a
    micro-batch: the message budget is the tighter (126 bytes), shared evenly (7 and 7) while
    both partitions have messages, then going to partition 0. A second run goes on from the
    checkpoint; with values of 90 bytes the byte budget is the tighter one."""
    topic = pooled_partitioned_topic(2)
    p0, p1 = partition_of(topic, 0), partition_of(topic, 1)
    first = streams.publish(p0, drafts(60, "p0"), batch_size=7)
    first += streams.publish(p1, drafts(30, "p1"), batch_size=7)
    assert {len(m.value) for m in first} == {9}
    limits = {"maxMessagesPerTrigger": "14", "maxBytesPerTrigger": "180"}
    batches = Batches()
    query = streams.read_available_now(topic, batches, startingOffsets="earliest", **limits)
    assert split(batches) == [(7, 7)] * 4 + [(12, 2), (14, 0), (6, 0)]
    assert sorted(batches.all()) == sorted(first)
    for partition in (0, 1):
        read = [m for m in batches.all() if m.partition == partition]
        assert read == [m for m in first if m.partition == partition]
    # the first micro-batch ends inside the second batched entry of each partition
    assert query.recentProgress[0].numInputRows == 14

    second = streams.publish(p0, drafts(3, "p0", first=60), batch_size=7)
    second += streams.publish(p1, [(None, b"v" * 90, {})] * 3)
    batches.by_id.clear()
    streams.read_available_now(topic, batches, startingOffsets="earliest", **limits)
    # first messages: 9 + 90 bytes, leaving 81: p0's next two (18), p1's next (90) does not
    # fit; then p1's first (90) and its next, which fits in the 90 left
    assert sorted(batches.by_id) == [7, 8]
    assert split(batches) == [(3, 1), (0, 2)]
    assert sorted(batches.all()) == sorted(second)
