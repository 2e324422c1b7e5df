"""Interop with Apache Pulsar's Java client, on the Apache broker: the client's real bytes.

The official Python client has none of Java's KeyValue, date and time schemas, nor its
key-based batcher or routing modes; these tests produce with the Java client itself
(``support/java_peer``, the release the broker runs) and read with the connector, and read what
the connector writes with the Java client.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.apache_fixtures import create_partitioned_topic
from support.java_peer import JavaPeer
from support.schemas import READING

from pulsar_spark.local import ApacheBroker
from pulsar_spark.protocol.routing import partition_for_key

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.apache]

KEY_RECORD = {
    "type": "record",
    "name": "Key",
    "namespace": "test",
    "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}],
}
# Reading's flat fields: the peer builds records of primitive fields only
VALUE_RECORD = {**READING, "fields": READING["fields"][:5]}
KEYS = [{"id": 1, "region": "eu"}, {"id": -2, "region": "ap"}, {"id": 2**40, "region": ""}]
VALUES = [
    {"name": "first", "count": 2**40, "ratio": 0.25, "ok": True, "note": None},
    {"name": "second", "count": -3, "ratio": -1.5, "ok": False, "note": "noted"},
    {"name": "", "count": 0, "ratio": 1e300, "ok": True, "note": ""},
]


def avro(record: dict[str, Any]) -> dict[str, Any]:
    return {"type": "AVRO", "definition": json.dumps(record)}


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/java-{prefix}-{uuid.uuid4().hex[:10]}"


def read(spark: SparkSession, broker: ApacheBroker, topic: str, **options: str) -> list[Any]:
    reader = spark.read.format("pulsar").option("service.url", broker.service_url)
    reader = reader.option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    rows = reader.load().orderBy("partition", "messageId").collect()
    return [row.asDict(recursive=True) for row in rows]


@pytest.fixture(scope="module")
def java(apache_broker: ApacheBroker) -> Iterator[JavaPeer]:
    """The Java client on the session's Apache broker."""
    peer = JavaPeer(apache_broker.service_url)
    try:
        yield peer
    finally:
        peer.close()


# --- KeyValue schemas --------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["INLINE", "SEPARATED"])
def test_key_value_from_java_reads_typed(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer, encoding: str
) -> None:
    """``Schema.KeyValue(AVRO(Key), AVRO(Reading), encoding)``: every key and value field
    reads as Java wrote it; SEPARATED keys travel as the message key (base64 on the wire)."""
    topic = new_topic(f"kv-{encoding.lower()}")
    schema = {
        "type": "KEY_VALUE",
        "key": avro(KEY_RECORD),
        "value": avro(VALUE_RECORD),
        "encoding": encoding,
    }
    messages = [{"value": {"key": k, "value": v}} for k, v in zip(KEYS, VALUES, strict=True)]
    java.produce(topic, schema, messages)

    rows = read(spark, apache_broker, topic)
    assert [row["key"] for row in rows] == KEYS
    assert [row["value"] for row in rows] == VALUES
    # and Java reads its own messages back as the same KeyValues
    back = java.consume(topic, schema, len(KEYS))
    assert [m["value"] for m in back] == [m["value"] for m in messages]
    assert all(("keyBytes" in m) == (encoding == "SEPARATED") for m in back)


# --- date and time schemas ---------------------------------------------------------------------

AT_MS = 1772368245123  # 2026-03-01T12:30:45.123Z
DATES_AND_TIMES: list[tuple[str, list[Any], list[Any]]] = [
    ("DATE", [AT_MS, -1], [dt.date(2026, 3, 1), dt.date(1969, 12, 31)]),
    (
        "TIMESTAMP",
        [AT_MS, -1],
        [
            dt.datetime(2026, 3, 1, 12, 30, 45, 123000),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999000),
        ],
    ),
    (
        "INSTANT",
        ["2026-03-01T12:30:45.123456Z", "1969-12-31T23:59:59.999999Z"],
        [
            dt.datetime(2026, 3, 1, 12, 30, 45, 123456),
            dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
        ],
    ),
    ("LOCAL_DATE", ["2026-03-01", "0001-01-01"], [dt.date(2026, 3, 1), dt.date(1, 1, 1)]),
    (
        "LOCAL_DATE_TIME",
        ["2026-03-01T12:30:45.123456", "1970-01-01T00:00"],
        [dt.datetime(2026, 3, 1, 12, 30, 45, 123456), dt.datetime(1970, 1, 1)],
    ),
]


@pytest.mark.parametrize(("kind", "sent", "expected"), DATES_AND_TIMES, ids=lambda v: str(v)[:20])
def test_date_and_time_schemas_from_java_read_typed(
    spark: SparkSession,
    apache_broker: ApacheBroker,
    java: JavaPeer,
    *,
    kind: str,
    sent: list[Any],
    expected: list[Any],
) -> None:
    """Java's own DATE, TIMESTAMP, INSTANT, LOCAL_DATE and LOCAL_DATE_TIME payloads and
    registered schemas; Spark's timestamps are read in the session's UTC."""
    topic = new_topic(kind.lower().replace("_", "-"))
    java.produce(topic, {"type": kind}, [{"value": v} for v in [*sent, None]])
    rows = read(spark, apache_broker, topic)
    assert [row["value"] for row in rows] == [*expected, None]


