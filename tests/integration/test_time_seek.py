"""Locating a publish time by the broker's seek: the exact first entry at or after it, for
every publish time in the topic, in batched and unbatched topics, on pulsar-lite (one consumer
moved by seeks) and on Apache Pulsar (a reader per entry read; across ledgers, its seek by
publish time); and planning that starts a time-bounded read there instead of at the beginning.
"""

from __future__ import annotations

import os
import time

import pulsar
import pytest
from pyspark.sql import SparkSession
from support.clients import settings_for
from support.official import official_client
from support.range_reading import FAST, Sent, publish

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.time_seek import _EntryReads, first_published_at
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.planning import PartitionRead
from pulsar_spark.source.read_options import ReadMode, ReadOptions
from pulsar_spark.spark.batch_reader import PulsarBatchReader
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration


def publish_in_phases(client: pulsar.Client, topic: str, **producer_options: object) -> None:
    """Four phases of six messages, 30 ms apart, so that publish times differ between them."""
    for phase in range(4):
        time.sleep(0.03)
        publish(
            client,
            topic,
            [Sent(f"p{phase}-{i}".encode()) for i in range(6)],
            **producer_options,
        )


def entry_times(client: pulsar.Client, topic: str) -> list[tuple[int, int, int]]:
    """(ledger, entry, publish time) of every entry, in order, read by the official client."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    seen: dict[tuple[int, int], int] = {}
    try:
        while True:
            try:
                message = reader.read_next(1000)
            except pulsar.Timeout:
                break
            mid = message.message_id()
            seen.setdefault((mid.ledger_id(), mid.entry_id()), message.publish_timestamp())
    finally:
        reader.close()
    return [(ledger, entry, at) for (ledger, entry), at in sorted(seen.items())]


@pytest.fixture(scope="module", params=["unbatched", "batched"])
def timed_topic(request: pytest.FixtureRequest, client: pulsar.Client) -> tuple[str, list]:
    topic = full_topic_name(f"time-seek-{request.param}-{os.urandom(6).hex()}")
    if request.param == "batched":
        publish_in_phases(
            client,
            topic,
            batching_enabled=True,
            batching_max_messages=3,
            batching_max_publish_delay_ms=5000,
        )
    else:
        publish_in_phases(client, topic, batching_enabled=False)
    times = entry_times(client, topic)
    assert len(times) == (24 if request.param == "unbatched" else 8)
    return topic, times


def test_every_publish_time_finds_the_first_entry_at_or_after_it(
    lookup: Lookup, timed_topic: tuple[str, list[tuple[int, int, int]]]
) -> None:
    topic, times = timed_topic
    ledger, entry, _ = times[-1]
    last = MessageId(ledger, entry, -1)
    probes = sorted({at for _, _, at in times} | {at + 1 for _, _, at in times} | {1})
    for millis in probes:
        expected = next(((lg, en) for lg, en, at in times if at >= millis), None)
        found = first_published_at(lookup, topic, last, millis, FAST)
        assert (None if found is None else found.entry) == expected, millis
        assert found is None or found.batch_index == -1


def test_a_time_after_the_last_entry_finds_nothing(
    lookup: Lookup, timed_topic: tuple[str, list[tuple[int, int, int]]]
) -> None:
    topic, times = timed_topic
    last = MessageId(*times[-1][:2], -1)
    future = int(time.time() * 1000) + 3_600_000
    for millis in (times[-1][2] + 1, future):
        assert first_published_at(lookup, topic, last, millis, FAST) is None


def test_batch_read_by_time_is_planned_from_the_entry_found(
    broker: LocalBroker, timed_topic: tuple[str, list[tuple[int, int, int]]]
) -> None:
    topic, times = timed_topic
    third = times[len(times) // 2]
    fifth = times[len(times) * 3 // 4]
    options = ReadOptions.parse(
        {
            "service.url": broker.service_url,
            "topic": topic,
            "startingTime": str(third[2]),
            "endingTime": str(fifth[2]),
        },
        mode=ReadMode.BATCH,
    )
    (partition,) = PulsarBatchReader(options).partitions()
    read = partition.value
    assert isinstance(read, PartitionRead)
    first = next((lg, en) for lg, en, at in times if at >= third[2])
    stop = next((lg, en) for lg, en, at in times if at >= fifth[2])
    assert (read.start.entry, read.start.batch_index, read.start_inclusive) == (first, -1, True)
    assert (read.end.entry, read.end.batch_index, read.end_inclusive) == (
        (stop[0], stop[1] - 1),
        -1,
        True,
    )
    assert (read.min_publish_time, read.max_publish_time) == (third[2], fifth[2])


def test_a_search_reads_on_with_a_reader_when_its_consumer_is_gone(
    broker: LocalBroker | ApacheBroker, timed_topic: tuple[str, list[tuple[int, int, int]]]
) -> None:
    # On pulsar-lite the search's one consumer is moved from entry to entry; gone from the
    # broker (a topic moving, say), the entry is read again by a reader of its own, and the
    # next read subscribes anew. Apache Pulsar closes a consumer whose cursor a seek resets,
    # so there every read has a reader of its own and no consumer is kept to lose.
    topic, times = timed_topic
    by_seek = isinstance(broker, LocalBroker)
    pool = ConnectionPool()
    try:
        lookup = Lookup(settings_for(broker.service_url, timeout=10.0), pool)
        with _EntryReads(lookup, topic, MessageId(*times[-1][:2], -1), FAST) as reads:
            assert reads.by_seek is by_seek
            assert reads.publish_time(times[1][1]) == times[1][2]
            gone = reads._consumer
            assert (gone is not None) is by_seek
            if gone is not None:
                gone.close()  # unsubscribed: the broker no longer knows it
            assert reads.publish_time(times[-2][1]) == times[-2][2]
            assert reads._consumer is None
            assert reads.publish_time(times[0][1]) == times[0][2]
            kept = reads._consumer
            assert (kept is not None) is by_seek
            assert kept is not gone or kept is None
    finally:
        pool.close()


@pytest.mark.apache
@pytest.mark.spark
def test_times_in_earlier_ledgers_are_found_by_apache_pulsars_seek(
    apache_broker: ApacheBroker, spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Apache Pulsar rolls ledgers (here the topic is unloaded between phases), and entry ids
    say nothing across them: a time at or before the last ledger's first entry is found by the
    broker's seek by publish time, any later one by reading entries of the last ledger. Every
    publish time finds its first entry, and a batch read between two times reads exactly the
    messages published in between."""
    client = official_client(apache_broker.service_url)
    pool = ConnectionPool()
    seeks: list[int] = []
    seek = Consumer.seek_publish_time

    def counted(consumer: Consumer, publish_time: int) -> None:
        seeks.append(publish_time)
        seek(consumer, publish_time)

    monkeypatch.setattr(Consumer, "seek_publish_time", counted)
    try:
        topic = full_topic_name(f"time-seek-ledgers-{os.urandom(6).hex()}")
        admin_path = topic.replace("persistent://", "/admin/v2/persistent/", 1)
        for phase in range(3):
            if phase:
                apache_broker.admin("PUT", f"{admin_path}/unload")
            time.sleep(0.03)
            values = [f"p{phase}-{i}".encode() for i in range(6)]
            publish(client, topic, [Sent(v) for v in values], batching_enabled=False)
        times = entry_times(client, topic)
        ledgers = sorted({ledger for ledger, _, _ in times})
        assert len(ledgers) == 3
        assert len(times) == 18

        lookup = Lookup(settings_for(apache_broker.service_url, timeout=10.0), pool)
        last = MessageId(*times[-1][:2], -1)
        first_of_last = (ledgers[-1], 0)
        probes = sorted({at for _, _, at in times} | {at + 1 for _, _, at in times} | {1})
        expected_seeks = []
        for millis in probes:
            expected = next(((lg, en) for lg, en, at in times if at >= millis), None)
            found = first_published_at(lookup, topic, last, millis, FAST)
            assert (None if found is None else found.entry) == expected, millis
            if expected is not None and expected <= first_of_last:
                expected_seeks.append(millis)
        assert seeks == expected_seeks

        phase_starts = [next(at for lg, _, at in times if lg == ledger) for ledger in ledgers]
        rows = (
            spark.read.format("pulsar")
            .option("service.url", apache_broker.service_url)
            .option("topic", topic)
            .option("startingTime", str(phase_starts[1]))
            .option("endingTime", str(phase_starts[2]))
            .load()
            .select("value")
            .collect()
        )
        assert sorted(bytes(r["value"]) for r in rows) == [f"p1-{i}".encode() for i in range(6)]
    finally:
        pool.close()
        client.close()
