"""Writing with a schema, without a broker: the bytes each schema writes, the Avro schema derived
from a Spark type, the checks of a given definition, and the schema a producer registers."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from pyspark.sql import types

from pulsar_spark.arrow.avro_encode import encode_avro_column
from pulsar_spark.arrow.value_encode import ColumnEncoding
from pulsar_spark.errors import ConfigurationError, SchemaError
from pulsar_spark.protocol import commands, compression, pb
from pulsar_spark.protocol.encode import BatchBuilder, OutgoingMessage, single_message_metadata
from pulsar_spark.protocol.key_value import split_key_value
from pulsar_spark.spark.avro_types import avro_schema_for, check_fits
from pulsar_spark.spark.write_schemas import write_schemas

UTC = dt.timezone.utc

PRIMITIVE_BYTES: list[tuple[str, pa.Array, list[bytes | None]]] = [
    ("string", pa.array(["h\u00e9", "", None]), [b"h\xc3\xa9", b"", None]),
    ("bytes", pa.array([b"\x00\xff", None], pa.binary()), [b"\x00\xff", None]),
    (
        "int64",
        pa.array([1, -1, None, 2**63 - 1], pa.int64()),
        [
            b"\x00\x00\x00\x00\x00\x00\x00\x01",
            b"\xff\xff\xff\xff\xff\xff\xff\xff",
            None,
            b"\x7f\xff\xff\xff\xff\xff\xff\xff",
        ],
    ),
    ("int64", pa.array([258], pa.int32()), [b"\x00\x00\x00\x00\x00\x00\x01\x02"]),
    ("int32", pa.array([-2, None], pa.int32()), [b"\xff\xff\xff\xfe", None]),
    ("double", pa.array([1.5, None], pa.float64()), [b"\x3f\xf8\x00\x00\x00\x00\x00\x00", None]),
    ("float", pa.array([-2.0], pa.float32()), [b"\xc0\x00\x00\x00"]),
    ("boolean", pa.array([True, False, None]), [b"\x01", b"\x00", None]),
]


@pytest.mark.parametrize(
    ("name", "column", "expected"),
    PRIMITIVE_BYTES,
    ids=[f"{p[0]}-{i}" for i, p in enumerate(PRIMITIVE_BYTES)],
)
def test_primitive_schemas_write_java_bytes(
    name: str, column: pa.Array, expected: list[bytes | None]
) -> None:
    encoded = ColumnEncoding(name).encode(column, "column 'value'")
    assert encoded.type == pa.binary()
    assert encoded.to_pylist() == expected


def test_primitive_encoding_of_a_sliced_column() -> None:
    column = pa.array([None, 5, None, 7], pa.int64()).slice(1, 3)
    assert ColumnEncoding("int64").encode(column, "v").to_pylist() == [
        b"\x00\x00\x00\x00\x00\x00\x00\x05",
        None,
        b"\x00\x00\x00\x00\x00\x00\x00\x07",
    ]


RECORD = types.StructType(
    [
        types.StructField("id", types.LongType(), False),
        types.StructField("name", types.StringType()),
        types.StructField("tags", types.ArrayType(types.StringType(), False)),
        types.StructField("attrs", types.MapType(types.StringType(), types.IntegerType())),
        types.StructField("at", types.TimestampType()),
        types.StructField("local", types.TimestampNTZType()),
        types.StructField("day", types.DateType()),
        types.StructField("price", types.DecimalType(5, 2)),
        types.StructField("blob", types.BinaryType()),
        types.StructField(
            "place",
            types.StructType(
                [
                    types.StructField("city", types.StringType(), False),
                    types.StructField("zip", types.IntegerType()),
                ]
            ),
        ),
    ]
)


def test_avro_schema_derived_from_a_struct() -> None:
    assert avro_schema_for(RECORD, "column 'value'") == {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["null", "string"], "default": None},
            {
                "name": "tags",
                "type": ["null", {"type": "array", "items": "string"}],
                "default": None,
            },
            {
                "name": "attrs",
                "type": ["null", {"type": "map", "values": ["null", "int"]}],
                "default": None,
            },
            {
                "name": "at",
                "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}],
                "default": None,
            },
            {
                "name": "local",
                "type": ["null", {"type": "long", "logicalType": "local-timestamp-micros"}],
                "default": None,
            },
            {
                "name": "day",
                "type": ["null", {"type": "int", "logicalType": "date"}],
                "default": None,
            },
            {
                "name": "price",
                "type": [
                    "null",
                    {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
                ],
                "default": None,
            },
            {"name": "blob", "type": ["null", "bytes"], "default": None},
            {
                "name": "place",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "namespace": "topLevelRecord",
                        "name": "place",
                        "fields": [
                            {"name": "city", "type": "string"},
                            {"name": "zip", "type": ["null", "int"], "default": None},
                        ],
                    },
                ],
                "default": None,
            },
        ],
    }


ROW: dict[str, Any] = {
    "id": 1,
    "name": None,
    "tags": ["a"],
    "attrs": [("k", 2), ("n", None)],
    "at": dt.datetime(1970, 1, 1, 0, 0, 1, 5, tzinfo=UTC),
    "local": dt.datetime(1970, 1, 2),
    "day": dt.date(1970, 1, 3),
    "price": decimal.Decimal("-1.50"),
    "blob": b"\x01",
    "place": {"city": "Oslo", "zip": None},
}


def _record_column() -> pa.Array:
    arrow = pa.struct(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int32())),
            ("at", pa.timestamp("us", tz="UTC")),
            ("local", pa.timestamp("us")),
            ("day", pa.date32()),
            ("price", pa.decimal128(5, 2)),
            ("blob", pa.binary()),
            ("place", pa.struct([("city", pa.string()), ("zip", pa.int32())])),
        ]
    )
    return pa.array([ROW, None], arrow)


def test_avro_record_bytes() -> None:
    encoding = ColumnEncoding("avro", avro_schema_for(RECORD, "v"))
    encoded = encoding.encode(_record_column(), "column 'value'").to_pylist()
    assert encoded == [
        b"\x02"  # id 1
        b"\x00"  # name: null branch
        b"\x02\x02\x02a\x00"  # tags: branch 1, one item "a", end
        b"\x02\x04\x02k\x02\x04\x02n\x00\x00"  # attrs: k -> 2, n -> null, end
        b"\x02\x8a\x89\x7a"  # at: 1,000,005 µs
        b"\x02\x80\x80\xbb\xdd\x83\x05"  # local: 86,400,000,000 µs
        b"\x02\x04"  # day 2
        b"\x02\x04\xff\x6a"  # price: -150 as two bytes
        b"\x02\x02\x01"  # blob
        b"\x02\x08Oslo\x00",  # place: city, zip null
        None,
    ]


def test_json_record_text() -> None:
    encoding = ColumnEncoding("json", avro_schema_for(RECORD, "v"))
    encoded = encoding.encode(_record_column(), "column 'value'").to_pylist()
    assert encoded == [
        b'{"id":1,"name":null,"tags":["a"],"attrs":{"k":2,"n":null},"at":1000005,'
        b'"local":86400000000,"day":2,"price":"-1.50","blob":"AQ==","place":{"city":"Oslo","zip":null}}',
        None,
    ]


def test_json_timestamp_millis_of_a_given_schema() -> None:
    schema = {"type": "long", "logicalType": "timestamp-millis"}
    column = pa.array(
        [dt.datetime(1970, 1, 1, 0, 0, 1, 999, tzinfo=UTC)], pa.timestamp("us", "UTC")
    )
    assert ColumnEncoding("json", schema).encode(column, "v").to_pylist() == [b"1000"]


def test_a_null_where_the_schema_takes_none_names_the_field() -> None:
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    column = pa.array([{"n": 1}, {"n": None}], pa.struct([("n", pa.int64())]))
    with pytest.raises(SchemaError) as info:
        ColumnEncoding("avro", schema).encode(column, "column 'value'")
    assert str(info.value) == (
        "column 'value'.n: a row has a null where the Avro schema it is written with, long, "
        "takes no null"
    )


def test_a_row_the_row_encoder_cannot_write_names_the_column() -> None:
    fields = [{"name": "b", "type": "long"}, {"name": "a", "type": "long"}]
    schema = {"type": "record", "name": "R", "fields": fields}  # not the column's order
    column = pa.array([{"a": 1, "b": None}], pa.struct([("a", pa.int64()), ("b", pa.int64())]))
    with pytest.raises(SchemaError, match=r"^column 'value': a row does not fit the Avro schema"):
        ColumnEncoding("avro", schema).encode(column, "column 'value'")


COLUMNAR_TYPE = pa.struct(
    [
        ("i8", pa.int8()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("ok", pa.bool_()),
        ("text", pa.string()),
        ("raw", pa.binary()),
        ("at", pa.timestamp("us", tz="UTC")),
        ("naive", pa.timestamp("us")),
        ("day", pa.date32()),
        ("price", pa.decimal128(38, 2)),
        ("list", pa.list_(pa.list_(pa.int64()))),
        ("map", pa.map_(pa.string(), pa.struct([("x", pa.string())]))),
        ("inner", pa.struct([("deep", pa.struct([("v", pa.int32())]))])),
    ]
)
COLUMNAR_ROWS: list[dict[str, Any] | None] = [
    {
        "i8": -128,
        "i32": 2**31 - 1,
        "i64": -(2**63),
        "f32": 1.5,
        "f64": -0.0,
        "ok": True,
        "text": "\u65e5\u672c" * 100,
        "raw": b"\x00" * 300,
        "at": dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        "naive": dt.datetime(2262, 1, 1),
        "day": dt.date(1, 1, 1),
        "price": decimal.Decimal("99999999999999999999999999999999999.99"),
        "list": [[1, -1], [], None, [2**62]],
        "map": [("a", {"x": "y"}), ("b", None), ("", {"x": None})],
        "inner": {"deep": {"v": -64}},
    },
    None,
    {
        "i8": None,
        "i32": 0,
        "i64": 63,
        "f32": None,
        "f64": float("inf"),
        "ok": False,
        "text": "",
        "raw": None,
        "at": None,
        "naive": None,
        "day": None,
        "price": decimal.Decimal("-1.29"),
        "list": [],
        "map": [],
        "inner": {"deep": None},
    },
    dict.fromkeys(COLUMNAR_TYPE.names),
]


def _avro_type(data_type: pa.DataType) -> Any:
    """The Spark type's derivation, through the Spark type of ``data_type``."""
    from pyspark.sql.pandas.types import from_arrow_type

    return avro_schema_for(from_arrow_type(data_type), "v")


