"""Typed values: Pulsar schemas mapped to Spark types, and payloads decoded to exactly those
Arrow types (Avro with resolution between versions, Json, the primitive encodings)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import struct
import uuid
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)
from support.schemas import EVOLVED, READING, avro_bytes

from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo

TOPIC = "persistent://public/default/typed"

RECORD: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "fields": [
        *READING["fields"][:7],  # name, count, ratio, ok, note, at, tags
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "color", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "BLUE"]}},
        {
            "name": "place",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [{"name": "city", "type": "string"}],
            },
        },
    ],
}
SPARK_RECORD = StructType(
    [
        StructField("name", StringType()),
        StructField("count", LongType()),
        StructField("ratio", DoubleType()),
        StructField("ok", BooleanType()),
        StructField("note", StringType()),
        StructField("at", TimestampType()),
        StructField("tags", ArrayType(StringType())),
        StructField("counts", MapType(StringType(), LongType())),
        StructField("day", DateType()),
        StructField("price", DecimalType(10, 2)),
        StructField("color", StringType()),
        StructField("place", StructType([StructField("city", StringType())])),
    ]
)
AT = dt.datetime(2026, 3, 1, 12, 30, 45, 123000, tzinfo=dt.UTC)
VALUE = {
    "name": "a",
    "count": 2**40,
    "ratio": 0.5,
    "ok": True,
    "note": None,
    "at": AT,
    "tags": ["x", "y"],
    "counts": {"k": 1},
    "day": dt.date(2026, 3, 1),
    "price": decimal.Decimal("12.34"),
    "color": "BLUE",
    "place": {"city": "Oslo"},
}
V0, V1, V2 = (i.to_bytes(8, "big") for i in range(3))


def _info(kind: str, data: bytes = b"", version: bytes | None = V0) -> SchemaInfo:
    return SchemaInfo(pb.Schema.Type.Value(kind), data, "", (), version)


def test_record_maps_to_the_spark_struct_and_its_arrow_type() -> None:
    schema = ValueSchema.of(TOPIC, _info("Avro", json.dumps(RECORD).encode()))
    assert schema is not None
    assert schema.spark_type().startswith("struct<`name`: string, `count`: bigint,")
    assert schema.arrow_type() == to_arrow_type(SPARK_RECORD, timezone="UTC")
    assert schema.arrow_schema().field("value").type == schema.arrow_type()
    assert "value struct<" in schema.read_schema_ddl()


def test_avro_values_decode_exactly() -> None:
    schema = ValueSchema.of(TOPIC, _info("Avro", json.dumps(RECORD).encode()))
    assert schema is not None
    other = dict(VALUE, note="n", tags=[], counts={})
    values = pa.array([avro_bytes(VALUE, RECORD), None, avro_bytes(other, RECORD)], pa.binary())
    writer = json.dumps(RECORD).encode()
    decoded = ValueDecoder(schema, lambda v: writer).decode(values, [V0, None, V0])
    assert decoded.type == schema.arrow_type()
    rows = decoded.to_pylist()
    assert rows[1] is None
    first = dict(rows[0], counts=dict(rows[0]["counts"]))
    assert first == VALUE
    assert rows[2]["note"] == "n" and rows[2]["tags"] == [] and rows[2]["counts"] == []


def test_json_values_follow_the_avro_schema() -> None:
    schema = ValueSchema.of(TOPIC, _info("Json", json.dumps(RECORD).encode()))
    assert schema is not None
    text = dict(VALUE, at=int(AT.timestamp() * 1000), day=20513, price="12.34")
    decoded = ValueDecoder(schema, lambda v: None).decode(
        pa.array([json.dumps(text).encode()], pa.binary()), [V0]
    )
    (row,) = decoded.to_pylist()
    assert dict(row, counts=dict(row["counts"])) == VALUE


def test_every_version_resolves_to_the_newest() -> None:
    versions = {V0: EVOLVED[0], V1: EVOLVED[1], V2: EVOLVED[2]}
    schema = ValueSchema.of(TOPIC, _info("Avro", json.dumps(EVOLVED[2]).encode(), V2))
    assert schema is not None
    asked: list[bytes] = []

    def writers(version: bytes) -> bytes:
        asked.append(version)
        return json.dumps(versions[version]).encode()

    values = pa.array(
        [
            avro_bytes({"id": 1}, EVOLVED[0]),
            avro_bytes({"id": 2, "label": "x", "weight": 7.0}, EVOLVED[1]),
            avro_bytes({"id": 3, "label": "y"}, EVOLVED[2]),
            avro_bytes({"id": 4}, EVOLVED[0]),
        ],
        pa.binary(),
    )
    decoder = ValueDecoder(schema, writers)
    decoded = decoder.decode(values, [V0, V1, V2, V0])
    assert decoded.to_pylist() == [
        {"id": 1, "label": "unlabelled"},
        {"id": 2, "label": "x"},
        {"id": 3, "label": "y"},
        {"id": 4, "label": "unlabelled"},
    ]
    assert asked == [V0, V1, V2]  # each version's schema fetched once


def test_a_version_with_another_record_name_resolves_as_java_resolves_it() -> None:
    """A Spark write's ``topLevelRecord`` after a producer's ``test.Event``: Java's Avro (and
    Apache Pulsar's compatibility check) resolves records whatever their names; so do we."""
    newest = {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "label", "type": ["null", "string"], "default": None},
        ],
    }
    first = dict(EVOLVED[0], namespace="test")
    schema = ValueSchema.of(TOPIC, _info("Avro", json.dumps(newest).encode(), V1))
    assert schema is not None
    decoder = ValueDecoder(schema, lambda v: json.dumps(first).encode())
    values = pa.array([avro_bytes({"id": 1}, first), avro_bytes({"id": 2}, first)], pa.binary())
    assert decoder.decode(values, [V0, V0]).to_pylist() == [
        {"id": 1, "label": None},
        {"id": 2, "label": None},
    ]


