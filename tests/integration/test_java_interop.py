"""Interop with Apache Pulsar's Java client, on the Apache broker: the client's real bytes.

The official Python client has none of Java's KeyValue, date and time schemas, nor its
key-based batcher or routing modes, nor its EC keys for encryption; these tests produce with
the Java client itself (``support/java_peer``, the release the broker runs) and read with the
connector, and read what the connector writes with the Java client. Where both sides show a
message's fields, every one is compared; where the tests need Java's partition for a key,
Java's producer says it.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import descriptor_pb2, json_format
from pyspark.sql import SparkSession
from support import protobuf_messages as proto
from support.apache_fixtures import create_partitioned_topic
from support.crypto_keys import CURVES, write_key_pair
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
    """``Schema.KeyValue(AVRO(Key), AVRO(Reading), encoding)``: the key and value columns are
    typed from Java's registered schema, every key and value field reads as Java wrote it, a
    null key or value too; SEPARATED keys travel as the message key (base64 on the wire). Read
    raw, the payload and key are the bytes Java's consumer sees."""
    topic = new_topic(f"kv-{encoding.lower()}")
    schema = {
        "type": "KEY_VALUE",
        "key": avro(KEY_RECORD),
        "value": avro(VALUE_RECORD),
        "encoding": encoding,
    }
    keys = [*KEYS, None, KEYS[0]]
    values = [*VALUES, VALUES[0], None]
    messages = [{"value": {"key": k, "value": v}} for k, v in zip(keys, values, strict=True)]
    java.produce(topic, schema, messages)

    loaded = spark.read.format("pulsar").option("service.url", apache_broker.service_url)
    types = loaded.option("topic", topic).load().schema
    assert types["key"].dataType.simpleString() == "struct<id:bigint,region:string>"
    assert types["value"].dataType.simpleString() == (
        "struct<name:string,count:bigint,ratio:double,ok:boolean,note:string>"
    )
    rows = read(spark, apache_broker, topic)
    assert [row["key"] for row in rows] == keys
    assert [row["value"] for row in rows] == values
    # and Java reads its own messages back as the same KeyValues (all but a SEPARATED null
    # value, the last, on which Java's own consumer fails with a NullPointerException)
    count = len(keys) - (encoding == "SEPARATED")
    back = java.consume(topic, schema, count)
    assert [m["value"] for m in back] == [m["value"] for m in messages[:count]]
    separated_keys = [k is not None and encoding == "SEPARATED" for k in keys[:count]]
    assert [("keyBytes" in m) for m in back] == separated_keys

    raw = read(spark, apache_broker, topic, valueFormat="raw")[:count]
    assert [row["value"] for row in raw] == [bytes.fromhex(m["data"]) for m in back]
    assert [row["key"] for row in raw] == [
        bytes.fromhex(m["keyBytes"]) if "keyBytes" in m else None for m in back
    ]


# --- PROTOBUF_NATIVE ---------------------------------------------------------------------------

PROTOBUF = {
    "type": "PROTOBUF_NATIVE",
    "files": descriptor_pb2.FileDescriptorSet(file=proto.FILES).SerializeToString().hex(),
    "root": "test.Reading",
}
"""``test.Reading`` for the Java peer: it builds the descriptors from these files."""


def protobuf_readings() -> list[Any]:
    """Every field of ``test.Reading`` set, to extremes, and none set."""
    return [
        proto.Reading(
            name="\u00e9t\u00e9 \U0001f600",
            count=-(2**63),
            ratio=-1e300,
            ok=True,
            note="",  # set, though empty: proto3 optional keeps it
            tags=["x", "", "y"],
            counts={"a": 2**63 - 1, "": -1},
            color=1,
            place=proto.Place(city="Oslo", zip=-150),
            places=[proto.Place(city="Lima"), proto.Place(), proto.Place(zip=2**31 - 1)],
            blob=bytes(range(256)),
            big=2**64 - 1,
            small=-(2**31),
            ratio32=0.25,
            unsigned=2**32 - 1,
        ),
        proto.Reading(name="n", count=1, note="noted", place=proto.Place()),
        proto.Reading(),
    ]