@pytest.mark.parametrize("millis", [False, True], ids=["micros", "millis"])
def test_columnar_avro_writes_what_fastavro_writes(millis: bool) -> None:
    schema = _avro_type(COLUMNAR_TYPE)
    if millis:
        for field in schema["fields"]:
            if field["name"] in ("at", "naive"):
                field["type"][1]["logicalType"] = field["type"][1]["logicalType"].replace(
                    "micros", "millis"
                )
    column = pa.array([COLUMNAR_ROWS[0], *COLUMNAR_ROWS], COLUMNAR_TYPE).slice(1)  # sliced
    columnar = encode_avro_column(column, schema, "v")
    assert columnar is not None
    parsed = fastavro.parse_schema(schema)
    expected = []
    for row in column.to_pylist():
        if row is None:
            expected.append(None)
            continue
        row["map"] = None if row["map"] is None else dict(row["map"])
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        expected.append(out.getvalue())
    assert columnar.to_pylist() == expected


def test_columnar_avro_decimals_take_as_few_bytes_as_java() -> None:
    values = ["0", "1.27", "1.28", "-1.28", "-1.29", "-0.01", "2.55", "-2.56", "-99999999.99"]
    column = pa.array([decimal.Decimal(v) for v in values], pa.decimal128(10, 2))
    schema = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    encoded = encode_avro_column(column, schema, "v")
    assert encoded is not None
    assert [v.hex() for v in encoded.to_pylist()] == [
        "0200",
        "027f",
        "040080",
        "0280",  # -128 in one byte, as Java writes it (fastavro writes ff80: the same value)
        "04ff7f",
        "02ff",
        "0400ff",
        "04ff00",
        "0afdabf41c01",
    ]


