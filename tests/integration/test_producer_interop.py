"""Our producer publishes, the official Pulsar client reads: every field must come back.

Messages are read with an official Reader from ``MessageId.earliest`` (one reader per
partition topic, looping on ``read_next``), so what we wrote is judged by the C++ client's
own decoding of what pulsar-lite stored. The official Python client does not expose sequence
ids, so those are checked on the raw entries through a plain subscription.

Failure paths use a loopback proxy in front of the broker whose broker-to-client direction
can be held (receipts then never arrive) or given extra frames (a SEND_ERROR), and a broker
of their own that is stopped under a producer.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pulsar
import pytest
from support.broker_proxy import BrokerProxy, apache_proxy
from support.clients import settings_for

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.settings import ProducerSettings
from pulsar_spark.errors import (
    ConfigurationError,
    LocalProtocolError,
    PulsarConnectionError,
    RemoteProtocolError,
    RequestTimeoutError,
    RetriesExhaustedError,
    TopicTerminatedError,
)
from pulsar_spark.local import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.encode import Blobs, OutgoingColumns, OutgoingMessage, routing_key
from pulsar_spark.protocol.payload import PayloadSection, parse_payload_section
from pulsar_spark.protocol.routing import partitions_for_keys
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration

READ_TIMEOUT_MS = 10_000
QUIET_MS = 300  # how long "no further message" is waited for
CODECS = compression.CODEC_NAMES


# --- helpers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Received:
    """What the official client reports for one message."""

    value: bytes
    key: str
    null_value: bool
    event_time: int
    properties: dict[str, str]
    producer_name: str
    entry: tuple[int, int]
    batch_index: int
    partition: int


def read_exactly(
    client: pulsar.Client, topic: str, count: int, *, attempts: int = 1
) -> list[Received]:
    """Read ``count`` messages from the start of ``topic``, then check nothing else follows.

    pulsar-lite may dispatch an entry twice to a reader; repeats of an id already read are
    dropped (they are the broker's, a second publish would have a new id). A repeated chunk
    can make the C++ client discard a whole chunked message; ``attempts`` > 1 then reads
    again with a fresh reader.
    """
    for _ in range(attempts - 1):
        with contextlib.suppress(pulsar.Timeout):
            return _read_once(client, topic, count)
    return _read_once(client, topic, count)


def _read_once(client: pulsar.Client, topic: str, count: int) -> list[Received]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    seen: set[tuple[int, int, int]] = set()
    out: list[Received] = []
    try:
        while len(out) < count:
            received = _received(reader.read_next(READ_TIMEOUT_MS))
            ident = (*received.entry, received.batch_index)
            if ident not in seen:
                seen.add(ident)
                out.append(received)
        with contextlib.suppress(pulsar.Timeout):
            while True:
                extra = _received(reader.read_next(QUIET_MS))
                assert (*extra.entry, extra.batch_index) in seen, f"unexpected message {extra}"
    finally:
        reader.close()
    return out


def _received(message: pulsar.Message) -> Received:
    message_id = message.message_id()
    return Received(
        value=message.data(),
        key=message.partition_key(),
        null_value=message.has_null_value(),
        event_time=message.event_timestamp(),
        properties=dict(message.properties()),
        producer_name=message.producer_name(),
        entry=(message_id.ledger_id(), message_id.entry_id()),
        batch_index=message_id.batch_index(),
        partition=message_id.partition(),
    )


def assert_same(sent: OutgoingMessage, got: Received, producer_name: str) -> None:
    assert got.value == (sent.value or b"")
    assert got.key == (sent.key or "")
    assert got.null_value == (sent.value is None)
    assert got.event_time == sent.event_time
    assert got.properties == dict(sent.properties)
    assert got.producer_name == producer_name


def varied_messages(count: int) -> list[OutgoingMessage]:
    """Messages covering every field: keys (text, non-ASCII, binary), properties, nulls."""
    binary_key, _ = routing_key(bytes(range(256))[::7])
    shapes: list[Callable[[int], OutgoingMessage]] = [
        lambda i: OutgoingMessage(f"plain-{i}".encode()),
        lambda i: OutgoingMessage(f"keyed-{i}".encode() * 10, key=f"key-{i % 5}"),
        lambda i: OutgoingMessage(b"\x00\xff" * i, key=f"ключ-日本-\U0001f600-{i}"),
        lambda i: OutgoingMessage(os.urandom(i + 1), key=binary_key, key_is_base64=True),
        lambda i: OutgoingMessage(None, key=f"tombstone-{i}"),
        lambda i: OutgoingMessage(b""),
        lambda i: OutgoingMessage(
            b"with-props", properties=(("n", str(i)), ("é", "ü"), ("empty", ""))
        ),
        lambda i: OutgoingMessage(b"timed", event_time=1_700_000_000_000 + i),
        lambda i: OutgoingMessage(
            b"x" * 5000, key="all", properties=(("a", "b"),), event_time=1_600_000_000_000 + i
        ),
    ]
    return [shapes[i % len(shapes)](i) for i in range(count)]


@dataclass(frozen=True)
class RawEntry:
    """One stored entry as the broker dispatches it, below any client library."""

    metadata: pb.MessageMetadata
    sequence_ids: list[int]  # of the messages inside a batch; empty for an unbatched entry


def raw_entries(lookup: Lookup, topic: str, count: int) -> list[RawEntry]:
    """The first ``count`` entries of ``topic``, in order."""
    consumer = Consumer(lookup, topic, MessageId.earliest(), timeout=10.0)
    found: dict[tuple[int, int], RawEntry] = {}
    try:
        consumer.flow(1000)
        deadline = time.monotonic() + 10
        while len(found) < count and time.monotonic() < deadline:
            delivery = consumer.receive(1.0)
            if delivery is None or delivery.payload is None:
                continue
            section = parse_payload_section(delivery.payload)
            ident = (delivery.message.message_id.ledgerId, delivery.message.message_id.entryId)
            found[ident] = RawEntry(section.metadata, _batch_sequence_ids(section))
    finally:
        consumer.close()
    assert len(found) == count
    return [found[ident] for ident in sorted(found)]


def _batch_sequence_ids(section: PayloadSection) -> list[int]:
    metadata = section.metadata
    if not metadata.HasField("num_messages_in_batch"):
        return []
    raw = compression.decompress(metadata.compression, section.payload, metadata.uncompressed_size)
    ids = []
    pos = 0
    while pos < len(raw):
        (size,) = struct.unpack_from(">I", raw, pos)
        smm = pb.SingleMessageMetadata.FromString(raw[pos + 4 : pos + 4 + size])
        ids.append(smm.sequence_id)
        pos += 4 + size + smm.payload_size
    return ids


# --- fields, batching and codecs -------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS.values(), ids=CODECS.keys())
@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
def test_official_reader_sees_every_field(
    lookup: Lookup, client: pulsar.Client, topic_name: str, batching: bool, codec: int
) -> None:
    topic = full_topic_name(topic_name)
    messages = varied_messages(60)
    with Producer.create(
        lookup,
        topic,
        ProducerSettings(
            codec=codec, batching=batching, batch_max_messages=25, batch_max_delay_ms=60_000
        ),
        name=f"interop-{topic_name}",
    ) as producer:
        for message in messages:
            producer.send(message)
        producer.flush()
        assert producer.messages_sent == producer.messages_acknowledged == len(messages)
        name = producer.name
    assert name == f"interop-{topic_name}"

    received = read_exactly(client, topic, len(messages))
    for sent, got in zip(messages, received, strict=True):
        assert_same(sent, got, name)
    entries = sorted({got.entry for got in received})
    if batching:
        assert len(entries) == 3  # 25 + 25 + 10
        assert [got.batch_index for got in received] == [i % 25 for i in range(60)]
    else:
        assert len(entries) == len(messages)
        assert {got.batch_index for got in received} == {-1}


def test_sequence_ids_and_batch_metadata_on_the_wire(lookup: Lookup, topic_name: str) -> None:
    topic = full_topic_name(topic_name)
    with Producer.create(
        lookup,
        topic,
        ProducerSettings(batch_max_messages=4),
        name="seq-writer",
        initial_sequence_id=1000,
    ) as producer:
        for i in range(10):
            producer.send(OutgoingMessage(b"m%d" % i, key="first" if i % 4 == 0 else None))
        assert producer.next_sequence_id == 1010
    entries = raw_entries(lookup, topic, 3)
    metadata = [entry.metadata for entry in entries]
    spans = [(m.sequence_id, m.highest_sequence_id, m.num_messages_in_batch) for m in metadata]
    assert spans == [(1000, 1003, 4), (1004, 1007, 4), (1008, 1009, 2)]
    assert [entry.sequence_ids for entry in entries] == [
        list(range(first, last + 1)) for first, last, _ in spans
    ]
    assert {m.producer_name for m in metadata} == {"seq-writer"}
    assert [m.partition_key for m in metadata] == ["first", "first", "first"]
    assert all(m.uncompressed_size > 0 for m in metadata)


def test_unbatched_sequence_ids_on_the_wire(lookup: Lookup, topic_name: str) -> None:
    topic = full_topic_name(topic_name)
    with Producer.create(
        lookup, topic, ProducerSettings(batching=False), name="seq-single", initial_sequence_id=7
    ) as producer:
        for i in range(5):
            producer.send(OutgoingMessage(b"m%d" % i))
    metadata = [entry.metadata for entry in raw_entries(lookup, topic, 5)]
    assert [m.sequence_id for m in metadata] == [7, 8, 9, 10, 11]
    assert not any(m.HasField("num_messages_in_batch") for m in metadata)
    assert {m.producer_name for m in metadata} == {"seq-single"}


def test_binary_key_reads_back_as_its_base64_text(
    lookup: Lookup, client: pulsar.Client, topic_name: str
) -> None:
    # The official Python client hands out partition_key() as stored, without decoding it.
    topic = full_topic_name(topic_name)
    key, is_base64 = routing_key(b"\x00\xffbin")
    with Producer.create(lookup, topic) as producer:
        producer.send(OutgoingMessage(b"batched", key=key, key_is_base64=is_base64))
        producer.flush()
        producer.send(OutgoingMessage(b"x" * 200_000, key=key, key_is_base64=is_base64))
    received = read_exactly(client, topic, 2)
    assert [got.key for got in received] == ["AP9iaW4=", "AP9iaW4="]
    assert received[0].batch_index == 0  # in a batch
    assert received[1].batch_index == -1  # alone, being larger than a batch


def test_broker_chosen_producer_name_is_what_readers_see(
    lookup: Lookup, client: pulsar.Client, topic_name: str
) -> None:
    topic = full_topic_name(topic_name)
    with Producer.create(lookup, topic) as producer:
        producer.send(OutgoingMessage(b"anonymous"))
        name = producer.name
        assert producer.last_sequence_id_from_broker == -1
    assert name
    (got,) = read_exactly(client, topic, 1)
    assert got.producer_name == name


# --- large messages --------------------------------------------------------------------------


def test_chunked_message_read_from_backlog(
    lookup: Lookup, client: pulsar.Client, topic_name: str
) -> None:
    topic = full_topic_name(topic_name)
    big = os.urandom(8 * 1024 * 1024)
    messages = [
        OutgoingMessage(b"before", key="k"),
        OutgoingMessage(big, key="big-key", properties=(("size", "8MiB"),), event_time=42),
        OutgoingMessage(b"after"),
    ]
    with Producer.create(
        lookup, topic, ProducerSettings(codec=compression.LZ4), name="chunker"
    ) as p:
        for message in messages:
            p.send(message)
        p.flush()
        assert p.messages_acknowledged == 3

    # What is stored: "before" in a batch, two chunks of message 1, "after" in a batch.
    entries = [entry.metadata for entry in raw_entries(lookup, topic, 4)]
    chunks = entries[1:3]
    assert [c.chunk_id for c in chunks] == [0, 1]
    assert {(c.sequence_id, c.num_chunks_from_msg, c.uuid) for c in chunks} == {(1, 2, "chunker-1")}
    assert {c.total_chunk_msg_size for c in chunks} == {
        len(compression.compress(compression.LZ4, big))
    }
    assert {c.uncompressed_size for c in chunks} == {len(big)}
    assert [e.sequence_id for e in entries] == [0, 1, 1, 2]

    received = read_exactly(client, topic, 3, attempts=3)
    for sent, got in zip(messages, received, strict=True):
        assert_same(sent, got, "chunker")


def test_compressible_message_above_the_limit_is_not_chunked(
    lookup: Lookup, client: pulsar.Client, topic_name: str
) -> None:
    topic = full_topic_name(topic_name)
    value = b"compressible " * 1_000_000  # 13 MB, a few KB once compressed
    with Producer.create(
        lookup, topic, ProducerSettings(codec=compression.ZSTD, batching=False)
    ) as producer:
        producer.send(OutgoingMessage(value))
        producer.send(OutgoingMessage(b"next"))
    first, second = read_exactly(client, topic, 2)
    assert first.value == value
    assert second.entry[1] == first.entry[1] + 1


# --- partitions ------------------------------------------------------------------------------


def test_publish_to_each_partition(
    lookup: Lookup,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    partitions = 3
    base = full_topic_name(pooled_partitioned_topic(partitions))
    keys = [f"user-{i}" for i in range(90)]
    routed = partitions_for_keys(keys, partitions)
    by_partition: dict[int, list[OutgoingMessage]] = {p: [] for p in range(partitions)}
    for key, partition in zip(keys, routed, strict=True):
        by_partition[partition].append(OutgoingMessage(key.encode(), key=key))
    for partition, messages in by_partition.items():
        assert messages, "the keys should reach every partition"
        name = f"part-writer-{partition}"
        with Producer.create(lookup, f"{base}-partition-{partition}", name=name) as p:
            for message in messages:
                p.send(message)
    for partition, messages in by_partition.items():
        received = read_exactly(client, f"{base}-partition-{partition}", len(messages))
        for sent, got in zip(messages, received, strict=True):
            assert_same(sent, got, f"part-writer-{partition}")
            assert got.partition == partition


@pytest.mark.pulsar_lite
def test_producer_on_partitioned_root_fails_within_the_operation_timeout(
    broker: LocalBroker,
) -> None:
    """pulsar-lite answers with a closed connection rather than an error (Apache Pulsar
    refuses with an error that is not retried), which is retried like any lost connection
    until the operation timeout (2 s here)."""
    pool = ConnectionPool()
    try:
        started = time.monotonic()
        with pytest.raises(RetriesExhaustedError) as info:
            Producer.create(
                Lookup(settings_for(broker.service_url, timeout=2.0), pool),
                full_topic_name("part2"),
            )
        assert time.monotonic() - started < 2.0 + 2.0 + 1.0
        assert str(info.value).startswith(
            "creating producer (unnamed) on persistent://public/default/part2: gave up after "
        )
        assert isinstance(info.value.__cause__, PulsarConnectionError)
    finally:
        pool.close()


# --- lifecycle -------------------------------------------------------------------------------


def test_closed_producer_refuses_to_send(lookup: Lookup, topic_name: str) -> None:
    producer = Producer.create(lookup, full_topic_name(topic_name))
    producer.send(OutgoingMessage(b"one"))
    producer.close()
    assert producer.messages_acknowledged == 1
    producer.close()  # idempotent
    with pytest.raises(LocalProtocolError):
        producer.send(OutgoingMessage(b"two"))


def test_invalid_options_are_rejected(lookup: Lookup, topic_name: str) -> None:
    with pytest.raises(ConfigurationError):
        Producer.create(lookup, full_topic_name(topic_name), ProducerSettings(batch_max_messages=0))
    with pytest.raises(ConfigurationError):
        Producer.create(lookup, full_topic_name(topic_name), ProducerSettings(codec=99))


def test_producer_gives_up_when_the_broker_stays_away() -> None:
    """A producer whose broker is gone retries for the operation timeout (2 s here), then
    fails, saying what it tried; the failure is sticky and close does not hang either."""
    own = LocalBroker.start()
    pool = ConnectionPool()
    try:
        lookup = Lookup(settings_for(own.service_url, timeout=2.0, connect_timeout=1.0), pool)
        producer = Producer.create(lookup, full_topic_name("doomed"))
        producer.send(OutgoingMessage(b"before"))
        producer.flush()
        own.stop()
        started = time.monotonic()
        with pytest.raises(RetriesExhaustedError) as info:
            producer.send(OutgoingMessage(b"after"))
            producer.flush()
        assert time.monotonic() - started < 2.0 + 2.0 + 2.0  # the limit, one pause, a connect
        message = str(info.value)
        assert message.startswith("reconnecting producer ")
        # the lost connection was noticed before "after" was sent: nothing was in flight
        assert " on persistent://public/default/doomed with 0 message(s) without receipt: " in (
            message
        )
        assert isinstance(info.value.__cause__, PulsarConnectionError)
        with pytest.raises(RetriesExhaustedError):
            producer.close()
    finally:
        own.stop()
        pool.close()


# --- receipts held back or forged by a proxy -------------------------------------------------


class ProxiedLookup(Lookup):
    """Lookups answer with the broker's own address; keep every connection on the proxy."""

    def connect_to_owner(self, topic: str) -> Connection:
        return self.service_connection()


@pytest.fixture
def proxy(broker: LocalBroker) -> Iterator[BrokerProxy]:
    held = BrokerProxy((broker.host, broker.port))
    yield held
    held.close()


@pytest.fixture
def proxied_lookup(proxy: BrokerProxy) -> Iterator[Lookup]:
    pool = ConnectionPool()
    yield ProxiedLookup(settings_for(proxy.url, timeout=5.0), pool)
    pool.close()


def test_flush_times_out_without_receipts(
    proxy: BrokerProxy, proxied_lookup: Lookup, topic_name: str
) -> None:
    producer = Producer.create(
        proxied_lookup,
        full_topic_name(topic_name),
        ProducerSettings(batching=False, send_timeout=1.0),
    )
    producer.send(OutgoingMessage(b"receipted"))
    producer.flush()
    proxy.hold()
    for i in range(3):
        producer.send(OutgoingMessage(b"held-%d" % i))
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError, match="3 message"):
        producer.flush()
    assert 0.9 <= time.monotonic() - started < 5
    with pytest.raises(RequestTimeoutError):
        producer.send(OutgoingMessage(b"refused"))
    proxy.release()
    with pytest.raises(RequestTimeoutError):
        producer.close()
    assert producer.messages_sent == 4


