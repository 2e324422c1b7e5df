"""RangeReader on partitions the official client published to: each partition holds what was
sent to it, by hand or by the official router, and an empty one or an empty range yields
nothing at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pulsar
import pytest
from support.range_reading import FAST, KEYS, Row, Sent, last_message_id, publish, read
from support.topics import partition_of

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration


def test_empty_partition(
    client: pulsar.Client,
    lookup: Lookup,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    base = pooled_partitioned_topic(3)
    assert lookup.partitions(full_topic_name(base)) == 3
    first = publish(client, partition_of(base, 0), [Sent(b"p0", sequence_id=1)], partition=0)
    third = publish(client, partition_of(base, 2), [Sent(b"p2", sequence_id=1)], partition=2)

    assert last_message_id(lookup, partition_of(base, 1)) is None
    p0_last = last_message_id(lookup, partition_of(base, 0))
    assert p0_last == MessageId(first.rows[0].ledger, 0)
    assert p0_last is not None and p0_last.partition == 0
    p2_last = last_message_id(lookup, partition_of(base, 2))
    assert p2_last == MessageId(third.rows[0].ledger, 0)
    assert p2_last is not None and p2_last.partition == 2

    empty = RangeReader(
        lookup, ReadRange(partition_of(base, 1), MessageId(0, 5), MessageId(0, 4)), FAST
    )
    assert list(empty) == []
    assert list(empty.entries()) == []
    assert read(lookup, partition_of(base, 0)) == first.rows
    assert read(lookup, partition_of(base, 2)) == third.rows


@pytest.mark.parametrize(
    "bounds",
    [
        (MessageId(0, 5), True, MessageId(0, 4), True),
        (MessageId(0, 3, 2), False, MessageId(0, 3, 2), True),
        (MessageId(0, 3, 2), True, MessageId(0, 3, 2), False),
        (MessageId(0, 0), False, MessageId(0, 0), True),
        (MessageId.earliest(), True, MessageId.earliest(), True),
    ],
    ids=["start-after-end", "batch-excl-start", "batch-excl-end", "entry-excl-start", "earliest"],
)
def test_empty_ranges_yield_nothing_at_once(
    lookup: Lookup,
    pooled_partitioned_topic: Callable[[int], str],
    bounds: tuple[MessageId, bool, MessageId, bool],
) -> None:
    """A range that holds no position yields nothing at once: no subscription waits out the
    poll timeout for a message that cannot belong to it. Checked on an empty partition,
    where waiting could never end any other way."""
    start, start_inclusive, end, end_inclusive = bounds
    empty = partition_of(pooled_partitioned_topic(2), 1)
    assert last_message_id(lookup, empty) is None
    settings = ReaderSettings(queue_size=1000, poll_timeout=3.0, request_timeout=5.0)
    reader = RangeReader(
        lookup,
        ReadRange(empty, start, end, start_inclusive=start_inclusive, end_inclusive=end_inclusive),
        settings,
    )
    started = time.monotonic()
    assert list(reader) == []
    assert time.monotonic() - started < 1.0


def test_each_partition_holds_what_was_sent_to_it(
    client: pulsar.Client,
    lookup: Lookup,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    base = pooled_partitioned_topic(4)
    expected: dict[int, list[Row]] = {}
    for index in range(4):
        messages = [
            Sent(
                f"p{index}-m{j}".encode(),
                key=KEYS[j % 4],
                properties={"p": str(index)},
                sequence_id=j + 1,
            )
            for j in range(index + 2)
        ]
        expected[index] = publish(
            client,
            partition_of(base, index),
            messages,
            partition=index,
            producer_name=f"writer-p{index}",
            batching_enabled=index % 2 == 1,
            batching_max_messages=2,
            batching_max_publish_delay_ms=5000,
        ).rows
    for index in range(4):
        last = last_message_id(lookup, partition_of(base, index))
        assert last is not None and last.partition == index
        assert read(lookup, partition_of(base, index)) == expected[index]


def test_partitions_hold_what_the_official_router_put_there(
    client: pulsar.Client,
    lookup: Lookup,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    base = pooled_partitioned_topic(3)
    messages = [
        Sent(f"routed-{i}".encode(), key=f"user-{i % 7}", event_time=1000 + i, sequence_id=100 + i)
        for i in range(40)
    ]
    published = publish(client, full_topic_name(base), messages, producer_name="router")
    by_partition: dict[int, list[Row]] = {0: [], 1: [], 2: []}
    for r in published.rows:
        by_partition[r.partition].append(r)
    # keyed routing: one key always lands on one partition, and the keys spread out
    for key in {r.key for r in published.rows}:
        assert len({r.partition for r in published.rows if r.key == key}) == 1
    assert sum(1 for rows in by_partition.values() if rows) >= 2
    assert sum(len(rows) for rows in by_partition.values()) == 40
    for index in range(3):
        topic = partition_of(base, index)
        if not by_partition[index]:
            assert last_message_id(lookup, topic) is None
            continue
        # every partition's producer carries the root producer's name
        assert read(lookup, topic) == by_partition[index]
