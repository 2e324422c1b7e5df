"""``df.write.format("pulsar")`` and ``df.writeStream.format("pulsar")`` against pulsar-lite.

Spark writes; the official Apache client (``pulsar-client``) reads back, one reader per
partition topic from ``MessageId.earliest``, and every field it reports is compared with what
was written: value (and whether it was null), partition key, properties, event time,
partition, producer name. What the official Python client does not expose (whether a key was
set at all, the base64 flag of a binary key, sequence ids, the compression of an entry) is
checked through ``spark.read.format("pulsar")`` or the raw entries.

Partition routing is checked against an implementation of Java's ``String.hashCode`` written
here, independently of the connector's.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import datetime
import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
from java_routing import java_partition, java_string_hash
from pyspark.errors import AnalysisException, PythonException, StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812
from pyspark.sql.streaming import StreamingQuery
from support.clients import settings_for

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.local_broker import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import compression
from pulsar_spark.protocol.payload import parse_payload_section

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NS = "persistent://public/default/"
READ_TIMEOUT_MS = 5_000
READ_ATTEMPTS = 5
DRAIN_TIMEOUT_MS = 200
PRODUCER_NAME = re.compile(r"spark-[0-9a-f]{12}-(\d+)-(\d+)")
"""``spark-<write id>-<task>-<partition>`` for a batch write."""
UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)


def full(topic: str) -> str:
    return topic if "://" in topic else NS + topic


def partition_topic(topic: str, index: int) -> str:
    return f"{full(topic)}-partition-{index}"


# --- Java's String.hashCode (tests/java_routing.py) ------------------------------------------


def test_java_string_hash_reference_values() -> None:
    """The test helper agrees with values Java prints for ``"...".hashCode()``."""
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    # U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00
    assert java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00 == 1772899
    assert java_partition("polygenelubricants", 4) == 0  # MIN_VALUE & 0x7FFFFFFF == 0


# --- reading back with the official client ---------------------------------------------------


@dataclass(frozen=True)
class Got:
    """What the official client reports for one message."""

    value: bytes
    null_value: bool
    key: str
    properties: tuple[tuple[str, str], ...]
    event_time: int
    producer_name: str
    topic: str
    partition: int
    position: tuple[int, int, int]  # ledger, entry, batch index

    def fields(self) -> tuple[Any, ...]:
        """What the writer controls: value, null value, key, properties, event time."""
        return (self.value, self.null_value, self.key, self.properties, self.event_time)


@pytest.fixture(scope="module")
def client(broker: LocalBroker) -> Iterator[pulsar.Client]:
    official = pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=15,
        logger=logging.getLogger("official-pulsar-client"),
    )
    yield official
    with contextlib.suppress(pulsar.AlreadyClosed):
        official.close()


def read_topic(client: pulsar.Client, topic: str) -> list[Got]:
    """Every message of one topic or one ``-partition-N``, in order, each id once.

    ``has_message_available`` compares with the broker's last message id, so no quiet period
    is waited for. pulsar-lite answers that request for an empty topic with UnknownError
    ("Topic has no messages"), and may dispatch an entry twice: repeats of an id already read
    are the broker's, not a second publish (which would have a new id), and are dropped. Its
    dispatch can also stall on a long backlog of small entries: reading then goes on with a
    new reader after the last message read.

    pulsar-lite's last message id has no batch index, and the official reader may then take
    the first message of the last batched entry for the last message: when it says nothing
    is left, what it already holds of that entry is drained with a short wait.
    """
    seen: set[tuple[int, int, int]] = set()
    out: list[Got] = []
    start = pulsar.MessageId.earliest
    for _ in range(READ_ATTEMPTS):
        reader = client.create_reader(full(topic), start)
        try:
            while True:
                try:
                    more = reader.has_message_available()
                except pulsar.UnknownError:
                    more = False
                try:
                    message = reader.read_next(READ_TIMEOUT_MS if more else DRAIN_TIMEOUT_MS)
                except pulsar.Timeout:
                    if more:
                        raise
                    return out
                got = _got(message)
                if got.position not in seen:
                    seen.add(got.position)
                    out.append(got)
                    start = message.message_id()
        except pulsar.Timeout:
            continue
        finally:
            reader.close()
    raise AssertionError(f"reading {topic} stalled {READ_ATTEMPTS} times")


def read_partitioned(client: pulsar.Client, topic: str, partitions: int) -> list[list[Got]]:
    """The messages of each partition of ``topic``, read one partition topic at a time."""
    return [read_topic(client, partition_topic(topic, p)) for p in range(partitions)]


def _got(message: pulsar.Message) -> Got:
    mid = message.message_id()
    return Got(
        value=message.data(),
        null_value=message.has_null_value(),
        key=message.partition_key(),
        properties=tuple(sorted(message.properties().items())),
        event_time=message.event_timestamp(),
        producer_name=message.producer_name(),
        topic=message.topic_name(),
        partition=mid.partition(),
        position=(mid.ledger_id(), mid.entry_id(), mid.batch_index()),
    )


def expected_fields(
    value: bytes | str | None,
    key: str | bytes | None = None,
    properties: dict[str, str] | None = None,
    event_time: datetime.datetime | None = None,
) -> tuple[Any, ...]:
    """What the official client should report for a written row (see :meth:`Got.fields`)."""
    data = value.encode() if isinstance(value, str) else (value or b"")
    if isinstance(key, bytes):
        key = base64.b64encode(key).decode("ascii")  # a binary key travels base64
    millis = (event_time - EPOCH) // datetime.timedelta(milliseconds=1) if event_time else 0
    return (data, value is None, key or "", tuple(sorted((properties or {}).items())), millis)


# --- writing with Spark ----------------------------------------------------------------------


def write(
    df: DataFrame, broker: LocalBroker, *, mode: str | None = "append", **options: str
) -> None:
    """``df.write.format("pulsar")`` with the broker's URL unless ``service.url`` is given."""
    writer = df.write.format("pulsar")
    for name, value in {"service.url": broker.service_url, **options}.items():
        if value is not None:
            writer = writer.option(name, value)
    if mode is not None:
        writer = writer.mode(mode)
    writer.save()