@pytest.mark.parametrize(
    ("kind", "sent"),
    [("TIME", [AT_MS % 86_400_000, 0]), ("LOCAL_TIME", ["12:34:56.789012", "00:00"])],
)
def test_time_schemas_from_java_read_typed(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer, kind: str, sent: list[Any]
) -> None:
    """TIME (milliseconds of the day) and LOCAL_TIME (nanoseconds of the day)."""
    topic = new_topic(kind.lower().replace("_", "-"))
    java.produce(topic, {"type": kind}, [{"value": v} for v in sent])
    values = [row["value"] for row in read(spark, apache_broker, topic)]
    if kind == "TIME":
        assert values == [dt.time(12, 30, 45, 123000), dt.time(0)]
    else:
        assert values == [dt.time(12, 34, 56, 789012), dt.time(0)]


# --- compression, batching, event time, properties ---------------------------------------------


@pytest.mark.parametrize("codec", ["LZ4", "ZLIB", "ZSTD", "SNAPPY"])
def test_compressed_batches_from_java(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer, codec: str
) -> None:
    """Java's compressed batches, key-based batching, event times and properties: every
    field of every message reads as Java's own consumer reads it."""
    topic = new_topic(codec.lower())
    messages = [
        {
            "value": f"{codec}-{i}-" + "x" * (i * 37),
            "key": f"k{i % 3}",
            "eventTime": AT_MS + i,
            "properties": {"i": str(i), "é": "ü"},
        }
        for i in range(60)
    ]
    producer = {"compression": codec, "batching": True, "batcher": "KEY_BASED"}
    java.produce(topic, {"type": "STRING"}, messages, batchingDelayMs=50, **producer)
    seen = java.consume(topic, {"type": "STRING"}, len(messages))
    assert sorted(m["value"] for m in seen) == sorted(m["value"] for m in messages)
    # key-based batching: each entry holds one key's messages
    by_entry: dict[tuple[int, int], set[str]] = {}
    for m in seen:
        by_entry.setdefault((m["ledger"], m["entry"]), set()).add(m["key"])
    assert all(len(keys) == 1 for keys in by_entry.values())
    assert any(m["batchIndex"] > 0 for m in seen)

    rows = read(spark, apache_broker, topic)
    ours = {
        row["value"]: (
            row["key"].decode(),
            row["eventTime"],
            row["properties"],
            row["messageId"]["ledgerId"],
            row["messageId"]["entryId"],
            row["messageId"]["batchIndex"],
            row["producerName"],
        )
        for row in rows
    }
    theirs = {
        m["value"]: (
            m["key"],
            dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=m["eventTime"]),
            m["properties"],
            m["ledger"],
            m["entry"],
            m["batchIndex"],
            m["producerName"],
        )
        for m in seen
    }
    assert ours == theirs


# --- routing -----------------------------------------------------------------------------------

ROUTED_KEYS = [
    *(f"key-{i}" for i in range(60)),
    "",
    "Aa",
    "BB",
    "polygenelubricants",  # hashCode() == Integer.MIN_VALUE
    "\u043a\u043b\u044e\u0447",
    "\U0001f600",
    "a\U0001f600b\U0001d11ec",
    "L" * 1000 + "\U0001f600",
]


def test_keyed_routing_matches_java(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer
) -> None:
    """Java's default router (JavaStringHash) and the connector's writer put each key on the
    same partition of a 4-partition topic."""
    theirs_topic = new_topic("route-java")
    ours_topic = new_topic("route-ours")
    for topic in (theirs_topic, ours_topic):
        create_partitioned_topic(apache_broker, topic, 4)
    messages = [{"value": f"v{i}", "key": key} for i, key in enumerate(ROUTED_KEYS)]
    ids = java.produce(theirs_topic, {"type": "STRING"}, messages)
    java_partitions = {key: ident["partition"] for key, ident in zip(ROUTED_KEYS, ids, strict=True)}
    assert len(set(java_partitions.values())) == 4

    df = spark.createDataFrame(
        [(f"v{i}", k) for i, k in enumerate(ROUTED_KEYS)], "value string, key string"
    )
    df.repartition(2).write.mode("append").format("pulsar").option(
        "service.url", apache_broker.service_url
    ).option("topic", ours_topic).save()
    rows = read(spark, apache_broker, ours_topic)
    ours = {row["key"].decode(): row["partition"] for row in rows}
    assert ours == java_partitions
    assert {k: partition_for_key(k, 4) for k in ROUTED_KEYS} == java_partitions


