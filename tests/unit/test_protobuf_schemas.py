"""PROTOBUF_NATIVE schemas: the root message of the schema's file descriptors as a Spark struct,
and payload bytes (byte fixtures of ``test.Reading``) decoded to exactly its values."""

from __future__ import annotations

import base64
import decimal
import json
from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2
from support.protobuf_messages import FILES, READING_SPARK, Place, Reading, schema_data

from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo

TOPIC = "persistent://public/default/proto"

# test.Reading{name: "a", count: -2**40, ratio: 0.25, ok: true, note: "n", tags: [x, y],
# counts: {k: 7}, color: BLUE, place: {Oslo, 150}, places: [{Lima}, {}], blob: 00ff,
# big: 2**64-1, small: -3, ratio32: 1.5, unsigned: 2**32-1}
FULL = bytes.fromhex(
    "0a0161108080808080e0ffffff0119000000000000d03f20012a016e3201783201793a050a016b100740014a"
    "090a044f736c6f10960152060a044c696d6152005a0200ff60ffffffffffffffffff016805750000c03f78ff"
    "ffffff0f"
)
EMPTY = b""  # every field at its default, none set
ODD = bytes.fromhex("2a004005")  # note: "" (set, so not null), color: 5 (no such value)

DEFAULTS: dict[str, Any] = {
    "name": "",
    "count": 0,
    "ratio": 0.0,
    "ok": False,
    "note": None,
    "tags": [],
    "counts": [],
    "color": "RED",
    "place": None,
    "places": [],
    "blob": b"",
    "big": decimal.Decimal(0),
    "small": 0,
    "ratio32": 0.0,
    "unsigned": 0,
}


def _schema(data: bytes) -> ValueSchema:
    info = SchemaInfo(pb.Schema.Type.Value("ProtobufNative"), data, "Reading", (), bytes(8))
    schema = ValueSchema.of(TOPIC, info)
    assert schema is not None
    return schema


def test_the_root_message_maps_to_a_struct() -> None:
    schema = _schema(schema_data())
    place = pa.struct([("city", pa.string()), ("zip", pa.int32())])
    assert schema.arrow_type() == pa.struct(
        [
            ("name", pa.string()),
            ("count", pa.int64()),
            ("ratio", pa.float64()),
            ("ok", pa.bool_()),
            ("note", pa.string()),
            ("tags", pa.list_(pa.field("element", pa.string()))),
            ("counts", pa.map_(pa.string(), pa.int64())),
            ("color", pa.string()),
            ("place", place),
            ("places", pa.list_(pa.field("element", place))),
            ("blob", pa.binary()),
            ("big", pa.decimal128(20, 0)),
            ("small", pa.int32()),
            ("ratio32", pa.float32()),
            ("unsigned", pa.int64()),
        ]
    )
    ddl = schema.spark_type().replace("`", "").replace(": ", ":").replace(", ", ",")
    assert ddl == READING_SPARK


def test_payloads_decode_exactly() -> None:
    assert Reading.FromString(FULL).SerializeToString() == FULL  # the fixture is a Reading
    schema = _schema(schema_data())
    values = pa.array([FULL, EMPTY, ODD, None], pa.binary())
    decoded = ValueDecoder(schema, lambda v: None).decode(values, [None] * 4)
    assert decoded.type == schema.arrow_type()
    full, empty, odd, null = decoded.to_pylist()
    assert full == {
        "name": "a",
        "count": -(2**40),
        "ratio": 0.25,
        "ok": True,
        "note": "n",
        "tags": ["x", "y"],
        "counts": [("k", 7)],
        "color": "BLUE",
        "place": {"city": "Oslo", "zip": 150},
        "places": [{"city": "Lima", "zip": 0}, {"city": "", "zip": 0}],
        "blob": b"\x00\xff",
        "big": decimal.Decimal(2**64 - 1),
        "small": -3,
        "ratio32": 1.5,
        "unsigned": 2**32 - 1,
    }
    assert empty == DEFAULTS
    assert odd == dict(DEFAULTS, note="", color="5")
    assert null is None


def test_a_payload_that_is_not_the_message_names_the_topic() -> None:
    decoder = ValueDecoder(_schema(schema_data()), lambda v: None)
    with pytest.raises(SchemaError, match=r"proto: a value is not a test.Reading message"):
        decoder.decode(pa.array([bytes.fromhex("0a05")], pa.binary()), [None])


def test_schemas_without_a_mapping_are_refused() -> None:
    with pytest.raises(SchemaError, match=r"proto: the ProtobufNative schema is not the JSON"):
        _schema(b"{}")
    with pytest.raises(
        SchemaError, match=r"files import \['test/place.proto'\], which it does not carry"
    ):
        _schema(schema_data(FILES[1:]))
    missing = json.loads(schema_data())
    missing["rootMessageTypeName"] = "test.Nothing"
    with pytest.raises(SchemaError, match=r"has no message 'test.Nothing'"):
        _schema(json.dumps(missing).encode())

    loop = descriptor_pb2.FileDescriptorProto(name="test/loop.proto", package="test")
    node = loop.message_type.add(name="Node")
    node.field.add(
        name="next",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
        type_name=".test.Node",
    )
    files = descriptor_pb2.FileDescriptorSet(file=[loop]).SerializeToString()
    data = {
        "fileDescriptorSet": base64.b64encode(files).decode(),
        "rootMessageTypeName": "test.Node",
    }
    with pytest.raises(SchemaError, match=r"test.Node contains itself"):
        _schema(json.dumps(data).encode())


def test_place_is_its_own_file() -> None:
    """The root's file imports another; the schema carries both, imported one first or not."""
    schema = _schema(schema_data(FILES[::-1]))
    payload = Reading(place=Place(city="Rome")).SerializeToString()
    (row,) = ValueDecoder(schema, lambda v: None).decode(pa.array([payload]), [None]).to_pylist()
    assert row == dict(DEFAULTS, place={"city": "Rome", "zip": 0})
