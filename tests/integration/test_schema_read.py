"""Typed ``value`` columns: topics with schemas, read through a broker's schema registry.

The ``registry`` fixture is Apache Pulsar's own registry on the Apache runs. pulsar-lite keeps no
schemas, so its runs go through :func:`apache_proxy`, which keeps the schemas producers
register, numbers their versions, stamps the version on PRODUCER_SUCCESS (the producer then puts
it on each message) and answers GET_SCHEMA as an Apache broker does. The official client
(``pulsar-client``) produces with its own ``AvroSchema``, ``JsonSchema`` and ``StringSchema``.

Schemas only Java's client produces (its date and time schemas, KeyValue) are read from Java's
own messages in ``test_java_interop.py``, on the Apache broker.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import logging
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar.schema import (
    Array,
    AvroSchema,
    Boolean,
    Double,
    JsonSchema,
    Long,
    ProtobufNativeSchema,
    Record,
    String,
    StringSchema,
)
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from support import protobuf_messages as proto
from support.broker_proxy import ApacheAnswers, BrokerProxy, apache_proxy
from support.clients import settings_for
from support.schemas import (
    EVOLVED,
    READING,
    Half,
    SchemaRegistry,
    avro_bytes,
    key_value_schema,
)
from support.topics import full
from support.waiting import wait_until

from pulsar_spark.arrow.schema import SCHEMA_DDL
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.schema import fetch_schema
from pulsar_spark.local import LocalBroker
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo
from pulsar_spark.source.read_options import ReadMode, ReadOptions
from pulsar_spark.source.value_schemas import resolve_value_schema

pytestmark = [pytest.mark.integration, pytest.mark.spark]

AT = dt.datetime(2026, 3, 1, 12, 30, 45, 123000, tzinfo=dt.UTC)
READINGS = [
    {
        "name": "first",
        "count": 2**40,
        "ratio": 0.25,
        "ok": True,
        "note": None,
        "at": AT,
        "tags": ["a", "b"],
        "place": {"city": "Oslo", "zip": 150},
    },
    {
        "name": "second",
        "count": -3,
        "ratio": -1.5,
        "ok": False,
        "note": "noted",
        "at": AT + dt.timedelta(days=400, milliseconds=7),
        "tags": [],
        "place": {"city": "Lima", "zip": 15001},
    },
]


def _load(spark: SparkSession, url: str, topic: str, **options: str) -> DataFrame:
    """A batch read of ``topic`` with ``options``."""
    reader = spark.read.format("pulsar").option("service.url", url).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def _read(spark: SparkSession, url: str, topic: str, **options: str) -> list[Any]:
    df = _load(spark, url, topic, **options)
    return [row.asDict(recursive=True) for row in df.orderBy("messageId").collect()]


def _stream(spark: SparkSession, url: str, topic: str) -> DataFrame:
    """A streaming read of ``topic`` from its earliest message."""
    return (
        spark.readStream.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .load()
    )


def _publish(client: pulsar.Client, topic: str, schema: Any, values: list[Any]) -> None:
    producer = client.create_producer(topic, schema=schema, batching_enabled=False)
    for value in values:
        producer.send(value)
    producer.close()


def _utc(value: Any) -> Any:
    """Spark's timestamps come back naive in the session time zone; tests run it in UTC."""
    return value.replace(tzinfo=dt.UTC) if isinstance(value, dt.datetime) else value