@pytest.mark.parametrize("routing", ["SinglePartition", "RoundRobinPartition"])
def test_java_routing_modes_read_by_partition(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer, routing: str
) -> None:
    """Unkeyed messages: SinglePartition keeps them on one partition, RoundRobinPartition
    spreads them (unbatched, one message a partition in turn); keyed ones are hashed in both.
    The connector reads each on the partition Java reported."""
    topic = new_topic(routing.lower())
    create_partitioned_topic(apache_broker, topic, 4)
    unkeyed = [{"value": f"u{i}"} for i in range(40)]
    keyed = [{"value": f"k{i}", "key": key} for i, key in enumerate(ROUTED_KEYS[:20])]
    ids = java.produce(topic, {"type": "STRING"}, [*unkeyed, *keyed], routing=routing)
    unkeyed_partitions = {ident["partition"] for ident in ids[:40]}
    if routing == "SinglePartition":
        assert len(unkeyed_partitions) == 1
    else:
        assert unkeyed_partitions == {0, 1, 2, 3}
    for message, ident in zip(keyed, ids[40:], strict=True):
        assert ident["partition"] == partition_for_key(message["key"], 4)

    rows = read(spark, apache_broker, topic)
    sent = [m["value"] for m in [*unkeyed, *keyed]]
    got = {row["value"]: row["partition"] for row in rows}
    assert got == {v: ident["partition"] for v, ident in zip(sent, ids, strict=True)}


# --- Java reads what the connector writes --------------------------------------------------------


def test_java_auto_consume_reads_our_writes(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer
) -> None:
    """A df.write with an Avro value schema, with a JSON one and as strings: Java's
    ``Schema.AUTO_CONSUME()`` decodes each with the schema the writer registered, and sees the
    keys, event times and properties written."""
    url = apache_broker.service_url
    at = dt.datetime(2026, 3, 1, 12, 30, 45, 123000)
    rows = [
        (f"k{i}", v["name"], v["count"], v["ok"], at, {"p": str(i)}) for i, v in enumerate(VALUES)
    ]
    df = spark.createDataFrame(
        rows,
        "key string, name string, count long, ok boolean, eventTime timestamp, "
        "properties map<string,string>",
    )
    for fmt in ("avro", "json"):
        topic = new_topic(f"auto-{fmt}")
        out = df.selectExpr(
            "key",
            "named_struct('name', name, 'count', count, 'ok', ok) AS value",
            "eventTime",
            "properties",
        )
        out.coalesce(1).write.mode("append").format("pulsar").option("service.url", url).option(
            "topic", topic
        ).option("valueSchema", fmt).save()
        seen = java.consume(topic, {"type": "AUTO_CONSUME"}, len(rows))
        assert [m["schemaType"] for m in seen] == [fmt.upper()] * len(rows)
        assert [m["value"] for m in seen] == [
            {"name": v["name"], "count": v["count"], "ok": v["ok"]} for v in VALUES
        ]
        assert [m["key"] for m in seen] == ["k0", "k1", "k2"]
        assert [m["eventTime"] for m in seen] == [AT_MS] * 3
        assert [m["properties"] for m in seen] == [{"p": "0"}, {"p": "1"}, {"p": "2"}]
        assert all(m["schemaVersion"] is not None for m in seen)

    topic = new_topic("auto-string")
    df.selectExpr("key", "name AS value").coalesce(1).write.mode("append").format("pulsar").option(
        "service.url", url
    ).option("topic", topic).option("valueSchema", "string").save()
    seen = java.consume(topic, {"type": "AUTO_CONSUME"}, len(rows))
    assert [m["value"] for m in seen] == [v["name"] for v in VALUES]


# --- chunked messages --------------------------------------------------------------------------


def test_chunked_messages_both_ways(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer
) -> None:
    """Java's chunks (``enableChunking``, 100 KB chunks) read whole by the connector, and the
    connector's chunks (a value over the broker's 5 MB entry limit) read whole by Java."""
    topic = new_topic("chunks-java")
    values = [bytes([i]) * 350_000 + bytes(range(256)) * i for i in range(1, 4)]
    java.produce(
        topic,
        {"type": "BYTES"},
        [{"value": v.hex(), "key": f"c{i}"} for i, v in enumerate(values)],
        chunking=True,
        chunkMaxMessageSize=100_000,
    )
    rows = read(spark, apache_broker, topic)
    assert [(row["key"], row["value"]) for row in rows] == [
        (f"c{i}".encode(), v) for i, v in enumerate(values)
    ]

    topic = new_topic("chunks-ours")
    big = [bytes([7, i]) * 3_000_000 for i in range(2)]  # 6 MB each
    df = spark.createDataFrame(
        [(f"b{i}", v) for i, v in enumerate(big)], "key string, value binary"
    )
    df.coalesce(1).write.mode("append").format("pulsar").option(
        "service.url", apache_broker.service_url
    ).option("topic", topic).save()
    seen = java.consume(topic, {"type": "BYTES"}, 2)
    assert [(m["key"], bytes.fromhex(m["value"])) for m in seen] == [
        (f"b{i}", v) for i, v in enumerate(big)
    ]
