"""Spark types and Avro schemas on the write side: the schema a column is written with.

:func:`avro_schema_for` derives an Avro schema (its JSON form) from a Spark type:

==========================  ============================================================
Spark type                  Avro type
==========================  ============================================================
struct                      record (the top one ``topLevelRecord``, a nested one named
                            after its field, in its parent's namespace), fields in order
array                       array
map<string, ...>            map (Avro map keys are strings; other keys are refused)
string                      string
binary                      bytes
boolean                     boolean
tinyint / smallint / int    int
bigint                      long
float / double              float / double
date                        int, logical type date
timestamp                   long, logical type timestamp-micros (Spark's precision)
timestamp_ntz               long, logical type local-timestamp-micros
decimal(p, s)               bytes, logical type decimal(p, s)
==========================  ============================================================

A nullable field (or element, or map value) becomes a union of null and its type, with a
null default for record fields.

:func:`check_fits` checks, when the DataFrame is defined, that a Spark type can be written
with a given Avro schema (``valueSchema.definition``), naming the first field that cannot.
Record fields are matched by name; a field the schema has and the DataFrame lacks needs a
default. Ints widen to long, float and double; long to float and double; float to double (as
Avro's promotions allow). A null in a field whose Avro type is not a union with null, or a
string that is not a symbol of an enum, is only found when the row is written.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pulsar_spark.errors import ConfigurationError

TOP_RECORD = "topLevelRecord"

_SIMPLE: tuple[tuple[type[DataType], Any], ...] = (
    (StringType, "string"),
    (BinaryType, "bytes"),
    (BooleanType, "boolean"),
    (ByteType, "int"),
    (ShortType, "int"),
    (IntegerType, "int"),
    (LongType, "long"),
    (FloatType, "float"),
    (DoubleType, "double"),
    (DateType, {"type": "int", "logicalType": "date"}),
    (TimestampType, {"type": "long", "logicalType": "timestamp-micros"}),
    (TimestampNTZType, {"type": "long", "logicalType": "local-timestamp-micros"}),
)

# Avro primitive -> the Spark types whose values it takes (Avro's promotions included).
_TAKES: dict[str, tuple[type[DataType], ...]] = {
    "string": (StringType,),
    "bytes": (BinaryType,),
    "boolean": (BooleanType,),
    "int": (ByteType, ShortType, IntegerType),
    "long": (ByteType, ShortType, IntegerType, LongType),
    "float": (ByteType, ShortType, IntegerType, LongType, FloatType),
    "double": (ByteType, ShortType, IntegerType, LongType, FloatType, DoubleType),
}
_LOGICAL_TAKES: dict[str, tuple[type[DataType], ...]] = {
    "date": (DateType,),
    "timestamp-millis": (TimestampType,),
    "timestamp-micros": (TimestampType,),
    "local-timestamp-millis": (TimestampNTZType,),
    "local-timestamp-micros": (TimestampNTZType,),
}


def avro_schema_for(data_type: DataType, what: str) -> Any:
    """The Avro schema (JSON form) of ``data_type``; ``what`` names the column in errors."""
    return _avro(data_type, what, TOP_RECORD, "")


def _avro(data_type: DataType, path: str, name: str, namespace: str) -> Any:
    for spark, avro in _SIMPLE:
        if isinstance(data_type, spark):
            return avro
    if isinstance(data_type, DecimalType):
        return {
            "type": "bytes",
            "logicalType": "decimal",
            "precision": data_type.precision,
            "scale": data_type.scale,
        }
    if isinstance(data_type, StructType):
        full = f"{namespace}.{name}" if namespace else name
        fields = []
        for f in data_type.fields:
            avro = _avro(f.dataType, f"{path}.{f.name}", f.name, full)
            if f.nullable:
                fields.append({"name": f.name, "type": ["null", avro], "default": None})
            else:
                fields.append({"name": f.name, "type": avro})
        record: dict[str, Any] = {"type": "record", "name": name}
        if namespace:
            record["namespace"] = namespace
        record["fields"] = fields
        return record
    if isinstance(data_type, ArrayType):
        items = _avro(data_type.elementType, f"{path}[]", name, namespace)
        return {"type": "array", "items": _nullable(items, data_type.containsNull)}
    if isinstance(data_type, MapType):
        if not isinstance(data_type.keyType, StringType):
            raise ConfigurationError(
                f"{path} is a {data_type.simpleString()}: Avro maps have string keys, so a map "
                "written with a schema must be map<string, ...>"
            )
        values = _avro(data_type.valueType, f"{path}{{}}", name, namespace)
        return {"type": "map", "values": _nullable(values, data_type.valueContainsNull)}
    raise ConfigurationError(
        f"{path} has type {data_type.simpleString()}, which has no Avro type to write it with"
    )


def _nullable(avro: Any, nullable: bool) -> Any:
    return ["null", avro] if nullable else avro


def parse_definition(text: str, option: str) -> Any:
    """An Avro schema given as JSON text in ``option``, parsed (and checked by fastavro)."""
    import fastavro

    try:
        schema = json.loads(text)
        fastavro.parse_schema(schema)
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as exc:
        raise ConfigurationError(f"option {option!r} is not a valid Avro schema: {exc}") from exc
    return schema


def check_fits(data_type: DataType, schema: Any, path: str) -> None:
    """Refuse ``data_type`` if its values cannot be written with the Avro ``schema``; the
    error names the field (``path``) and both types."""
    named: dict[str, Any] = {}
    _collect_names(schema, "", named)
    _fits(data_type, schema, path, named)


def _fits(data_type: DataType, schema: Any, path: str, named: dict[str, Any]) -> None:
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise _misfit(path, data_type, schema, "only unions of null and one type are written")
        _fits(data_type, branches[0], path, named)
        return
    if isinstance(schema, str):
        if schema in named:
            _fits(data_type, named[schema], path, named)
            return
        if not isinstance(data_type, _TAKES.get(schema, ())):
            raise _misfit(path, data_type, schema)
        return
    kind = schema.get("type")
    if schema.get("logicalType") in (*_LOGICAL_TAKES, "decimal"):
        if not _logical_fits(data_type, schema):
            raise _misfit(path, data_type, schema)
    elif kind == "record":
        _record_fits(data_type, schema, path, named)
    elif kind in ("array", "map"):
        _container_fits(data_type, schema, path, named)
    elif kind in ("enum", "fixed"):
        if not isinstance(data_type, StringType if kind == "enum" else BinaryType):
            raise _misfit(path, data_type, schema)
    else:
        _fits(data_type, kind, path, named)


def _logical_fits(data_type: DataType, schema: Any) -> bool:
    logical = schema["logicalType"]
    if logical != "decimal":
        return isinstance(data_type, _LOGICAL_TAKES[logical])
    precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
    return (
        isinstance(data_type, DecimalType)
        and data_type.scale == scale
        and data_type.precision <= precision
    )


def _container_fits(data_type: DataType, schema: Any, path: str, named: dict[str, Any]) -> None:
    if schema["type"] == "array":
        if not isinstance(data_type, ArrayType):
            raise _misfit(path, data_type, schema)
        _fits(data_type.elementType, schema["items"], f"{path}[]", named)
        return
    if not (isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType)):
        raise _misfit(path, data_type, schema)
    _fits(data_type.valueType, schema["values"], f"{path}{{}}", named)


def _record_fits(data_type: DataType, schema: Any, path: str, named: dict[str, Any]) -> None:
    if not isinstance(data_type, StructType):
        raise _misfit(path, data_type, schema)
    fields = {f["name"]: f for f in schema["fields"]}
    for column in data_type.fields:
        if column.name not in fields:
            raise ConfigurationError(
                f"{path}.{column.name} is not a field of the Avro record {schema['name']!r} "
                f"(its fields: {', '.join(fields)})"
            )
        _fits(column.dataType, fields[column.name]["type"], f"{path}.{column.name}", named)
    present = set(data_type.fieldNames())
    for name, avro_field in fields.items():
        if name not in present and "default" not in avro_field:
            raise ConfigurationError(
                f"{path}.{name}: the Avro record {schema['name']!r} has this field without a "
                "default, and the DataFrame does not have it"
            )


def _collect_names(schema: Any, namespace: str, named: dict[str, Any]) -> None:
    """Every named type (record, enum, fixed) of ``schema``, by short and full name."""
    if isinstance(schema, list):
        for branch in schema:
            _collect_names(branch, namespace, named)
        return
    if not isinstance(schema, dict):
        return
    kind = schema.get("type")
    if kind in ("record", "enum", "fixed"):
        space = schema.get("namespace", namespace)
        named[schema["name"]] = schema
        named[f"{space}.{schema['name']}" if space else schema["name"]] = schema
        namespace = space
    for field in schema.get("fields", ()):
        _collect_names(field["type"], namespace, named)
    for part in ("items", "values"):
        if part in schema:
            _collect_names(schema[part], namespace, named)
    if isinstance(kind, (dict, list)):
        _collect_names(kind, namespace, named)


def _misfit(path: str, data_type: DataType, schema: Any, why: str = "") -> ConfigurationError:
    reason = f" ({why})" if why else ""
    return ConfigurationError(
        f"{path} has type {data_type.simpleString()}, which cannot be written as the Avro type "
        f"{json.dumps(schema, separators=(',', ':'))}{reason}"
    )
