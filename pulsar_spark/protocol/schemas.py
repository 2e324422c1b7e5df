"""Topic schemas as GET_SCHEMA returns them.

A broker stores a list of schema versions per topic. Each version is a ``Schema``: a type
(Avro, Json, String, Int32, ...), the schema data (for Avro and Json the Avro schema as JSON
text, empty for the primitive types) and properties. The version itself is opaque bytes; a
message names the version it was written with in ``MessageMetadata.schema_version``.

A topic without a schema answers with ``error_code`` TopicNotFound; that is "no schema", not a
failure, so :func:`schema_from_response` returns None for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_spark.errors import ServerError, server_error_for
from pulsar_spark.protocol import pb
from pulsar_spark.topic import TopicName

SchemaType = pb.Schema.Type

# Type value -> the name the wire uses for it.
_NAMES: dict[int, str] = {int(value): name for name, value in SchemaType.items()}


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    """One version of a topic's schema."""

    type: int  # a pb.Schema.Type value
    data: bytes
    name: str
    properties: tuple[tuple[str, str], ...]
    version: bytes | None

    @property
    def type_name(self) -> str:
        """The type as the wire names it: ``Avro``, ``Json``, ``String``, ``Int64``..."""
        return type_name(self.type)


def type_name(kind: int) -> str:
    """A pb.Schema.Type value as the wire names it."""
    return _NAMES.get(kind, f"type {kind}")


def schema_from_response(response: pb.CommandGetSchemaResponse, topic: str) -> SchemaInfo | None:
    """The schema a GET_SCHEMA_RESPONSE carries; None when the topic has no schema.

    Raises the :class:`~pulsar_spark.errors.ServerError` subclass of any other error code.
    """
    if response.HasField("error_code"):
        if response.error_code == pb.TopicNotFound:
            return None
        raise _error(response, topic)
    if not response.HasField("schema") or response.schema.type == SchemaType.Value("None"):
        return None
    schema = response.schema
    return SchemaInfo(
        type=schema.type,
        data=schema.schema_data,
        name=schema.name,
        properties=tuple((pair.key, pair.value) for pair in schema.properties),
        version=response.schema_version if response.HasField("schema_version") else None,
    )


def _error(response: pb.CommandGetSchemaResponse, topic: str) -> ServerError:
    return server_error_for(
        response.error_code, f"GET_SCHEMA {topic}: {response.error_message or 'failed'}"
    )


def schema_topic(topic: str) -> str:
    """The fully qualified name a topic's schema is kept under (a partition's parent)."""
    return TopicName.parse(topic).base_name
