"""Where ``spark.readStream.format("pulsar")`` starts: latest by default, startingTime,
startingOffsets as JSON, and an initial offset that stays the same once resolved.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pulsar
import pytest
from support.streaming import (
    QUERY_TIMEOUT,
    Batches,
    Streams,
    drafts,
    driver,
    processing_time,
    publish,
)
from support.topics import partition_of
from support.waiting import wait_until

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_stream_starts_at_latest_by_default(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Without startingOffsets a stream starts after what the partitions hold when it starts
    (one of them empty then, which it reads from its first message)."""
    topic = pooled_partitioned_topic(2)
    streams.publish(partition_of(topic, 0), drafts(6, "old"), batch_size=3)
    batches = Batches()
    query = processing_time(streams.stream(topic), batches, "500 milliseconds")
    try:
        wait_until(lambda: query.lastProgress is not None, "the first trigger", QUERY_TIMEOUT)
        new = streams.publish(partition_of(topic, 0), drafts(4, "new0"), batch_size=3)
        new += streams.publish(partition_of(topic, 1), drafts(2, "new1"))
        wait_until(lambda: len(batches.all()) >= 6, "the new messages", QUERY_TIMEOUT)
        time.sleep(1.5)  # nothing else arrives
    finally:
        query.stop()
    assert sorted(batches.all()) == sorted(new)


def test_starting_time_skips_what_was_published_before(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """startingTime (publish time, ms) starts each partition at its first message published at
    or after that time; a partition with nothing newer starts after its end."""
    topic = pooled_partitioned_topic(2)
    old = streams.publish(partition_of(topic, 0), drafts(5, "old0"), batch_size=2)
    old += streams.publish(partition_of(topic, 1), drafts(5, "old1"))
    time.sleep(0.05)
    since = int(time.time() * 1000)
    time.sleep(0.05)
    new = streams.publish(partition_of(topic, 0), drafts(5, "new0"), batch_size=2)
    batches = Batches()
    streams.read_available_now(topic, batches, startingTime=str(since))
    assert batches.all() == new
    assert {m.partition for m in old} == {0, 1}


def test_starting_offsets_json_is_inclusive(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """A position given in startingOffsets is the first message read (here inside a batch);
    partitions not named start at the default for streams, latest."""
    topic = pooled_partitioned_topic(2)
    p0 = streams.publish(partition_of(topic, 0), drafts(10, "j0"), batch_size=4)
    streams.publish(partition_of(topic, 1), drafts(4, "j1"))
    assert p0[5].batch == 1
    batches = Batches()
    start = {partition_of(topic, 0): p0[5].position()}
    streams.read_available_now(topic, batches, startingOffsets=json.dumps(start))
    assert batches.all() == p0[5:]


def test_initial_offset_is_resolved_once(
    broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Spark asks for the initial offset twice: once to start the first latestOffset and
    once to start the first micro-batch. For startingOffsets=latest both answers must be the
    same, or the messages published in between would be skipped."""
    publish(client, topic_name, drafts(2, "a"))
    reader = driver(broker.service_url, topic_name)
    first = reader.initialOffset()
    publish(client, topic_name, drafts(3, "b"))
    assert reader.initialOffset() == first