def read_with_spark(spark: SparkSession, broker: LocalBroker, topic: str) -> list[dict[str, Any]]:
    """Our own reader's view of a topic (for what the official client does not expose)."""
    df = (
        spark.read.format("pulsar")
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .load()
    )
    rows = df.select("key", "value", "partition", "producerName", "sequenceId").collect()
    return [r.asDict() for r in rows]


@pytest.fixture(scope="module")
def lookup(broker: LocalBroker) -> Iterator[Lookup]:
    pool = ConnectionPool()
    yield Lookup(settings_for(broker.service_url, timeout=10.0), pool)
    pool.close()


def raw_entry_codecs(lookup: Lookup, topic: str, entries: int) -> list[tuple[int, int]]:
    """``(compression, messages)`` of the first ``entries`` stored entries of ``topic``."""
    consumer = Consumer(lookup, full(topic), MessageId.earliest(), timeout=10.0)
    found: dict[tuple[int, int], tuple[int, int]] = {}
    try:
        consumer.flow(entries)
        deadline = time.monotonic() + 15
        while len(found) < entries and time.monotonic() < deadline:
            delivery = consumer.receive(1.0)
            if delivery is None or delivery.payload is None:
                continue
            metadata = parse_payload_section(delivery.payload).metadata
            ident = (delivery.message.message_id.ledgerId, delivery.message.message_id.entryId)
            count = (
                metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 0
            )
            found[ident] = (metadata.compression, count)
    finally:
        consumer.close()
    assert len(found) == entries
    return [found[ident] for ident in sorted(found)]


