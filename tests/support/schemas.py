"""Avro schemas and encodings the schema tests share."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass, field
from typing import Any

import fastavro

from pulsar_spark.protocol import pb

EVOLVED: list[dict[str, Any]] = [
    {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}]},
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "label", "type": "string", "default": "unlabelled"},
            {"name": "weight", "type": "double"},
        ],
    },
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "label", "type": "string", "default": "unlabelled"},
        ],
    },
]
"""Three versions of one record: a field with a default added (and one more), then that one
more removed."""


READING: dict[str, Any] = {
    "type": "record",
    "name": "Reading",
    "namespace": "test",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "count", "type": "long"},
        {"name": "ratio", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {
            "name": "place",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [{"name": "city", "type": "string"}, {"name": "zip", "type": "long"}],
            },
        },
    ],
}
"""A record of 8 fields: string, long, double, boolean, nullable string, timestamp-millis,
array of strings, nested record (the schema tests' and the Avro benchmark's)."""


def avro_bytes(value: dict[str, Any], schema: dict[str, Any]) -> bytes:
    """``value`` in Avro binary encoding without a header, as Pulsar producers write it."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


@dataclass(frozen=True)
class Half:
    """The key or value schema of a KEY_VALUE schema: Java's type name, name, data, properties."""

    type: str
    name: str = ""
    data: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def avro(cls, schema: dict[str, Any]) -> Half:
        """An Avro schema as Java's ``Schema.AVRO`` describes one."""
        return cls("AVRO", schema["name"], json.dumps(schema).encode(), JAVA_AVRO_PROPERTIES)


JAVA_AVRO_PROPERTIES = {"__alwaysAllowNull": "true", "__jsr310ConversionEnabled": "false"}
"""The properties Java's ``AvroSchema`` gives its schema."""


def key_value_layout(key: bytes | None, value: bytes | None) -> bytes:
    """``key`` and ``value`` as a KEY_VALUE schema's data and an INLINE payload lay them out:
    each after its length (4 bytes, big-endian; -1 for null)."""
    out = b""
    for half in (key, value):
        out += struct.pack(">i", -1 if half is None else len(half)) + (half or b"")
    return out


def key_value_schema(key: Half, value: Half, encoding: str) -> pb.Schema:
    """The KEY_VALUE schema Java's ``Schema.KeyValue(key, value, encoding)`` registers."""
    properties: dict[str, str] = {"kv.encoding.type": encoding}
    for prefix, half in (("key", key), ("value", value)):
        properties[f"{prefix}.schema.name"] = half.name
        properties[f"{prefix}.schema.type"] = half.type
        properties[f"{prefix}.schema.properties"] = json.dumps(half.properties)
    return pb.Schema(
        name="KeyValue",
        type=pb.Schema.Type.Value("KeyValue"),
        schema_data=key_value_layout(key.data, value.data),
        properties=[pb.KeyValue(key=k, value=v) for k, v in properties.items()],
    )
