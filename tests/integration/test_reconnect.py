"""Riding through broker restarts and topic unloads inside one read or one write.

The broker is killed (SIGKILL) and started again on the same port and data directory while a
range reader reads or a producer writes; the proxy (tests/support/broker_proxy.py) sends what Apache
Pulsar sends when it unloads a topic (CloseConsumer, CloseProducer, TopicMigrated) and, for
the producer, emulates a deduplicating broker. Reads must deliver every message exactly once,
writes lose nothing, and duplicates stay within the bound docs/offsets.md states: without
deduplication at most the messages in flight when the connection broke, with it none.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import signal
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest
from support.apache_faults import disable_deduplication
from support.broker_proxy import ApacheAnswers, BrokerProxy
from support.clients import settings_for
from support.decoding import strings

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.client.settings import ProducerSettings
from pulsar_spark.errors import PulsarConnectionError, RetriesExhaustedError
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.decode import decode_entry, entry_info
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration

Type = pb.BaseCommand.Type


@pytest.fixture
def restartable() -> Iterator[LocalBroker]:
    broker = LocalBroker.start()
    yield broker
    broker.stop()


@pytest.fixture
def pool() -> Iterator[ConnectionPool]:
    connections = ConnectionPool()
    yield connections
    connections.close()


def kill_and_restart(broker: LocalBroker) -> float:
    """SIGKILL the broker and start it again on the same port and data; seconds it was away."""
    started = time.monotonic()
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGKILL)
    broker.restart()
    return time.monotonic() - started


CLOSE_REQUEST_ID = 2**63  # for the broker's answer, which the client drops as unknown


def close_on_both_sides(proxy: BrokerProxy, close: pb.BaseCommand, *, held: bool = False) -> None:
    """What Apache Pulsar does when it unloads a topic: close the consumer or producer on the
    broker (pulsar-lite, told by the proxy) and tell the client, which must reconnect."""
    if not held:
        proxy.hold()
    proxy.inject_upstream(close)
    proxy.inject(close)
    proxy.release()


def publish(url: str, topic: str, count: int) -> list[bytes]:
    values = [b"v-%06d" % i for i in range(count)]
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=100, block_if_queue_full=True
        )
        failed: list[object] = []
        for value in values:
            producer.send_async(
                value, lambda result, _id: result == pulsar.Result.Ok or failed.append(result)
            )
        producer.flush()
        assert not failed
    finally:
        client.close()
    return values


def read_back(url: str, topic: str) -> list[bytes]:
    """Every message stored in ``topic``, in order (the official reader stalls on pulsar-lite
    now and then; ours nudges it)."""
    pool = ConnectionPool()
    try:
        lookup = Lookup(settings_for(url), pool)
        reader = RangeReader(lookup, ReadRange(topic, MessageId.earliest(), last_id(lookup, topic)))
        return values_of(reader, lambda _entries: None)
    finally:
        pool.close()


def last_id(lookup: Lookup, topic: str) -> MessageId:
    from pulsar_spark.client.consumer import Consumer

    with Consumer(lookup, topic, MessageId.latest(), timeout=lookup.timeout) as consumer:
        last = consumer.last_message_id()
    assert last is not None
    return last


def values_of(reader: RangeReader, on_entry: Callable[[int], None]) -> list[bytes]:
    """Every value the reader reads, calling ``on_entry(entries so far)`` after each entry.

    Entries are taken one by one from the reader's connection-handling layer and decoded here,
    so that a fault lands right after the entry asked for (the reader's columns come a group of
    thousands of messages at a time)."""
    values: list[bytes] = []
    for entries, raw in enumerate(reader.entries(), start=1):
        metadata = raw.section.metadata
        info = entry_info(metadata, *raw.entry, raw.message.message_id.partition)
        columns = decode_entry(info, metadata, raw.section.payload)
        values += [value or b"" for value in strings(columns.values)]
        on_entry(entries)
    return values


# --- reads ---------------------------------------------------------------------------------------


def test_read_rides_through_broker_kills(restartable: LocalBroker, pool: ConnectionPool) -> None:
    topic = full_topic_name("restarted-while-read")
    published = publish(restartable.service_url, topic, 20_000)
    lookup = Lookup(settings_for(restartable.service_url, timeout=20.0), pool)
    reader = RangeReader(
        lookup,
        ReadRange(topic, MessageId.earliest(), last_id(lookup, topic)),
        ReaderSettings(queue_size=2_000, request_timeout=20.0),
    )
    outages: list[float] = []

    def on_entry(entries: int) -> None:
        if entries in (20, 80, 140):
            outages.append(kill_and_restart(restartable))

    got = values_of(reader, on_entry)
    assert got == published  # every message once, in order
    assert len(outages) == 3
    assert reader.reconnects >= 3


def test_read_rides_through_close_consumer(broker: LocalBroker, pool: ConnectionPool) -> None:
    """Apache Pulsar unloading the topic: CloseConsumer, then the topic is served again."""
    topic = full_topic_name(f"unloaded-while-read-{time.monotonic_ns()}")
    published = publish(broker.service_url, topic, 50_000)
    answers = ApacheAnswers()
    consumer_ids: list[int] = []

    def rewrite(command: pb.BaseCommand) -> bool:
        if command.type == Type.SUBSCRIBE:
            consumer_ids.append(command.subscribe.consumer_id)
        return answers(command)

    proxy = BrokerProxy((broker.host, broker.port), rewrite)
    answers.url = proxy.url
    try:
        lookup = Lookup(settings_for(proxy.url, timeout=10.0), pool)
        reader = RangeReader(
            lookup,
            ReadRange(topic, MessageId.earliest(), last_id(lookup, topic)),
            ReaderSettings(queue_size=200),
        )

        def on_entry(entries: int) -> None:
            if entries == 10:
                close = pb.CommandCloseConsumer(
                    consumer_id=consumer_ids[-1], request_id=CLOSE_REQUEST_ID
                )
                close_on_both_sides(
                    proxy, pb.BaseCommand(type=Type.CLOSE_CONSUMER, close_consumer=close)
                )

        got = values_of(reader, on_entry)
    finally:
        proxy.close()
    assert got == published
    assert reader.reconnects == 1
    assert len(consumer_ids) == 3  # last message id, the read, and the read again


def test_read_gives_up_when_the_broker_stays_away(
    restartable: LocalBroker, pool: ConnectionPool
) -> None:
    topic = full_topic_name("gone-while-read")
    publish(restartable.service_url, topic, 5_000)
    lookup = Lookup(settings_for(restartable.service_url, timeout=2.0, connect_timeout=1.0), pool)
    reader = RangeReader(
        lookup,
        ReadRange(topic, MessageId.earliest(), last_id(lookup, topic)),
        ReaderSettings(queue_size=500, request_timeout=2.0),
    )
    started: list[float] = []

    def on_entry(entries: int) -> None:
        if entries == 5:
            restartable.stop()
            started.append(time.monotonic())

    with pytest.raises(RetriesExhaustedError) as info:
        values_of(reader, on_entry)
    assert time.monotonic() - started[0] < 2.0 + 2.0 + 1.0  # the limit, one pause, a connect
    assert str(info.value).startswith(f"reading {topic}: gave up after ")
    assert isinstance(info.value.__cause__, PulsarConnectionError)


# --- writes --------------------------------------------------------------------------------------


def test_write_rides_through_broker_kills(restartable: LocalBroker, pool: ConnectionPool) -> None:
    """Nothing lost; without deduplication, each outage may store again at most the messages
    that were without a receipt when it began (max_pending_messages)."""
    topic = full_topic_name("restarted-while-written")
    lookup = Lookup(settings_for(restartable.service_url, timeout=20.0), pool)
    settings = ProducerSettings(batch_max_messages=100, max_pending_messages=1_000)
    values = [b"w-%06d" % i for i in range(30_000)]
    outages = 0
    with Producer.create(lookup, topic, settings, name="survivor") as producer:
        for i, value in enumerate(values):
            producer.send(OutgoingMessage(value))
            if i in (5_000, 15_000, 25_000):
                kill_and_restart(restartable)
                outages += 1
        producer.flush()
        assert producer.reconnects == outages
    stored = read_back(restartable.service_url, topic)
    counts = collections.Counter(stored)
    assert set(counts) == set(values)  # nothing lost
    duplicates = sum(n - 1 for n in counts.values())
    assert duplicates <= outages * settings.max_pending_messages
    first_seen = list(dict.fromkeys(stored))
    assert first_seen == values  # and in order


JAVA_MINUS_ONE = 2**64 - 1
"""A receipt's ``highest_sequence_id`` when the SEND carried none (Java's -1 as a uint64)."""


class DedupBroker(ApacheAnswers):
    """Answers a re-created producer with the highest sequence id the broker confirmed under
    its name, as Apache Pulsar does with deduplication on (the proxy sees every receipt, also
    those it no longer delivers to a client whose connection broke)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: dict[int, str] = {}  # producer id (one connection at a time) -> name
        self.stored: dict[str, int] = {}

    def __call__(self, command: pb.BaseCommand) -> bool:
        if command.type == Type.PRODUCER and command.producer.producer_name:
            self.names[command.producer.producer_id] = command.producer.producer_name
        elif command.type == Type.SEND_RECEIPT:
            receipt = command.send_receipt
            name = self.names.get(receipt.producer_id)
            if name is not None:
                highest = receipt.sequence_id
                if receipt.highest_sequence_id != JAVA_MINUS_ONE:
                    highest = max(highest, receipt.highest_sequence_id)
                self.stored[name] = max(self.stored.get(name, -1), highest)
        elif command.type == Type.PRODUCER_SUCCESS and command.producer_success.producer_name:
            success = command.producer_success
            if success.producer_name in self.stored:
                success.last_sequence_id = self.stored[success.producer_name]
                return True
        return super().__call__(command)