def protobuf_row(message: Any) -> dict[str, Any]:
    """The value the connector reads for ``message`` (its Spark type: READING_SPARK)."""

    def place(p: Any) -> dict[str, Any]:
        return {"city": p.city, "zip": p.zip}

    return {
        "name": message.name,
        "count": message.count,
        "ratio": message.ratio,
        "ok": message.ok,
        "note": message.note if message.HasField("note") else None,
        "tags": list(message.tags),
        "counts": dict(message.counts),
        "color": ["RED", "BLUE"][message.color],
        "place": place(message.place) if message.HasField("place") else None,
        "places": [place(p) for p in message.places],
        "blob": message.blob,
        "big": decimal.Decimal(message.big),
        "small": message.small,
        "ratio32": message.ratio32,
        "unsigned": message.unsigned,
    }


def from_java(value: dict[str, Any]) -> Any:
    """A message the Java peer printed (protobuf's JSON mapping) as a ``test.Reading``."""
    return json_format.ParseDict(value, proto.Reading())


def test_protobuf_native_from_java_reads_typed(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer
) -> None:
    """Java's PROTOBUF_NATIVE schema (its ``ProtobufNativeSchemaUtils`` data) and Java's
    encoding of every field kind: the connector types the column from Java's schema and reads
    every field as sent; Java's own consumer decodes the same messages."""
    topic = new_topic("protobuf")
    readings = protobuf_readings()
    sent = [json_format.MessageToDict(r, preserving_proto_field_name=True) for r in readings]
    java.produce(topic, PROTOBUF, [{"value": v} for v in sent])

    reader = spark.read.format("pulsar").option("service.url", apache_broker.service_url)
    loaded = reader.option("topic", topic).load()
    assert loaded.schema["value"].dataType.simpleString() == proto.READING_SPARK
    rows = read(spark, apache_broker, topic)
    assert [row["value"] for row in rows] == [protobuf_row(r) for r in readings]

    seen = java.consume(topic, {"type": "AUTO_CONSUME"}, len(readings))
    assert [m["schemaType"] for m in seen] == ["PROTOBUF_NATIVE"] * len(readings)
    assert [from_java(m["value"]) for m in seen] == readings
    raw = read(spark, apache_broker, topic, valueFormat="raw")
    assert [row["value"].hex() for row in raw] == [m["data"] for m in seen]
    # Java's encoding parses as the same messages (its map entries may come in another order)
    assert [proto.Reading.FromString(bytes.fromhex(m["data"])) for m in seen] == readings


def test_java_decodes_our_protobuf_payloads(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer
) -> None:
    """The connector's writer registers no PROTOBUF_NATIVE schema (``valueSchema`` has no
    protobuf format): protobuf payloads written as ``binary`` to a topic whose schema a Java
    producer registered are decoded field by field by a Java consumer of that schema. (Java's
    ``AUTO_CONSUME`` hands such messages, which carry no schema version, over as bytes.) The
    connector reads them typed with the topic's schema."""
    topic = new_topic("protobuf-ours")
    first, *readings = protobuf_readings()
    java.produce(
        topic,
        PROTOBUF,
        [{"value": json_format.MessageToDict(first, preserving_proto_field_name=True)}],
    )
    df = spark.createDataFrame(
        [(f"p{i}", r.SerializeToString()) for i, r in enumerate(readings)],
        "key string, value binary",
    )
    df.coalesce(1).write.mode("append").format("pulsar").option(
        "service.url", apache_broker.service_url
    ).option("topic", topic).save()
    seen = java.consume(topic, PROTOBUF, 1 + len(readings))
    assert [from_java(m["value"]) for m in seen] == [first, *readings]
    assert [m["key"] for m in seen[1:]] == [f"p{i}" for i in range(len(readings))]
    rows = read(spark, apache_broker, topic)
    assert [row["value"] for row in rows] == [protobuf_row(r) for r in [first, *readings]]


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


SPARK_TYPES = {
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "INSTANT": "timestamp",
    "LOCAL_DATE": "date",
    "LOCAL_DATE_TIME": "timestamp_ntz",
    "TIME": "time(6)",
    "LOCAL_TIME": "time(6)",
}
"""The Spark type of the ``value`` column for each of Java's date and time schemas."""


def value_type(spark: SparkSession, broker: ApacheBroker, topic: str) -> str:
    reader = spark.read.format("pulsar").option("service.url", broker.service_url)
    return str(reader.option("topic", topic).load().schema["value"].dataType.simpleString())


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
    assert value_type(spark, apache_broker, topic) == SPARK_TYPES[kind]
    rows = read(spark, apache_broker, topic)
    assert [row["value"] for row in rows] == [*expected, None]