def ts(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- 1. every field, read back by the official client ---------------------------------------


BINARY_VALUE_ROWS: list[tuple[Any, ...]] = [
    # value binary, key string, properties, eventTime
    (b"plain", None, None, None),
    (b"\x00\xff\x01 all bytes", "k1", {"a": "1"}, ts("2023-01-01T00:00:00.123456")),
    (None, "tombstone", {}, None),  # null value
    (
        b"",
        "\u043a\u043b\u044e\u0447-\u65e5\u672c-\u00fc",
        {"\u00fc": "\u65e5\u672c", "e": ""},
        None,
    ),
    (b"emoji key", "\U0001f600-\U0001d11e", None, ts("1970-01-01T00:00:01")),
    (b"x" * 5000, "same", {"p": "q", "r": "s", "t": "u"}, ts("2024-02-29T23:59:59.999")),
    (b"no key, props", None, {"only": "props"}, ts("2030-06-15T12:00:00")),
    (None, None, None, None),  # null value, no key
    *[(f"row-{i}".encode() * (i % 7), f"key-{i % 5}", {"i": str(i)}, None) for i in range(8, 40)],
]

STRING_VALUE_ROWS: list[tuple[Any, ...]] = [
    # value string, key binary, eventTime
    ("text", bytes([0, 255, 1]), ts("2023-05-05T05:05:05.5")),
    ("\u65e5\u672c\u8a9e \U0001f600", b"plain-ascii-bytes", None),
    ("", b"\xfe\xff" * 40, None),
    (None, b"\x00", None),  # null value, binary key
    ("no key", None, ts("2001-09-09T01:46:40")),
    *[(f"s-{i}", bytes([i, 255 - i, (i * 7) % 256]), None) for i in range(5, 30)],
]


def test_batch_write_every_field_binary_value(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    schema = "value binary, key string, properties map<string,string>, eventTime timestamp"
    df = spark.createDataFrame(BINARY_VALUE_ROWS, schema).repartition(2)
    write(df, broker, topic=topic_name)

    got = read_topic(client, topic_name)
    assert collections.Counter(g.fields() for g in got) == collections.Counter(
        expected_fields(*row) for row in BINARY_VALUE_ROWS
    )
    # spelled out: a null value is a message with null_value set and an empty payload, an
    # event time keeps its milliseconds (the microseconds are cut), absent fields stay unset
    by_key = {g.key: g for g in got}
    assert by_key["tombstone"].null_value and by_key["tombstone"].value == b""
    assert by_key["k1"].event_time == 1_672_531_200_123
    assert by_key["same"].event_time == 1_709_251_199_999
    assert by_key["\U0001f600-\U0001d11e"].event_time == 1000
    assert by_key["\u043a\u043b\u044e\u0447-\u65e5\u672c-\u00fc"].properties == (
        ("e", ""),
        ("\u00fc", "\u65e5\u672c"),
    )
    assert {g.topic for g in got} == {full(topic_name)}
    assert {g.partition for g in got} == {-1}
    _check_producers(got)

    # what the official Python client cannot tell: an unkeyed row has no key at all (not an
    # empty one), and each producer numbers its messages 0, 1, 2, ... in the order sent
    ours = read_with_spark(spark, broker, topic_name)
    assert collections.Counter(
        (r["value"], r["key"].decode() if r["key"] is not None else None) for r in ours
    ) == collections.Counter(
        (bytes(v) if v is not None else None, k) for v, k, _, _ in BINARY_VALUE_ROWS
    )
    _check_sequence_ids(ours)


def test_batch_write_every_field_string_value_binary_key(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    schema = "value string, key binary, eventTime timestamp"
    df = spark.createDataFrame(STRING_VALUE_ROWS, schema).repartition(2)
    write(df, broker, topic=topic_name)

    got = read_topic(client, topic_name)
    assert collections.Counter(g.fields() for g in got) == collections.Counter(
        expected_fields(value, key, None, event) for value, key, event in STRING_VALUE_ROWS
    )
    # the official client shows a binary key as its base64 text (partition_key)
    by_value = {g.value: g for g in got if not g.null_value}
    assert by_value[b"text"].key == "AP8B"
    assert by_value[b"text"].event_time == 1_683_263_105_500
    assert by_value["\u65e5\u672c\u8a9e \U0001f600".encode()].key == "cGxhaW4tYXNjaWktYnl0ZXM="
    assert by_value[b"no key"].key == ""
    assert [g.key for g in got if g.null_value] == ["AA=="]
    _check_producers(got)

    # the base64 flag travels with the key: our reader gives back the original bytes
    ours = read_with_spark(spark, broker, topic_name)
    assert collections.Counter((r["value"], r["key"]) for r in ours) == collections.Counter(
        (v.encode() if v is not None else None, k) for v, k, _ in STRING_VALUE_ROWS
    )
    _check_sequence_ids(ours)


def _check_producers(got: list[Got]) -> None:
    """One producer per Spark task (two here) named ``spark-<write>-<task>-0``."""
    names = {g.producer_name for g in got}
    matches = [PRODUCER_NAME.fullmatch(name) for name in names]
    assert all(matches), names
    assert len({name.rsplit("-", 2)[0] for name in names}) == 1  # one write id
    assert {(int(m[1]), int(m[2])) for m in matches if m} == {(0, 0), (1, 0)}


def _check_sequence_ids(rows: list[dict[str, Any]]) -> None:
    by_producer: dict[str, list[int]] = collections.defaultdict(list)
    for row in rows:
        by_producer[row["producerName"]].append(row["sequenceId"])
    for sequence_ids in by_producer.values():
        assert sorted(sequence_ids) == list(range(len(sequence_ids)))


# --- 2, 3. partition routing ------------------------------------------------------------------


ROUTED_STRING_KEYS: list[str] = [
    *(f"key-{i}" for i in range(200)),
    "",
    "Aa",
    "BB",  # same hash as "Aa"
    "polygenelubricants",  # hashCode() == Integer.MIN_VALUE
    "\u043a\u043b\u044e\u0447",
    "\u65e5\u672c\u8a9e-\u00fc",
    "\U0001f600",  # outside the BMP: two UTF-16 units
    "a\U0001f600b\U0001d11ec",
    *(f"\U0001f680-{i}-\u00e9" for i in range(20)),
    "L" * 1000 + "\U0001f600",  # longer than any block the connector hashes at once
    "\U0001f600" * 100,
]


def test_keyed_rows_land_on_the_java_partition(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """Each keyed row is on partition ``(String.hashCode(key) & 0x7FFFFFFF) % 4``, a binary
    key hashed as its base64 text. Many keys per task and few (the connector routes large and
    small groups of keys differently), string and binary keys, one topic."""
    topic = pooled_partitioned_topic(4)
    few_strings = ROUTED_STRING_KEYS[200:]  # fewer than 64 keys per task
    binary_keys = [bytes([i, 255 - i, (i * 37) % 256]) * (1 + i % 3) for i in range(150)]
    writes: list[tuple[str, list[tuple[str, Any]]]] = [
        ("value string, key string", [(f"s{i}", k) for i, k in enumerate(ROUTED_STRING_KEYS)]),
        ("value string, key string", [(f"f{i}", k) for i, k in enumerate(few_strings)]),
        ("value string, key binary", [(f"b{i}", k) for i, k in enumerate(binary_keys)]),
        ("value string, key binary", [(f"c{i}", k) for i, k in enumerate(binary_keys[:40])]),
    ]
    expected: dict[bytes, tuple[str, int]] = {}
    for schema, rows in writes:
        write(spark.createDataFrame(rows, schema).repartition(2), broker, topic=topic)
        for value, key in rows:
            text = key if isinstance(key, str) else base64.b64encode(key).decode("ascii")
            expected[value.encode()] = (text, java_partition(text, 4))

    partitions = read_partitioned(client, topic, 4)
    found = {g.value: (g.key, g.partition) for got in partitions for g in got}
    assert sum(len(got) for got in partitions) == len(found) == len(expected)
    assert found == expected
    for index, got in enumerate(partitions):
        assert {g.topic for g in got} == {partition_topic(topic, index)}
        assert got, f"no key routed to partition {index}"
        # producers are named after the partition they write to
        assert {g.producer_name.rsplit("-", 1)[1] for g in got} == {str(index)}
    assert found[b"s203"] == ("polygenelubricants", 0)
    assert found[b"s201"][1] == found[b"s202"][1]  # "Aa" and "BB" collide in Java too


def test_unkeyed_rows_spread_over_every_partition(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """Unkeyed rows rotate over the partitions one producer batch (here 500 rows) at a time,
    each task starting at its own partition number (so every attempt of a task sends the same
    rows to the same partitions): task t's run r of 500 rows goes to partition (t + r) % 4."""
    topic = pooled_partitioned_topic(4)
    df = spark.range(8000, numPartitions=2).select(F.format_string("u-%05d", "id").alias("value"))
    write(df, broker, topic=topic, **{"pulsar.producer.batchingMaxMessages": "500"})

    expected: list[list[bytes]] = [[], [], [], []]
    for task in (0, 1):
        for run in range(8):
            first = task * 4000 + run * 500
            expected[(task + run) % 4] += [f"u-{i:05d}".encode() for i in range(first, first + 500)]
    partitions = read_partitioned(client, topic, 4)
    assert [sorted(g.value for g in got) for got in partitions] == expected
    for index, got in enumerate(partitions):
        assert {(g.key, g.partition, g.null_value) for g in got} == {("", index, False)}
        per_producer = collections.Counter(g.producer_name for g in got)
        assert all(count % 500 == 0 for count in per_producer.values()), per_producer


# --- 4. the topic column and the topic option -------------------------------------------------


def test_topic_column_routes_rows_and_the_topic_option_wins(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    single = topic_name
    other = f"{topic_name}-other"
    partitioned = pooled_partitioned_topic(2)
    # the same topics spelled short, as namespace/topic and fully qualified
    spellings = [single, f"public/default/{other}", full(partitioned), full(single)]
    rows = [(f"v{i}", f"k{i % 9}", spellings[i % 4]) for i in range(60)]
    df = spark.createDataFrame(rows, "value string, key string, topic string").repartition(2)
    write(df, broker)

    def routed(names: list[str]) -> list[tuple[bytes, str]]:
        return sorted((v.encode(), k) for v, k, t in rows if t in names)

    def read_all() -> dict[str, list[tuple[bytes, str]]]:
        on_partitions = [g for got in read_partitioned(client, partitioned, 2) for g in got]
        return {
            "single": sorted((g.value, g.key) for g in read_topic(client, single)),
            "other": sorted((g.value, g.key) for g in read_topic(client, other)),
            "partitioned": sorted((g.value, g.key) for g in on_partitions),
        }

    first = read_all()
    assert first == {
        "single": routed([single, full(single)]),
        "other": routed([f"public/default/{other}"]),
        "partitioned": routed([full(partitioned)]),
    }

    # with the option set, every row goes to that topic whatever its column says, null too
    target = f"{topic_name}-option"
    with_null = [*rows, ("null-topic", "k", None)]
    df = spark.createDataFrame(with_null, "value string, key string, topic string")
    write(df.repartition(2), broker, topic=target)
    got = read_topic(client, target)
    assert sorted((g.value, g.key) for g in got) == sorted((v.encode(), k) for v, k, _ in with_null)
    assert read_all() == first  # nothing more reached the column's topics


def test_null_topic_without_topic_option_fails_the_write(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    df = spark.createDataFrame(
        [("a", topic_name), ("b", None)], "value string, topic string"
    ).coalesce(1)
    with pytest.raises(
        PythonException, match="a row has a null 'topic' and no 'topic' option is set"
    ):
        write(df, broker)
    # the task checks every row of a record batch before sending any of it
    assert read_topic(client, topic_name) == []


def test_rows_of_a_topic_spelled_several_ways_keep_their_order(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """One record batch names each topic short, as namespace/topic and fully qualified, in
    turn: each topic, and each partition of a partitioned one, gets its rows in row order."""
    partitioned = pooled_partitioned_topic(2)
    spellings = {
        topic_name: [topic_name, full(topic_name), f"public/default/{topic_name}"],
        partitioned: [full(partitioned), partitioned],
    }
    rows = [  # (topic, value, key, the topic column)
        (topic, f"{topic}-{i}", f"k{i % 2}", spelt[i % len(spelt)])
        for i in range(40)
        for topic, spelt in spellings.items()
    ]
    df = spark.createDataFrame(
        [row[1:] for row in rows], "value string, key string, topic string"
    ).coalesce(1)
    write(df, broker)

    def sent(topic: str, keys: tuple[str, ...]) -> list[bytes]:
        return [v.encode() for t, v, k, _ in rows if t == topic and k in keys]

    assert [g.value for g in read_topic(client, topic_name)] == sent(topic_name, ("k0", "k1"))
    assert java_partition("k0", 2) != java_partition("k1", 2)
    for key in ("k0", "k1"):
        on_partition = read_topic(client, partition_topic(partitioned, java_partition(key, 2)))
        assert [g.value for g in on_partition] == sent(partitioned, (key,))


def test_event_time_before_1970_fails_the_write(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Pulsar carries event times as unsigned milliseconds, 0 meaning none: 1.5 ms before
    the epoch (-2 ms, rounded down as Spark does) cannot be sent, and the row is named."""
    rows = [("a", ts("2024-01-01T00:00:00")), ("b", ts("1969-12-31T23:59:59.998500"))]
    df = spark.createDataFrame(rows, "value string, eventTime timestamp").coalesce(1)
    with pytest.raises(
        PythonException,
        match=re.escape(
            "column 'eventTime': a row has event time 1969-12-31 23:59:59.998500+00:00 "
            "(-2 ms since the epoch)"
        ),
    ):
        write(df, broker, topic=topic_name)
    # the task checks every row of a record batch before sending any of it
    assert read_topic(client, topic_name) == []


# --- 5, 6. compression, batching, chunking ---------------------------------------------------


CODEC_ROWS: list[tuple[Any, ...]] = [
    # value, key, properties, eventTime: compressible values, nulls, empties
    *[
        (
            (f"codec-row-{i:04d} " * (1 + i % 20)).encode(),
            f"k{i % 7}" if i % 3 else None,
            {"n": str(i), "\u00e9": "\u00fc"} if i % 4 == 0 else None,
            ts("2022-02-02T02:02:02.002") if i % 5 == 0 else None,
        )
        for i in range(300)
    ],
    (None, "null-value", None, None),
    (b"", "empty-value", {"e": ""}, None),
    (b"", None, None, None),
]


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("codec", list(compression.CODEC_NAMES))
def test_compression_and_batching(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    lookup: Lookup,
    topic_name: str,
    codec: str,
    batching: bool,
) -> None:
    schema = "value binary, key string, properties map<string,string>, eventTime timestamp"
    df = spark.createDataFrame(CODEC_ROWS, schema).coalesce(1)
    write(
        df,
        broker,
        topic=topic_name,
        **{
            "pulsar.producer.compressionType": codec.upper() if codec == "zstd" else codec,
            "pulsar.producer.batchingEnabled": str(batching).lower(),
            "pulsar.producer.batchingMaxMessages": "100",
        },
    )
    got = read_topic(client, topic_name)
    # one task, one producer: the official client reads the rows back in order, exactly
    assert [g.fields() for g in got] == [expected_fields(*row) for row in CODEC_ROWS]
    if batching:
        assert [g.position[2] for g in got] == [i % 100 for i in range(len(CODEC_ROWS))]
    else:
        assert {g.position[2] for g in got} == {-1}

    # on the wire: every entry is compressed with the codec asked for (an unbatched empty or
    # null value is sent uncompressed, as the official clients do)
    entries = 4 if batching else len(CODEC_ROWS)
    stored = raw_entry_codecs(lookup, topic_name, entries)
    code = compression.CODEC_NAMES[codec]
    if batching:
        assert stored == [(code, 100), (code, 100), (code, 100), (code, 3)]
    else:
        assert stored == [(code if row[0] else compression.NONE, 0) for row in CODEC_ROWS]


def test_message_over_the_broker_limit_is_chunked(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """pulsar-lite takes entries of up to 5 MB: a 6 MB value goes as chunks of one message,
    which the official reader puts back together."""
    big = os.urandom(6 * 1024 * 1024)
    rows = [
        (b"before", "a", None),
        (big, "big", {"size": "6M"}),
        (b"after", None, {"p": "q"}),
    ]
    df = spark.createDataFrame(rows, "value binary, key string, properties map<string,string>")
    write(df.coalesce(1), broker, topic=topic_name)
    got = read_topic(client, topic_name)
    assert [len(g.value) for g in got] == [6, len(big), 5]
    assert [g.fields() for g in got] == [expected_fields(*row) for row in rows]
    # the chunks took entries 1 and 2; the message's id is its last chunk's
    assert [g.position[:2] for g in got] == [(got[0].position[0], e) for e in (0, 2, 3)]


# --- 7. streaming write, stopped and restarted ------------------------------------------------


class FileStream:
    """A directory of JSON files read by a file-source stream (one file per micro-batch) and
    written to a topic by ``writeStream.format("pulsar")`` with a checkpoint."""

    def __init__(self, spark: SparkSession, broker: LocalBroker, topic: str, root: Path) -> None:
        self.spark, self.broker, self.topic = spark, broker, topic
        self.source, self.staging, self.checkpoint = root / "in", root / "staging", root / "ck"
        self.source.mkdir()
        self.staging.mkdir()
        self.rows: dict[str, list[str]] = {}  # file name -> the values of its rows

    def add(self, name: str, rows: int) -> None:
        """A new input file, moved in whole so the stream never sees it half written."""
        values = [f"{name}-r{i}" for i in range(rows)]
        staged = self.staging / f"{name}.json"
        staged.write_text(
            "".join(json.dumps({"value": v, "key": key_of(v)}) + "\n" for v in values)
        )
        staged.rename(self.source / staged.name)
        self.rows[name] = values

    def start(self, **options: str) -> StreamingQuery:
        df = (
            self.spark.readStream.schema("value string, key string")
            .option("maxFilesPerTrigger", 1)
            .json(str(self.source))
        )
        writer = (
            df.writeStream.format("pulsar")
            .option("service.url", self.broker.service_url)
            .option("topic", self.topic)
            .option("checkpointLocation", str(self.checkpoint))
        )
        for name, value in options.items():
            writer = writer.option(name, value)
        return writer.start()

    def run(self) -> None:
        """Start, process every file present, stop cleanly."""
        query = self.start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    def last_committed(self) -> int:
        return max(int(p.name) for p in (self.checkpoint / "commits").iterdir() if p.name.isdigit())

    def files_of_batch(self, batch: int) -> list[str]:
        """The input files the file source log assigns to a micro-batch."""
        lines = (self.checkpoint / "sources" / "0" / str(batch)).read_text().splitlines()[1:]
        return [Path(json.loads(line)["path"]).stem for line in lines]

    def forget_commit(self, batch: int) -> None:
        """What a stop between a micro-batch's write and its commit leaves behind."""
        for name in (str(batch), f".{batch}.crc"):
            (self.checkpoint / "commits" / name).unlink(missing_ok=True)


def key_of(value: str) -> str:
    return f"key-{sum(value.encode()) % 11}"


def test_streaming_write_stopped_and_restarted(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    lookup: Lookup,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """Every input row reaches the topic across clean stops, a stop between a batch's write
    and its commit, and a stop in the middle of a batch's write.

    A clean stop duplicates nothing. A micro-batch run again after a restart (offsets logged,
    commit not) is written again in full by producers with the same names and sequence ids
    (write id = query id + batch id): pulsar-lite does not deduplicate, so the topic holds
    what the first attempt wrote twice, and a broker with deduplication would drop every
    repeat (same producer name and sequence id).
    """
    stream = FileStream(spark, broker, topic_name, tmp_path)
    duplicates: dict[str, int] = {}

    def check(*, replayed: set[str]) -> dict[str, list[Got]]:
        """Every row so far is in the topic with its key; only ``replayed`` files repeat."""
        got = read_topic(client, topic_name)
        by_value: dict[str, list[Got]] = collections.defaultdict(list)
        for g in got:
            by_value[g.value.decode()].append(g)
        expected = {v for values in stream.rows.values() for v in values}
        assert set(by_value) == expected
        for value, copies in by_value.items():
            assert {(g.key, g.properties, g.null_value) for g in copies} == {
                (key_of(value), (), False)
            }
            if len(copies) > 1:
                assert value.rsplit("-r", 1)[0] in replayed, value
        return by_value

    # two clean runs: nothing is written twice
    for name in ("a0", "a1", "a2"):
        stream.add(name, 300)
    stream.run()
    assert stream.last_committed() == 2
    for name in ("b0", "b1"):
        stream.add(name, 300)
    stream.run()
    assert stream.last_committed() == 4
    check(replayed=set())

    # stopped after batch 4 was written but before it was committed: the restart writes it
    # again, and only it
    stream.forget_commit(4)
    replayed = set(stream.files_of_batch(4))
    assert len(replayed) == 1
    stream.add("c0", 300)
    stream.run()
    assert stream.last_committed() == 5
    by_value = check(replayed=replayed)
    copies = {v: gs for v, gs in by_value.items() if len(gs) > 1}
    duplicates["replayed batch"] = sum(len(gs) - 1 for gs in copies.values())
    assert duplicates["replayed batch"] == 300
    assert set(copies) == set(stream.rows[next(iter(replayed))])
    for gs in copies.values():
        assert len(gs) == 2
        assert gs[0].producer_name == gs[1].producer_name  # same query id, batch id, task
    ours = read_with_spark(spark, broker, topic_name)
    repeats = collections.Counter((r["producerName"], r["sequenceId"]) for r in ours)
    assert sum(n - 1 for n in repeats.values()) == 300  # the repeats are the same (name, seq)

    # stopped in the middle of a micro-batch's write (a slow sink: one message in flight).
    # stop() returns once Spark has given up on the task, but its Python worker may go on
    # sending (until done, or killed after spark.python.task.killTimeout): wait until the
    # topic is quiet, so that the restart does not run beside it. The restart writes the
    # whole batch again, so it repeats exactly what the interrupted attempt wrote.
    slow = {
        "pulsar.producer.batchingEnabled": "false",
        "pulsar.producer.maxPendingMessages": "1",
    }
    for name in ("d0", "d1"):
        stream.add(name, 3000)
    query = stream.start(**slow)
    try:
        wait_for_value(client, topic_name, "d0-r", timeout=120)
    finally:
        query.stop()
    wait_until_quiet(lookup, topic_name, quiet=2.0)
    interrupted = stream.last_committed() + 1
    assert stream.files_of_batch(interrupted) == ["d0"]
    partial = [g for g in read_topic(client, topic_name) if g.value.startswith(b"d0-")]
    assert 0 < len(partial) <= 3000
    assert len({g.value for g in partial}) == len(partial)
    stream.run()
    by_value = check(replayed={"d0"} | replayed)
    duplicates["interrupted batch"] = sum(
        len(gs) - 1 for v, gs in by_value.items() if v.startswith("d0-")
    )
    assert duplicates["interrupted batch"] == len(partial)
    ours = read_with_spark(spark, broker, topic_name)
    repeats = collections.Counter((r["producerName"], r["sequenceId"]) for r in ours)
    assert sum(n - 1 for n in repeats.values()) == 300 + len(partial)
    # a clean restart with nothing new writes nothing
    stream.run()
    assert len(read_topic(client, topic_name)) == sum(len(gs) for gs in by_value.values())


def wait_until_quiet(lookup: Lookup, topic: str, *, quiet: float, timeout: float = 60) -> None:
    """Wait until ``topic`` has had no new entry for ``quiet`` seconds."""
    consumer = Consumer(lookup, full(topic), MessageId.latest(), timeout=10.0)
    try:
        last = consumer.last_message_id()
        changed = time.monotonic()
        deadline = changed + timeout
        while time.monotonic() - changed < quiet:
            assert time.monotonic() < deadline, f"{topic} still growing after {timeout}s"
            time.sleep(0.2)
            now = consumer.last_message_id()
            if now != last:
                last, changed = now, time.monotonic()
    finally:
        consumer.close()


def wait_for_value(client: pulsar.Client, topic: str, prefix: str, *, timeout: float) -> None:
    """Return as soon as a message whose value starts with ``prefix`` is in ``topic``."""
    reader = client.create_reader(full(topic), pulsar.MessageId.earliest)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(pulsar.Timeout):
                if reader.read_next(1000).data().startswith(prefix.encode()):
                    return
    finally:
        reader.close()
    raise AssertionError(f"no message starting with {prefix!r} within {timeout}s")


# --- 8. what is refused when the write is defined or started ---------------------------------


ACCEPTED = (
    "accepted columns: value (binary or string (required)), key (string or binary), "
    "properties (map<string,string>), eventTime (timestamp), topic (string)"
)

SCHEMA_ERRORS: list[tuple[str, str, str]] = [
    # (id, select expression over spark.range(3), message fragment)
    (
        "no value",
        "cast(id as string) as key",
        "needs a 'value' column (binary or string); got columns key",
    ),
    (
        "value int",
        "cast(id as int) as value",
        "column 'value' has type int; it must be binary or string",
    ),
    (
        "key int",
        "cast(id as string) as value, cast(id as int) as key",
        "column 'key' has type int; it must be string or binary",
    ),
    (
        "properties map<string,int>",
        "cast(id as string) as value, map('a', cast(id as int)) as properties",
        "column 'properties' has type map<string,int>; it must be map<string,string>",
    ),
    (
        "unknown column",
        "cast(id as string) as value, id as foo",
        f"column 'foo' cannot be written to Pulsar; {ACCEPTED}",
    ),
    (
        "eventTime string",
        "cast(id as string) as value, '2024-01-01' as eventTime",
        "column 'eventTime' has type string; it must be timestamp",
    ),
    (
        "eventTime timestamp_ntz",
        "cast(id as string) as value, timestamp_ntz'2024-01-01 00:00:00' as eventTime",
        "column 'eventTime' has type timestamp_ntz; it must be timestamp",
    ),
    (
        "topic int",
        "cast(id as string) as value, cast(id as int) as topic",
        "column 'topic' has type int; it must be string",
    ),
]


@pytest.mark.parametrize(
    ("expression", "fragment"), [c[1:] for c in SCHEMA_ERRORS], ids=[c[0] for c in SCHEMA_ERRORS]
)
def test_refused_schema_fails_at_save_and_sends_nothing(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    expression: str,
    fragment: str,
) -> None:
    df = spark.range(3).selectExpr(*[e.strip() for e in _split(expression)])
    with pytest.raises(AnalysisException) as info:
        write(df, broker, topic=topic_name)
    message = str(info.value)
    assert "ConfigurationError" in message
    assert fragment in message
    assert read_topic(client, topic_name) == []


def _split(expression: str) -> list[str]:
    """Split a select list on the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in expression:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


OPTION_ERRORS: list[tuple[str, dict[str, str | None], str]] = [
    ("no service.url", {"service.url": None}, "option 'service.url' is required"),
    (
        "bad service.url",
        {"service.url": "http://localhost:8080"},
        "must look like pulsar://host:6650",
    ),
    (
        "no topic",
        {"topic": None},
        "say where to write: set the 'topic' option, or give the DataFrame a 'topic' column",
    ),
    (
        "two topics",
        {"topic": "a,b"},
        "option 'topic' takes one topic; to write to several, leave it out and give each row "
        "a 'topic' column",
    ),
    (
        "bad compressionType",
        {"pulsar.producer.compressionType": "brotli"},
        "option 'pulsar.producer.compressionType': unknown compression 'brotli': use one of "
        "none, lz4, zlib, zstd, snappy",
    ),
    (
        "non-numeric batchingMaxMessages",
        {"pulsar.producer.batchingMaxMessages": "many"},
        "option 'pulsar.producer.batchingMaxMessages' must be a positive integer, got 'many'",
    ),
    (
        "zero maxPendingMessages",
        {"pulsar.producer.maxPendingMessages": "0"},
        "option 'pulsar.producer.maxPendingMessages' must be a positive integer, got 0",
    ),
    (
        "bad batchingEnabled",
        {"pulsar.producer.batchingEnabled": "yes"},
        "option 'pulsar.producer.batchingEnabled' must be 'true' or 'false', got 'yes'",
    ),
    (
        "misspelt option",
        {"pulsar.producer.compresionType": "lz4"},
        "unknown option 'pulsar.producer.compresiontype' for writing to Pulsar. Did you mean "
        "'pulsar.producer.compressionType'?",
    ),
    (
        "read option",
        {"startingOffsets": "earliest"},
        "unknown option 'startingoffsets' for writing",
    ),
]


@pytest.mark.parametrize(
    ("options", "fragment"), [c[1:] for c in OPTION_ERRORS], ids=[c[0] for c in OPTION_ERRORS]
)
def test_refused_option_fails_at_save_and_sends_nothing(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    options: dict[str, str | None],
    fragment: str,
) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as value")
    given: dict[str, Any] = {"topic": topic_name, **options}
    with pytest.raises(AnalysisException) as info:
        write(df, broker, **given)
    message = str(info.value)
    assert "ConfigurationError" in message
    assert fragment in message
    assert read_topic(client, topic_name) == []


def test_save_modes(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Only append writes. Spark itself refuses the default mode (ErrorIfExists) and
    ``ignore`` for a Python data source, before the connector is asked; overwrite reaches the
    connector, which refuses it."""
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(AnalysisException) as info:
        write(df, broker, mode="overwrite", topic=topic_name)
    assert (
        "Pulsar topics are append-only: use mode('append') (overwrite would need to delete "
        "messages, which the connector never does)"
    ) in str(info.value)
    for mode, shown in ((None, "ErrorIfExists"), ("error", "ErrorIfExists"), ("ignore", "Ignore")):
        with pytest.raises(AnalysisException) as info:
            write(df, broker, mode=mode, topic=topic_name)
        assert info.value.getCondition() == "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
        assert f'The data source "pulsar" cannot be written in the "{shown}" mode' in str(
            info.value
        )
    assert read_topic(client, topic_name) == []
    write(df, broker, mode="append", topic=topic_name)
    assert sorted(g.value for g in read_topic(client, topic_name)) == [b"0", b"1", b"2"]


def test_streaming_write_with_an_unknown_column_fails_at_start(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    tmp_path: Path,
) -> None:
    df = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .load()
        .selectExpr("cast(value as string) as value", "value as foo")
    )
    query = (
        df.writeStream.format("pulsar")
        .option("service.url", broker.service_url)
        .option("topic", topic_name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(60)
    finally:
        query.stop()
    message = str(info.value)
    assert "ConfigurationError" in message
    assert f"column 'foo' cannot be written to Pulsar; {ACCEPTED}" in message
    assert read_topic(client, topic_name) == []


# --- 9. send failures fail the task -----------------------------------------------------------


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says anything."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_unreachable_broker_fails_the_write_quickly(
    spark: SparkSession, broker: LocalBroker
) -> None:
    df = spark.range(10).selectExpr("cast(id as string) as value")
    port = free_port()  # closed: connections are refused at once
    started = time.monotonic()
    with pytest.raises(PythonException) as info:
        write(df, broker, topic="anything", **{"service.url": f"pulsar://127.0.0.1:{port}"})
    assert time.monotonic() - started < 30
    assert "BrokerUnreachableError" in str(info.value)
    assert f"cannot connect to Pulsar broker at 127.0.0.1:{port} within 10s" in str(info.value)
    assert "Connection refused" in str(info.value)


def test_silent_broker_fails_the_write_within_the_connection_timeout(
    spark: SparkSession, broker: LocalBroker
) -> None:
    df = spark.range(10).selectExpr("cast(id as string) as value")
    with silent_server() as port:
        started = time.monotonic()
        with pytest.raises(PythonException) as info:
            write(
                df,
                broker,
                topic="anything",
                **{
                    "service.url": f"pulsar://127.0.0.1:{port}",
                    "pulsar.client.connectionTimeoutMs": "2000",
                },
            )
        elapsed = time.monotonic() - started
    assert 2 <= elapsed < 30, elapsed
    assert (
        f"BrokerUnreachableError: broker at 127.0.0.1:{port} accepted TCP but did not complete "
        "the Pulsar handshake within 2s"
    ) in str(info.value)


def test_message_that_cannot_be_sent_fails_the_task(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Properties are metadata, which is never chunked: 6 MB of them cannot be sent."""
    df = spark.range(1).selectExpr(
        "'v' as value", f"map('big', repeat('x', {6 * 1024 * 1024})) as properties"
    )
    with pytest.raises(PythonException) as info:
        write(df, broker, topic=topic_name)
    assert (
        f"LocalProtocolError: batch of 1 messages for {full(topic_name)} is 6291525 bytes, over "
        "the maximum entry size of 5232640 bytes (keys or properties too large?)"
    ) in str(info.value)
    assert read_topic(client, topic_name) == []


def test_null_property_value_fails_the_task_before_sending(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """A Spark map may hold a null value; a Pulsar property cannot. The record batch holding
    it is refused as a whole, naming the property."""
    df = spark.createDataFrame(
        [("a", {"ok": "1"}), ("b", {"fine": "x", "missing": None})],
        "value string, properties map<string,string>",
    ).coalesce(1)
    with pytest.raises(PythonException) as info:
        write(df, broker, topic=topic_name)
    assert (
        "ConfigurationError: column 'properties': property 'missing' of a row has a null "
        "value; property values must be strings"
    ) in str(info.value)
    assert read_topic(client, topic_name) == []


def test_empty_dataframe_writes_nothing(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    write(spark.range(0).selectExpr("cast(id as string) as value"), broker, topic=topic_name)
    assert read_topic(client, topic_name) == []