def close_producer_notice(producer_id: int, notice: str, url: str) -> pb.BaseCommand:
    """What the broker tells the client: CloseProducer, or TopicMigrated naming ``url``."""
    if notice == "close":
        close = pb.CommandCloseProducer(producer_id=producer_id, request_id=CLOSE_REQUEST_ID)
        return pb.BaseCommand(type=Type.CLOSE_PRODUCER, close_producer=close)
    migrated = pb.CommandTopicMigrated(
        resource_id=producer_id,
        resource_type=pb.CommandTopicMigrated.Producer,
        brokerServiceUrl=url,
    )
    return pb.BaseCommand(type=Type.TOPIC_MIGRATED, topicMigrated=migrated)


@pytest.mark.parametrize("dedup", [False, True], ids=["plain", "deduplicating"])
@pytest.mark.parametrize("notice", ["close", "migrated"])
def test_write_rides_through_close_producer(
    broker: LocalBroker | ApacheBroker, pool: ConnectionPool, dedup: bool, notice: str
) -> None:
    """CloseProducer (or TopicMigrated) while 50 messages wait for their receipts (the proxy
    holds them): the producer is created again and sends them again. A plain broker may store
    those 50 twice, a deduplicating one reports them stored, and none is sent again.

    The Apache broker deduplicates (the proxy only points lookups at itself); in front of
    pulsar-lite, ``DedupBroker`` answers as it would."""
    topic = full_topic_name(f"unloaded-while-written-{dedup}-{notice}-{time.monotonic_ns()}")
    apache = isinstance(broker, ApacheBroker)
    if apache and not dedup:
        disable_deduplication(broker, topic)
    answers = DedupBroker() if dedup and not apache else ApacheAnswers()
    proxy = BrokerProxy((broker.host, broker.port), answers)
    answers.url = proxy.url
    try:
        lookup = Lookup(settings_for(proxy.url, timeout=10.0), pool)
        settings = ProducerSettings(batching=False, batch_max_delay_ms=0)  # each one at once
        values = [b"c-%04d" % i for i in range(200)]
        with Producer.create(lookup, topic, settings, name=f"closed-{dedup}") as producer:
            for value in values[:100]:
                producer.send(OutgoingMessage(value))
            producer.flush()
            proxy.hold()
            for value in values[100:150]:
                producer.send(OutgoingMessage(value))
            time.sleep(0.5)  # the broker stores them; their receipts wait in the proxy
            close = pb.CommandCloseProducer(
                producer_id=producer.producer_id, request_id=CLOSE_REQUEST_ID
            )
            proxy.inject_upstream(pb.BaseCommand(type=Type.CLOSE_PRODUCER, close_producer=close))
            proxy.inject(close_producer_notice(producer.producer_id, notice, proxy.url))
            proxy.release()
            time.sleep(0.2)  # the client handles the notice before it sends on
            for value in values[150:]:
                producer.send(OutgoingMessage(value))
            producer.flush()
            assert producer.reconnects == 1
        stored = read_back(broker.service_url, topic)
    finally:
        proxy.close()
    assert list(dict.fromkeys(stored)) == values  # nothing lost, in order
    duplicates = collections.Counter(stored) - collections.Counter(values)
    if dedup:
        assert not duplicates
    else:
        assert set(duplicates) <= set(values[100:150])  # only what was in flight
        assert sum(duplicates.values()) <= 50


def test_close_after_every_receipt_outlives_a_lost_connection(
    broker: LocalBroker | ApacheBroker, pool: ConnectionPool
) -> None:
    """Every message has its receipt; the connection breaks while CloseProducer waits for its
    answer (the proxy holds it). The broker drops a producer with its connection, so close()
    returns without error and all 30 messages are stored once."""
    topic = full_topic_name(f"closed-as-the-connection-breaks-{time.monotonic_ns()}")
    answers = ApacheAnswers()  # lookups answer the proxy's address
    proxy = BrokerProxy((broker.host, broker.port), answers)
    answers.url = proxy.url
    lookup = Lookup(settings_for(proxy.url, timeout=10.0), pool)
    values = [b"r-%02d" % i for i in range(30)]
    producer = Producer.create(lookup, topic, ProducerSettings(), name="closing")
    for value in values:
        producer.send(OutgoingMessage(value))
    producer.flush()
    proxy.hold()
    with concurrent.futures.ThreadPoolExecutor(1) as closer:
        closed = closer.submit(producer.close)
        time.sleep(0.3)  # CloseProducer has reached the broker, its answer waits in the proxy
        proxy.close()
        assert closed.result(timeout=15) is None
    assert read_back(broker.service_url, topic) == values
