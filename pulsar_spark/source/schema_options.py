"""The schema options of reads and writes: ``valueSchema``, ``keySchema`` and their
``.definition``, the formats they name and the Pulsar schema type of each, and the schemas a
write resolved (:mod:`pulsar_spark.spark.write_schemas` checks them against the DataFrame)."""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_spark.arrow.value_encode import ColumnEncoding
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.producer_schemas import (
    SchemaParts,
    key_value_schema,
    producer_schema,
)

VALUE_SCHEMA = "valueSchema"
KEY_SCHEMA = "keySchema"
DEFINITION = ".definition"

SchemaType = pb.Schema.Type

# Option value -> the Pulsar schema type it writes (and reads, for ``valueSchema``).
SCHEMA_TYPES: dict[str, str] = {
    "avro": "Avro",
    "json": "Json",
    "string": "String",
    "bytes": "None",
    "int64": "Int64",
    "int32": "Int32",
    "double": "Double",
    "float": "Float",
    "boolean": "Bool",
}


def schema_format(option: str, text: str | None) -> str | None:
    """The format an option names (lower case), None when unset; refuses anything else."""
    if text is None:
        return None
    name = text.strip().lower()
    if name not in SCHEMA_TYPES:
        raise ConfigurationError(
            f"option {option!r} must be one of {', '.join(SCHEMA_TYPES)} (Pulsar's AVRO, JSON, "
            f"STRING, BYTES, INT64, INT32, DOUBLE, FLOAT, BOOLEAN schemas), got {text!r}"
        )
    return name


@dataclass(frozen=True)
class ColumnSchema:
    """How one column (``value`` or ``key``) is written, and the schema registered for it."""

    encoding: ColumnEncoding
    parts: SchemaParts


@dataclass(frozen=True)
class WriteSchemas:
    """The value's schema, and the key's when the key is written with one too."""

    value: ColumnSchema
    key: ColumnSchema | None = None

    def producer_schema(self, topic: str) -> pb.Schema | None:
        """What a producer on ``topic`` registers; None for bytes (nothing registered)."""
        if self.key is not None:
            return key_value_schema(topic, self.key.parts, self.value.parts)
        if self.value.parts.type == SchemaType.Value("None"):
            return None
        return producer_schema(topic, self.value.parts)