def test_columnar_avro_enums_and_fixed() -> None:
    enum = {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}
    fixed = {"type": "fixed", "name": "F", "size": 2}
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "e", "type": ["null", enum]}, {"name": "f", "type": fixed}],
    }
    arrow = pa.struct([("e", pa.string()), ("f", pa.binary())])
    rows = [{"e": "C", "f": b"\x00\x01"}, {"e": None, "f": b"zz"}, {"e": "A", "f": b"ab"}]
    encoded = encode_avro_column(pa.array(rows, arrow).slice(0), schema, "v")
    assert encoded is not None
    assert encoded.to_pylist() == [b"\x02\x04\x00\x01", b"\x00zz", b"\x02\x00ab"]
    with pytest.raises(SchemaError) as info:
        encode_avro_column(pa.array([{"e": "D", "f": b"ab"}], arrow), schema, "column 'value'")
    assert str(info.value) == (
        "column 'value'.e: 'D' is not a symbol of the Avro enum it is written as (its symbols: "
        "A, B, C)"
    )
    with pytest.raises(SchemaError) as info:
        encode_avro_column(pa.array([{"e": "A", "f": b"abc"}], arrow), schema, "column 'value'")
    assert str(info.value) == (
        "column 'value'.f: a value is not 2 bytes long, as the Avro fixed type says"
    )


