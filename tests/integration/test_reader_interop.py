"""The official client publishes, our RangeReader reads: every field of every message.

Messages are published with ``pulsar-client`` (the Apache C++ client) to the session's
pulsar-lite broker and read back with :class:`RangeReader` from the earliest position to the
id :meth:`Consumer.last_message_id` reports. Each message is compared field by field, in
order, with what was sent and with the id the official producer got back.

The second half drives the connection and reader against small loopback servers written
here, to check failures that pulsar-lite cannot be made to produce: a peer that stops
answering, an oversize frame, a corrupted checksum, a broker PING.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import official_client
import pulsar
import pytest
from broker_proxy import apache_proxy
from support.clients import settings_for

from pulsar_spark.client.address import BrokerAddress
from pulsar_spark.client.connection import Connection
from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.reader import RangeReader, ReaderSettings, ReadRange
from pulsar_spark.client.settings import ConnectionSettings
from pulsar_spark.errors import (
    BrokerUnreachableError,
    ChecksumMismatchError,
    ConnectionClosedError,
    FrameTooLargeError,
    TopicLookupError,
)
from pulsar_spark.local_broker import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import Frame, FrameDecoder, encode_command, encode_payload_frame
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.payload import encode_payload_section
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration

Type = pb.BaseCommand.Type
KEYS = ["plain-key", "ключ-кириллица", "鍵-漢字", "🔑🚀", None]
CODECS = official_client.COMPRESSION
WIRE_CODEC = {"none": pb.NONE, "lz4": pb.LZ4, "zlib": pb.ZLIB, "zstd": pb.ZSTD, "snappy": pb.SNAPPY}
FAST = ReaderSettings(queue_size=1000, poll_timeout=20.0, request_timeout=10.0)


# --- publishing with the official client ----------------------------------------------------


@dataclass(frozen=True)
class Sent:
    value: bytes | None
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int = 0
    sequence_id: int | None = None


@dataclass(frozen=True)
class Row:
    """One message as our reader returned it, or as it was published."""

    ledger: int
    entry: int
    batch_index: int
    partition: int
    value: bytes | None
    key: bytes | None
    properties: dict[str, str]
    event_time: int
    sequence_id: int
    producer_name: str


@dataclass
class Published:
    rows: list[Row]
    producer_name: str
    started_ms: int
    finished_ms: int


def now_ms() -> int:
    return int(time.time() * 1000)


def publish(
    client: pulsar.Client,
    topic: str,
    messages: list[Sent],
    *,
    partition: int | None = None,
    **producer_options: object,
) -> Published:
    """Send ``messages`` in order with one official producer; return the expected rows.

    ``partition``: the partition index pulsar-lite reports for the topic (the topic is then a
    ``-partition-N`` name); None takes it from the official message id.
    """
    started = now_ms()
    producer = client.create_producer(topic, **producer_options)
    results: list[tuple[pulsar.Result, pulsar.MessageId] | None] = [None] * len(messages)
    done = threading.Event()
    remaining = [len(messages)]
    lock = threading.Lock()

    def callback(index: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def record(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            results[index] = (result, message_id)
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        return record

    for i, message in enumerate(messages):
        producer.send_async(
            message.value,
            callback(i),
            properties=message.properties or None,
            partition_key=message.key,
            event_timestamp=message.event_time or None,
            sequence_id=message.sequence_id,
        )
    producer.flush()
    assert done.wait(30), "the official producer did not confirm every message"
    name = producer.producer_name()
    producer.close()
    finished = now_ms()
    rows = []
    for message, outcome in zip(messages, results, strict=True):
        assert outcome is not None
        result, mid = outcome
        assert result == pulsar.Result.Ok
        rows.append(
            Row(
                ledger=mid.ledger_id(),
                entry=mid.entry_id(),
                batch_index=mid.batch_index(),
                partition=mid.partition() if partition is None else partition,
                value=message.value,
                key=None if message.key is None else message.key.encode(),
                properties=dict(message.properties),
                event_time=message.event_time,
                sequence_id=-1 if message.sequence_id is None else message.sequence_id,
                producer_name=name,
            )
        )
    return Published(rows, name, started, finished)


# --- reading with ours ------------------------------------------------------------------------


def columns_rows(columns: MessageColumns) -> list[Row]:
    out = []
    for i in range(columns.count):
        null = columns.null_value is not None and bool(columns.null_value[i])
        start, stop = int(columns.value_offsets[i]), int(columns.value_offsets[i + 1])
        props = () if columns.properties is None else columns.properties[i]
        assert len(dict(props)) == len(props)
        out.append(
            Row(
                ledger=columns.entry.ledger_id,
                entry=columns.entry.entry_id,
                batch_index=int(columns.batch_index[i]),
                partition=columns.entry.partition,
                value=None if null else columns.values[start:stop],
                key=None if columns.key is None else columns.key[i],
                properties=dict(props),
                event_time=int(columns.event_time[i]),
                sequence_id=int(columns.sequence_id[i]),
                producer_name=columns.entry.producer_name,
            )
        )
    return out


def last_message_id(lookup: Lookup, topic: str) -> MessageId | None:
    with Consumer(lookup, topic, MessageId.earliest(), timeout=10) as consumer:
        return consumer.last_message_id()


def read(
    lookup: Lookup,
    topic: str,
    start: MessageId | None = None,
    end: MessageId | None = None,
    *,
    start_inclusive: bool = True,
    end_inclusive: bool = True,
    settings: ReaderSettings = FAST,
    publish_times: list[int] | None = None,
) -> list[Row]:
    if end is None:
        end = last_message_id(lookup, topic)
        assert end is not None
    reader = RangeReader(
        lookup,
        ReadRange(
            topic,
            MessageId.earliest() if start is None else start,
            end,
            start_inclusive=start_inclusive,
            end_inclusive=end_inclusive,
        ),
        settings,
    )
    rows = []
    for columns in reader:
        rows.extend(columns_rows(columns))
        if publish_times is not None:
            publish_times.extend([columns.entry.publish_time] * columns.count)
    return rows


def with_sequence_ids(rows: list[Row], first: int) -> list[Row]:
    """Expected rows for a producer that numbered messages itself from ``first``."""
    return [
        r if r.sequence_id >= 0 else Row(**{**r.__dict__, "sequence_id": first + i})
        for i, r in enumerate(rows)
    ]


def ids(rows: list[Row]) -> list[tuple[int, int, int]]:
    return [(r.ledger, r.entry, r.batch_index) for r in rows]


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(broker: LocalBroker) -> Iterator[pulsar.Client]:
    official = pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    yield official
    with contextlib.suppress(Exception):
        official.close()


@pytest.fixture(scope="module")
def lookup(broker: LocalBroker) -> Iterator[Lookup]:
    pool = ConnectionPool()
    yield Lookup(settings_for(broker.service_url, timeout=10), pool)
    pool.close()


@pytest.fixture
def topic(topic_name: str) -> str:
    return full_topic_name(topic_name)


def varied_messages(count: int, *, first_sequence: int) -> list[Sent]:
    """Keys in several scripts (and none), properties, event times, sizes, empty and null."""
    messages = []
    for i in range(count):
        value: bytes | None = f"value-{i}-".encode() + bytes(range(i % 7)) * (i % 5)
        if i % 11 == 4:
            value = b""
        if i % 11 == 9:
            value = None
        props = {"i": str(i), "script": "кириллица 漢字 🚀"} if i % 3 else {}
        messages.append(
            Sent(
                value=value,
                key=KEYS[i % len(KEYS)],
                properties=props,
                event_time=1_700_000_000_000 + i if i % 4 else 0,
                sequence_id=first_sequence + i,
            )
        )
    return messages


# --- content: batching, codecs, keys, properties, ids -------------------------------------------


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("batching", [True, False], ids=["batched", "single"])
def test_every_field_of_every_message(
    client: pulsar.Client, lookup: Lookup, topic: str, codec: str, batching: bool
) -> None:
    messages = varied_messages(23, first_sequence=1000)
    options: dict[str, object] = {
        "producer_name": f"interop-{codec}-{batching}",
        "compression_type": CODECS[codec],
        "batching_enabled": batching,
    }
    if batching:
        options.update(batching_max_messages=5, batching_max_publish_delay_ms=5000)
    published = publish(client, topic, messages, **options)
    expected = published.rows
    assert published.producer_name == f"interop-{codec}-{batching}"

    # the layout the official producer reported: 5 batches of 5,5,5,5,3 or 23 entries
    ledger = expected[0].ledger
    if batching:
        assert ids(expected) == [(ledger, i // 5, i % 5) for i in range(23)]
    else:
        assert ids(expected) == [(ledger, i, -1) for i in range(23)]
    assert {r.partition for r in expected} == {-1}

    last = last_message_id(lookup, topic)
    assert last == MessageId(ledger, 4 if batching else 22)
    assert last is not None and last.partition == -1

    publish_times: list[int] = []
    got = read(lookup, topic, end=last, publish_times=publish_times)
    assert got == expected
    assert all(published.started_ms <= t <= published.finished_ms for t in publish_times)
    if batching:  # one publish time per batch
        assert publish_times == [publish_times[(i // 5) * 5] for i in range(23)]

    # the codec was really used on the wire, and the batch sizes are as published
    entries = list(
        RangeReader(lookup, ReadRange(topic, MessageId.earliest(), last), FAST).entries()
    )
    assert [e.section.metadata.compression for e in entries] == [WIRE_CODEC[codec]] * len(entries)
    assert [e.message_count for e in entries] == ([5, 5, 5, 5, 3] if batching else [1] * 23)
    assert [e.entry for e in entries] == [(ledger, i) for i in range(5 if batching else 23)]


def test_producer_chosen_sequence_ids_and_broker_named_producer(
    client: pulsar.Client, lookup: Lookup, topic: str
) -> None:
    messages = [Sent(f"m{i}".encode(), key="k") for i in range(7)]
    published = publish(
        client,
        topic,
        messages,
        initial_sequence_id=41,
        batching_enabled=True,
        batching_max_messages=3,
        batching_max_publish_delay_ms=5000,
    )
    expected = with_sequence_ids(published.rows, 42)
    assert published.producer_name  # generated by the broker
    assert {r.producer_name for r in expected} == {published.producer_name}
    assert read(lookup, topic) == expected
    assert [r.sequence_id for r in expected] == list(range(42, 49))


def test_chunked_message(client: pulsar.Client, lookup: Lookup, topic: str) -> None:
    big = os.urandom(6 * 1024 * 1024 + 12345)
    messages = [
        Sent(
            big, key="большой-ключ", properties={"kind": "chunked"}, event_time=123, sequence_id=7
        ),
        Sent(b"after the chunks", key="small", sequence_id=8),
    ]
    published = publish(
        client,
        topic,
        messages,
        producer_name="chunker",
        chunking_enabled=True,
        batching_enabled=False,
    )
    expected = published.rows
    ledger = expected[0].ledger
    # the official id of a chunked message is its last chunk's; 6 MB needs two chunks
    assert ids(expected) == [(ledger, 1, -1), (ledger, 2, -1)]

    raw = list(
        RangeReader(
            lookup, ReadRange(topic, MessageId.earliest(), MessageId(ledger, 2)), FAST
        ).entries()
    )
    metadata = [e.section.metadata for e in raw]
    assert [(m.chunk_id, m.num_chunks_from_msg) for m in metadata[:2]] == [(0, 2), (1, 2)]
    assert metadata[0].uuid == metadata[1].uuid
    assert metadata[0].total_chunk_msg_size == len(big)
    assert not metadata[2].HasField("uuid")

    got = read(lookup, topic, end=MessageId(ledger, 2))
    assert got == expected
    assert got[0].value == big


def test_range_ending_inside_a_chunked_message_still_returns_it_whole(
    client: pulsar.Client, lookup: Lookup, topic: str
) -> None:
    big = bytes(range(256)) * (24 * 1024)  # 6 MiB
    published = publish(
        client,
        topic,
        [Sent(b"before", sequence_id=1), Sent(big, sequence_id=2), Sent(b"after", sequence_id=3)],
        producer_name="chunker-2",
        chunking_enabled=True,
        batching_enabled=False,
    )
    ledger = published.rows[0].ledger
    assert ids(published.rows) == [(ledger, 0, -1), (ledger, 2, -1), (ledger, 3, -1)]
    # the end is the first chunk: the message that starts there is finished and returned
    got = read(lookup, topic, end=MessageId(ledger, 1))
    assert got == published.rows[:2]
    # the next range starts after that first chunk: the message is not returned again
    rest = read(lookup, topic, start=MessageId(ledger, 1), start_inclusive=False)
    assert rest == published.rows[2:]
    # starting at the first chunk (inclusive) returns it
    again = read(lookup, topic, start=MessageId(ledger, 1))
    assert again == published.rows[1:]


# --- partitions ---------------------------------------------------------------------------------


def partition_topic(short: str, index: int) -> str:
    return f"{full_topic_name(short)}-partition-{index}"


def test_empty_partition(
    client: pulsar.Client,
    lookup: Lookup,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    base = pooled_partitioned_topic(3)
    assert lookup.partitions(full_topic_name(base)) == 3
    first = publish(client, partition_topic(base, 0), [Sent(b"p0", sequence_id=1)], partition=0)
    third = publish(client, partition_topic(base, 2), [Sent(b"p2", sequence_id=1)], partition=2)

    assert last_message_id(lookup, partition_topic(base, 1)) is None
    p0_last = last_message_id(lookup, partition_topic(base, 0))
    assert p0_last == MessageId(first.rows[0].ledger, 0)
    assert p0_last is not None and p0_last.partition == 0
    p2_last = last_message_id(lookup, partition_topic(base, 2))
    assert p2_last == MessageId(third.rows[0].ledger, 0)
    assert p2_last is not None and p2_last.partition == 2

    empty = RangeReader(
        lookup, ReadRange(partition_topic(base, 1), MessageId(0, 5), MessageId(0, 4)), FAST
    )
    assert list(empty) == []
    assert list(empty.entries()) == []
    assert read(lookup, partition_topic(base, 0)) == first.rows
    assert read(lookup, partition_topic(base, 2)) == third.rows


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
    empty = partition_topic(pooled_partitioned_topic(2), 1)
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
            partition_topic(base, index),
            messages,
            partition=index,
            producer_name=f"writer-p{index}",
            batching_enabled=index % 2 == 1,
            batching_max_messages=2,
            batching_max_publish_delay_ms=5000,
        ).rows
    for index in range(4):
        last = last_message_id(lookup, partition_topic(base, index))
        assert last is not None and last.partition == index
        assert read(lookup, partition_topic(base, index)) == expected[index]


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
        topic = partition_topic(base, index)
        if not by_partition[index]:
            assert last_message_id(lookup, topic) is None
            continue
        # every partition's producer carries the root producer's name
        assert read(lookup, topic) == by_partition[index]


# --- ranges -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def single_topic(client: pulsar.Client, lookup: Lookup) -> tuple[str, list[Row]]:
    """10 non-batched messages: entries 0..9 of one ledger."""
    topic = full_topic_name(f"ranges-single-{os.urandom(6).hex()}")
    rows = publish(
        client,
        topic,
        [Sent(f"s{i}".encode(), sequence_id=i + 1) for i in range(10)],
        producer_name="ranges",
    ).rows
    assert [r.entry for r in rows] == list(range(10))
    return topic, rows


@pytest.fixture(scope="module")
def batched_topic(client: pulsar.Client, lookup: Lookup) -> tuple[str, list[Row]]:
    """Three batches of five: (entry, index) = (0..2, 0..4)."""
    topic = full_topic_name(f"ranges-batched-{os.urandom(6).hex()}")
    rows = publish(
        client,
        topic,
        [Sent(f"b{i}".encode(), key=f"k{i}", sequence_id=i + 1) for i in range(15)],
        producer_name="ranges",
        batching_enabled=True,
        batching_max_messages=5,
        batching_max_publish_delay_ms=5000,
    ).rows
    assert [(r.entry, r.batch_index) for r in rows] == [(i // 5, i % 5) for i in range(15)]
    return topic, rows


@pytest.mark.parametrize(
    "case",
    [
        # (start entry or None for earliest, inclusive, end entry, inclusive, expected entries)
        (3, True, 6, True, [3, 4, 5, 6]),
        (3, False, 6, True, [4, 5, 6]),
        (3, True, 6, False, [3, 4, 5]),
        (3, False, 6, False, [4, 5]),
        (None, True, 0, True, [0]),
        (None, True, 9, True, list(range(10))),
        (None, True, 4, False, [0, 1, 2, 3]),
        (0, False, 9, True, list(range(1, 10))),
        (-1, False, 2, True, [0, 1, 2]),
        (5, True, 5, True, [5]),
        (5, False, 6, False, []),
        (9, False, 9, True, []),
        (7, True, 3, True, []),
    ],
)
def test_ranges_by_entry(
    lookup: Lookup,
    single_topic: tuple[str, list[Row]],
    case: tuple[int | None, bool, int, bool, list[int]],
) -> None:
    start, start_inclusive, end, end_inclusive, expected = case
    topic, rows = single_topic
    ledger = rows[0].ledger
    got = read(
        lookup,
        topic,
        MessageId.earliest() if start is None else MessageId(ledger, start),
        MessageId(ledger, end),
        start_inclusive=start_inclusive,
        end_inclusive=end_inclusive,
    )
    assert got == [rows[i] for i in expected]
    assert ids(got) == [(ledger, i, -1) for i in expected]


@pytest.mark.parametrize(
    "case",
    [
        # (entry, batch index) bounds, None for earliest; -1 as index means the whole entry
        ((1, 2), True, (2, 1), True, [(1, 2), (1, 3), (1, 4), (2, 0), (2, 1)]),
        ((1, 2), False, (2, 1), True, [(1, 3), (1, 4), (2, 0), (2, 1)]),
        ((1, 2), True, (2, 1), False, [(1, 2), (1, 3), (1, 4), (2, 0)]),
        ((1, 2), False, (2, 1), False, [(1, 3), (1, 4), (2, 0)]),
        ((1, -1), True, (1, -1), True, [(1, i) for i in range(5)]),
        ((1, -1), False, (2, 2), True, [(2, 0), (2, 1), (2, 2)]),
        ((0, 3), True, (1, -1), False, [(0, 3), (0, 4)]),
        ((0, 4), True, (1, 0), True, [(0, 4), (1, 0)]),
        ((0, 4), False, (1, 0), False, []),
        ((1, 3), True, (1, 3), True, [(1, 3)]),
        ((1, 3), False, (1, 4), True, [(1, 4)]),
        ((2, 4), False, (2, -1), True, []),
        (None, True, (0, 0), True, [(0, 0)]),
        (None, True, (0, 0), False, []),
        (None, True, (2, -1), True, [(e, i) for e in range(3) for i in range(5)]),
        ((0, 0), True, (2, 4), True, [(e, i) for e in range(3) for i in range(5)]),
        ((0, -1), False, (1, 1), True, [(1, 0), (1, 1)]),
    ],
)
def test_ranges_by_batch_index(
    lookup: Lookup,
    batched_topic: tuple[str, list[Row]],
    case: tuple[tuple[int, int] | None, bool, tuple[int, int], bool, list[tuple[int, int]]],
) -> None:
    start, start_inclusive, end, end_inclusive, expected = case
    topic, rows = batched_topic
    ledger = rows[0].ledger
    got = read(
        lookup,
        topic,
        MessageId.earliest() if start is None else MessageId(ledger, *start),
        MessageId(ledger, *end),
        start_inclusive=start_inclusive,
        end_inclusive=end_inclusive,
    )
    assert ids(got) == [(ledger, e, i) for e, i in expected]
    assert got == [rows[e * 5 + i] for e, i in expected]


# --- a start that no longer exists ---------------------------------------------------------------


def test_a_start_in_a_removed_ledger_is_reported_before_anything_is_read(
    client: pulsar.Client, broker: LocalBroker, topic: str
) -> None:
    """Retention removes whole ledgers, and Apache Pulsar places a cursor that points into a
    removed one at the first entry left (here a proxy does it for pulsar-lite). A read whose
    start lies in a removed ledger tells ``on_start_gone`` the first entry delivered, once,
    before it yields anything, then reads what is left; a start whose ledger exists, inside
    it or just before its first entry, and an earliest start, are not reported."""
    publish(client, topic + "-earlier", [Sent(b"gives the topic below a later ledger")])
    sent = [Sent(f"r{i}".encode(), sequence_id=i) for i in range(6)]
    rows = publish(client, topic, sent, batching_enabled=False).rows
    ledger = rows[0].ledger
    assert ledger > 0 and [r.entry for r in rows] == list(range(6))
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.first_ledgers = {topic: ledger}
    pool = ConnectionPool()
    through = Lookup(settings_for(proxy.url, timeout=10), pool)

    def read_from(start: MessageId) -> tuple[list[Row], list[MessageId]]:
        gone: list[MessageId] = []
        reader = RangeReader(
            through,
            ReadRange(topic, start, MessageId(ledger, 5), start_inclusive=False),
            FAST,
            gone.append,
        )
        got = []
        for columns in reader:
            got.append((list(gone), columns_rows(columns)))
        assert all(reported == gone for reported, _ in got)  # reported before the first rows
        return [row for _, batch in got for row in batch], gone

    try:
        assert read_from(MessageId(ledger - 1, 4)) == (rows, [MessageId(ledger, 0)])
        assert read_from(MessageId(ledger, 2)) == (rows[3:], [])
        assert read_from(MessageId(ledger, -1)) == (rows, [])
        assert read_from(MessageId.earliest()) == (rows, [])
    finally:
        proxy.close()
        pool.close()


# --- volume: no duplicate, no gap --------------------------------------------------------------


def test_twenty_thousand_messages_once_each(
    client: pulsar.Client, lookup: Lookup, topic: str
) -> None:
    count = 20_000
    producer = client.create_producer(
        topic,
        producer_name="bulk",
        batching_enabled=False,
        block_if_queue_full=True,
        max_pending_messages=5000,
    )
    failures: list[pulsar.Result] = []
    for i in range(count):
        producer.send_async(
            b"%05d" % i,
            lambda result, _mid: failures.append(result) if result != pulsar.Result.Ok else None,
        )
    producer.flush()
    producer.close()
    assert failures == []
    last = last_message_id(lookup, topic)
    assert last is not None and last.entry_id == count - 1
    ledger = last.ledger_id
    reader = RangeReader(
        lookup,
        ReadRange(topic, MessageId.earliest(), last),
        ReaderSettings(queue_size=1000, poll_timeout=30.0, request_timeout=10.0),
    )
    got = [r for columns in reader for r in columns_rows(columns)]
    assert [(r.ledger, r.entry, r.batch_index) for r in got] == [
        (ledger, i, -1) for i in range(count)
    ]
    assert [r.value for r in got] == [b"%05d" % i for i in range(count)]
    assert [r.sequence_id for r in got] == list(range(count))
    assert {r.producer_name for r in got} == {"bulk"}


# --- failures against pulsar-lite --------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_unreachable_broker_fails_fast() -> None:
    port = closed_port()
    pool = ConnectionPool()
    lookup = Lookup(settings_for(f"pulsar://127.0.0.1:{port}", timeout=3, connect_timeout=3), pool)
    started = time.monotonic()
    with pytest.raises(
        BrokerUnreachableError,
        match=rf"^cannot connect to Pulsar broker at 127\.0\.0\.1:{port} within 3s: ",
    ):
        lookup.partitions("persistent://public/default/x")
    assert time.monotonic() - started < 3.5
    pool.close()


def test_unanswered_request_times_out_and_the_connection_survives(broker: LocalBroker) -> None:
    pool = ConnectionPool()
    lookup = Lookup(settings_for(broker.service_url, timeout=1.0), pool)
    try:
        connection = lookup.service_connection()
        started = time.monotonic()
        with pytest.raises(TopicLookupError) as info:
            lookup.topics_of_namespace("public/default")
        elapsed = time.monotonic() - started
        assert 0.9 <= elapsed < 2.5
        assert str(info.value) == (
            "the broker did not answer GetTopicsOfNamespace for 'public/default' within 1s; "
            "it may not support listing topics (pulsar-lite does not), so topicsPattern "
            "cannot be resolved: name topics with 'topic' or 'topics'"
        )
        assert "no response from broker" in str(info.value.__cause__)
        # same connection, still usable
        assert not connection.closed
        assert lookup.service_connection() is connection
        assert lookup.partitions("persistent://public/default/part3") == 3
        assert lookup.partitions("persistent://public/default/part4") == 4
    finally:
        pool.close()


# --- failures against loopback servers written here --------------------------------------------


Handler = Callable[["FakeBroker", socket.socket, Frame], None]


class FakeBroker:
    """A loopback TCP server that hands every frame it receives to ``handler``.

    Every socket operation has a short timeout and :meth:`close` stops everything, so a
    test that goes wrong cannot hang.
    """

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.received: list[pb.BaseCommand] = []
        self.got = threading.Condition()
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.1)
        self.port = int(self._server.getsockname()[1])
        self.url = f"pulsar://127.0.0.1:{self.port}"
        self.address = BrokerAddress("127.0.0.1", self.port)
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            sock.settimeout(0.1)
            self._sockets.append(sock)
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        decoder = FrameDecoder()
        while not self._stop.is_set():
            try:
                data = sock.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            for frame in decoder.feed(data):
                with self.got:
                    self.received.append(frame.command)
                    self.got.notify_all()
                self.handler(self, sock, frame)

    def wait_for(self, kind: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.got:
            while not any(c.type == kind for c in self.received):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.got.wait(remaining)
            return True

    def kinds(self) -> list[str]:
        return [pb.BaseCommand.Type.Name(c.type) for c in self.received]

    def close(self) -> None:
        self._stop.set()
        self._server.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()
        for thread in self._threads:
            thread.join(2)


@pytest.fixture
def fake_broker() -> Iterator[Callable[[Handler], FakeBroker]]:
    started: list[FakeBroker] = []

    def start(handler: Handler) -> FakeBroker:
        server = FakeBroker(handler)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def pool() -> Iterator[ConnectionPool]:
    """A private connection pool, closed after the test."""
    connections = ConnectionPool()
    yield connections
    connections.close()


def connected_frame() -> bytes:
    return encode_command(
        pb.BaseCommand(
            type=Type.CONNECTED,
            connected=pb.CommandConnected(server_version="fake-broker", protocol_version=19),
        )
    )


def ping_frame() -> bytes:
    return encode_command(pb.BaseCommand(type=Type.PING, ping=pb.CommandPing()))


def handshake_only(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
    if frame.command.type == Type.CONNECT:
        sock.sendall(connected_frame())


def test_silent_handshake_is_unreachable(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    server = fake_broker(lambda *_: None)
    started = time.monotonic()
    with pytest.raises(
        BrokerUnreachableError,
        match=rf"^broker at 127\.0\.0\.1:{server.port} accepted TCP but did not complete the "
        r"Pulsar handshake within 1s$",
    ):
        pool.get(server.address, ConnectionSettings(connect_timeout=1.0))
    assert 0.9 <= time.monotonic() - started < 2.5
    assert server.kinds() == ["CONNECT"]


def test_keepalive_detects_a_peer_that_went_silent(
    fake_broker: Callable[[Handler], FakeBroker],
) -> None:
    server = fake_broker(handshake_only)
    connection = Connection.open(
        server.address, ConnectionSettings(connect_timeout=2.0, keepalive_interval=0.5)
    )
    assert connection.server_version == "fake-broker"
    assert connection.protocol_version == 19
    started = time.monotonic()
    with pytest.raises(
        ConnectionClosedError,
        match=rf"^broker 127\.0\.0\.1:{server.port} did not answer keep-alive pings for 1s$",
    ):
        connection.request(
            lambda rid: commands.partitioned_metadata(topic="t", request_id=rid),
            what="partitioned metadata of t",
            timeout=10.0,
        )
    elapsed = time.monotonic() - started
    assert 0.8 <= elapsed < 2.5
    assert connection.closed
    assert server.wait_for(Type.PING, 1.0)
    assert server.kinds() == ["CONNECT", "PARTITIONED_METADATA", "PING"]
    with pytest.raises(ConnectionClosedError, match=r"did not answer keep-alive pings"):
        connection.send(commands.ping())


def test_connection_answers_broker_pings(fake_broker: Callable[[Handler], FakeBroker]) -> None:
    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(connected_frame())
            time.sleep(0.2)
            sock.sendall(ping_frame())

    server = fake_broker(handler)
    connection = Connection.open(server.address, ConnectionSettings(connect_timeout=2.0))
    try:
        assert server.wait_for(Type.PONG, 2.0)
        assert server.kinds() == ["CONNECT", "PONG"]
        assert not connection.closed
    finally:
        connection.close()


def test_ping_sent_right_behind_connected_is_answered(
    fake_broker: Callable[[Handler], FakeBroker],
) -> None:
    """A broker may write its next frame right behind CONNECTED; TCP can deliver both in one
    segment. That frame belongs to the connection and must not be dropped with the
    handshake's buffer."""

    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(connected_frame() + ping_frame())

    server = fake_broker(handler)
    connection = Connection.open(server.address, ConnectionSettings(connect_timeout=2.0))
    try:
        assert server.wait_for(Type.PONG, 2.0), f"no PONG; broker received {server.kinds()}"
        assert server.kinds() == ["CONNECT", "PONG"]
    finally:
        connection.close()


