"""Writing with a schema (``valueSchema``, ``keySchema``), read by the official client's schemas.

The tests write to the ``registry`` fixture's broker: Apache Pulsar, whose registry keeps the
schema each producer registers and refuses one its compatibility strategy does not accept, or
pulsar-lite behind :func:`apache_proxy`, which emulates that registry. The official client
(``pulsar-client``) then consumes with the matching ``pulsar.schema`` class (Apache accepts a
consumer whose schema can read the topic's), and our own typed read reads the same messages back.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _pulsar
import pulsar
import pytest
from pulsar.schema import (
    Array,
    AvroSchema,
    Boolean,
    BytesSchema,
    Double,
    JsonSchema,
    Long,
    Map,
    Record,
    Schema,
    String,
    StringSchema,
)
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)
from support.official import official_client
from support.schemas import SchemaRegistry
from support.topics import full
from support.written import read_topic

from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.protocol import pb

pytestmark = [pytest.mark.integration, pytest.mark.spark]

UTC = dt.timezone.utc
RECEIVE_MS = 10_000


class Reading(Record):
    name = String()
    weights = Map(Double())
    count = Long()
    ratio = Double()
    ok = Boolean()
    note = String()
    tags = Array(String())


READING_TYPE = StructType(
    [
        StructField(
            "value",
            StructType(
                [
                    StructField("name", StringType()),
                    StructField("weights", MapType(StringType(), DoubleType(), False)),
                    StructField("count", LongType()),
                    StructField("ratio", DoubleType()),
                    StructField("ok", BooleanType()),
                    StructField("note", StringType()),
                    StructField("tags", ArrayType(StringType(), False)),
                ]
            ),
        )
    ]
)
"""The readings' DataFrame: :class:`Reading`'s fields, its map values and list items never null
as the Record's are. Else the Record's schema could not read what was written, and Apache Pulsar
would refuse the official consumer: a reader of ``double`` cannot read ``["null", "double"]``."""
READING_AVRO: dict[str, Any] = {
    "type": "record",
    "name": "topLevelRecord",
    "fields": [
        {"name": "name", "type": ["null", "string"], "default": None},
        {
            "name": "weights",
            "type": ["null", {"type": "map", "values": "double"}],
            "default": None,
        },
        {"name": "count", "type": ["null", "long"], "default": None},
        {"name": "ratio", "type": ["null", "double"], "default": None},
        {"name": "ok", "type": ["null", "boolean"], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None},
        {
            "name": "tags",
            "type": ["null", {"type": "array", "items": "string"}],
            "default": None,
        },
    ],
}
"""The Avro schema derived from :data:`READING_TYPE`'s value."""
# Nulls in every field but ``ok``: the official client's Record turns a null boolean into False.
_FIELDS = ("name", "weights", "count", "ratio", "ok", "note", "tags")
READINGS: list[dict[str, Any]] = [
    dict(zip(_FIELDS, values, strict=True))
    for values in [
        ("first", {"a": 1.0, "b": -0.5}, 2**40, 0.25, True, None, ["a"]),
        ("second", {}, -3, -1.5, False, "noted", []),
        ("third", None, 0, 1e300, False, "", None),
        (None, {"z": 0.0}, None, None, True, "\u65e5", ["x", "y"]),
    ]
]


def _write(df: DataFrame, url: str, topic: str, **options: str) -> None:
    writer = df.write.format("pulsar").option("service.url", url).option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def _readings_df(spark: SparkSession) -> DataFrame:
    rows = [(r,) for r in READINGS]
    return spark.createDataFrame(rows, READING_TYPE).coalesce(1)


def _consume(client: pulsar.Client, topic: str, schema: Any, count: int) -> list[pulsar.Message]:
    """``count`` messages of ``topic`` from the start, as a consumer with ``schema`` gets them."""
    consumer = client.subscribe(
        full(topic),
        "schema-check",
        schema=schema,
        initial_position=pulsar.InitialPosition.Earliest,
    )
    try:
        return [consumer.receive(RECEIVE_MS) for _ in range(count)]
    finally:
        consumer.close()


def _fields(value: Any) -> dict[str, Any]:
    """A decoded Record's fields (its reserved attributes left out)."""
    return {f["name"]: getattr(value, f["name"]) for f in Reading.schema()["fields"]}


