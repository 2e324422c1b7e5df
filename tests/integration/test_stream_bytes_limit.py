"""maxBytesPerTrigger: each micro-batch holds at most that many payload bytes (the values' sizes
as published), counted exactly, also inside batched entries; every partition with messages
moves by at least one, so a message larger than the limit is read alone. The ends are in the
checkpoint like maxMessagesPerTrigger's, so a query started again goes on from the last."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from support.streaming import Batches, Draft, Streams, drafts
from support.topics import partition_of

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def split(batches: Batches) -> list[tuple[int, int]]:
    """Messages of partitions 0 and 1 in each micro-batch, in order."""
    return [
        (sum(m.partition == 0 for m in b), sum(m.partition == 1 for m in b))
        for b in (batches.by_id[i] for i in sorted(batches.by_id))
    ]


def test_max_bytes_per_trigger_is_exact(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """60 and 30 messages of 9 bytes in batches of 7, at most 180 bytes a micro-batch: each
    partition's first message, then even shares of what is left (81 bytes: 9 messages each),
    so 20 messages every micro-batch; once partition 1 is read, partition 0 gets the whole
    budget. The ends fall inside batched entries and the next micro-batch resumes right after;
    a second run goes on from the checkpoint with the same rule."""
    topic = pooled_partitioned_topic(2)
    p0 = streams.publish(partition_of(topic, 0), drafts(60, "p0"), batch_size=7)
    p1 = streams.publish(partition_of(topic, 1), drafts(30, "p1"), batch_size=7)
    assert {len(m.value) for m in p0 + p1} == {9}
    batches = Batches()
    query = streams.read_available_now(
        topic, batches, startingOffsets="earliest", maxBytesPerTrigger="180"
    )
    assert split(batches) == [(10, 10)] * 3 + [(20, 0), (10, 0)]
    for partition, sent in ((0, p0), (1, p1)):
        assert [m for m in batches.all() if m.partition == partition] == sent
    assert [p.numInputRows for p in query.recentProgress] == [20, 20, 20, 20, 10]
    # the first micro-batch ends after the 10th message of each: index 2 of the second entry
    assert (p0[9].entry, p0[9].batch) == (p0[7].entry, 2)
    assert json.loads(query.recentProgress[0].sources[0].endOffset) == {
        partition_of(topic, 0): p0[9].position(),
        partition_of(topic, 1): p1[9].position(),
    }

    more = streams.publish(partition_of(topic, 1), drafts(25, "p1", first=30), batch_size=7)
    batches.by_id.clear()
    streams.read_available_now(topic, batches, startingOffsets="earliest", maxBytesPerTrigger="180")
    assert sorted(batches.by_id) == [5, 6]
    assert split(batches) == [(0, 20), (0, 5)]
    assert batches.all() == more


def sized(sizes: list[int], tag: str) -> list[Draft]:
    return [(None, tag.encode() * size, {}) for size in sizes]


def test_a_message_larger_than_the_limit_is_read_alone(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Unbatched values of 50, 300, 50, 50 and 50 bytes, at most 100 bytes a micro-batch:
    the 300-byte message is a micro-batch of its own (the stream does not stall on it), and
    no micro-batch holds more than 100 bytes otherwise."""
    topic = pooled_partitioned_topic(2)
    sent = streams.publish(partition_of(topic, 0), sized([50, 300, 50, 50, 50], "a"))
    batches = Batches()
    streams.read_available_now(topic, batches, startingOffsets="earliest", maxBytesPerTrigger="100")
    assert [[len(m.value) for m in batches.by_id[i]] for i in sorted(batches.by_id)] == [
        [50],
        [300],
        [50, 50],
        [50],
    ]
    assert batches.all() == sent