def test_huge_frame_during_handshake(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(struct.pack(">I", 0x7FFFFFF0) + b"\x00" * 64)

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=2.0), pool)
    started = time.monotonic()
    with pytest.raises(
        FrameTooLargeError,
        match=r"^frame of 2147483632 bytes exceeds the maximum frame size of 5253120 bytes$",
    ):
        lookup.partitions("persistent://public/default/t")
    assert time.monotonic() - started < 1.0


def test_huge_frame_after_handshake_fails_the_pending_request(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(connected_frame())
        elif frame.command.type == Type.PARTITIONED_METADATA:
            sock.sendall(struct.pack(">I", 6 * 1024 * 1024) + b"\x00" * 64)

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=5.0), pool)
    first = lookup.service_connection()
    started = time.monotonic()
    with pytest.raises(ConnectionClosedError) as info:
        lookup.partitions("persistent://public/default/t")
    assert time.monotonic() - started < 1.0
    assert str(info.value) == (
        "partitioned metadata of persistent://public/default/t: frame of 6291456 bytes exceeds "
        "the maximum frame size of 5253120 bytes"
    )
    assert first.closed
    second = lookup.service_connection()  # the pool replaces the failed connection
    assert second is not first
    assert not second.closed
    assert server.kinds() == ["CONNECT", "PARTITIONED_METADATA", "CONNECT"]