@pytest.mark.parametrize(
    ("value_schema", "schema", "registered"),
    [("avro", AvroSchema(Reading), "Avro"), ("json", JsonSchema(Reading), "Json")],
    ids=["avro", "json"],
)
def test_record_write_is_consumed_by_the_official_schema(  # noqa: PLR0917
    spark: SparkSession,
    registry: SchemaRegistry,
    topic: str,
    value_schema: str,
    schema: Any,
    registered: str,
) -> None:
    _write(_readings_df(spark), registry.url, topic, valueSchema=value_schema)

    (kept,) = registry.versions(topic)
    assert kept.type == pb.Schema.Type.Value(registered)
    assert kept.name == topic.partition("://")[2]
    assert json.loads(kept.schema_data) == READING_AVRO
    messages = _consume(registry.client, topic, schema, len(READINGS))
    assert [_fields(m.value()) for m in messages] == READINGS
    assert {m.schema_version() for m in messages} == {"\x00" * 8}  # version 0, 8 bytes
    if value_schema == "json":
        assert json.loads(messages[1].data()) == READINGS[1]


class _Primitive(Schema):  # type: ignore[misc]
    """A primitive Pulsar schema the Python client has no class for (INT64, DOUBLE...), with
    Java's encoding: the value big-endian in ``fmt``."""

    def __init__(self, kind: Any, name: str, fmt: str) -> None:
        super().__init__(None, kind, None, name)
        self._fmt = fmt

    def encode(self, obj: Any) -> bytes:
        return struct.pack(self._fmt, obj)

    def decode(self, data: bytes) -> Any:
        return struct.unpack(self._fmt, data)[0]


PRIMITIVES: list[tuple[str, str, list[Any], Any, str]] = [
    # valueSchema, Spark type, values, the official consumer's schema, the registered type
    ("string", "string", ["plain", "", "\u65e5\u672c \U0001f600"], StringSchema(), "String"),
    (
        "int64",
        "bigint",
        [0, -1, 2**63 - 1, -(2**63)],
        _Primitive(_pulsar.SchemaType.INT64, "INT64", ">q"),
        "Int64",
    ),
    (
        "double",
        "double",
        [0.0, -1.5, 1e-300, float("inf")],
        _Primitive(_pulsar.SchemaType.DOUBLE, "DOUBLE", ">d"),
        "Double",
    ),
    (
        "int32",
        "int",
        [7, -(2**31)],
        _Primitive(_pulsar.SchemaType.INT32, "INT32", ">i"),
        "Int32",
    ),
    ("float", "float", [0.5, -2.0], _Primitive(_pulsar.SchemaType.FLOAT, "FLOAT", ">f"), "Float"),
    (
        "boolean",
        "boolean",
        [True, False],
        _Primitive(_pulsar.SchemaType.BYTES, "BYTES", ">?"),  # the client has no BOOLEAN
        "Bool",
    ),
]


@pytest.mark.parametrize(
    ("value_schema", "spark_type", "values", "schema", "registered"),
    PRIMITIVES,
    ids=[p[0] for p in PRIMITIVES],
)
def test_primitive_write_is_consumed_by_the_official_schema(  # noqa: PLR0917
    spark: SparkSession,
    registry: SchemaRegistry,
    topic: str,
    value_schema: str,
    spark_type: str,
    values: list[Any],
    schema: Any,
    registered: str,
) -> None:
    df = spark.createDataFrame([(v,) for v in values], f"value {spark_type}").coalesce(1)
    _write(df, registry.url, topic, valueSchema=value_schema)

    (kept,) = registry.versions(topic)
    assert (kept.type, kept.schema_data) == (pb.Schema.Type.Value(registered), b"")
    messages = _consume(registry.client, topic, schema, len(values))
    assert [m.value() for m in messages] == values
    typed = spark.read.format("pulsar").option("service.url", registry.url).option("topic", topic)
    assert [r.value for r in typed.load().orderBy("messageId").collect()] == values


