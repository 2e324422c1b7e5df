"""GET_SCHEMA and its response, byte for byte: field numbers as Apache brokers use them."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.errors import AuthorizationError
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.connection import ClientConnection, Response
from pulsar_spark.protocol.framing import FrameDecoder, encode_command
from pulsar_spark.protocol.schemas import schema_from_response

AVRO_RECORD = b'{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}'

# GET_SCHEMA_RESPONSE frames: [total size][command size][BaseCommand type=35, field 35].
AVRO_RESPONSE = bytes.fromhex(
    "0000007b0000007708239a0272080722640a01521a427b2274797065223a227265636f7264222c226e616d6522"
    "3a2252222c226669656c6473223a5b7b226e616d65223a2261222c2274797065223a226c6f6e67227d5d7d2004"
    "2a190a115f5f616c77617973416c6c6f774e756c6c1204747275652a080000000000000003"
)
JSON_RESPONSE = bytes.fromhex(
    "000000600000005c08239a0257080822490a01521a427b2274797065223a227265636f7264222c226e616d6522"
    "3a2252222c226669656c6473223a5b7b226e616d65223a2261222c2274797065223a226c6f6e67227d5d7d2002"
    "2a080000000000000000"
)
STRING_RESPONSE = bytes.fromhex(
    "0000001d0000001908239a0214080922060a001a0020012a080000000000000001"
)
NO_SCHEMA_RESPONSE = bytes.fromhex(
    "0000002b0000002708239a0222080a100b1a1c546f706963206e6f7420666f756e64206f72206e6f2d736368656d61"
)
REFUSED_RESPONSE = bytes.fromhex("0000001a0000001608239a0211080b10041a0b6e6f7420616c6c6f776564")


def _response(frame: bytes) -> pb.CommandGetSchemaResponse:
    (decoded,) = FrameDecoder().feed(frame)
    assert decoded.command.type == pb.BaseCommand.GET_SCHEMA_RESPONSE
    return decoded.command.getSchemaResponse


def test_get_schema_latest_and_by_version() -> None:
    latest = commands.get_schema(topic="persistent://public/default/t", request_id=3)
    versioned = commands.get_schema(
        topic="persistent://public/default/t", request_id=3, schema_version=(2).to_bytes(8, "big")
    )
    assert versioned == bytes.fromhex(
        "0000003400000030082292022b0803121d70657273697374656e743a2f2f7075626c69632f64656661756c"
        "742f741a080000000000000002"
    )
    # The same command without field 3 (0x1a, 8 bytes): 10 bytes shorter.
    assert len(latest) == len(versioned) - 10
    assert b"\x1a\x08" not in latest[-12:]


def test_avro_response() -> None:
    info = schema_from_response(_response(AVRO_RESPONSE), "t")
    assert info is not None
    assert info.type == pb.Schema.Avro
    assert info.type_name == "Avro"
    assert info.data == AVRO_RECORD
    assert info.name == "R"
    assert info.properties == (("__alwaysAllowNull", "true"),)
    assert info.version == (3).to_bytes(8, "big")


def test_json_response() -> None:
    info = schema_from_response(_response(JSON_RESPONSE), "t")
    assert info is not None
    assert (info.type_name, info.data, info.version) == ("Json", AVRO_RECORD, bytes(8))


def test_string_response() -> None:
    info = schema_from_response(_response(STRING_RESPONSE), "t")
    assert info is not None
    assert (info.type_name, info.data, info.properties) == ("String", b"", ())
    assert info.version == (1).to_bytes(8, "big")


def test_topic_without_schema_is_none() -> None:
    assert schema_from_response(_response(NO_SCHEMA_RESPONSE), "t") is None


def test_other_errors_raise_with_the_topic() -> None:
    with pytest.raises(AuthorizationError, match="GET_SCHEMA t: not allowed"):
        schema_from_response(_response(REFUSED_RESPONSE), "t")


def test_connection_completes_the_request() -> None:
    connection = ClientConnection()
    connection.data_to_send()
    connected = pb.CommandConnected(server_version="broker-1", protocol_version=19)
    connection.receive_data(
        encode_command(pb.BaseCommand(type=pb.BaseCommand.CONNECTED, connected=connected))
    )
    request_id, _ = connection.start_request(
        lambda rid: commands.get_schema(topic="t", request_id=rid), "GET_SCHEMA t"
    )
    command = pb.BaseCommand(
        type=pb.BaseCommand.GET_SCHEMA_RESPONSE,
        getSchemaResponse=pb.CommandGetSchemaResponse(request_id=request_id),
    )
    events = connection.receive_data(encode_command(command))
    assert events == [Response(request_id, command)]


# GET_SCHEMA_RESPONSE frames of the date and time schemas: name, type, no data, version.
DATE_AND_TIME_RESPONSES = {
    "Date": "000000210000001d08239a02180814220a0a04446174651a00200c2a080000000000000000",
    "Time": "000000210000001d08239a02180815220a0a0454696d651a00200d2a080000000000000001",
    "Timestamp": "000000260000002208239a021d0816220f0a0954696d657374616d701a00200e2a08000000000000"
    "0002",
    "Instant": "000000240000002008239a021b0817220d0a07496e7374616e741a0020102a080000000000000003",
    "LocalDate": "000000260000002208239a021d0818220f0a094c6f63616c446174651a0020112a08000000000000"
    "0004",
    "LocalTime": "000000260000002208239a021d0819220f0a094c6f63616c54696d651a0020122a08000000000000"
    "0005",
}
# GET_SCHEMA_RESPONSE (version 2): ProtobufNative, data the JSON of a base64 FileDescriptorSet
# of tiny.proto (proto3, package t, message Tiny { int64 id = 1; }) and the root's names.
PROTOBUF_NATIVE_RESPONSE = bytes.fromhex(
    "000000bd000000b908239a02b301081e22a4010a0454696e791a99017b2266696c6544657363726970746f72"
    "536574223a224369734b436e5270626e6b7563484a76644738534158516945676f4556476c756552494b4367"
    "4a705a4267424941456f4132494763484a766447387a222c22726f6f744d657373616765547970654e616d65"
    "223a22742e54696e79222c22726f6f7446696c6544657363726970746f724e616d65223a2274696e792e7072"
    "6f746f227d20142a080000000000000002"
)


@pytest.mark.parametrize("kind", list(DATE_AND_TIME_RESPONSES))
def test_date_and_time_responses(kind: str) -> None:
    info = schema_from_response(_response(bytes.fromhex(DATE_AND_TIME_RESPONSES[kind])), "t")
    assert info is not None
    version = list(DATE_AND_TIME_RESPONSES).index(kind)
    assert (info.type_name, info.name, info.data, info.properties) == (kind, kind, b"", ())
    assert info.version == version.to_bytes(8, "big")


def test_protobuf_native_response() -> None:
    info = schema_from_response(_response(PROTOBUF_NATIVE_RESPONSE), "t")
    assert info is not None
    assert (info.type_name, info.name, info.version) == ("ProtobufNative", "Tiny", bytes(7) + b"\2")
    assert info.data.startswith(b'{"fileDescriptorSet":"CisKCnRpbnkucHJvdG8SAXQi')
    schema = ValueSchema.of("t", info)
    assert schema is not None and schema.spark_type() == "struct<`id`: bigint>"
    payloads = pa.array([bytes.fromhex("0807"), b"", None], pa.binary())
    decoded = ValueDecoder(schema, lambda v: None).decode(payloads, [None] * 3)
    assert decoded.to_pylist() == [{"id": 7}, {"id": 0}, None]