def test_avro_records_are_read_typed_field_by_field(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    client = registry.client
    _publish(client, topic, AvroSchema(None, schema_definition=READING), READINGS)
    assert len(registry.versions(topic)) == 1

    value_type = _load(spark, registry.url, topic).schema["value"].dataType.simpleString()
    assert value_type == (
        "struct<name:string,count:bigint,ratio:double,ok:boolean,note:string,at:timestamp,"
        "tags:array<string>,place:struct<city:string,zip:bigint>>"
    )
    rows = [row["value"] for row in _read(spark, registry.url, topic)]
    got = [dict(row, at=_utc(spark_time(spark, row["at"]))) for row in rows]
    assert got == READINGS


def spark_time(spark: SparkSession, value: dt.datetime) -> dt.datetime:
    """A naive timestamp Spark returned, as the UTC instant it stands for."""
    zone = spark.conf.get("spark.sql.session.timeZone")
    if value.tzinfo is not None:
        return value
    from zoneinfo import ZoneInfo

    return value.replace(tzinfo=ZoneInfo(zone or "UTC")).astimezone(dt.UTC)


class Place(Record):
    city = String()


class Reading(Record):
    name = String()
    count = Long()
    ratio = Double()
    ok = Boolean()
    note = String()
    tags = Array(String())
    place = Place()


def test_json_records_and_strings_are_read_typed(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    client = registry.client
    values = [
        Reading(
            name="j", count=7, ratio=0.5, ok=True, note=None, tags=["x"], place=Place(city="Rome")
        ),
        Reading(name="k", count=-1, ratio=2.0, ok=False, note="n", tags=[], place=None),
    ]
    _publish(client, topic, JsonSchema(Reading), values)
    rows = [row["value"] for row in _read(spark, registry.url, topic)]
    assert rows == [
        {
            "name": "j",
            "count": 7,
            "ratio": 0.5,
            "ok": True,
            "note": None,
            "tags": ["x"],
            "place": {"city": "Rome"},
        },
        {
            "name": "k",
            "count": -1,
            "ratio": 2.0,
            "ok": False,
            "note": "n",
            "tags": [],
            "place": None,
        },
    ]

    strings = topic + "-strings"
    _publish(client, strings, StringSchema(), ["héllo", "", "wörld"])
    assert [row["value"] for row in _read(spark, registry.url, strings)] == ["héllo", "", "wörld"]


def test_three_versions_are_read_resolved_to_the_newest(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    client = registry.client
    _publish(client, topic, AvroSchema(None, schema_definition=EVOLVED[0]), [{"id": 1}])
    _publish(
        client,
        topic,
        AvroSchema(None, schema_definition=EVOLVED[1]),
        [{"id": 2, "label": "two", "weight": 2.5}],
    )
    _publish(
        client, topic, AvroSchema(None, schema_definition=EVOLVED[2]), [{"id": 3, "label": "c"}]
    )
    assert len(registry.versions(topic)) == 3

    rows = _read(spark, registry.url, topic)
    assert [row["value"] for row in rows] == [
        {"id": 1, "label": "unlabelled"},
        {"id": 2, "label": "two"},
        {"id": 3, "label": "c"},
    ]

    raw = _read(spark, registry.url, topic, valueFormat="raw")
    given = spark.read.format("pulsar").schema(SCHEMA_DDL).option("service.url", registry.url)
    rows_given = given.option("topic", topic).load().orderBy("messageId").collect()
    assert [row.value for row in rows_given] == [row["value"] for row in raw]
    assert [row["value"] for row in raw] == [
        avro_bytes({"id": 1}, EVOLVED[0]),
        avro_bytes({"id": 2, "label": "two", "weight": 2.5}, EVOLVED[1]),
        avro_bytes({"id": 3, "label": "c"}, EVOLVED[2]),
    ]


def test_get_schema_answers_the_latest_version_or_the_one_asked_for(
    registry: SchemaRegistry, pool: ConnectionPool, topic: str
) -> None:
    """GET_SCHEMA: nothing for a topic without a schema or for a version it does not have; the
    latest version, or the one asked for, under the topic's name (a partition's is its
    parent's)."""
    lookup = Lookup(settings_for(registry.url, timeout=10.0), pool)
    assert fetch_schema(lookup, topic) is None
    _publish(registry.client, topic, AvroSchema(None, schema_definition=EVOLVED[0]), [{"id": 1}])
    _publish(
        registry.client,
        topic,
        AvroSchema(None, schema_definition=EVOLVED[1]),
        [{"id": 2, "label": "two", "weight": 2.5}],
    )

    def got(info: SchemaInfo | None) -> tuple[str, Any, str, tuple[Any, ...], bytes | None]:
        assert info is not None
        return info.type_name, json.loads(info.data), info.name, info.properties, info.version

    name = topic.partition("://")[2]
    latest = ("Avro", EVOLVED[1], name, (), (1).to_bytes(8, "big"))
    assert got(fetch_schema(lookup, topic)) == latest
    assert got(fetch_schema(lookup, topic + "-partition-0")) == latest
    first = fetch_schema(lookup, topic, (0).to_bytes(8, "big"))
    assert got(first) == ("Avro", EVOLVED[0], name, (), (0).to_bytes(8, "big"))
    assert fetch_schema(lookup, topic, (2).to_bytes(8, "big")) is None


def test_a_version_that_does_not_resolve_names_topic_versions_and_field(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    """The topic takes any schema (ALWAYS_COMPATIBLE), so the two versions share no field."""
    client = registry.client
    registry.set_compatibility(topic, "ALWAYS_COMPATIBLE")
    newer = {"type": "record", "name": "Event", "fields": [{"name": "serial", "type": "long"}]}
    _publish(client, topic, AvroSchema(None, schema_definition=EVOLVED[0]), [{"id": 1}])
    _publish(client, topic, AvroSchema(None, schema_definition=newer), [{"serial": 2}])
    with pytest.raises(Exception) as failure:
        _read(spark, registry.url, topic)
    text = str(failure.value)
    assert topic in text
    assert "schema version 0" in text and "latest version 1" in text
    assert "serial" in text


def test_topics_with_different_schemas_are_refused_unless_raw(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    client = registry.client
    other = topic + "-other"
    _publish(client, topic, StringSchema(), ["a"])
    _publish(client, other, AvroSchema(None, schema_definition=EVOLVED[0]), [{"id": 1}])
    reader = spark.read.format("pulsar").option("service.url", registry.url)
    with pytest.raises(Exception, match="different schemas"):
        reader.option("topics", f"{topic},{other}").load()
    rows = reader.option("topics", f"{topic},{other}").option("valueFormat", "raw").load()
    assert sorted(row.value for row in rows.collect()) == sorted(
        [b"a", avro_bytes({"id": 1}, EVOLVED[0])]
    )


def test_batched_partitioned_topics_and_streams_read_typed(
    spark: SparkSession,
    registry: SchemaRegistry,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """Batched entries carry the version in the entry's metadata; a partitioned topic's schema
    is its parent's; a stream types values as a batch read does."""
    client = registry.client
    topic = full(pooled_partitioned_topic(2))
    schema = AvroSchema(None, schema_definition=EVOLVED[2])
    producer = client.create_producer(
        topic, schema=schema, batching_enabled=True, batching_max_messages=10
    )
    for i in range(30):
        producer.send_async({"id": i, "label": f"l{i}"}, None, partition_key=str(i))
    producer.flush()
    producer.close()
    assert len(registry.versions(topic)) == 1
    expected = [{"id": i, "label": f"l{i}"} for i in range(30)]

    rows = _read(spark, registry.url, topic)
    assert sorted((row["value"] for row in rows), key=lambda v: v["id"]) == expected
    assert {row["messageId"]["batchIndex"] for row in rows} != {-1}

    query = (
        _stream(spark, registry.url, topic)
        .select("value.id", "value.label")
        .writeStream.format("memory")
        .queryName("typed_values")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120)
    assert query.exception() is None
    streamed = spark.sql("select id, label from typed_values order by id").collect()
    assert [row.asDict() for row in streamed] == expected


def test_a_stream_resolves_new_versions_and_fails_on_one_that_does_not_resolve(
    spark: SparkSession,
    registry: SchemaRegistry,
    topic: str,
    tmp_path: Path,
) -> None:
    """The type is fixed when the query starts (version 0: an id); a version registered later
    that resolves to it is read (its extra fields dropped), one that does not fails the query.
    The topic takes any schema (ALWAYS_COMPATIBLE): the last version retypes the id."""
    client = registry.client
    registry.set_compatibility(topic, "ALWAYS_COMPATIBLE")
    _publish(client, topic, AvroSchema(None, schema_definition=EVOLVED[0]), [{"id": 1}])
    query = (
        _stream(spark, registry.url, topic)
        .select("value")
        .writeStream.format("memory")
        .queryName("evolving")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )

    def seen() -> list[Any]:
        rows = spark.sql("select value from evolving").collect()
        return sorted((row["value"].asDict() for row in rows), key=lambda v: v["id"])

    try:
        wait_until(lambda: seen() == [{"id": 1}], "the first message", timeout=60)
        added = {"id": 2, "label": "two", "weight": 0.5}
        _publish(client, topic, AvroSchema(None, schema_definition=EVOLVED[1]), [added])
        wait_until(lambda: seen() == [{"id": 1}, {"id": 2}], "the second version", timeout=60)
        retyped = {
            "type": "record",
            "name": "Event",
            "fields": [{"name": "id", "type": "string"}],
        }
        _publish(client, topic, AvroSchema(None, schema_definition=retyped), [{"id": "three"}])
        with pytest.raises(StreamingQueryException) as raised:
            query.awaitTermination(120)
    finally:
        query.stop()
    assert (
        f"topic {topic}: a message written with schema version 2 does not resolve to the "
        "latest version 0"
    ) in str(raised.value)
    assert seen() == [{"id": 1}, {"id": 2}]


def test_an_unreachable_broker_at_definition_leaves_value_as_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The read itself then fails when it connects, as it always did."""
    with socket.create_server(("127.0.0.1", 0)) as closed:
        port = closed.getsockname()[1]
    options = ReadOptions.parse(
        {
            "service.url": f"pulsar://127.0.0.1:{port}",
            "topic": "t",
            "pulsar.client.operationTimeoutMs": "300",
        },
        mode=ReadMode.BATCH,
    )
    with caplog.at_level(logging.WARNING):
        assert resolve_value_schema(options) is None
    assert "value is read as bytes" in caplog.text


@pytest.mark.pulsar_lite
def test_pulsar_lite_is_not_asked_for_schemas(
    broker: LocalBroker, proxied: tuple[BrokerProxy, ApacheAnswers, pulsar.Client], topic: str
) -> None:
    """pulsar-lite never answers GET_SCHEMA: asking would cost the operation timeout."""
    proxy, answers, client = proxied
    _publish(client, topic, StringSchema(), ["a"])
    options = {"service.url": proxy.url, "topic": topic}
    typed = resolve_value_schema(ReadOptions.parse(options, mode=ReadMode.BATCH))
    assert typed is not None and typed.spark_type() == "string"
    assert answers.schema_requests == 1

    lite, lite_answers = apache_proxy((broker.host, broker.port))  # the broker's own name
    try:
        options = {"service.url": lite.url, "topic": topic}
        assert resolve_value_schema(ReadOptions.parse(options, mode=ReadMode.BATCH)) is None
    finally:
        lite.close()
    assert lite_answers.schema_requests == 0


KEY_RECORD: dict[str, Any] = {
    "type": "record",
    "name": "Key",
    "namespace": "test",
    "fields": [{"name": "id", "type": "long"}, {"name": "region", "type": "string"}],
}
KEYS = [{"id": 1, "region": "eu"}, {"id": -2, "region": "ap"}, None, {"id": 4, "region": ""}]
"""Keys of four messages: the third without a key; the fourth goes with a null value."""


def _readings(spark: SparkSession, values: list[Any]) -> list[Any]:
    return [None if v is None else dict(v, at=_utc(spark_time(spark, v["at"]))) for v in values]


def test_key_value_separated_keys_are_message_keys(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    """SEPARATED: Java producers send the encoded key as a base64 message key (with
    ``partition_key_b64_encoded``), as the connector's writer sends a binary ``key``; a Python
    producer sends a String key as plain text. Both read as the key schema's type.

    Java's own SEPARATED (and INLINE) messages are read in ``test_java_interop.py``; this test
    stays for what has no Java producer in it and runs on pulsar-lite too: the connector's
    writer into a SEPARATED topic, the refusal of an INLINE and a SEPARATED topic together, and
    the official Python client's plain-text String keys."""
    client = registry.client
    registry.register(
        topic, key_value_schema(Half.avro(KEY_RECORD), Half.avro(READING), "SEPARATED")
    )
    values = [READINGS[0], READINGS[1], READINGS[1], None]
    written = spark.createDataFrame(
        [
            (
                None if key is None else avro_bytes(key, KEY_RECORD),
                None if value is None else avro_bytes(value, READING),
            )
            for key, value in zip(KEYS, values, strict=True)
        ],
        "key binary, value binary",
    ).coalesce(1)
    written.write.mode("append").format("pulsar").option("service.url", registry.url).option(
        "topic", topic
    ).save()
    rows = _read(spark, registry.url, topic)
    assert [row["key"] for row in rows] == KEYS
    assert _readings(spark, [row["value"] for row in rows]) == values

    # The same two schemas INLINE: the same schema data, so only the properties tell them apart.
    inline = topic + "-inline"
    registry.register(inline, key_value_schema(Half.avro(KEY_RECORD), Half.avro(READING), "INLINE"))
    assert registry.versions(inline)[0].schema_data == registry.versions(topic)[0].schema_data
    both = spark.read.format("pulsar").option("service.url", registry.url)
    with pytest.raises(Exception, match="different schemas"):
        both.option("topics", f"{topic},{inline}").load()

    strings = topic + "-strings"
    registry.register(
        strings, key_value_schema(Half("STRING", "String"), Half.avro(EVOLVED[0]), "SEPARATED")
    )
    producer = client.create_producer(strings, batching_enabled=False)
    producer.send(avro_bytes({"id": 1}, EVOLVED[0]), partition_key="clé")
    producer.send(avro_bytes({"id": 2}, EVOLVED[0]))
    producer.close()
    rows = _read(spark, registry.url, strings)
    assert [(row["key"], row["value"]) for row in rows] == [("clé", {"id": 1}), (None, {"id": 2})]


def test_topics_pattern_reads_typed_under_the_one_schema_rule(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    """The pattern is resolved on the driver (GetTopicsOfNamespace); the topics it matches
    must share one schema."""
    client = registry.client
    schema = AvroSchema(None, schema_definition=EVOLVED[2])
    _publish(client, topic + "-pa", schema, [{"id": 1, "label": "a"}])
    _publish(client, topic + "-pb", schema, [{"id": 2, "label": "b"}, {"id": 3, "label": "c"}])
    _publish(client, topic + "-other", StringSchema(), ["not matched"])
    pattern = topic.rpartition("/")[2] + "-p.*"
    reader = spark.read.format("pulsar").option("service.url", registry.url)
    df = reader.option("topicsPattern", pattern).load()
    assert df.schema["value"].dataType.simpleString() == "struct<id:bigint,label:string>"
    rows = df.orderBy("value.id").collect()
    assert [(row.topic, row.value.asDict()) for row in rows] == [
        (topic + "-pa", {"id": 1, "label": "a"}),
        (topic + "-pb", {"id": 2, "label": "b"}),
        (topic + "-pb", {"id": 3, "label": "c"}),
    ]

    _publish(client, topic + "-pc", StringSchema(), ["c"])
    with pytest.raises(Exception, match="different schemas") as refused:
        reader.option("topicsPattern", pattern).load()
    assert f"{topic}-pc: String version 0" in str(refused.value)
    raw = reader.option("topicsPattern", pattern).option("valueFormat", "raw").load()
    assert sorted(row.value for row in raw.collect()) == sorted(
        [
            avro_bytes({"id": 1, "label": "a"}, EVOLVED[2]),
            avro_bytes({"id": 2, "label": "b"}, EVOLVED[2]),
            avro_bytes({"id": 3, "label": "c"}, EVOLVED[2]),
            b"c",
        ]
    )


def test_protobuf_native_from_the_official_client(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    client = registry.client
    messages = [
        proto.Reading(
            name="a",
            count=-(2**40),
            note="n",
            tags=["x"],
            counts={"k": 7},
            color=1,
            place=proto.Place(city="Oslo", zip=150),
            places=[proto.Place(city="Lima")],
            big=2**64 - 1,
        ),
        proto.Reading(),
    ]
    _publish(client, topic, ProtobufNativeSchema(proto.Reading), messages)
    (registered,) = registry.versions(topic)
    assert registered.type == pb.Schema.Type.Value("ProtobufNative")

    df = spark.read.format("pulsar").option("service.url", registry.url).option("topic", topic)
    assert df.load().schema["value"].dataType.simpleString() == proto.READING_SPARK
    full, empty = (row["value"] for row in _read(spark, registry.url, topic))
    assert full == {
        "name": "a",
        "count": -(2**40),
        "ratio": 0.0,
        "ok": False,
        "note": "n",
        "tags": ["x"],
        "counts": {"k": 7},
        "color": "BLUE",
        "place": {"city": "Oslo", "zip": 150},
        "places": [{"city": "Lima", "zip": 0}],
        "blob": b"",
        "big": decimal.Decimal(2**64 - 1),
        "small": 0,
        "ratio32": 0.0,
        "unsigned": 0,
    }
    assert empty == dict(
        full,
        name="",
        count=0,
        note=None,
        tags=[],
        counts={},
        color="RED",
        place=None,
        places=[],
        big=decimal.Decimal(0),
    )


def test_a_given_value_schema_types_values_no_schema_was_registered_for(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic: str
) -> None:
    """pulsar-lite keeps no schemas: Avro bytes sent as plain bytes, then an Avro
    ``valueSchema.definition``, a Json one and a primitive one on the same kinds of payloads."""
    producer = client.create_producer(topic, batching_enabled=False)
    for reading in READINGS:
        producer.send(avro_bytes(reading, READING))
    producer.close()
    given = {"valueSchema": "avro", "valueSchema.definition": json.dumps(READING)}
    df = _load(spark, broker.service_url, topic, **given)
    assert df.schema["value"].dataType.simpleString().startswith("struct<name:string,count:bigint")
    rows = [row["value"].asDict(recursive=True) for row in df.orderBy("messageId").collect()]
    assert [dict(row, at=_utc(spark_time(spark, row["at"]))) for row in rows] == READINGS


def test_a_given_json_or_primitive_schema(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic: str
) -> None:
    clicks, numbers = f"{topic}-clicks", f"{topic}-numbers"
    producer = client.create_producer(clicks, batching_enabled=False)
    for text in ('{"id": 1, "page": "home"}', '{"id": -2, "page": null}'):
        producer.send(text.encode())
    producer.close()
    producer = client.create_producer(numbers, batching_enabled=False)
    for number in (7, -(2**40)):
        producer.send(number.to_bytes(8, "big", signed=True))
    producer.close()
    click = {
        "type": "record",
        "name": "Click",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "page", "type": ["null", "string"]},
        ],
    }
    given = {"valueSchema": "json", "valueSchema.definition": json.dumps(click)}
    rows = _read(spark, broker.service_url, clicks, **given)
    assert [row["value"] for row in rows] == [{"id": 1, "page": "home"}, {"id": -2, "page": None}]
    rows = _read(spark, broker.service_url, numbers, valueSchema="INT64")
    assert [row["value"] for row in rows] == [7, -(2**40)]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"valueSchema": "avro"},
            "option 'valueSchema'='avro' needs option 'valueSchema.definition': the Avro schema "
            "of the values, as JSON text",
        ),
        (
            {"valueSchema.definition": '"long"'},
            "option 'valueSchema.definition' needs option 'valueSchema' ('avro' or 'json')",
        ),
        (
            {"valueSchema": "string", "valueSchema.definition": '"string"'},
            "option 'valueSchema.definition' goes with 'valueSchema' 'avro' or 'json' only, got "
            "'valueSchema'='string'",
        ),
        (
            {"valueSchema": "avro", "valueSchema.definition": '"long"', "valueFormat": "raw"},
            "options 'valueSchema' and 'valueFormat'='raw' exclude each other: the first decodes "
            "the values, the second keeps their bytes",
        ),
        (
            {"valueSchema": "protobuf"},
            "option 'valueSchema' must be one of avro, json, string, bytes, int64, int32, double, "
            "float, boolean (Pulsar's AVRO, JSON, STRING, BYTES, INT64, INT32, DOUBLE, FLOAT, "
            "BOOLEAN schemas), got 'protobuf'",
        ),
        (
            {"valueSchema": "avro", "valueSchema.definition": "{not json"},
            "option 'valueSchema.definition': topic persistent://public/default/given: the Avro "
            "schema is not JSON",
        ),
    ],
)
def test_a_given_value_schema_is_checked_when_the_dataframe_is_defined(
    spark: SparkSession, options: dict[str, str], message: str
) -> None:
    reader = spark.read.format("pulsar").option("service.url", "pulsar://127.0.0.1:9")
    reader = reader.option("topic", "given")
    for name, value in options.items():
        reader = reader.option(name, value)
    with pytest.raises(Exception) as raised:
        reader.load()
    assert message in str(raised.value)
