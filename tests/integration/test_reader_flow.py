"""Flow control: the entries queued ahead of the reader stay within the window however large
the topic, and every message is read once, on pulsar-lite (which counts permits per entry) and
on Apache Pulsar (which counts them per message, but reads as many entries as a consumer has
permits: the last test shows it)."""

from __future__ import annotations

import os
from typing import Any

import pulsar
import pytest
from support.clients import settings_for
from support.official import official_client
from support.range_reading import Sent, columns_rows, publish

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.local import ApacheBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.read_stage import ReadRange
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


def publish_entries(client: pulsar.Client, topic: str) -> list[Sent]:
    """15,000 keyed messages in 300 batched entries of 50 (about 130 B each)."""
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
    return sent


def test_entries_ahead_of_the_reader_stay_within_the_window(
    client: pulsar.Client, lookup: Lookup, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = full_topic_name(f"flow-{os.urandom(6).hex()}")
    sent = publish_entries(client, topic)
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
    # 500 messages of 50 per entry: a window of 10 entries (Apache Pulsar, granted 500
    # permits, would read 100); re-sent duplicates may add some on pulsar-lite
    assert 1 <= watch.entries <= 20, watch.entries
    assert watch.bytes <= 20 * 50 * 130


def entries_until_silent(consumer: Consumer, silence: float = 1.5) -> int:
    """How many entries arrive before ``silence`` seconds pass without one."""
    count = 0
    while consumer.receive(silence) is not None:
        count += 1
    return count


@pytest.mark.apache
def test_apache_pulsar_reads_as_many_entries_as_a_consumer_has_permits(
    apache_broker: ApacheBroker,
) -> None:
    """What the reader's grants rest on: Apache Pulsar spends permits per message, yet each
    read from storage takes as many entries as the consumer has permits, up to
    ``dispatcherMaxReadBatchSize`` (100), and a new read waits for permits above zero."""
    official = official_client(apache_broker.service_url)
    pool = ConnectionPool()
    try:
        topic = full_topic_name(f"flow-apache-{os.urandom(6).hex()}")
        publish_entries(official, topic)
        lookup = Lookup(settings_for(apache_broker.service_url, timeout=10.0), pool)
        with Consumer(lookup, topic, MessageId.earliest(), timeout=10.0) as consumer:
            consumer.flow(5)
            assert entries_until_silent(consumer) == 5  # 250 messages: -245 permits
            consumer.flow(245)
            assert entries_until_silent(consumer) == 0  # no permits above zero, no read
            consumer.flow(500)
            assert entries_until_silent(consumer) == 100  # not 10: capped by the read size
            consumer.flow(5000 - 500 + 10)
            assert entries_until_silent(consumer) == 10
    finally:
        pool.close()
        official.close()