def test_columnar_avro_of_a_sliced_column_and_a_top_level_long() -> None:
    column = pa.array([5, None, -3, 64], pa.int64()).slice(1, 3)
    encoded = encode_avro_column(column, "long", "v")
    assert encoded is not None
    assert encoded.to_pylist() == [None, b"\x05", b"\x80\x01"]
    rows = pa.array([[1], [2, 3], None, []], pa.large_list(pa.int32())).slice(1)
    lists = encode_avro_column(rows, ["null", {"type": "array", "items": "int"}], "v")
    assert lists is not None
    assert lists.to_pylist() == [b"\x02\x04\x04\x06\x00", None, b"\x02\x00"]  # null: no value


def test_columnar_avro_leaves_what_it_does_not_cover_to_the_row_encoder() -> None:
    column = pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))
    decimal_type = {"type": "bytes", "logicalType": "decimal", "precision": 3, "scale": 1}
    defaulted = {"name": "b", "type": "long", "default": 0}
    for schema in (
        decimal_type,
        {"type": "enum", "name": "E", "symbols": ["A"]},  # a long column is no enum
        ["null", "long", "string"],
        {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}, defaulted]},
    ):
        assert encode_avro_column(column, schema, "v") is None


GIVEN = {
    "type": "record",
    "name": "Event",
    "namespace": "x",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "label", "type": "string", "default": "none"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "again", "type": ["null", "x.Kind"]},
    ],
}


