"""``spark.read.format("pulsar")`` against pulsar-lite, with the official client as the producer.

Every test publishes with ``pulsar-client`` (the Apache C++ client), remembers what it sent and
the ids the broker gave back, reads the publish times back with an official reader, and then
compares what Spark reads with that, row by row and field by field, ordered by topic, partition
and message id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, unix_micros
from support.official import COMPRESSION
from support.topics import full, partition_of

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]

SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,"
    "messageId:struct<ledgerId:bigint,entryId:bigint,batchIndex:int>,"
    "publishTime:timestamp,eventTime:timestamp,properties:map<string,string>,"
    "producerName:string,sequenceId:bigint,replicatedFrom:string>"
)
CODECS = COMPRESSION
Row = dict[str, Any]


# --- publishing with the official client --------------------------------------------------------


@dataclass(frozen=True)
class Msg:
    value: bytes | None
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int | None = None  # ms


def publish(
    client: Any,
    topic: str,
    messages: list[Msg],
    *,
    batch_size: int = 0,
    compression: Any = None,
    chunking: bool = False,
    raw_key: bytes | None = None,
) -> list[Row]:
    """Publish ``messages`` to ``topic`` (a topic or one ``...-partition-i``) with a new official
    producer; return the rows Spark should read for them, in order.

    ``batch_size`` > 0 turns batching on with exactly that many messages per batch (the publish
    delay is long, so only the count and the final flush close a batch). ``raw_key`` sets every
    message's partition key to these bytes through the client's message builder, which accepts
    bytes where the Python API only takes ``str``.
    """
    name = full(topic)
    base, _, index = name.rpartition("-partition-")
    base, partition = (base, int(index)) if index.isdigit() else (name, -1)
    producer = client.create_producer(
        name,
        batching_enabled=batch_size > 0,
        batching_max_messages=batch_size or 1000,
        batching_max_publish_delay_ms=60_000 if batch_size else 10,
        compression_type=compression if compression is not None else pulsar.CompressionType.NONE,
        chunking_enabled=chunking,
        block_if_queue_full=True,
    )
    ids: list[Any] = [None] * len(messages)
    for i, m in enumerate(messages):
        kwargs = {"properties": m.properties or None, "event_timestamp": m.event_time}
        if raw_key is not None:
            built = _raw_key_message(m, raw_key)
            if batch_size:
                producer._producer.send_async(built, _store(ids, i))
            else:
                ids[i] = producer._producer.send(built)
        elif batch_size:
            producer.send_async(m.value, _store(ids, i), partition_key=m.key, **kwargs)
        else:
            ids[i] = producer.send(m.value, partition_key=m.key, **kwargs)
    producer.flush()
    assert all(i is not None for i in ids)
    # A new producer numbers its messages 0, 1, 2, ...
    assert producer.last_sequence_id() == len(messages) - 1
    producer_name = producer.producer_name()
    producer.close()

    rows = []
    for seq, (m, mid) in enumerate(zip(messages, ids, strict=True)):
        key = raw_key if raw_key is not None else (m.key.encode() if m.key else None)
        rows.append(
            {
                "key": key,
                "value": m.value,
                "topic": base,
                "partition": partition,
                "ledgerId": mid.ledger_id(),
                "entryId": mid.entry_id(),
                "batchIndex": mid.batch_index(),
                "publishTime": None,
                "eventTime": m.event_time * 1000 if m.event_time else None,
                "properties": dict(m.properties),
                "producerName": producer_name,
                "sequenceId": seq,
                "replicatedFrom": None,
            }
        )
    if batch_size:
        assert {r["batchIndex"] for r in rows} == set(range(min(batch_size, len(rows))))
    else:
        assert {r["batchIndex"] for r in rows} == {-1}
    times = publish_times(client, name, {_id(r) for r in rows}, attempts=3 if chunking else 1)
    for r in rows:
        r["publishTime"] = times[_id(r)] * 1000 if _id(r) in times else None
    if compression != pulsar.CompressionType.ZLib:
        assert all(r["publishTime"] is not None for r in rows)
    return rows


def _raw_key_message(m: Msg, key: bytes) -> Any:
    import _pulsar  # the official client's C++ binding

    builder = _pulsar.MessageBuilder()
    builder.content(m.value or b"")
    builder.partition_key(key)
    for name, value in m.properties.items():
        builder.property(name, value)
    if m.event_time:
        builder.event_timestamp(m.event_time)
    return builder.build()


def _store(ids: list[Any], i: int) -> Callable[[Any, Any], None]:
    def done(result: Any, message_id: Any) -> None:
        assert result == pulsar.Result.Ok, result
        ids[i] = message_id

    return done


def _id(row: Row) -> tuple[int, int, int]:
    return (row["ledgerId"], row["entryId"], row["batchIndex"])


def publish_times(
    client: Any, topic: str, wanted: set[tuple[int, int, int]], *, attempts: int = 1
) -> dict:
    """Publish time (ms) of each wanted message id, read back with an official reader.

    The official client drops a few messages it wrote itself (zlib-compressed empty values: it
    fails to inflate them), so reading stops after a quiet spell and such ids are missing. It
    also drops a chunked message when pulsar-lite dispatches a chunk twice (quirk 1), which a
    new reader usually gets whole: up to ``attempts`` readers are tried while ids are missing.
    """
    found: dict[tuple[int, int, int], int] = {}
    for _ in range(attempts):
        found |= _read_publish_times(client, topic, wanted - found.keys())
        if wanted <= found.keys():
            break
    return found


def _read_publish_times(client: Any, topic: str, wanted: set[tuple[int, int, int]]) -> dict:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    found: dict[tuple[int, int, int], int] = {}
    try:
        while not wanted <= found.keys():
            try:
                message = reader.read_next(3_000)
            except pulsar.Timeout:
                break
            mid = message.message_id()
            at = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            if at in wanted:
                found[at] = message.publish_timestamp()
    finally:
        reader.close()
    return found


def settle_unknown_publish_times(expected: list[Row], rows: list[Row]) -> None:
    """For expected rows whose publish time the official reader could not give, check that
    what Spark read lies between the publish times of the neighbouring messages, and take it."""
    assert len(rows) == len(expected)
    known = [r["publishTime"] for r in expected]
    for i, row in enumerate(expected):
        if row["publishTime"] is None:
            before = max([t for t in known[:i] if t is not None], default=0)
            after = min([t for t in known[i + 1 :] if t is not None], default=2**62)
            assert before <= rows[i]["publishTime"] <= after
            row["publishTime"] = rows[i]["publishTime"]


# --- reading with Spark -----------------------------------------------------------------------


def load(spark: SparkSession, broker: LocalBroker, **options: str | None) -> DataFrame:
    """``spark.read.format("pulsar")`` with the broker's URL unless ``service.url`` is given
    (``None`` leaves an option out)."""
    options = {"service.url": broker.service_url, **options}
    reader = spark.read.format("pulsar")
    for name, value in options.items():
        if value is not None:
            reader = reader.option(name, value)
    return reader.load()


def read(spark: SparkSession, broker: LocalBroker, **options: str | None) -> list[Row]:
    """Every row, flattened, timestamps as µs since the epoch, ordered by position."""
    df = load(spark, broker, **options)
    flat = df.select(
        "key",
        "value",
        "topic",
        "partition",
        col("messageId.ledgerId").alias("ledgerId"),
        col("messageId.entryId").alias("entryId"),
        col("messageId.batchIndex").alias("batchIndex"),
        unix_micros("publishTime").alias("publishTime"),
        unix_micros("eventTime").alias("eventTime"),
        "properties",
        "producerName",
        "sequenceId",
        "replicatedFrom",
    ).orderBy("topic", "partition", "ledgerId", "entryId", "batchIndex")
    return [r.asDict() for r in flat.collect()]


def ordered(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], _id(r)))


def offsets(**by_topic: Any) -> str:
    return json.dumps(by_topic)


def position(row: Row, batch_index: int | None = None) -> dict[str, int]:
    return {
        "ledgerId": row["ledgerId"],
        "entryId": row["entryId"],
        "batchIndex": row["batchIndex"] if batch_index is None else batch_index,
    }


# --- messages ------------------------------------------------------------------------------------


VARIED: list[tuple[str | None, dict[str, str], int | None]] = [
    # (key, properties, event time) of the i-th message, by i % 6
    ("k{i}", {"i": "{i}"}, 1_600_000_000_000),
    ("\u043a\u043b\u044e\u0447-\u00fc-\u65e5\u672c", {"\u00fc": "\u65e5\u672c", "b": ""}, None),
    (None, {}, 1),
    ("tomb", {}, None),  # null value
    (None, {"x": "y"}, None),  # empty value
    ("k", {}, 1_700_000_000_123),
]


def varied(count: int, tag: str) -> list[Msg]:
    """Messages with and without keys, properties and event times, some non-ASCII, one empty
    value and one null value in every six."""
    out = []
    for i in range(count):
        kind = i % len(VARIED)
        key, properties, event_time = VARIED[kind]
        value = f"{tag}-{i}-".encode() * 8
        out.append(
            Msg(
                value=None if kind == 3 else (b"" if kind == 4 else value),
                key=None if key is None else key.format(i=i),
                properties={k: v.format(i=i) for k, v in properties.items()},
                event_time=None if event_time is None else event_time + (i if kind == 0 else 0),
            )
        )
    return out


def uniform(count: int, tag: str) -> list[Msg]:
    """Messages that differ only in their (equal-length) values."""
    return [Msg(f"{tag}-{i:04d}".encode(), key="same", properties={"p": "q"}) for i in range(count)]


# --- schema, single messages, batches, codecs -------------------------------------------------


def test_empty_topic_reads_as_an_empty_dataframe_with_the_schema(
    spark: SparkSession, broker: LocalBroker, topic_name: str
) -> None:
    df = load(spark, broker, topic=topic_name)
    assert df.schema.simpleString() == SCHEMA
    assert df.collect() == []


def test_partitioned_topic_with_every_partition_empty(
    spark: SparkSession, broker: LocalBroker, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    assert load(spark, broker, topic=pooled_partitioned_topic(2)).count() == 0


def test_single_messages_every_field(
    spark: SparkSession, broker: LocalBroker, client: Any, topic_name: str
) -> None:
    expected = publish(client, topic_name, varied(12, "single"))
    rows = read(spark, broker, topic=topic_name)
    assert rows == expected
    # the cases the messages were built to cover, spelled out
    assert rows[0]["key"] == b"k0"
    assert rows[1]["key"] == "\u043a\u043b\u044e\u0447-\u00fc-\u65e5\u672c".encode()
    assert rows[1]["properties"] == {"\u00fc": "\u65e5\u672c", "b": ""}
    assert rows[1]["eventTime"] is None
    assert rows[2]["key"] is None
    assert rows[2]["properties"] == {}
    assert rows[3]["value"] is None
    assert rows[4]["value"] == b""
    assert rows[0]["topic"] == full(topic_name)
    assert rows[0]["partition"] == -1


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("batch_size", [0, 4], ids=["single", "batched"])
def test_codecs(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: Any,
    topic_name: str,
    codec: str,
    batch_size: int,
) -> None:
    # the first batch is uniform (same key/properties, equal-length values), the rest vary
    messages = uniform(4, codec) + varied(10, codec)
    expected = publish(
        client, topic_name, messages, batch_size=batch_size, compression=CODECS[codec]
    )
    rows = read(spark, broker, topic=topic_name)
    settle_unknown_publish_times(expected, rows)
    assert rows == expected
    if batch_size:
        assert len({r["entryId"] for r in expected}) == 4  # 4 + 4 + 4 + 2


def test_chunked_message(
    spark: SparkSession, broker: LocalBroker, client: Any, topic_name: str
) -> None:
    big = os.urandom(8 * 1024 * 1024)
    messages = [
        Msg(b"before", key="a"),
        Msg(big, key="big", properties={"size": "8M"}),
        Msg(b"after"),
    ]
    expected = publish(client, topic_name, messages, chunking=True)
    # 8 MB is more than pulsar-lite's 5 MB limit: the middle message spans two entries, and
    # its id is that of its last chunk
    assert [r["entryId"] for r in expected] == [0, 2, 3]
    rows = read(spark, broker, topic=topic_name)
    assert [len(r["value"]) for r in rows] == [6, len(big), 5]
    assert rows == expected


@pytest.mark.parametrize("batch_size", [0, 3], ids=["single", "batched"])
def test_non_utf8_string_key_is_read_as_its_bytes(
    spark: SparkSession, broker: LocalBroker, client: Any, topic_name: str, batch_size: int
) -> None:
    """The official Python client takes only ``str`` keys and cannot set a base64 (binary) key;
    its C++ core does put any bytes into the string key field. Such a key reads as those bytes."""
    raw = b"\xff\x00\xfe-key"
    expected = publish(client, topic_name, uniform(3, "raw"), batch_size=batch_size, raw_key=raw)
    assert read(spark, broker, topic=topic_name) == expected


# --- partitions and several topics ------------------------------------------------------------


@pytest.fixture(scope="module")
def spread(client: Any, partitioned_topic_pool: Any) -> dict[str, Any]:
    """A 3-partition topic with data in partitions 0 (batched) and 2 (single messages) and
    nothing in 1, and a non-partitioned topic."""
    partitioned = partitioned_topic_pool.take(3)
    single = f"spread-{os.urandom(6).hex()}"
    p0 = publish(client, partition_of(partitioned, 0), varied(7, "p0"), batch_size=3)
    p2 = publish(client, partition_of(partitioned, 2), varied(4, "p2"))
    other = publish(client, single, uniform(3, "np"), compression=pulsar.CompressionType.LZ4)
    return {"partitioned": partitioned, "single": single, "p0": p0, "p2": p2, "other": other}


def test_partitions_with_one_empty(
    spark: SparkSession, broker: LocalBroker, spread: dict[str, Any]
) -> None:
    rows = read(spark, broker, topic=spread["partitioned"])
    assert rows == spread["p0"] + spread["p2"]
    assert {r["topic"] for r in rows} == {full(spread["partitioned"])}
    assert [r["partition"] for r in rows] == [0] * 7 + [2] * 4


def test_several_topics(spark: SparkSession, broker: LocalBroker, spread: dict[str, Any]) -> None:
    names = f"public/default/{spread['single']},{full(spread['partitioned'])}"
    rows = read(spark, broker, topics=names)
    assert rows == ordered(spread["p0"] + spread["p2"] + spread["other"])
    assert {(r["topic"], r["partition"]) for r in rows} == {
        (full(spread["partitioned"]), 0),
        (full(spread["partitioned"]), 2),
        (full(spread["single"]), -1),
    }


def test_one_partition_by_name(
    spark: SparkSession, broker: LocalBroker, spread: dict[str, Any]
) -> None:
    """Reading ``X-partition-2`` directly: ``topic`` is X, ``partition`` is 2."""
    rows = read(spark, broker, topic=f"{spread['partitioned']}-partition-2")
    assert [r["value"] for r in rows] == [r["value"] for r in spread["p2"]]
    assert rows == spread["p2"]


@pytest.mark.parametrize(("min_partitions", "tasks"), [("2", 3), ("6", 6), ("40", 10)])
def test_min_partitions_splits_the_ranges_and_reads_each_message_once(
    spark: SparkSession,
    broker: LocalBroker,
    spread: dict[str, Any],
    min_partitions: str,
    tasks: int,
) -> None:
    """Entries: 3 (p0, batched), 4 (p2) and 3 (the other topic). Fewer ranges than asked: each
    gets a share in proportion to its entries; never more tasks than entries."""
    names = f"public/default/{spread['single']},{full(spread['partitioned'])}"
    df = load(spark, broker, topics=names, minPartitions=min_partitions)
    assert df.rdd.getNumPartitions() == tasks
    rows = read(spark, broker, topics=names, minPartitions=min_partitions)
    assert rows == ordered(spread["p0"] + spread["p2"] + spread["other"])


def test_min_partitions_cut_inside_a_chunked_message(
    spark: SparkSession, broker: LocalBroker, client: Any, topic_name: str
) -> None:
    """A task boundary between the chunks of one message: the task where it begins reads all of
    it, the next skips the rest of its chunks."""
    big = os.urandom(7 * 1024 * 1024)
    messages = [Msg(b"before"), Msg(big, key="big"), Msg(b"after")]
    expected = publish(client, topic_name, messages, chunking=True)
    assert [r["entryId"] for r in expected] == [0, 2, 3]
    assert load(spark, broker, topic=topic_name, minPartitions="4").rdd.getNumPartitions() == 4
    assert read(spark, broker, topic=topic_name, minPartitions="4") == expected


# --- startingOffsets / endingOffsets -----------------------------------------------------------


@pytest.fixture(scope="module")
def positioned(client: Any, partitioned_topic_pool: Any) -> dict[str, Any]:
    """A topic of 5 batches of 4, a topic of 6 single messages, and a 2-partition topic with
    4 single messages per partition."""
    batched = f"pos-b-{os.urandom(6).hex()}"
    single = f"pos-s-{os.urandom(6).hex()}"
    partitioned = partitioned_topic_pool.take(2)
    return {
        "batched": batched,
        "b": publish(client, batched, varied(20, "b"), batch_size=4),
        "single": single,
        "s": publish(client, single, varied(6, "s")),
        "partitioned": partitioned,
        "p0": publish(client, partition_of(partitioned, 0), varied(4, "q0")),
        "p1": publish(client, partition_of(partitioned, 1), varied(4, "q1")),
    }


def test_offsets_entry_granularity_inclusive(
    spark: SparkSession, broker: LocalBroker, positioned: dict[str, Any]
) -> None:
    b, t = positioned["b"], full(positioned["batched"])
    # batchIndex -1 means the whole entry, on both ends: entries 1, 2 and 3
    rows = read(
        spark,
        broker,
        topic=positioned["batched"],
        startingOffsets=offsets(**{t: position(b[4], -1)}),
        endingOffsets=offsets(**{t: position(b[15], -1)}),
    )
    assert rows == b[4:16]

    s = positioned["s"]
    rows = read(
        spark,
        broker,
        topic=positioned["single"],
        startingOffsets=offsets(**{positioned["single"]: position(s[2])}),
        endingOffsets=offsets(**{positioned["single"]: position(s[4])}),
    )
    assert rows == s[2:5]


def test_offsets_batch_index_granularity_inclusive(
    spark: SparkSession, broker: LocalBroker, positioned: dict[str, Any]
) -> None:
    b, t = positioned["b"], full(positioned["batched"])
    start, end = b[6], b[13]  # entry 1 index 2 .. entry 3 index 1
    assert (start["batchIndex"], end["batchIndex"]) == (2, 1)
    rows = read(
        spark,
        broker,
        topic=t,
        startingOffsets=offsets(**{t: position(start)}),
        endingOffsets=offsets(**{t: position(end)}),
    )
    assert rows == b[6:14]


def test_offsets_one_side_and_single_message(
    spark: SparkSession, broker: LocalBroker, positioned: dict[str, Any]
) -> None:
    b, t = positioned["b"], positioned["batched"]
    assert read(spark, broker, topic=t, startingOffsets=offsets(**{t: position(b[19])})) == b[19:]
    assert read(spark, broker, topic=t, endingOffsets=offsets(**{t: position(b[0])})) == b[:1]
    rows = read(
        spark,
        broker,
        topic=t,
        startingOffsets=offsets(**{t: position(b[9])}),
        endingOffsets=offsets(**{t: position(b[9])}),
    )
    assert rows == [b[9]]
    rows = read(
        spark,
        broker,
        topic=t,
        startingOffsets=offsets(**{t: position(b[10])}),
        endingOffsets=offsets(**{t: position(b[9])}),
    )
    assert rows == []


def test_offsets_earliest_and_latest_in_json(
    spark: SparkSession, broker: LocalBroker, positioned: dict[str, Any]
) -> None:
    t = positioned["batched"]
    rows = read(
        spark,
        broker,
        topic=t,
        startingOffsets=offsets(**{t: "earliest"}),
        endingOffsets=offsets(**{t: "latest"}),
    )
    assert rows == positioned["b"]


def test_offsets_partitions_not_named_use_the_default(
    spark: SparkSession, broker: LocalBroker, positioned: dict[str, Any]
) -> None:
    p0, p1, name = positioned["p0"], positioned["p1"], positioned["partitioned"]
    rows = read(
        spark,
        broker,
        topic=name,
        startingOffsets=offsets(**{partition_of(name, 1): position(p1[2])}),
    )
    assert rows == p0 + p1[2:]
    rows = read(
        spark,
        broker,
        topic=name,
        endingOffsets=offsets(**{f"{name}-partition-0": position(p0[1])}),
    )
    assert rows == p0[:2] + p1
    rows = read(
        spark,
        broker,
        topics=f"{name},{positioned['single']}",
        startingOffsets=offsets(**{partition_of(name, 0): position(p0[3])}),
        endingOffsets=offsets(**{positioned["single"]: position(positioned["s"][0])}),
    )
    assert rows == ordered(p0[3:] + p1 + positioned["s"][:1])


# --- startingTime / endingTime ----------------------------------------------------------------


def test_publish_time_bounds(
    spark: SparkSession, broker: LocalBroker, client: Any, pooled_partitioned_topic: Any
) -> None:
    name = pooled_partitioned_topic(2)
    phases: list[list[Row]] = []
    for phase in range(3):
        if phase:
            time.sleep(0.05)
        rows: list[Row] = []
        for p in (0, 1):
            rows += publish(client, partition_of(name, p), varied(3, f"ph{phase}p{p}"))
        phases.append(rows)
    everything = read(spark, broker, topic=name)
    assert everything == ordered([r for rows in phases for r in rows])
    a, b, c = phases
    # phases are apart in publish time, so the boundaries below separate them
    assert max(r["publishTime"] for r in a) < min(r["publishTime"] for r in b)
    assert max(r["publishTime"] for r in b) < min(r["publishTime"] for r in c)
    b_start = min(r["publishTime"] for r in b) // 1000
    c_start = min(r["publishTime"] for r in c) // 1000

    assert read(spark, broker, topic=name, startingTime=str(b_start)) == ordered(b + c)
    assert read(spark, broker, topic=name, endingTime=str(c_start)) == ordered(a + b)
    assert read(
        spark, broker, topic=name, startingTime=str(b_start), endingTime=str(c_start)
    ) == ordered(b)

    # a boundary on a message's own publish time: included at the start, excluded at the end
    pivot = sorted(b, key=lambda r: r["publishTime"])[2]["publishTime"] // 1000
    assert read(spark, broker, topic=name, startingTime=str(pivot)) == [
        r for r in everything if r["publishTime"] >= pivot * 1000
    ]
    assert read(spark, broker, topic=name, endingTime=str(pivot)) == [
        r for r in everything if r["publishTime"] < pivot * 1000
    ]
    future = str(int(time.time() * 1000) + 3_600_000)
    assert read(spark, broker, topic=name, startingTime=future) == []
    assert read(spark, broker, topic=name, endingTime="1") == []


# --- option errors ----------------------------------------------------------------------------


BAD_OPTIONS: list[tuple[dict[str, str | None], str]] = [
    ({"service.url": None}, "option 'service.url' is required"),
    ({"service.url": "http://localhost:8080"}, "must look like pulsar://host:6650"),
    ({"topic": None}, "exactly one of the options 'topic', 'topics' or 'topicsPattern'"),
    ({"topics": "a,b"}, "got topic, topics"),
    ({"topic": "a/b"}, "topic 'a/b' is not a valid name"),
    ({"topic": None, "topicsPattern": "t-["}, "option 'topicsPattern': 't-[' is not a regex"),
    ({"startingOffset": "earliest"}, "Did you mean 'startingOffsets'?"),
    ({"endingOffsets": "earliest"}, "option 'endingOffsets': 'earliest' is not allowed"),
    ({"startingOffsets": "first"}, "option 'startingOffsets': 'first' is neither"),
    (
        {"startingOffsets": '{"t": {"ledgerId": "x", "entryId": 1}}'},
        "ledgerId must be an integer",
    ),
    (
        {"startingOffsets": "earliest", "startingTime": "1"},
        "options 'startingOffsets' and 'startingTime' cannot be used together",
    ),
    (
        {"endingOffsets": "latest", "endingTime": "1"},
        "options 'endingOffsets' and 'endingTime' cannot be used together",
    ),
    ({"startingTime": "now"}, "option 'startingTime': 'now' is not a publish time"),
    ({"endingTime": "-5"}, "option 'endingTime': time must be >= 0"),
    ({"pollTimeoutMs": "0"}, "option 'pollTimeoutMs' must be a positive integer"),
    ({"minPartitions": "two"}, "option 'minPartitions' must be a positive integer, got 'two'"),
    ({"failOnDataLoss": "maybe"}, "option 'failOnDataLoss' must be 'true' or 'false'"),
    (
        {"pulsar.client.operationTimeoutMs": "soon"},
        "option 'pulsar.client.operationTimeoutMs' must be a positive integer",
    ),
    ({"maxMessagesPerTrigger": "-1"}, "option 'maxMessagesPerTrigger' must be a positive"),
    (
        {"pulsar.reader.cryptoKeyReader": "com.example.Keys"},
        "option 'pulsar.reader.cryptoKeyReader' is not supported yet: a Java class cannot be "
        "loaded here; give each key's private key file in 'pulsar.reader.privateKeyFiles'",
    ),
    (
        {"PULSAR.CLIENT.TLSTRUSTSTOREPATH": "/etc/pulsar/truststore.jks"},
        "option 'pulsar.client.tlsTrustStorePath' is not supported yet: JVM trust stores are "
        "not read, so the broker's certificate would be checked against the system's trusted "
        "CAs instead",
    ),
    (
        {"subscriptionPrefix": "spark-pulsar"},
        "option 'subscriptionPrefix' is not supported yet: a stream keeps no subscription of its "
        "own on each partition; give 'subscriptionName'",
    ),
    (
        {"maxTriggerDelay": "30s"},
        "option 'maxTriggerDelay' goes with 'minMessagesPerTrigger'",
    ),
    (
        {"minMessagesPerTrigger": "10", "maxTriggerDelay": "soon"},
        "option 'maxTriggerDelay' must be a positive duration",
    ),
    (
        {"startingTime": "1", "startingOffsetsByTime": '{"t": 1}'},
        "options 'startingTime' and 'startingOffsetsByTime' cannot be used together",
    ),
    (
        {"endingOffsetsByTime": '{"t": {"0": "noon"}}'},
        "option 'endingOffsetsByTime': the time of",
    ),
]


@pytest.mark.parametrize(("options", "fragment"), BAD_OPTIONS, ids=[f for _, f in BAD_OPTIONS])
def test_bad_option_fails_at_load(
    spark: SparkSession, broker: LocalBroker, options: dict[str, str | None], fragment: str
) -> None:
    given = {"topic": "t", **options}
    with pytest.raises(AnalysisException) as info:
        load(spark, broker, **given)
    message = str(info.value)
    assert "ConfigurationError" in message
    assert fragment in message


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (
            {"startingOffsets": "latest"},
            "option 'startingOffsets': 'latest' is not allowed for batch reads",
        ),
        (
            {"startingOffsets": '{"t": "latest"}'},
            "option 'startingOffsets': 'latest' is not allowed for batch reads",
        ),
        (
            {"maxMessagesPerTrigger": "10"},
            "option 'maxMessagesPerTrigger' applies to streaming reads only",
        ),
        (
            {"maxBytesPerTrigger": "1000"},
            "option 'maxBytesPerTrigger' applies to streaming reads only",
        ),
        (
            {"failOnDataLoss": "false"},
            "option 'failOnDataLoss' applies to streaming reads only: a batch read has no "
            "checkpointed position whose data could be lost",
        ),
        (
            {"waitingForNonExistedTopic": "true"},
            "option 'waitingForNonExistedTopic'='true' applies to streaming reads only",
        ),
    ],
)
def test_batch_only_option_errors_fail_at_the_first_action(
    spark: SparkSession, broker: LocalBroker, options: dict[str, str], fragment: str
) -> None:
    """Spark asks a Python source for its schema at load() without saying whether the read is
    a batch or a stream, so what only a batch read refuses is refused when the read is planned,
    at the first action; the error still names the option."""
    df = load(spark, broker, topic="t", **options)
    with pytest.raises(AnalysisException) as info:
        df.count()
    message = str(info.value)
    assert "ConfigurationError" in message
    assert fragment in message


@pytest.mark.pulsar_lite
def test_topics_pattern_on_pulsar_lite_fails_within_the_operation_timeout(
    spark: SparkSession, broker: LocalBroker
) -> None:
    """pulsar-lite never answers GetTopicsOfNamespace. Defining the DataFrame needs no broker;
    the error comes when Spark plans the partitions, after pulsar.client.operationTimeoutMs."""
    df = load(
        spark,
        broker,
        topicsPattern="pos-.*",
        **{"pulsar.client.operationTimeoutMs": "2000"},
    )
    started = time.monotonic()
    with pytest.raises(AnalysisException) as info:
        df.collect()
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert (
        "the broker did not answer GetTopicsOfNamespace for 'public/default' within 2s" in message
    )
    assert "topicsPattern cannot be resolved" in message
    assert 1.5 <= elapsed < 15, elapsed


# --- discovery without register() -------------------------------------------------------------


AUTOLOAD_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    rows = (
        spark.read.format("pulsar")
        .option("service.url", sys.argv[1])
        .option("topic", sys.argv[2])
        .load()
        .orderBy("messageId")
        .collect()
    )
    print(json.dumps({
        "values": [r.value.decode() for r in rows],
        "topics": sorted({r.topic for r in rows}),
        "driver_imported_connector": "pulsar_spark" in sys.modules,
    }))
    spark.stop()
    """
)


