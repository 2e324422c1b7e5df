"""Writing with a schema: the ``valueSchema`` and ``keySchema`` options, checked against the
DataFrame when it is defined, and what the producer registers.

``valueSchema``:

- ``avro`` / ``json``: ``value`` (a struct, or a type Avro has) is written with an Avro schema,
  derived from its Spark type (:mod:`pulsar_spark.spark.avro_types`) or given as JSON text in
  ``valueSchema.definition``; the producer registers an AVRO or JSON schema whose data is that
  Avro schema.
- ``string``, ``int64``, ``int32``, ``double``, ``float``, ``boolean``: Pulsar's primitive
  schemas (STRING, INT64, ...), for a ``value`` of the matching Spark type.
- ``bytes``, or no option: the payload bytes, and no schema registered (Java's producer
  registers none for BYTES either).

``keySchema`` (with a ``valueSchema`` only): the ``key`` column is written with that schema
(``string``, ``avro``, ``json``, or a primitive; ``keySchema.definition`` as for the value) into
the message key, base64 with ``partition_key_b64_encoded`` as Java's producer does for a
KEY_VALUE schema with the SEPARATED encoding, and the producer registers that KEY_VALUE schema.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from pulsar_spark.arrow.value_encode import ColumnEncoding
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol.producer_schemas import SchemaParts
from pulsar_spark.source.schema_options import (
    DEFINITION,
    KEY_SCHEMA,
    SCHEMA_TYPES,
    VALUE_SCHEMA,
    ColumnSchema,
    SchemaType,
    WriteSchemas,
)
from pulsar_spark.spark.avro_types import avro_schema_for, check_fits, parse_definition

_INTS = (ByteType, ShortType, IntegerType)
# Option value (of :data:`~pulsar_spark.source.schema_options.SCHEMA_TYPES`) -> the Spark
# types of the values it writes; Avro and JSON take any type Avro has.
SPARK_TYPES: dict[str, tuple[type[DataType], ...]] = {
    "avro": (),
    "json": (),
    "string": (StringType,),
    "bytes": (BinaryType,),
    "int64": (*_INTS, LongType),
    "int32": _INTS,
    "double": (FloatType, DoubleType),
    "float": (FloatType,),
    "boolean": (BooleanType,),
}


def write_schemas(
    schema: StructType,
    value_format: str | None,
    key_format: str | None,
    definitions: dict[str, str],
) -> WriteSchemas | None:
    """The schemas of a write of ``schema`` (the DataFrame's), checked; None for plain bytes.

    ``definitions`` holds the ``<option>.definition`` texts given, by option name.
    """
    if key_format is not None and value_format is None:
        raise ConfigurationError(
            f"option {KEY_SCHEMA!r} needs option {VALUE_SCHEMA!r}: the key is written with a "
            "schema only as part of a KEY_VALUE schema"
        )
    for option in definitions:
        chosen = value_format if option == VALUE_SCHEMA else key_format
        if chosen not in ("avro", "json"):
            raise ConfigurationError(
                f"option {option + DEFINITION!r} is an Avro schema, for {option}=avro or json; "
                f"{option} is {'not set' if chosen is None else repr(chosen)}"
            )
    if value_format is None or (value_format == "bytes" and key_format is None):
        if value_format == "bytes":
            _column_schema(schema, "value", VALUE_SCHEMA, value_format, None)
        return None
    fields = {f.name for f in schema.fields}
    key = None
    if key_format is not None:
        if "key" not in fields:
            raise ConfigurationError(
                f"option {KEY_SCHEMA!r} is set but the DataFrame has no 'key' column to write "
                "with it"
            )
        key = _column_schema(schema, "key", KEY_SCHEMA, key_format, definitions.get(KEY_SCHEMA))
    value = _column_schema(
        schema, "value", VALUE_SCHEMA, value_format, definitions.get(VALUE_SCHEMA)
    )
    return WriteSchemas(value, key)


def _column_schema(
    schema: StructType, column: str, option: str, name: str, definition: str | None
) -> ColumnSchema:
    data_type = schema[column].dataType
    kind = SchemaType.Value(SCHEMA_TYPES[name])
    accepted = SPARK_TYPES[name]
    if name not in ("avro", "json"):
        if not isinstance(data_type, accepted):
            allowed = " or ".join(t().simpleString() for t in accepted)
            raise ConfigurationError(
                f"column {column!r} has type {data_type.simpleString()}, which {option}={name} "
                f"cannot write: it writes {allowed} values"
            )
        return ColumnSchema(ColumnEncoding(name), SchemaParts(kind))
    avro: Any
    if definition is not None:
        avro = parse_definition(definition, option + DEFINITION)
        check_fits(data_type, avro, f"column {column!r}")
    else:
        avro = avro_schema_for(data_type, f"column {column!r}")
    data = json.dumps(avro, separators=(",", ":")).encode()
    return ColumnSchema(ColumnEncoding(name, avro), SchemaParts(kind, data))