def message_frame(consumer_id: int, entry: int, value: bytes, *, corrupt: bool) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="fake-producer",
        sequence_id=entry,
        publish_time=1_700_000_000_000 + entry,
        partition_key=f"key-{entry}",
    )
    section = bytearray(encode_payload_section(metadata, value))
    if corrupt:
        section[-1] ^= 0x20
    command = pb.BaseCommand(
        type=Type.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=consumer_id,
            message_id=pb.MessageIdData(ledgerId=5, entryId=entry, partition=-1),
        ),
    )
    return encode_payload_frame(command, bytes(section))


def serve_one_consumer(server: FakeBroker, sock: socket.socket, frame: Frame) -> bool:
    """Answer the handshake, lookup and subscription commands a reader sends; False for others."""
    command = frame.command
    kind = command.type
    if kind == Type.CONNECT:
        sock.sendall(connected_frame())
    elif kind == Type.LOOKUP:
        response = pb.CommandLookupTopicResponse(
            brokerServiceUrl=server.url,
            response=pb.CommandLookupTopicResponse.Connect,
            request_id=command.lookupTopic.request_id,
        )
        sock.sendall(
            encode_command(pb.BaseCommand(type=Type.LOOKUP_RESPONSE, lookupTopicResponse=response))
        )
    elif kind in (Type.SUBSCRIBE, Type.UNSUBSCRIBE, Type.CLOSE_CONSUMER):
        body = {
            Type.SUBSCRIBE: command.subscribe,
            Type.UNSUBSCRIBE: command.unsubscribe,
            Type.CLOSE_CONSUMER: command.close_consumer,
        }[kind]
        success = pb.CommandSuccess(request_id=body.request_id)
        sock.sendall(encode_command(pb.BaseCommand(type=Type.SUCCESS, success=success)))
    else:
        return False
    return True