ROOT = Path(__file__).resolve().parents[2]
PIP_INSTALL = (sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target")


def _installed_env(tmp_path: Path) -> dict[str, str]:
    """An environment where pulsar-spark is pip-installed: the interpreter's own install when
    there is one (``make test``), else a fresh ``pip install`` of the source tree into a
    temporary directory, so the check runs everywhere."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    if _find_specs(env, tmp_path) != [True, True]:
        site = tmp_path / "site"
        subprocess.run(
            [*PIP_INSTALL, str(site), str(ROOT)],
            cwd=tmp_path,
            capture_output=True,
            check=True,
            timeout=300,
        )
        env["PYTHONPATH"] = str(site)
    return env


def _find_specs(env: dict[str, str], cwd: Path) -> list[bool]:
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import importlib.util as u, json; "
            "print(json.dumps([bool(u.find_spec(n)) for n in ('pulsar_spark', 'pyspark_pulsar')]))",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found: list[bool] = json.loads(probe.stdout)
    return found


def test_format_pulsar_without_register_when_installed(
    broker: LocalBroker, client: Any, topic_name: str, tmp_path: Path
) -> None:
    """After ``pip install pulsar-spark``, a fresh Spark finds the ``pulsar`` format by itself
    (the top-level ``pyspark_pulsar`` module). Run outside the repository so that the installed
    package, not the source tree, is what Spark sees."""
    env = _installed_env(tmp_path)
    assert _find_specs(env, tmp_path) == [True, True], "pyspark_pulsar is not importable"

    publish(client, topic_name, [Msg(b"one"), Msg(b"two")])
    done = subprocess.run(
        [sys.executable, "-c", AUTOLOAD_SCRIPT, broker.service_url, topic_name],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {
        "values": ["one", "two"],
        "topics": [full(topic_name)],
        "driver_imported_connector": False,
    }
