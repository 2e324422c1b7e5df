"""The schema a producer registers (CommandProducer's ``schema``), built from its parts.

A value schema is a type with, for Avro and Json, the Avro schema JSON as its data (empty for
the primitive types). The broker keeps it under the topic's name (``tenant/namespace/topic``).

A KEY_VALUE schema with the SEPARATED encoding (the key travels as the message key, the value
as the payload) carries both schemas, as Java's ``KeyValueSchemaInfo`` lays them out (the
layout itself is :mod:`pulsar_spark.protocol.key_value`'s):

- ``schema_data``: the key schema's data, then the value schema's, each preceded by its
  length as a 4-byte big-endian signed integer;
- ``properties``: ``key.schema.name`` (the key schema's name: here, as it has none of its own,
  the type's name), ``key.schema.type`` (Java's name of the type: ``AVRO``, ``JSON``,
  ``STRING``...), ``key.schema.properties`` (the key schema's properties as a JSON object), the
  same three for ``value.``, and ``kv.encoding.type`` = ``SEPARATED``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pulsar_spark.protocol import pb
from pulsar_spark.protocol.key_value import java_type_name, join_key_value
from pulsar_spark.protocol.schemas import schema_topic

SchemaType = pb.Schema.Type

SEPARATED = "SEPARATED"


@dataclass(frozen=True, slots=True)
class SchemaParts:
    """One schema as a producer declares it: a pb.Schema.Type value, its data and properties."""

    type: int
    data: bytes = b""
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def java_type_name(self) -> str:
        return java_type_name(self.type)


def producer_schema(topic: str, parts: SchemaParts) -> pb.Schema:
    """The ``schema`` of a CommandProducer registering ``parts`` for ``topic``."""
    return pb.Schema(
        name=schema_name(topic),
        type=parts.type,  # type: ignore[arg-type]
        schema_data=parts.data,
        properties=[pb.KeyValue(key=k, value=v) for k, v in parts.properties],
    )


def key_value_schema(topic: str, key: SchemaParts, value: SchemaParts) -> pb.Schema:
    """A KEY_VALUE schema, SEPARATED encoding, of ``key`` and ``value`` (see the module)."""
    data = join_key_value(key.data, value.data)
    properties: list[tuple[str, str]] = []
    for prefix, part in (("key", key), ("value", value)):
        properties += [
            (f"{prefix}.schema.name", part.java_type_name),
            (f"{prefix}.schema.type", part.java_type_name),
            (f"{prefix}.schema.properties", json.dumps(dict(part.properties))),
        ]
    properties.append(("kv.encoding.type", SEPARATED))
    parts = SchemaParts(SchemaType.Value("KeyValue"), data, tuple(properties))
    return producer_schema(topic, parts)


def schema_name(topic: str) -> str:
    """The name a schema is kept under: ``tenant/namespace/topic`` of the (parent) topic."""
    return schema_topic(topic).partition("://")[2]