LOGICAL_DDL = (
    "value struct<id: bigint, at: timestamp, day: date, price: decimal(12,3), "
    "blob: binary, attrs: map<string,bigint>, place: struct<city: string, zip: int>>"
)
AT = dt.datetime(2026, 3, 1, 12, 30, 45, 123456, tzinfo=UTC)
LOGICAL_ROWS: list[dict[str, Any]] = [
    {
        "id": 1,
        "at": AT,
        "day": dt.date(2026, 3, 1),
        "price": decimal.Decimal("123456789.125"),
        "blob": b"\x00\xff",
        "attrs": {"a": 1, "b": None},
        "place": {"city": "Oslo", "zip": 150},
    },
    {
        "id": 2,
        "at": None,
        "day": None,
        "price": None,
        "blob": None,
        "attrs": None,
        "place": None,
    },
    {
        "id": 3,
        "at": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "day": dt.date(1, 1, 1),
        "price": decimal.Decimal("-0.001"),
        "blob": b"",
        "attrs": {},
        "place": {"city": None, "zip": None},
    },
]
# The reader schema an independent consumer brings: the same fields, its own names.
LOGICAL_READER: dict[str, Any] = {
    "type": "record",
    "name": "topLevelRecord",
    "fields": [
        {"name": "id", "type": ["null", "long"]},
        {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {
            "name": "price",
            "type": [
                "null",
                {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3},
            ],
        },
        {"name": "blob", "type": ["null", "bytes"]},
        {"name": "attrs", "type": ["null", {"type": "map", "values": ["null", "long"]}]},
        {
            "name": "place",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "place",
                    "namespace": "topLevelRecord",
                    "fields": [
                        {"name": "city", "type": ["null", "string"]},
                        {"name": "zip", "type": ["null", "int"]},
                    ],
                },
            ],
        },
    ],
}