def test_an_unresolvable_version_names_topic_versions_and_field() -> None:
    newest = {"type": "record", "name": "R", "fields": [{"name": "z", "type": "long"}]}
    schema = ValueSchema.of(TOPIC, _info("Avro", json.dumps(newest).encode(), V1))
    assert schema is not None
    decoder = ValueDecoder(schema, lambda v: json.dumps(EVOLVED[0]).encode())
    with pytest.raises(SchemaError, match=r"typed.*version 0.*latest version 1.*z"):
        decoder.decode(pa.array([avro_bytes({"id": 1}, EVOLVED[0])], pa.binary()), [V0])


@pytest.mark.parametrize(
    ("kind", "fmt", "items", "spark"),
    [
        ("Bool", ">?", [True, False], "boolean"),
        ("Int8", ">b", [-128, 127], "tinyint"),
        ("Int16", ">h", [-2, 300], "smallint"),
        ("Int32", ">i", [-(2**31), 5], "int"),
        ("Int64", ">q", [2**62, -1], "bigint"),
        ("Float", ">f", [0.5, -2.25], "float"),
        ("Double", ">d", [0.1, 1e300], "double"),
    ],
)
def test_primitives_are_big_endian(kind: str, fmt: str, items: list[Any], spark: str) -> None:
    schema = ValueSchema.of(TOPIC, _info(kind))
    assert schema is not None and schema.spark_type() == spark
    values = pa.array([struct.pack(fmt, v) for v in items] + [None], pa.binary())
    decoded = ValueDecoder(schema, lambda v: None).decode(values, [None] * 3)
    assert decoded.type == schema.arrow_type()
    assert decoded.to_pylist() == [*items, None]


def test_strings_are_utf8() -> None:
    schema = ValueSchema.of(TOPIC, _info("String"))
    assert schema is not None and schema.spark_type() == "string"
    values = pa.array(["é".encode(), None], pa.binary())
    assert ValueDecoder(schema, lambda v: None).decode(values, [None, None]).to_pylist() == [
        "é",
        None,
    ]


def test_strings_that_are_not_utf8_read_as_java_reads_them() -> None:
    schema = ValueSchema.of(TOPIC, _info("String"))
    assert schema is not None
    values = pa.array([b"caf\xc3", b"\xff-x", b"ok"], pa.binary())
    decoded = ValueDecoder(schema, lambda v: None).decode(values.slice(0, 2), [None] * 2)
    assert decoded.to_pylist() == ["caf\ufffd", "\ufffd-x"]


