"""KEY_VALUE schemas, byte for byte: the two schemas a GET_SCHEMA_RESPONSE's KeyValue schema
carries (data and properties as Java's KeyValueSchemaInfo writes them), INLINE payloads split
into key and value, and both columns typed (INLINE and SEPARATED, across schema versions)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from support.schemas import EVOLVED, Half, key_value_schema

from pulsar_spark.arrow.key_values import KeyValueDecoder
from pulsar_spark.arrow.values import ValueSchema
from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.framing import FrameDecoder
from pulsar_spark.protocol.key_value import key_value_schemas, split_key_value
from pulsar_spark.protocol.schemas import SchemaInfo, schema_from_response

TOPIC = "persistent://public/default/kv"
AVRO_RECORD = b'{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}'

# GET_SCHEMA_RESPONSE (request 11, version 4): KeyValue, SEPARATED, key STRING (no data),
# value AVRO (AVRO_RECORD); schema_data = [0][] [66][AVRO_RECORD], 4-byte big-endian lengths.
KEY_VALUE_RESPONSE = bytes.fromhex(
    "000001500000014c08239a02c602080b22b7020a084b657956616c75651a4a00000000000000427b22747970"
    "65223a227265636f7264222c226e616d65223a2252222c226669656c6473223a5b7b226e616d65223a226122"
    "2c2274797065223a226c6f6e67227d5d7d200f2a1d0a106b762e656e636f64696e672e747970651209534550"
    "4152415445442a190a0f6b65792e736368656d612e6e616d651206537472696e672a190a0f6b65792e736368"
    "656d612e747970651206535452494e472a1b0a156b65792e736368656d612e70726f7065727469657312027b"
    "7d2a160a1176616c75652e736368656d612e6e616d651201522a190a1176616c75652e736368656d612e7479"
    "706512044156524f2a380a1776616c75652e736368656d612e70726f70657274696573121d7b225f5f616c77"
    "617973416c6c6f774e756c6c223a202274727565227d2a080000000000000004"
)
# GET_SCHEMA_RESPONSE (request 12, version 0): LocalDateTime, no data.
LOCAL_DATE_TIME_RESPONSE = bytes.fromhex(
    "0000002a0000002608239a0221080c22130a0d4c6f63616c4461746554696d651a0020132a080000000000000000"
)
V0, V1 = bytes(8), (1).to_bytes(8, "big")
KEY = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}


def _info(frame: bytes) -> SchemaInfo:
    (decoded,) = FrameDecoder().feed(frame)
    info = schema_from_response(decoded.command.getSchemaResponse, TOPIC)
    assert info is not None
    return info


def _kv(schema: pb.Schema, version: bytes) -> SchemaInfo:
    pairs = tuple((p.key, p.value) for p in schema.properties)
    return SchemaInfo(schema.type, schema.schema_data, schema.name, pairs, version)


def test_a_key_value_response_carries_both_schemas() -> None:
    info = _info(KEY_VALUE_RESPONSE)
    assert (info.type_name, info.name, info.version) == (
        "KeyValue",
        "KeyValue",
        (4).to_bytes(8, "big"),
    )
    halves = key_value_schemas(info, TOPIC)
    assert halves.separated is True
    version = (4).to_bytes(8, "big")
    assert halves.key == SchemaInfo(pb.Schema.String, b"", "String", (), version)
    assert halves.value == SchemaInfo(
        pb.Schema.Avro, AVRO_RECORD, "R", (("__alwaysAllowNull", "true"),), version
    )


def test_a_local_date_time_response() -> None:
    info = _info(LOCAL_DATE_TIME_RESPONSE)
    assert (info.type_name, info.name, info.data, info.version) == (
        "LocalDateTime",
        "LocalDateTime",
        b"",
        V0,
    )


def test_without_properties_halves_are_bytes_and_inline() -> None:
    """As Apache decodes a KeyValue schema a client registered without properties."""
    info = SchemaInfo(pb.Schema.KeyValue, bytes.fromhex("0000000161ffffffff"), "kv", (), V0)
    halves = key_value_schemas(info, TOPIC)
    assert halves.separated is False
    assert halves.key == SchemaInfo(pb.Schema.Type.Value("None"), b"a", "", (), V0)
    assert halves.value == SchemaInfo(pb.Schema.Type.Value("None"), b"", "", (), V0)


def test_an_unknown_encoding_or_type_is_refused() -> None:
    data = bytes(8)
    wrong = SchemaInfo(pb.Schema.KeyValue, data, "kv", (("kv.encoding.type", "MIXED"),), V0)
    with pytest.raises(SchemaError, match=r"kv: the KeyValue schema's kv.encoding.type is 'MIXED'"):
        key_value_schemas(wrong, TOPIC)
    odd = SchemaInfo(pb.Schema.KeyValue, data, "kv", (("key.schema.type", "UUID"),), V0)
    with pytest.raises(SchemaError, match=r"key.schema.type 'UUID' is not a schema type"):
        key_value_schemas(odd, TOPIC)


def test_inline_payloads_split_into_key_and_value() -> None:
    assert split_key_value(bytes.fromhex("0000000261620000000378797a")) == (b"ab", b"xyz")
    assert split_key_value(bytes.fromhex("ffffffff00000000")) == (None, b"")
    assert split_key_value(bytes.fromhex("00000000ffffffff")) == (b"", None)
    for cut in ("000000", "0000000561", "00000000", "00000000000000020a"):
        with pytest.raises(SchemaError, match="cut short"):
            split_key_value(bytes.fromhex(cut))


def test_inline_keys_and_values_typed_across_versions() -> None:
    """Version 0 has the oldest value schema; the latest (1) adds a field with a default."""
    old = key_value_schema(Half.avro(KEY), Half.avro(EVOLVED[0]), "INLINE")
    new = key_value_schema(Half.avro(KEY), Half.avro(EVOLVED[2]), "INLINE")
    schema = ValueSchema.of(TOPIC, _kv(new, V1))
    assert schema is not None and schema.key is not None and not schema.separated
    assert schema.read_schema_ddl().startswith(
        "key struct<`id`: bigint>, value struct<`id`: bigint, `label`: string>, topic string"
    )
    assert schema.arrow_schema().field("key").type == pa.struct([("id", pa.int64())])
    asked: list[bytes] = []

    def writers(version: bytes) -> SchemaInfo:
        asked.append(version)
        return _kv({V0: old, V1: new}[version], version)

    decoder = KeyValueDecoder(schema, writers)
    payloads = pa.array(
        [
            # key {id: 1}, value {id: 7} written with version 0
            bytes.fromhex("0000000102000000010e"),
            # key {id: -1}, value {id: 2, label: "x"} with version 1
            bytes.fromhex("0000000101000000030402" + "78"),
            # null key, value {id: 0} with version 0
            bytes.fromhex("ffffffff0000000100"),
            # key {id: 3}, null value, version 1
            bytes.fromhex("0000000106ffffffff"),
            None,  # a null payload: both null
        ],
        pa.binary(),
    )
    message_keys = pa.array([b"ignored", None, None, None, None], pa.binary())
    keys, values = decoder.decode_columns(message_keys, payloads, [V0, V1, V0, V1, V1])
    assert keys.to_pylist() == [{"id": 1}, {"id": -1}, None, {"id": 3}, None]
    assert values.to_pylist() == [
        {"id": 7, "label": "unlabelled"},
        {"id": 2, "label": "x"},
        {"id": 0, "label": "unlabelled"},
        None,
        None,
    ]
    assert sorted(asked) == [V0, V1]  # each version asked for once, for both halves


def test_separated_keys_are_the_message_keys() -> None:
    schema_pb = key_value_schema(Half("STRING", "String"), Half.avro(EVOLVED[0]), "SEPARATED")
    schema = ValueSchema.of(TOPIC, _kv(schema_pb, V0))
    assert schema is not None and schema.separated
    assert schema.read_schema_ddl().startswith("key string, value struct<`id`: bigint>,")
    decoder = KeyValueDecoder(schema, lambda version: _kv(schema_pb, version))
    keys, values = decoder.decode_columns(
        pa.array(["kä".encode(), None], pa.binary()),
        pa.array([bytes.fromhex("02"), bytes.fromhex("04")], pa.binary()),
        [V0, None],
    )
    assert keys.to_pylist() == ["kä", None]
    assert values.to_pylist() == [{"id": 1}, {"id": 2}]


def test_bytes_halves_stay_binary() -> None:
    schema_pb = key_value_schema(Half("BYTES"), Half("INT64", "INT64"), "INLINE")
    schema = ValueSchema.of(TOPIC, _kv(schema_pb, V0))
    assert schema is not None
    assert schema.read_schema_ddl().startswith("key binary, value bigint,")
    decoder = KeyValueDecoder(schema, lambda version: _kv(schema_pb, version))
    payload = bytes.fromhex("00000002abcd00000008ffffffffffffff85")
    keys, values = decoder.decode_columns(pa.nulls(1, pa.binary()), pa.array([payload]), [V0])
    assert (keys.to_pylist(), values.to_pylist()) == ([b"\xab\xcd"], [-123])


def test_a_cut_inline_payload_names_the_topic() -> None:
    schema_pb = key_value_schema(Half("STRING", "String"), Half("STRING", "String"), "INLINE")
    schema = ValueSchema.of(TOPIC, _kv(schema_pb, V0))
    assert schema is not None
    decoder = KeyValueDecoder(schema, lambda version: _kv(schema_pb, version))
    cut = pa.array([bytes.fromhex("00000001")], pa.binary())
    with pytest.raises(SchemaError, match=r"kv: a KeyValue payload of 4 bytes is cut short"):
        decoder.decode_columns(pa.nulls(1, pa.binary()), cut, [V0])
