"""The last message of every partition, asked of the broker for all partitions at once: each
partition gets its own last id (an empty one None), whatever the others hold."""

from __future__ import annotations

from collections.abc import Callable

import pulsar
import pytest
from support.range_reading import Sent, publish
from support.topics import partition_of

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.planning import PartitionRef, last_message_ids
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration


def test_each_partition_gets_its_own_last_id(
    client: pulsar.Client,
    lookup: Lookup,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    base = pooled_partitioned_topic(4)
    refs = [PartitionRef(full_topic_name(base), i, partition_of(base, i)) for i in range(4)]
    sent = {
        index: publish(
            client,
            partition_of(base, index),
            [Sent(f"p{index}-{n}".encode(), sequence_id=n + 1) for n in range(count)],
            partition=index,
            flush_each=True,
        )
        for index, count in ((0, 1), (2, 3), (3, 2))
    }

    found = last_message_ids(lookup, refs)

    assert list(found) == [ref.name for ref in refs]
    assert found[partition_of(base, 1)] is None
    for index, published in sent.items():
        last = published.rows[-1]
        assert [row.entry for row in published.rows] == list(range(len(published.rows)))
        assert found[partition_of(base, index)] == MessageId(last.ledger, last.entry)
        assert found[partition_of(base, index)].partition == index  # type: ignore[union-attr]
    assert last_message_ids(lookup, refs[1:2]) == {partition_of(base, 1): None}
    assert last_message_ids(lookup, []) == {}