TEXT = {"type": "record", "name": "T", "fields": [{"name": "s", "type": "string"}]}


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        pytest.param(b"\x04\xff\xfe", "UnicodeDecodeError", id="not-utf8"),
        pytest.param(b"\x7f", "EOFError", id="negative-length"),
        pytest.param(b"\x08ab", "EOFError", id="cut-short"),
        pytest.param(b"\xff", "IndexError", id="varint-cut-short"),
    ],
)
def test_an_avro_value_fastavro_cannot_read_is_a_schema_error(payload: bytes, error: str) -> None:
    """The columnar decoder declines these; fastavro's own exceptions once came out as they
    were, outside the project's errors."""
    schema = ValueSchema.of(TOPIC, _info("Avro", json.dumps(TEXT).encode(), None))
    assert schema is not None
    values = pa.array([avro_bytes({"s": "fine"}, TEXT), payload], pa.binary())
    message = rf"^topic {TOPIC}: a value does not decode with schema version \(none\): {error}\("
    with pytest.raises(SchemaError, match=message):
        ValueDecoder(schema, lambda v: None).decode(values, [None, None])


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        pytest.param(b"{not json", "Expecting property name", id="not-json"),
        pytest.param(b"\xff{}", "invalid start byte", id="not-utf8"),
        pytest.param(b"[1, 2]", "'list' object has no attribute 'get'", id="not-an-object"),
    ],
)
def test_a_json_value_that_is_not_the_schema_s_is_a_schema_error(
    payload: bytes, error: str
) -> None:
    schema = ValueSchema.of(TOPIC, _info("Json", json.dumps(TEXT).encode(), None))
    assert schema is not None
    message = rf"^topic {TOPIC}: a value is not JSON of the topic's schema: .*{error}"
    with pytest.raises(SchemaError, match=message):
        ValueDecoder(schema, lambda v: None).decode(pa.array([payload], pa.binary()), [None])


def test_a_json_value_of_the_wrong_type_is_a_schema_error() -> None:
    schema = ValueSchema.of(TOPIC, _info("Json", json.dumps(READING).encode(), None))
    assert schema is not None
    payload = json.dumps({"name": "n", "count": "many"}).encode()
    message = rf"^topic {TOPIC}: a value does not fit the value column's type: "
    with pytest.raises(SchemaError, match=message):
        ValueDecoder(schema, lambda v: None).decode(pa.array([payload], pa.binary()), [None])


def test_types_without_a_mapping() -> None:
    assert ValueSchema.of(TOPIC, _info("Protobuf", b"{}")) is None
    union = {"type": "record", "name": "U", "fields": [{"name": "u", "type": ["int", "string"]}]}
    with pytest.raises(SchemaError, match="union"):
        ValueSchema.of(TOPIC, _info("Avro", json.dumps(union).encode()))


def test_value_format_option() -> None:
    from pulsar_spark.errors import ConfigurationError
    from pulsar_spark.source.read_options import ReadMode, ReadOptions

    base = {"service.url": "pulsar://localhost:6650", "topic": "t"}
    assert ReadOptions.parse(base, mode=ReadMode.BATCH).value_format == "auto"
    raw = ReadOptions.parse({**base, "valueFormat": "RAW"}, mode=ReadMode.BATCH)
    assert raw.value_format == "raw"
    with pytest.raises(ConfigurationError, match="valueFormat"):
        ReadOptions.parse({**base, "valueFormat": "avro"}, mode=ReadMode.BATCH)


def test_times_of_day_uuids_and_local_timestamps() -> None:
    record = {
        "type": "record",
        "name": "T",
        "fields": [
            {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
            {"name": "m", "type": {"type": "long", "logicalType": "time-micros"}},
            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "l", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        ],
    }
    schema = ValueSchema.of(TOPIC, _info("Avro", json.dumps(record).encode()))
    assert schema is not None
    spark = StructType(
        [
            StructField("t", IntegerType()),
            StructField("m", LongType()),
            StructField("u", StringType()),
            StructField("l", TimestampNTZType()),
        ]
    )
    assert schema.arrow_type() == to_arrow_type(spark, timezone="UTC")
    value = {
        "t": dt.time(1, 2, 3, 4000),
        "m": dt.time(0, 0, 1, 7),
        "u": uuid.UUID(int=5),
        "l": dt.datetime(2020, 1, 2, 3, 4, 5),
    }
    writer = json.dumps(record).encode()
    decoded = ValueDecoder(schema, lambda v: writer).decode(
        pa.array([avro_bytes(value, record)], pa.binary()), [V0]
    )
    assert decoded.to_pylist() == [
        {
            "t": 3_723_004,
            "m": 1_000_007,
            "u": "00000000-0000-0000-0000-000000000005",
            "l": dt.datetime(2020, 1, 2, 3, 4, 5),
        }
    ]
