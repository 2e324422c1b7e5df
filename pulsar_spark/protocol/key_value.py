"""KEY_VALUE schemas: the two schemas one carries, and the two halves of an INLINE payload.

A KEY_VALUE schema's data is the key schema's data and the value schema's data, each after its
length as a 4-byte big-endian signed number (the same layout an INLINE message uses for its key
and value, where a length of -1 stands for null). Its properties name each half's type, name and
properties and the encoding:

=========================  ===============================================================
property                   meaning
=========================  ===============================================================
``key.schema.type``        the key schema's type as Java names it (``AVRO``, ``STRING``,
                           ``INT64``...); absent: ``BYTES``
``key.schema.name``        the key schema's name
``key.schema.properties``  the key schema's properties, a JSON object
``value.schema.*``         the same three for the value
``kv.encoding.type``       ``INLINE`` (absent or empty: INLINE) or ``SEPARATED``
=========================  ===============================================================

INLINE: the payload holds both halves. SEPARATED: the payload is the value alone, and the key
is the message key (base64 text with ``partition_key_b64_encoded``, as Java producers send it).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo

_LENGTH = struct.Struct(">i")

# Java's SchemaType names -> the wire's Schema.Type names (BYTES is the wire's None).
_JAVA_NAMES: dict[str, str] = {
    "NONE": "None",
    "BYTES": "None",
    "STRING": "String",
    "JSON": "Json",
    "PROTOBUF": "Protobuf",
    "AVRO": "Avro",
    "BOOLEAN": "Bool",
    "INT8": "Int8",
    "INT16": "Int16",
    "INT32": "Int32",
    "INT64": "Int64",
    "FLOAT": "Float",
    "DOUBLE": "Double",
    "DATE": "Date",
    "TIME": "Time",
    "TIMESTAMP": "Timestamp",
    "KEY_VALUE": "KeyValue",
    "INSTANT": "Instant",
    "LOCAL_DATE": "LocalDate",
    "LOCAL_TIME": "LocalTime",
    "LOCAL_DATE_TIME": "LocalDateTime",
    "PROTOBUF_NATIVE": "ProtobufNative",
}


@dataclass(frozen=True, slots=True)
class KeyValueSchemas:
    """The halves of a KEY_VALUE schema (each with the KEY_VALUE schema's version)."""

    key: SchemaInfo
    value: SchemaInfo
    separated: bool


def key_value_schemas(info: SchemaInfo, topic: str) -> KeyValueSchemas:
    """The key and value schemas ``info`` (a KEY_VALUE schema of ``topic``) carries."""
    properties = dict(info.properties)
    try:
        key_data, value_data = split_key_value(info.data)
    except SchemaError as exc:
        raise SchemaError(f"topic {topic}: the KeyValue schema's data is cut short") from exc
    encoding = properties.get("kv.encoding.type") or "INLINE"
    if encoding not in ("INLINE", "SEPARATED"):
        raise SchemaError(
            f"topic {topic}: the KeyValue schema's kv.encoding.type is {encoding!r}, "
            "not INLINE or SEPARATED"
        )
    return KeyValueSchemas(
        key=_half(info, "key", key_data or b"", properties, topic),
        value=_half(info, "value", value_data or b"", properties, topic),
        separated=encoding == "SEPARATED",
    )


def _half(
    info: SchemaInfo, half: str, data: bytes, properties: dict[str, str], topic: str
) -> SchemaInfo:
    java_name = properties.get(f"{half}.schema.type") or "BYTES"
    if java_name not in _JAVA_NAMES:
        raise SchemaError(
            f"topic {topic}: the KeyValue schema's {half}.schema.type {java_name!r} is not "
            "a schema type"
        )
    own = properties.get(f"{half}.schema.properties") or "{}"
    try:
        pairs = json.loads(own)
    except ValueError as exc:
        raise SchemaError(
            f"topic {topic}: the KeyValue schema's {half}.schema.properties is not JSON"
        ) from exc
    return SchemaInfo(
        type=pb.Schema.Type.Value(_JAVA_NAMES[java_name]),
        data=data,
        name=properties.get(f"{half}.schema.name", ""),
        properties=tuple((str(k), str(v)) for k, v in pairs.items()),
        version=info.version,
    )


def split_key_value(payload: bytes) -> tuple[bytes | None, bytes | None]:
    """The key and the value of an INLINE payload (None for a length of -1)."""
    halves: list[bytes | None] = []
    at = 0
    for _ in range(2):
        if at + 4 > len(payload):
            raise SchemaError(f"a KeyValue payload of {len(payload)} bytes is cut short")
        (length,) = _LENGTH.unpack_from(payload, at)
        at += 4
        if length == -1:
            halves.append(None)
            continue
        if length < 0 or at + length > len(payload):
            raise SchemaError(f"a KeyValue payload of {len(payload)} bytes is cut short")
        halves.append(payload[at : at + length])
        at += length
    return halves[0], halves[1]


def split_all(
    payloads: Iterable[bytes | None],
) -> tuple[list[bytes | None], list[bytes | None]]:
    """:func:`split_key_value` of each payload: (keys, values); a null payload gives nulls."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    for payload in payloads:
        key, value = (None, None) if payload is None else split_key_value(payload)
        keys.append(key)
        values.append(value)
    return keys, values


def join_key_value(key: bytes, value: bytes) -> bytes:
    """The layout :func:`split_key_value` reads: each half after its 4-byte length."""
    return _LENGTH.pack(len(key)) + key + _LENGTH.pack(len(value)) + value


def java_type_name(schema_type: int) -> str:
    """Java's name of a pb.Schema.Type value (``BYTES`` for None), as ``*.schema.type`` holds it."""
    wire = pb.Schema.Type.Name(schema_type)  # type: ignore[arg-type]
    return "BYTES" if wire == "None" else next(j for j, w in _JAVA_NAMES.items() if w == wire)