@pytest.mark.parametrize(
    ("kind", "sent"),
    [("TIME", [AT_MS % 86_400_000, 0, -1]), ("LOCAL_TIME", ["12:34:56.789012", "00:00"])],
)
def test_time_schemas_from_java_read_typed(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer, kind: str, sent: list[Any]
) -> None:
    """TIME (epoch milliseconds, read as their time of day: -1 is a millisecond before
    midnight) and LOCAL_TIME (nanoseconds of the day)."""
    topic = new_topic(kind.lower().replace("_", "-"))
    java.produce(topic, {"type": kind}, [{"value": v} for v in sent])
    assert value_type(spark, apache_broker, topic) == SPARK_TYPES[kind]
    values = [row["value"] for row in read(spark, apache_broker, topic)]
    if kind == "TIME":
        assert values == [dt.time(12, 30, 45, 123000), dt.time(0), dt.time(23, 59, 59, 999000)]
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
    messages: list[dict[str, Any]] = [
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


def epoch_ms(at: dt.datetime | None) -> int:
    """A timestamp the connector read (naive, in the session's UTC) as epoch milliseconds;
    None as 0, which Java's ``getEventTime()`` returns for a message without one."""
    if at is None:
        return 0
    return (at - dt.datetime(1970, 1, 1)) // dt.timedelta(milliseconds=1)


VIEW = (
    "key",
    "eventTime",
    "publishTime",
    "properties",
    "producerName",
    "sequenceId",
    "replicatedFrom",
    "topic",
    "partition",
    "ledger",
    "entry",
    "batchIndex",
)
"""The fields of a message both sides show, in the Java peer's terms."""


def our_view(row: dict[str, Any]) -> dict[str, Any]:
    """:data:`VIEW` of a row the connector read."""
    key = row["key"]
    return {
        "key": None if key is None else key.decode(),
        "eventTime": epoch_ms(row["eventTime"]),
        "publishTime": epoch_ms(row["publishTime"]),
        "properties": row["properties"],
        "producerName": row["producerName"],
        "sequenceId": row["sequenceId"],
        "replicatedFrom": row["replicatedFrom"],
        "topic": row["topic"],
        "partition": row["partition"],
        "ledger": row["messageId"]["ledgerId"],
        "entry": row["messageId"]["entryId"],
        "batchIndex": row["messageId"]["batchIndex"],
    }


def java_view(message: dict[str, Any]) -> dict[str, Any]:
    """:data:`VIEW` of a message the Java consumer received."""
    return {name: message[name] for name in VIEW}


def metadata_messages(prefix: str) -> list[dict[str, Any]]:
    """Messages with and without a key, an event time and properties, in turn."""
    messages: list[dict[str, Any]] = []
    for i in range(24):
        message: dict[str, Any] = {"value": f"{prefix}-{i}"}
        if i % 2 == 0:
            message["key"] = f"key-{i % 5}"
        if i % 3 != 0:
            message["eventTime"] = AT_MS + i * 1000 if i % 3 == 1 else i  # 1 ms and up
        if i % 4 != 0:
            message["properties"] = {"i": str(i), "\u00e9": "\u00fc" * i, "empty": ""}
        messages.append(message)
    return messages


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_event_time_and_properties_from_java(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer, batching: bool
) -> None:
    """Java's keys, event times and properties, on messages sent one an entry and in batches:
    every field the connector reads (message id, publish time, producer name, sequence id, no
    replicatedFrom) is what Java's consumer reads, and what Java's send receipts said."""
    topic = new_topic(f"meta-{'batched' if batching else 'single'}")
    messages = metadata_messages("m")
    ids = java.produce(topic, {"type": "STRING"}, messages, batching=batching)
    seen = java.consume(topic, {"type": "STRING"}, len(messages))
    assert [m["value"] for m in seen] == [m["value"] for m in messages]
    assert [m.get("key") for m in messages] == [m["key"] for m in seen]
    assert [m.get("eventTime", 0) for m in messages] == [m["eventTime"] for m in seen]
    assert [m.get("properties", {}) for m in messages] == [m["properties"] for m in seen]
    assert any(m["batchIndex"] > 0 for m in seen) == batching
    assert all(m["replicatedFrom"] is None for m in seen)

    rows = read(spark, apache_broker, topic)
    assert [row["value"] for row in rows] == [m["value"] for m in messages]
    assert [our_view(row) for row in rows] == [java_view(m) for m in seen]
    assert [(row["messageId"]["ledgerId"], row["messageId"]["entryId"]) for row in rows] == [
        (ident["ledger"], ident["entry"]) for ident in ids
    ]


def write_metadata_messages(
    spark: SparkSession,
    broker: ApacheBroker,
    topic: str,
    messages: list[dict[str, Any]],
    **options: str,
) -> None:
    """Write :func:`metadata_messages` to ``topic`` in order, with one task."""
    df = spark.createDataFrame(
        [
            (
                m["value"],
                m.get("key"),
                None
                if "eventTime" not in m
                else dt.datetime(1970, 1, 1) + dt.timedelta(milliseconds=m["eventTime"]),
                m.get("properties"),
            )
            for m in messages
        ],
        "value string, key string, eventTime timestamp, properties map<string,string>",
    )
    writer = df.coalesce(1).write.mode("append").format("pulsar")
    writer = writer.option("service.url", broker.service_url).option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def test_java_reads_our_event_times_and_properties(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer
) -> None:
    """The connector's keys, event times and properties, batched: Java's
    ``getKey()``, ``getEventTime()``, ``getProperties()`` and every other field are what the
    connector reads back, and no message is marked replicated."""
    topic = new_topic("meta-ours")
    messages = metadata_messages("o")
    write_metadata_messages(spark, apache_broker, topic, messages)
    seen = java.consume(topic, {"type": "BYTES"}, len(messages) + 1)
    assert [bytes.fromhex(m["value"]).decode() for m in seen] == [m["value"] for m in messages]
    assert [m["key"] for m in seen] == [m.get("key") for m in messages]
    assert [m["eventTime"] for m in seen] == [m.get("eventTime", 0) for m in messages]
    assert [m["properties"] for m in seen] == [m.get("properties", {}) for m in messages]
    assert [m["replicatedFrom"] for m in seen] == [None] * len(messages)

    rows = read(spark, apache_broker, topic)
    assert [our_view(row) for row in rows] == [java_view(m) for m in seen]


def test_key_based_batches_from_java_keep_each_keys_order(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer
) -> None:
    """``BatcherBuilder.KEY_BASED`` reorders a producer's messages into one batch a key: the
    connector reads every message once, at the id Java's send receipt gave it, and each key's
    messages (the unkeyed ones too) in the order they were sent."""
    topic = new_topic("key-based")
    keys = ["a", "b", "c", "d", None]
    messages: list[dict[str, Any]] = [
        {"value": f"v{i:03d}", **({} if keys[i * 7 % 5] is None else {"key": keys[i * 7 % 5]})}
        for i in range(300)
    ]
    producer = {"batching": True, "batcher": "KEY_BASED", "batchingMaxMessages": 40}
    ids = java.produce(topic, {"type": "STRING"}, messages, batchingDelayMs=100, **producer)
    sent_at = {
        m["value"]: (ident["ledger"], ident["entry"], ident["batchIndex"])
        for m, ident in zip(messages, ids, strict=True)
    }
    assert any(ident["batchIndex"] > 0 for ident in ids)

    rows = read(spark, apache_broker, topic)
    assert sorted(row["value"] for row in rows) == sorted(sent_at)  # each message once
    got_at = {
        row["value"]: (
            row["messageId"]["ledgerId"],
            row["messageId"]["entryId"],
            row["messageId"]["batchIndex"],
        )
        for row in rows
    }
    assert got_at == sent_at
    entries: dict[tuple[int, int], set[Any]] = {}
    for row in rows:
        entries.setdefault(got_at[row["value"]][:2], set()).add(row["key"])
    assert all(len(keys_in) == 1 for keys_in in entries.values())
    for key in keys:
        wanted = [m["value"] for m in messages if m.get("key") == key]
        in_order = [row["value"] for row in rows if row["key"] == (key and key.encode())]
        assert in_order == wanted, key


# --- routing -----------------------------------------------------------------------------------

ROUTED_KEYS = [
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
BINARY_KEYS = [bytes([i, 255 - i, (i * 37) % 256]) * (1 + i % 3) for i in range(150)]


@pytest.mark.parametrize("scheme", ["JavaStringHash", "Murmur3_32Hash"])
def test_keyed_routing_matches_java(
    spark: SparkSession, apache_broker: ApacheBroker, java: JavaPeer, scheme: str
) -> None:
    """Java's default router with ``hashingScheme`` ``scheme`` and the connector's writer with
    the same ``pulsar.producer.hashingScheme`` put each key on the same partition of a
    4-partition topic: string keys (non-ASCII and long ones too) and binary ones (Java's
    ``keyBytes``, hashed as their base64 text), many keys per task and few (the connector
    routes large and small groups of keys differently). Each partition's messages come from a
    producer named after it. The connector's ``partition_for_key``, which the pulsar-lite
    tests use to predict partitions, gives Java's partition for every key."""
    theirs_topic = new_topic("route-java")
    ours_topic = new_topic("route-ours")
    for topic in (theirs_topic, ours_topic):
        create_partitioned_topic(apache_broker, topic, 4)
    messages = [
        *({"value": f"s{i}", "key": key} for i, key in enumerate(ROUTED_KEYS)),
        *({"value": f"b{i}", "keyBytes": key.hex()} for i, key in enumerate(BINARY_KEYS)),
    ]
    ids = java.produce(theirs_topic, {"type": "STRING"}, messages, hashing=scheme)
    java_partitions = {
        m["value"]: ident["partition"] for m, ident in zip(messages, ids, strict=True)
    }
    assert set(java_partitions.values()) == {0, 1, 2, 3}
    if scheme == "JavaStringHash":
        assert java_partitions["s203"] == 0  # polygenelubricants: MIN_VALUE & 0x7FFFFFFF == 0
        assert java_partitions["s201"] == java_partitions["s202"]  # "Aa" and "BB" collide
    else:  # "Aa" and "BB" collide only under String.hashCode
        assert java_partitions["s201"] != java_partitions["s202"]

    few = ROUTED_KEYS[200:]  # fewer than 64 keys per task
    writes: list[tuple[str, list[tuple[str, Any]]]] = [
        ("value string, key string", [(f"s{i}", k) for i, k in enumerate(ROUTED_KEYS)]),
        ("value string, key string", [(f"f{i}", k) for i, k in enumerate(few)]),
        ("value string, key binary", [(f"b{i}", k) for i, k in enumerate(BINARY_KEYS)]),
        ("value string, key binary", [(f"c{i}", k) for i, k in enumerate(BINARY_KEYS[:40])]),
    ]
    for schema, rows in writes:
        spark.createDataFrame(rows, schema).repartition(2).write.mode("append").format(
            "pulsar"
        ).option("service.url", apache_broker.service_url).option("topic", ours_topic).option(
            "pulsar.producer.hashingScheme", scheme
        ).save()
    expected = {
        **java_partitions,
        **{f"f{i}": java_partitions[f"s{200 + i}"] for i in range(len(few))},
        **{f"c{i}": java_partitions[f"b{i}"] for i in range(40)},
    }
    got = read(spark, apache_broker, ours_topic)
    assert len(got) == len(expected)
    assert {row["value"].decode(): row["partition"] for row in got} == expected
    for index in range(4):
        on_partition = [row for row in got if row["partition"] == index]
        assert {row["topic"] for row in on_partition} == {ours_topic}
        assert {row["producerName"].rsplit("-", 1)[1] for row in on_partition} == {str(index)}

    texts = {
        **{f"s{i}": key for i, key in enumerate(ROUTED_KEYS)},
        **{f"b{i}": base64.b64encode(key).decode() for i, key in enumerate(BINARY_KEYS)},
    }
    assert {v: partition_for_key(texts[v], 4, scheme) for v in texts} == java_partitions


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


# --- end-to-end encryption -----------------------------------------------------------------------

CRYPTO_FIXTURES = Path(__file__).resolve().parents[1] / "data" / "crypto"
KeyFiles = dict[str, tuple[Path, Path]]


@pytest.fixture(scope="module")
def key_files(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    """(public, private) PEM files by kind: an EC key pair on each of :data:`CURVES`, one
    with explicit curve parameters (``openssl ecparam -param_enc explicit``), an RSA one."""
    directory = tmp_path_factory.mktemp("java-keys")
    files = {curve: write_key_pair(directory, curve, curve) for curve in CURVES}
    files["rsa"] = write_key_pair(directory, "rsa")
    explicit = (
        CRYPTO_FIXTURES / "ec_explicit_public.pem",
        CRYPTO_FIXTURES / "ec_explicit_private.pem",
    )
    files["explicit-secp521r1"] = explicit
    return files


def assert_stored_encrypted(spark: SparkSession, broker: ApacheBroker, topic: str) -> None:
    """Read without a key, every entry of ``topic`` is ciphertext: no value shows."""
    options = {"valueFormat": "raw", "pulsar.reader.cryptoFailureAction": "CONSUME"}
    raw = read(spark, broker, topic, **options)
    assert raw
    assert all(row["encrypted"] for row in raw)
    assert not any(b"secret" in row["value"] for row in raw)


@pytest.mark.parametrize(
    "case",
    [
        ("secp256r1", True, "LZ4"),
        ("secp256r1", False, "LZ4"),
        ("secp384r1", True, "ZSTD"),
        ("secp521r1", False, "ZLIB"),
        ("secp256k1", True, "SNAPPY"),
        ("explicit-secp521r1", False, "LZ4"),
        ("rsa", True, "ZSTD"),
    ],
    ids=lambda case: "-".join(map(str, case)),
)
def test_java_encrypted_messages_read_as_plain_rows(
    spark: SparkSession,
    apache_broker: ApacheBroker,
    java: JavaPeer,
    key_files: KeyFiles,
    case: tuple[str, bool, str],
) -> None:
    """Java's producer encrypts for an EC key (Bouncy Castle's ECIES wraps the data key) or
    an RSA one, compressed, batched or not; the connector, given the private key, reads every
    field as Java's own consumer decrypting with that key reads it."""
    kind, batching, codec = case
    topic = new_topic(f"crypto-java-{kind}")
    public, private = key_files[kind]
    messages = metadata_messages(f"secret-{kind}")
    ids = java.produce(
        topic,
        {"type": "STRING"},
        messages,
        batching=batching,
        compression=codec,
        encryptionKeys=["app"],
        publicKeys={"app": str(public)},
    )
    seen = java.consume(topic, {"type": "STRING"}, len(messages), private_keys={"app": private})
    assert [m["value"] for m in seen] == [m["value"] for m in messages]
    assert any(m["batchIndex"] > 0 for m in seen) == batching

    rows = read(spark, apache_broker, topic, **{"pulsar.reader.privateKeyFiles": f"app={private}"})
    assert [row["value"] for row in rows] == [m["value"] for m in messages]
    assert [our_view(row) for row in rows] == [java_view(m) for m in seen]
    assert [(row["messageId"]["ledgerId"], row["messageId"]["entryId"]) for row in rows] == [
        (ident["ledger"], ident["entry"]) for ident in ids
    ]
    assert_stored_encrypted(spark, apache_broker, topic)


@pytest.mark.parametrize(
    "case",
    [
        ("secp256r1", True),
        ("secp384r1", False),
        ("secp521r1", True),
        ("secp256k1", False),
        ("explicit-secp521r1", True),
        ("rsa", False),
    ],
    ids=lambda case: "-".join(map(str, case)),
)
def test_java_decrypts_what_we_encrypt(
    spark: SparkSession,
    apache_broker: ApacheBroker,
    java: JavaPeer,
    key_files: KeyFiles,
    case: tuple[str, bool],
) -> None:
    """A ``df.write`` encrypted for an EC key (or an RSA one), LZ4-compressed, batched or not:
    Java's consumer, with the private key, decrypts every message, and every field it shows is
    what the connector reads back with the same key."""
    kind, batching = case
    topic = new_topic(f"crypto-ours-{kind}")
    public, private = key_files[kind]
    messages = metadata_messages(f"secret-{kind}")
    write_metadata_messages(
        spark,
        apache_broker,
        topic,
        messages,
        **{
            "pulsar.producer.encryptionKeys": "app",
            "pulsar.producer.publicKeyFiles": f"app={public}",
            "pulsar.producer.compressionType": "LZ4",
            "pulsar.producer.batchingEnabled": str(batching).lower(),
            "pulsar.producer.batchingMaxMessages": "10",
        },
    )
    assert_stored_encrypted(spark, apache_broker, topic)
    seen = java.consume(topic, {"type": "BYTES"}, len(messages) + 1, private_keys={"app": private})
    assert [bytes.fromhex(m["value"]).decode() for m in seen] == [m["value"] for m in messages]
    assert [m["key"] for m in seen] == [m.get("key") for m in messages]
    assert [m["eventTime"] for m in seen] == [m.get("eventTime", 0) for m in messages]
    assert [m["properties"] for m in seen] == [m.get("properties", {}) for m in messages]
    assert any(m["batchIndex"] > 0 for m in seen) == batching

    rows = read(spark, apache_broker, topic, **{"pulsar.reader.privateKeyFiles": f"app={private}"})
    assert [our_view(row) for row in rows] == [java_view(m) for m in seen]
    assert [bytes(row["value"]).decode() for row in rows] == [m["value"] for m in messages]
