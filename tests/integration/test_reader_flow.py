"""Flow control against pulsar-lite, which counts permits per entry: the entries queued ahead of
the reader stay within the window however large the topic, and every message is read once."""

from __future__ import annotations

import os
from typing import Any

import pulsar
import pytest
from support.range_reading import Sent, columns_rows, publish

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings, ReadRange
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration


class QueueWatch:
    """Records the most entries and payload bytes any consumer had queued at once."""

    def __init__(self) -> None:
        self.entries = 0
        self.bytes = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        received = Consumer.on_message

        def on_message(consumer: Consumer, message: pb.CommandMessage, payload: Any) -> None:
            received(consumer, message, payload)
            self.entries = max(self.entries, len(consumer._queue))
            self.bytes = max(self.bytes, consumer.queued_bytes)

        monkeypatch.setattr(Consumer, "on_message", on_message)


def test_entries_ahead_of_the_reader_stay_within_the_window(
    client: pulsar.Client, lookup: Lookup, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = full_topic_name(f"flow-{os.urandom(6).hex()}")
    sent = publish(
        client,
        topic,
        [Sent(f"m{i:05d}".encode() * 20, key=f"k{i % 7}", sequence_id=i) for i in range(15_000)],
        batching_enabled=True,
        batching_max_messages=50,
        batching_max_publish_delay_ms=5000,
        max_pending_messages=20_000,
        block_if_queue_full=True,
    ).rows
    assert len({r.entry for r in sent}) == 300
    watch = QueueWatch()
    watch.install(monkeypatch)
    last = sent[-1]
    reader = RangeReader(
        lookup,
        ReadRange(topic, MessageId.earliest(), MessageId(last.ledger, last.entry, -1)),
        ReaderSettings(queue_size=500, poll_timeout=20.0, request_timeout=10.0),
    )
    rows = [row for columns in reader for row in columns_rows(columns)]
    assert rows == sent
    # 500 messages of 50 per entry: a window of 10 entries; re-sent duplicates may add some
    assert 1 <= watch.entries <= 20, watch.entries
    assert watch.bytes <= 20 * 50 * 130