def _naive_utc(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` as Spark returns it in a UTC session: timestamps naive."""
    at = row["at"]
    return dict(row, at=None if at is None else at.replace(tzinfo=None))


def test_avro_logical_types_nested_and_nulls_round_trip(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    df = spark.createDataFrame([(r,) for r in LOGICAL_ROWS], LOGICAL_DDL).coalesce(1)
    _write(df, registry.url, topic, valueSchema="avro")

    messages = _consume(
        registry.client,
        topic,
        AvroSchema(None, schema_definition=LOGICAL_READER),
        len(LOGICAL_ROWS),
    )
    assert [m.value() for m in messages] == LOGICAL_ROWS
    typed = spark.read.format("pulsar").option("service.url", registry.url).option("topic", topic)
    rows = [r.value.asDict(recursive=True) for r in typed.load().orderBy("messageId").collect()]
    assert rows == [_naive_utc(r) for r in LOGICAL_ROWS]
    assert [v.type for v in registry.versions(topic)] == [pb.Schema.Type.Value("Avro")]


def test_json_logical_types_are_written_as_java_writes_them(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    df = spark.createDataFrame([(r,) for r in LOGICAL_ROWS[:1]], LOGICAL_DDL)
    _write(df, registry.url, topic, valueSchema="json")

    (message,) = _consume(registry.client, topic, BytesSchema(), 1)
    assert json.loads(message.data()) == {
        "id": 1,
        "at": (AT - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(microseconds=1),
        "day": (dt.date(2026, 3, 1) - dt.date(1970, 1, 1)).days,
        "price": "123456789.125",
        "blob": base64.b64encode(b"\x00\xff").decode(),
        "attrs": {"a": 1, "b": None},
        "place": {"city": "Oslo", "zip": 150},
    }


def test_json_is_read_back_typed_but_bytes(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    """Our typed read takes Json bytes for UTF-8 text (as the Python client writes them), so a
    binary field, written base64 as Java does, does not come back as written; the rest does."""
    df = spark.createDataFrame([(r,) for r in LOGICAL_ROWS], LOGICAL_DDL).coalesce(1)
    _write(df, registry.url, topic, valueSchema="json")

    typed = spark.read.format("pulsar").option("service.url", registry.url).option("topic", topic)
    rows = [r.value.asDict(recursive=True) for r in typed.load().orderBy("messageId").collect()]
    blobs = [None if r["blob"] is None else base64.b64encode(r["blob"]) for r in LOGICAL_ROWS]
    assert rows == [dict(_naive_utc(r), blob=b) for r, b in zip(LOGICAL_ROWS, blobs, strict=True)]


def test_definition_is_registered_and_used(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    """Written with the consumer's own schema: its record names, int widened to long."""
    definition = json.dumps(Reading.schema())
    _write(
        _readings_df(spark),
        registry.url,
        topic,
        valueSchema="avro",
        **{"valueSchema.definition": definition},
    )
    (kept,) = registry.versions(topic)
    assert json.loads(kept.schema_data) == Reading.schema()
    messages = _consume(registry.client, topic, AvroSchema(Reading), len(READINGS))
    assert [_fields(m.value()) for m in messages] == READINGS


def test_key_schema_writes_key_value_separated(
    spark: SparkSession, registry: SchemaRegistry, topic: str
) -> None:
    rows = [({"id": 1, "region": "eu"}, "one"), ({"id": 2, "region": None}, "two"), (None, "none")]
    df = spark.createDataFrame(rows, "key struct<id: bigint, region: string>, value string")
    _write(df.coalesce(1), registry.url, topic, valueSchema="string", keySchema="avro")

    (kept,) = registry.versions(topic)
    key_avro = {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [
            {"name": "id", "type": ["null", "long"], "default": None},
            {"name": "region", "type": ["null", "string"], "default": None},
        ],
    }
    key_data = json.dumps(key_avro, separators=(",", ":")).encode()
    assert kept.type == pb.Schema.Type.Value("KeyValue")
    assert kept.schema_data == struct.pack(">i", len(key_data)) + key_data + b"\x00" * 4
    assert {(p.key, p.value) for p in kept.properties} == {
        ("key.schema.name", "AVRO"),
        ("key.schema.type", "AVRO"),
        ("key.schema.properties", "{}"),
        ("value.schema.name", "STRING"),
        ("value.schema.type", "STRING"),
        ("value.schema.properties", "{}"),
        ("kv.encoding.type", "SEPARATED"),
    }
    # The Python client has no KeyValue schema, and Apache refuses a consumer whose schema is
    # not the topic's type: it consumes the values as bytes (no schema).
    messages = _consume(registry.client, topic, BytesSchema(), len(rows))
    assert [m.data().decode() for m in messages] == ["one", "two", "none"]
    key_schema = AvroSchema(None, schema_definition=key_avro)
    keys = [m.partition_key() for m in messages]
    assert [key_schema.decode(base64.b64decode(k)) for k in keys[:2]] == [r[0] for r in rows[:2]]
    assert keys[2] == ""
    # our typed read takes the registered KEY_VALUE schema: key and value both typed
    ours = spark.read.format("pulsar").option("service.url", registry.url).option("topic", topic)
    typed = ours.load().orderBy("messageId").collect()
    assert [(None if r.key is None else r.key.asDict(), r.value) for r in typed] == rows


def test_writes_to_plain_pulsar_lite_with_a_schema(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic: str
) -> None:
    """pulsar-lite ignores the schema a producer registers: the messages arrive as written."""
    _write(_readings_df(spark), broker.service_url, topic, valueSchema="avro")
    got = read_topic(client, topic)
    schema = AvroSchema(None, schema_definition=READING_AVRO)
    assert [schema.decode(g.value) for g in got] == READINGS


def test_incompatible_registered_schema_fails_before_sending(
    spark: SparkSession, registry: SchemaRegistry, client: pulsar.Client, topic: str
) -> None:
    """A Json write to a topic whose schema is Avro: every strategy but ALWAYS_COMPATIBLE
    refuses a schema of another type."""
    producer = registry.client.create_producer(full(topic), schema=AvroSchema(Reading))
    producer.send(Reading(name="official", count=1, ratio=0.5, ok=True, note=None, tags=[]))
    producer.close()

    with pytest.raises(PythonException) as info:
        _write(_readings_df(spark), registry.url, topic, valueSchema="json")
    refusal = (
        "org.apache.pulsar.broker.service.schema.exceptions.IncompatibleSchemaException: "
        "Incompatible schema: exists schema type AVRO, new schema type JSON"
    )
    assert (
        f"IncompatibleSchemaError (server error 18): topic {full(topic)} refused the Json "
        "schema of this write, so nothing was sent to it (the broker said: create producer on "
        f"{full(topic)}: {refusal} caused by {refusal})"
    ) in str(info.value)
    assert [v.type for v in registry.versions(topic)] == [pb.Schema.Type.Value("Avro")]
    assert [g.value for g in read_topic(client, topic)] == [
        AvroSchema(Reading).encode(
            Reading(name="official", count=1, ratio=0.5, ok=True, note=None, tags=[])
        )
    ]


DEFINE_ERRORS: list[tuple[str, str, dict[str, str], str]] = [
    # id, DataFrame DDL, options, message
    (
        "unknown valueSchema",
        "value string",
        {"valueSchema": "protobuf"},
        "option 'valueSchema' must be one of avro, json, string, bytes, int64, int32, double, "
        "float, boolean (Pulsar's AVRO, JSON, STRING, BYTES, INT64, INT32, DOUBLE, FLOAT, "
        "BOOLEAN schemas), got 'protobuf'",
    ),
    (
        "value type for int64",
        "value string",
        {"valueSchema": "int64"},
        "column 'value' has type string, which valueSchema=int64 cannot write: it writes "
        "tinyint or smallint or int or bigint values",
    ),
    (
        "field not in the definition",
        "value struct<name: string, extra: int>",
        {"valueSchema": "avro", "valueSchema.definition": json.dumps(Reading.schema())},
        "column 'value'.extra is not a field of the Avro record 'Reading' (its fields: name, "
        "weights, count, ratio, ok, note, tags)",
    ),
    (
        "definition field missing",
        "value struct<name: string>",
        {"valueSchema": "avro", "valueSchema.definition": json.dumps(Reading.schema())},
        "column 'value'.weights: the Avro record 'Reading' has this field without a default, and "
        "the DataFrame does not have it",
    ),
    (
        "definition field type",
        "value struct<name: string, count: string>",
        {"valueSchema": "avro", "valueSchema.definition": json.dumps(Reading.schema())},
        "column 'value'.count has type string, which cannot be written as the Avro type \"long\"",
    ),
    (
        "definition not Avro",
        "value struct<name: string>",
        {"valueSchema": "avro", "valueSchema.definition": "{not json"},
        "option 'valueSchema.definition' is not a valid Avro schema",
    ),
    (
        "keySchema without valueSchema",
        "value string, key string",
        {"keySchema": "string"},
        "option 'keySchema' needs option 'valueSchema': the key is written with a schema only "
        "as part of a KEY_VALUE schema",
    ),
    (
        "bytes of a string",
        "value string",
        {"valueSchema": "BYTES"},
        "column 'value' has type string, which valueSchema=bytes cannot write: it writes binary "
        "values",
    ),
    (
        "keySchema without a key",
        "value string",
        {"valueSchema": "string", "keySchema": "string"},
        "option 'keySchema' is set but the DataFrame has no 'key' column to write with it",
    ),
    (
        "definition of a primitive",
        "value string",
        {"valueSchema": "string", "valueSchema.definition": '"string"'},
        "option 'valueSchema.definition' is an Avro schema, for valueSchema=avro or json; "
        "valueSchema is 'string'",
    ),
    (
        "map keys",
        "value struct<m: map<int,string>>",
        {"valueSchema": "avro"},
        "column 'value'.m is a map<int,string>: Avro maps have string keys, so a map written "
        "with a schema must be map<string, ...>",
    ),
]


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [e[1:] for e in DEFINE_ERRORS],
    ids=[e[0] for e in DEFINE_ERRORS],
)
def test_refused_when_defined_and_nothing_sent(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic: str,
    ddl: str,
    options: dict[str, str],
    message: str,
) -> None:
    df = spark.createDataFrame([], ddl)
    with pytest.raises(AnalysisException) as info:
        _write(df, broker.service_url, topic, **options)
    assert "ConfigurationError" in str(info.value)
    assert message in str(info.value)
    assert read_topic(client, topic) == []


def test_streaming_write_with_a_schema(
    spark: SparkSession, registry: SchemaRegistry, topic: str, tmp_path: Path
) -> None:
    source = tmp_path / "source"
    _readings_df(spark).write.parquet(str(source))
    stream = spark.readStream.schema(READING_TYPE).parquet(str(source))
    query = (
        stream.writeStream.format("pulsar")
        .option("service.url", registry.url)
        .option("topic", topic)
        .option("valueSchema", "avro")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    (kept,) = registry.versions(topic)
    assert kept.type == pb.Schema.Type.Value("Avro")
    # A file source makes every column nullable (map values and list items too), so the
    # consumer reads with the schema written, which the Record's could not read.
    written = AvroSchema(None, schema_definition=json.loads(kept.schema_data))
    messages = _consume(registry.client, topic, written, len(READINGS))
    assert sorted(repr(sorted(m.value().items())) for m in messages) == sorted(
        repr(sorted(r.items())) for r in READINGS
    )


def test_partitioned_topic_keeps_one_schema_for_all_partitions(
    spark: SparkSession, registry: SchemaRegistry, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Each partition's producer registers the schema under the parent topic: one version."""
    topic = pooled_partitioned_topic(3)
    rows = [({"id": i, "name": f"n{i}"}, f"k{i}") for i in range(30)]
    df = spark.createDataFrame(rows, "value struct<id: bigint, name: string>, key string")
    _write(df, registry.url, topic, valueSchema="avro")

    (kept,) = registry.versions(topic)
    assert kept.type == pb.Schema.Type.Value("Avro")
    typed = spark.read.format("pulsar").option("service.url", registry.url).option("topic", topic)
    got = {(r.key.decode(), r.value.id, r.value.name, r.partition) for r in typed.load().collect()}
    assert {(key, row["id"], row["name"]) for row, key in rows} == {g[:3] for g in got}
    assert len(got) == len(rows)
    assert {g[3] for g in got} == {0, 1, 2}


EVENT: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "fields": [{"name": "id", "type": "long"}],
}


@pytest.mark.apache
@pytest.mark.parametrize("strategy", ["FULL", "BACKWARD"])
def test_the_topics_compatibility_strategy_refuses_or_takes_a_write(
    spark: SparkSession, apache_broker: ApacheBroker, topic: str, strategy: str
) -> None:
    """Apache Pulsar's registry under a real strategy (the emulation has none): a write whose
    schema cannot read the topic's data fails with IncompatibleSchemaError and sends nothing; a
    write adding a field with a default (null) is the topic's next version, and our typed read
    reads both versions' messages as the newest."""
    client = official_client(apache_broker.service_url)
    registry = SchemaRegistry(apache_broker.service_url, client, apache=apache_broker)
    try:
        registry.set_compatibility(topic, strategy)
        producer = client.create_producer(topic, schema=AvroSchema(None, schema_definition=EVENT))
        producer.send({"id": 1})
        producer.close()

        retyped = spark.createDataFrame([({"id": "two"},)], "value struct<id: string>")
        with pytest.raises(PythonException) as info:
            _write(retyped, registry.url, topic, valueSchema="avro")
        assert (
            f"IncompatibleSchemaError (server error 18): topic {topic} refused the Avro schema "
            "of this write, so nothing was sent to it (the broker said: create producer on "
            f"{topic}: org.apache.pulsar.broker.service.schema.exceptions."
            "IncompatibleSchemaException: Error during schema compatibility check with strategy "
            f"{strategy}: org.apache.avro.SchemaValidationException: Unable to read schema:"
        ) in str(info.value)
        assert len(registry.versions(topic)) == 1

        labelled = StructType(
            [
                StructField(
                    "value",
                    StructType(
                        [StructField("id", LongType(), False), StructField("label", StringType())]
                    ),
                )
            ]
        )
        added = spark.createDataFrame([({"id": 2, "label": "two"},)], labelled)
        _write(added, registry.url, topic, valueSchema="avro")
        versions = registry.versions(topic)
        assert [json.loads(v.schema_data) for v in versions] == [
            EVENT,
            {
                "type": "record",
                "name": "topLevelRecord",
                "fields": [
                    {"name": "id", "type": "long"},
                    {"name": "label", "type": ["null", "string"], "default": None},
                ],
            },
        ]
        typed = spark.read.format("pulsar").option("service.url", registry.url)
        rows = typed.option("topic", topic).load().orderBy("messageId").collect()
        assert [r.value.asDict() for r in rows] == [
            {"id": 1, "label": None},
            {"id": 2, "label": "two"},
        ]
    finally:
        client.close()