def test_corrupted_checksum_fails_the_reader(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    sent_messages = threading.Event()

    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        command = frame.command
        if serve_one_consumer(server, sock, frame):
            return
        if command.type == Type.FLOW and not sent_messages.is_set():
            sent_messages.set()
            consumer_id = command.flow.consumer_id
            sock.sendall(
                message_frame(consumer_id, 0, b"intact", corrupt=False)
                + message_frame(consumer_id, 1, b"tampered", corrupt=True)
                + message_frame(consumer_id, 2, b"never read", corrupt=False)
            )

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=5.0), pool)
    topic = "persistent://public/default/corrupt"
    reader = RangeReader(
        lookup,
        ReadRange(topic, MessageId.earliest(), MessageId(5, 2)),
        ReaderSettings(queue_size=100, poll_timeout=5.0, request_timeout=5.0),
    )
    got: list[Row] = []
    started = time.monotonic()
    with pytest.raises(
        ChecksumMismatchError,
        match=r"^payload checksum mismatch: frame says 0x[0-9a-f]{8}, "
        r"data hashes to 0x[0-9a-f]{8}$",
    ) as info:
        for columns in reader:
            got.extend(columns_rows(columns))
    assert time.monotonic() - started < 3.0
    assert got == [
        Row(5, 0, -1, -1, b"intact", b"key-0", {}, 0, 0, "fake-producer"),
    ]
    # the two checksums in the message are the frame's and the recomputed one
    good = encode_payload_section(
        pb.MessageMetadata(
            producer_name="fake-producer",
            sequence_id=1,
            publish_time=1_700_000_000_001,
            partition_key="key-1",
        ),
        b"tampered",
    )
    assert f"frame says {struct.unpack_from('>I', good, 2)[0]:#010x}" in str(info.value)
    # the subscription was removed on the way out
    assert server.wait_for(Type.UNSUBSCRIBE, 2.0)
    kinds = server.kinds()
    assert kinds[:3] == ["CONNECT", "LOOKUP", "SUBSCRIBE"]
    assert kinds[3] == "FLOW"
    assert kinds[-1] == "UNSUBSCRIBE"
    subscribe = next(c.subscribe for c in server.received if c.type == Type.SUBSCRIBE)
    assert subscribe.topic == topic
    assert subscribe.durable is False
    assert subscribe.start_message_id.ledgerId == (1 << 64) - 1


def test_stalled_dispatch_is_nudged_with_one_permit(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    """A broker that stops dispatching although permits are left (as pulsar-lite sometimes
    does) gets one more permit after a short silence; here every entry after the first is
    only sent in answer to such a nudge."""
    values = [b"first", b"after one nudge", b"after two nudges"]
    flows: list[int] = []

    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if serve_one_consumer(server, sock, frame) or frame.command.type != Type.FLOW:
            return
        flow = frame.command.flow
        flows.append(flow.messagePermits)
        entry = len(flows) - 1
        if entry < len(values):
            sock.sendall(message_frame(flow.consumer_id, entry, values[entry], corrupt=False))

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=5.0), pool)
    reader = RangeReader(
        lookup,
        ReadRange("persistent://public/default/stalls", MessageId.earliest(), MessageId(5, 2)),
        ReaderSettings(queue_size=100, poll_timeout=5.0, request_timeout=5.0),
    )
    started = time.monotonic()
    got = [row.value for columns in reader for row in columns_rows(columns)]
    assert got == values
    assert flows == [100, 1, 1]
    assert reader.nudges == 2
    assert time.monotonic() - started < 2.0  # nudged after 20-40 ms of silence, not seconds