def _five_unanswered(
    proxy: BrokerProxy, lookup: Lookup, topic_name: str, send_timeout: float
) -> Producer:
    """A producer allowed five pending messages that has sent five the broker holds back."""
    producer = Producer.create(
        lookup,
        full_topic_name(topic_name),
        ProducerSettings(batching=False, max_pending_messages=5, send_timeout=send_timeout),
    )
    proxy.hold()
    for i in range(5):
        producer.send(OutgoingMessage(b"m%d" % i))
    return producer


def test_send_blocks_while_too_many_messages_lack_receipts(
    proxy: BrokerProxy, proxied_lookup: Lookup, topic_name: str
) -> None:
    producer = _five_unanswered(proxy, proxied_lookup, topic_name, send_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(RequestTimeoutError, match="5 message"):
        producer.send(OutgoingMessage(b"sixth"))
    assert 0.9 <= time.monotonic() - started < 5
    assert (producer.messages_sent, producer.messages_acknowledged) == (5, 0)
    proxy.release()
    deadline = time.monotonic() + 5
    while producer.messages_acknowledged < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert producer.messages_acknowledged == 5  # what was written still got its receipts


def test_blocked_send_resumes_when_receipts_arrive(
    proxy: BrokerProxy, proxied_lookup: Lookup, topic_name: str
) -> None:
    producer = _five_unanswered(proxy, proxied_lookup, topic_name, send_timeout=10.0)
    releaser = threading.Timer(0.5, proxy.release)
    releaser.start()
    started = time.monotonic()
    producer.send(OutgoingMessage(b"sixth"))
    assert 0.4 <= time.monotonic() - started < 5
    producer.close()
    assert producer.messages_acknowledged == 6


def test_connection_loss_without_a_broker_to_return_to_fails_a_waiting_flush(
    proxy: BrokerProxy, proxied_lookup: Lookup, topic_name: str
) -> None:
    producer = Producer.create(
        proxied_lookup,
        full_topic_name(topic_name),
        ProducerSettings(batching=False, send_timeout=30.0),
    )
    proxy.hold()
    for i in range(3):
        producer.send(OutgoingMessage(b"m%d" % i))
    threading.Timer(0.3, proxy.close).start()
    started = time.monotonic()
    with pytest.raises(RetriesExhaustedError, match=r"with 3 message\(s\) without receipt"):
        producer.flush()
    # the reconnect's limit (the lookup's 5 s) and one pause, not send_timeout
    assert time.monotonic() - started < 5 + 2 + 1
    with pytest.raises(RetriesExhaustedError):
        producer.close()


def test_send_error_from_the_broker_fails_the_producer(
    proxy: BrokerProxy, proxied_lookup: Lookup, topic_name: str
) -> None:
    """A refusal that is not retriable (TopicTerminated) is sticky; a retriable one makes the
    producer connect again (test_apache_faults.py)."""
    producer = Producer.create(
        proxied_lookup, full_topic_name(topic_name), ProducerSettings(batching=False)
    )
    producer.send(OutgoingMessage(b"fine"))
    producer.flush()
    error = pb.CommandSendError(
        producer_id=producer.producer_id,
        sequence_id=1,
        error=pb.TopicTerminatedError,
        message="Topic was already terminated",
    )
    proxy.inject(pb.BaseCommand(type=pb.BaseCommand.SEND_ERROR, send_error=error))
    with pytest.raises(TopicTerminatedError, match=r"message 1 .* already terminated"):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            producer.send(OutgoingMessage(b"more"))
            time.sleep(0.01)
    with pytest.raises(TopicTerminatedError):
        producer.close()


def test_receipt_out_of_order_is_a_protocol_error(
    proxy: BrokerProxy, proxied_lookup: Lookup, topic_name: str
) -> None:
    producer = Producer.create(
        proxied_lookup, full_topic_name(topic_name), ProducerSettings(batching=False)
    )
    producer.send(OutgoingMessage(b"fine"))
    producer.flush()
    proxy.hold()
    producer.send(OutgoingMessage(b"in flight"))  # sequence id 1
    # Nothing reached the client since hold(), so the stream is at a frame boundary.
    forged = pb.CommandSendReceipt(producer_id=producer.producer_id, sequence_id=99)
    proxy.inject(pb.BaseCommand(type=pb.BaseCommand.SEND_RECEIPT, send_receipt=forged))
    with pytest.raises(RemoteProtocolError, match="99"):
        producer.flush()
    proxy.release()
    with pytest.raises(RemoteProtocolError):
        producer.close()


def test_messages_a_deduplicating_broker_has_stored_are_not_sent_again(
    broker: LocalBroker, lookup: Lookup, client: pulsar.Client, topic_name: str
) -> None:
    """A broker with deduplication confirms a producer with the highest sequence id it has
    stored under that name (the proxy answers so; pulsar-lite does not deduplicate). With
    ``skip_stored`` those messages are not sent again: alone, in columns entirely stored, or
    at the head of columns partly stored. Without it, everything is sent."""
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.last_sequence_ids = {"resumed": 5, "resumed-single": 5, "not-skipping": 5}
    pool = ConnectionPool()
    proxied = Lookup(settings_for(proxy.url, timeout=5.0), pool)
    batched, single, plain = (
        full_topic_name(f"{topic_name}-{suffix}") for suffix in ("batched", "single", "plain")
    )
    values = [b"v%d" % i for i in range(12)]
    try:
        with Producer.create(
            proxied,
            batched,
            ProducerSettings(batch_max_messages=3, batch_max_delay_ms=60_000),
            name="resumed",
            skip_stored=True,
        ) as producer:
            assert producer.last_sequence_id_from_broker == 5
            producer.send(OutgoingMessage(values[0]))
            producer.send_columns(OutgoingColumns(Blobs.of(values[1:4])))
            producer.send_columns(OutgoingColumns(Blobs.of(values[4:9])))
            producer.send(OutgoingMessage(values[9]))
            producer.send_columns(OutgoingColumns(Blobs.of(values[10:])))
            assert producer.messages_skipped == 6
        with Producer.create(
            proxied,
            single,
            ProducerSettings(batching=False),
            name="resumed-single",
            skip_stored=True,
        ) as producer:
            for value in values[:8]:
                producer.send(OutgoingMessage(value))
            assert producer.messages_skipped == 6
        with Producer.create(proxied, plain, name="not-skipping") as producer:
            producer.send_columns(OutgoingColumns(Blobs.of(values[:3])))
            assert producer.messages_skipped == 0
    finally:
        pool.close()
        proxy.close()
    assert [e.sequence_ids for e in raw_entries(lookup, batched, 2)] == [[6, 7, 8], [9, 10, 11]]
    assert [g.value for g in read_exactly(client, batched, 6)] == values[6:]
    assert [e.metadata.sequence_id for e in raw_entries(lookup, single, 2)] == [6, 7]
    assert [g.value for g in read_exactly(client, single, 2)] == values[6:8]
    assert [e.sequence_ids for e in raw_entries(lookup, plain, 1)] == [[0, 1, 2]]
    assert [g.value for g in read_exactly(client, plain, 3)] == values[:3]
