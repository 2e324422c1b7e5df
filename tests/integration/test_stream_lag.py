"""``pulsar_spark.lag``: per partition, the entries a micro-batch left unread, from the query's
progress reports (``endOffset`` against ``latestOffset``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from support.streaming import Batches, Streams, drafts
from support.topics import full, partition_of

import pulsar_spark
from pulsar_spark.source.lag import progress_lag

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_lag_per_micro_batch_of_a_limited_query(streams: Streams, topic_name: str) -> None:
    """Ten single messages read four per micro-batch: six, then two, then no entries behind."""
    streams.publish(topic_name, drafts(10, "m"))
    batches = Batches()
    query = streams.read_available_now(
        topic_name, batches, startingOffsets="earliest", maxMessagesPerTrigger="4"
    )
    assert batches.sizes() == [4, 4, 2]
    name = full(topic_name)
    lags = [progress_lag(p) for p in query.recentProgress if p["numInputRows"] > 0]
    assert lags == [{name: 6}, {name: 2}, {name: 0}]
    assert pulsar_spark.lag(query) == {name: 0}


def test_lag_counts_entries_per_partition(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Batched messages on three partitions: the lag counts entries (five messages each here),
    and an entry read part-way counts as unread."""
    topic = pooled_partitioned_topic(3)
    sent = streams.publish(topic, drafts(60, "b"), batch_size=5)
    batches = Batches()
    query = streams.read_available_now(
        topic, batches, startingOffsets="earliest", maxMessagesPerTrigger="12"
    )
    assert sorted(batches.all()) == sorted(sent)
    first = next(p for p in query.recentProgress if p["numInputRows"] > 0)
    first_batch = batches.by_id[min(batches.by_id)]

    def expected(partition: int) -> int | None:
        """Entries of the partition not read whole by the first micro-batch (None: nothing
        read there yet)."""
        read = Counter((m.ledger, m.entry) for m in first_batch if m.partition == partition)
        if not read:
            return None
        entries = {(m.ledger, m.entry) for m in sent if m.partition == partition}
        return len(entries) - sum(1 for n in read.values() if n == 5)

    names = [partition_of(topic, p) for p in range(3)]
    assert progress_lag(first) == {names[p]: expected(p) for p in range(3)}
    assert pulsar_spark.lag(query) == dict.fromkeys(names, 0)