def test_a_given_schema_takes_widened_and_named_types() -> None:
    struct = types.StructType(
        [
            types.StructField("id", types.IntegerType()),
            types.StructField("kind", types.StringType()),
            types.StructField("again", types.StringType()),
        ]
    )
    check_fits(struct, GIVEN, "column 'value'")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            [types.StructField("id", types.StringType())],
            "column 'value'.id has type string, which cannot be written as the Avro type \"long\"",
        ),
        (
            [types.StructField("kind", types.StringType())],
            "column 'value'.id: the Avro record 'Event' has this field without a default, and the "
            "DataFrame does not have it",
        ),
        (
            [
                types.StructField("id", types.LongType()),
                types.StructField("kind", types.StringType()),
                types.StructField("x", types.LongType()),
            ],
            "column 'value'.x is not a field of the Avro record 'Event' (its fields: id, label, "
            "kind, again)",
        ),
        (
            [
                types.StructField("id", types.LongType()),
                types.StructField("kind", types.LongType()),
            ],
            "column 'value'.kind has type bigint, which cannot be written as the Avro type "
            '{"type":"enum","name":"Kind","symbols":["A","B"]}',
        ),
    ],
    ids=["type", "missing", "extra", "enum"],
)
def test_a_given_schema_refuses_naming_the_field(
    fields: list[types.StructField], message: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_fits(types.StructType(fields), GIVEN, "column 'value'")
    assert str(info.value) == message


def test_key_value_schema_layout() -> None:
    schema = types.StructType(
        [types.StructField("key", types.StringType()), types.StructField("value", types.LongType())]
    )
    schemas = write_schemas(schema, "int64", "string", {})
    assert schemas is not None
    registered = schemas.producer_schema("persistent://t/n/topic-partition-3")
    assert registered == pb.Schema(
        name="t/n/topic",
        type=pb.Schema.Type.Value("KeyValue"),
        schema_data=b"\x00\x00\x00\x00\x00\x00\x00\x00",
        properties=[
            pb.KeyValue(key="key.schema.name", value="STRING"),
            pb.KeyValue(key="key.schema.type", value="STRING"),
            pb.KeyValue(key="key.schema.properties", value="{}"),
            pb.KeyValue(key="value.schema.name", value="INT64"),
            pb.KeyValue(key="value.schema.type", value="INT64"),
            pb.KeyValue(key="value.schema.properties", value="{}"),
            pb.KeyValue(key="kv.encoding.type", value="SEPARATED"),
        ],
    )


def test_key_value_schema_data_holds_both_avro_schemas() -> None:
    key = types.StructType([types.StructField("k", types.LongType(), False)])
    schema = types.StructType(
        [types.StructField("key", key), types.StructField("value", types.StringType())]
    )
    schemas = write_schemas(schema, "json", "avro", {})
    assert schemas is not None
    registered = schemas.producer_schema("persistent://public/default/t")
    assert registered is not None
    key_data, value_data = split_key_value(registered.schema_data)
    assert key_data is not None
    assert json.loads(key_data) == {
        "type": "record",
        "name": "topLevelRecord",
        "fields": [{"name": "k", "type": "long"}],
    }
    assert value_data == b'"string"'
    assert registered.schema_data[:4] == len(key_data).to_bytes(4, "big")


def test_bytes_registers_no_schema_and_avro_registers_its_json() -> None:
    schema = types.StructType([types.StructField("value", types.BinaryType())])
    assert write_schemas(schema, "bytes", None, {}) is None
    schema = types.StructType([types.StructField("value", types.LongType(), False)])
    schemas = write_schemas(schema, "avro", None, {})
    assert schemas is not None
    assert schemas.producer_schema("persistent://public/default/t") == pb.Schema(
        name="public/default/t", type=pb.Schema.Type.Value("Avro"), schema_data=b'"long"'
    )


def test_producer_command_carries_the_schema() -> None:
    schema = pb.Schema(
        name="public/default/t", type=pb.Schema.Type.Value("String"), schema_data=b""
    )
    frame = commands.producer(
        topic="persistent://public/default/t",
        producer_id=1,
        request_id=2,
        producer_name="p",
        schema=schema,
    )
    command = pb.BaseCommand.FromString(frame[8:])
    assert command.producer.schema == schema


def test_schema_version_is_stamped_on_batches_and_single_messages() -> None:
    version = (3).to_bytes(8, "big")
    builder = BatchBuilder()
    builder.add(OutgoingMessage(b"a"), 0)
    batch, _ = builder.build(
        producer_name="p", publish_time=1, codec=compression.NONE, schema_version=version
    )
    single = single_message_metadata(
        OutgoingMessage(b"b"),
        producer_name="p",
        sequence_id=1,
        publish_time=1,
        schema_version=version,
    )
    assert (batch.schema_version, single.schema_version) == (version, version)
    builder.add(OutgoingMessage(b"c"), 2)
    unversioned, _ = builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    assert not unversioned.HasField("schema_version")
