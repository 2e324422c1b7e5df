"""The typed ``value`` column: a topic's schema mapped to a Spark type, and values decoded to it.

With ``valueFormat`` ``auto`` the ``value`` column follows the topic's schema instead of being
the payload bytes. The schema is fixed when the DataFrame is defined (:class:`ValueSchema`,
the topic's latest schema); every message is decoded with the schema it was written with (its
``schema_version``), resolved to that latest one.

===========================  ==============================================================
Pulsar schema / Avro type    Spark type
===========================  ==============================================================
primitives (String, Int64,   see :mod:`pulsar_spark.arrow.primitives`
Date, Instant, LocalTime...)
KeyValue                     ``key`` and ``value`` typed by its key and value schemas (see
                             :mod:`pulsar_spark.arrow.key_values`)
ProtobufNative               struct of the root message (see :mod:`pulsar_spark.arrow.protobuf`)
Avro, Json: record           struct, one field per record field, in order
array / map                  array / map<string, ...>
union of null and one type   that type (nullable); other unions are refused
enum / string                string
bytes / fixed                binary
int, long, float, double     int, bigint, float, double
boolean                      boolean
date                         date
timestamp-millis / -micros   timestamp (UTC)
local-timestamp-millis/-mic. timestamp_ntz
time-millis / time-micros    int (ms of the day) / bigint (µs of the day)
uuid                         string
decimal(p, s)                decimal(p, s)
===========================  ==============================================================

Every field is nullable. Avro values written with the latest version are read column by column
(:mod:`pulsar_spark.arrow.avro_decode`); other versions, and types that module leaves out, one
by one with ``fastavro``. Json values (the Avro schema describes them) are read with
:mod:`json`. Values read one by one are built as Python objects and laid out by pyarrow.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import io
import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pyarrow as pa

from pulsar_spark.arrow.avro_decode import decode_avro_parts
from pulsar_spark.arrow.primitives import PRIMITIVES
from pulsar_spark.arrow.protobuf import protobuf_schema
from pulsar_spark.arrow.schema import ARROW_SCHEMA, SCHEMA_DDL
from pulsar_spark.common.arrow_types import TIMESTAMP_TYPE
from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.key_value import key_value_schemas
from pulsar_spark.protocol.schemas import SchemaInfo, type_name

SchemaType = pb.Schema.Type

_BYTES = SchemaType.Value("None")  # a key or value of a KeyValue schema kept as bytes
_AVRO = SchemaType.Value("Avro")
_PROTOBUF = SchemaType.Value("ProtobufNative")
_JSON = SchemaType.Value("Json")
_EPOCH_DAY = dt.date(1970, 1, 1)

_AVRO_PRIMITIVES: dict[str, tuple[str, pa.DataType]] = {
    "string": ("string", pa.string()),
    "bytes": ("binary", pa.binary()),
    "boolean": ("boolean", pa.bool_()),
    "int": ("int", pa.int32()),
    "long": ("bigint", pa.int64()),
    "float": ("float", pa.float32()),
    "double": ("double", pa.float64()),
}


@dataclass(frozen=True)
class ValueSchema:
    """The schema the ``value`` column follows: a topic's latest schema, by type."""

    topic: str
    type: int  # a pb.Schema.Type value (None: bytes, for a half of a KeyValue schema)
    data: bytes  # the Avro schema JSON for Avro and Json, else empty
    version: bytes | None
    avro: Any = field(default=None, compare=False)  # the parsed Avro schema (JSON form)
    key: ValueSchema | None = None  # a KeyValue schema's key schema (then this is its value's)
    separated: bool = False  # a KeyValue schema's key is the message key, not in the payload

    @classmethod
    def of(cls, topic: str, info: SchemaInfo) -> ValueSchema | None:
        """The typed schema for ``info``; None for types read as bytes (BYTES, Protobuf...)."""
        if info.type == SchemaType.Value("KeyValue"):
            halves = key_value_schemas(info, topic)
            key = cls.of(topic, halves.key) or cls(topic, _BYTES, b"", info.version)
            value = cls.of(topic, halves.value) or cls(topic, _BYTES, b"", info.version)
            return dataclasses.replace(value, key=key, separated=halves.separated)
        if info.type in PRIMITIVES:
            return cls(topic, info.type, b"", info.version)
        if info.type == _PROTOBUF:
            protobuf_schema(info.data, topic)  # refuse what has no mapping now, on the driver
            return cls(topic, info.type, info.data, info.version)
        if info.type not in (_AVRO, _JSON):
            return None
        try:
            avro = json.loads(info.data)
        except ValueError as exc:
            raise SchemaError(f"topic {topic}: the {info.type_name} schema is not JSON") from exc
        schema = cls(topic, info.type, info.data, info.version, avro)
        schema.spark_type()  # refuse what has no mapping now, on the driver
        return schema

    def spark_type(self) -> str:
        """The Spark DDL type of the ``value`` column."""
        if self.type == _BYTES:
            return "binary"
        if self.type in PRIMITIVES:
            return PRIMITIVES[self.type].ddl
        if self.type == _PROTOBUF:
            return protobuf_schema(self.data, self.topic).spark_type
        return _types(self.avro, self.topic)[0]

    def arrow_type(self) -> pa.DataType:
        """The Arrow type Spark expects for :meth:`spark_type`."""
        if self.type == _BYTES:
            return pa.binary()
        if self.type in PRIMITIVES:
            return PRIMITIVES[self.type].arrow
        if self.type == _PROTOBUF:
            return protobuf_schema(self.data, self.topic).arrow_type
        return _types(self.avro, self.topic)[1]

    def read_schema_ddl(self) -> str:
        """The full read schema, with ``value`` of :meth:`spark_type` (and for a KeyValue
        schema ``key`` of its key schema's type)."""
        ddl = SCHEMA_DDL.replace("value binary", f"value {self.spark_type()}", 1)
        if self.key is not None:
            ddl = ddl.replace("key binary", f"key {self.key.spark_type()}", 1)
        return ddl

    def arrow_schema(self) -> pa.Schema:
        schema = ARROW_SCHEMA.set(1, pa.field("value", self.arrow_type()))
        if self.key is not None:
            schema = schema.set(0, pa.field("key", self.key.arrow_type()))
        return schema


WriterSchemas = Callable[[bytes], bytes | None]
"""The Avro schema JSON of a schema version of the topic (None if the broker has none)."""


class ValueDecoder:
    """Decodes payloads of one topic to the Arrow type of a :class:`ValueSchema`."""

    def __init__(self, schema: ValueSchema, writer_schemas: WriterSchemas) -> None:
        self.schema = schema
        self._writer_schemas = writer_schemas
        self._arrow_type = schema.arrow_type()
        self.arrow_schema = schema.arrow_schema()
        self._parsed: dict[bytes | None, Any] = {}
        if schema.type in (_AVRO, _JSON):
            self._reader = fastavro.parse_schema(schema.avro)
        self._conform_avro = any(
            f'"{name}"'.encode() in schema.data for name in ("time-millis", "time-micros", "uuid")
        )

    def decode_columns(
        self, keys: pa.Array, values: pa.Array, versions: Sequence[bytes | None]
    ) -> tuple[pa.Array, pa.Array]:
        """The ``key`` and ``value`` columns: ``keys`` as they are, ``values`` decoded."""
        return keys, self.decode(values, versions)

    def decode(self, values: pa.Array, versions: Sequence[bytes | None]) -> pa.Array:
        """``values`` (binary, null for null values) decoded; ``versions`` one per value."""
        kind = self.schema.type
        if kind == _BYTES:
            return values
        if kind in PRIMITIVES:
            return PRIMITIVES[kind].decode(values, self.schema.topic, type_name(kind))
        if kind == _PROTOBUF:
            return protobuf_schema(self.schema.data, self.schema.topic).decode(values)
        if kind == _JSON:
            return self._array([None if v is None else self._json(v) for v in values.to_pylist()])
        if all(self._writer(version) is None for version in dict.fromkeys(versions)):
            return decode_avro_parts(values, self.schema.avro, self._arrow_type, self._one_by_one)
        return self._one_by_one(values, versions)

    def _one_by_one(
        self, values: pa.Array, versions: Sequence[bytes | None] | None = None
    ) -> pa.Array:
        """Avro ``values`` decoded with fastavro, each with its version (None: the reader's)."""
        each = versions if versions is not None else [None] * len(values)
        decoded = [
            None if v is None else self._avro(v, version)
            for v, version in zip(values.to_pylist(), each, strict=True)
        ]
        return self._array(decoded)

    def _array(self, decoded: list[Any]) -> pa.Array:
        """Decoded values as the Arrow type; SchemaError for one that does not fit it."""
        try:
            return pa.array(decoded, type=self._arrow_type)
        except (pa.ArrowException, OverflowError, ValueError, TypeError) as exc:
            raise SchemaError(
                f"topic {self.schema.topic}: a value does not fit the value column's type: {exc}"
            ) from exc

    def _json(self, value: bytes) -> Any:
        try:
            return _conform(json.loads(value), self.schema.avro)
        except Exception as exc:  # text of any shape: not JSON, or JSON _conform cannot walk
            raise SchemaError(
                f"topic {self.schema.topic}: a value is not JSON of the topic's schema: {exc}"
            ) from exc

    def _avro(self, value: bytes, version: bytes | None) -> Any:
        writer = self._writer(version)
        try:
            if writer is None:
                record = fastavro.schemaless_reader(io.BytesIO(value), self._reader, None)
            else:
                record = fastavro.schemaless_reader(io.BytesIO(value), writer, self._reader)
        except fastavro.read.SchemaResolutionError as exc:
            raise SchemaError(
                f"topic {self.schema.topic}: a message written with schema version "
                f"{_version_text(version)} does not resolve to the latest version "
                f"{_version_text(self.schema.version)}: {exc}"
            ) from exc
        except Exception as exc:  # fastavro raises what a malformed value makes its reads meet
            raise SchemaError(
                f"topic {self.schema.topic}: a value does not decode with schema version "
                f"{_version_text(version)}: {exc!r}"
            ) from exc
        # fastavro already gives what pyarrow takes for most types (datetime, date, Decimal,
        # str for enums, dicts for records and maps); only times of day and UUIDs need work.
        return _conform(record, self.schema.avro) if self._conform_avro else record

    def _writer(self, version: bytes | None) -> Any:
        """The parsed writer schema of ``version``; None when it is the reader's own.

        Versions are numbered per topic, so each is asked for (once) and compared by content:
        the topic the schema was taken from need not be the one being read."""
        if version is None:
            return None
        if version not in self._parsed:
            data = self._writer_schemas(version)
            if data is None:
                raise SchemaError(
                    f"topic {self.schema.topic}: the broker has no schema version "
                    f"{_version_text(version)}, which a message was written with"
                )
            same = data == self.schema.data
            self._parsed[version] = (
                None
                if same
                else fastavro.parse_schema(named_as_reader(json.loads(data), self.schema.avro))
            )
        return self._parsed[version]


def named_as_reader(writer: Any, reader: Any) -> Any:
    """``writer``'s top-level record under ``reader``'s name (and namespace).

    Java's Avro resolves a written record to the reader's whatever their names, and Apache
    Pulsar's compatibility check, built on it, takes a renamed record as the next version
    (a Spark write's ``topLevelRecord`` after a Java producer's ``Event``, say); fastavro
    resolves records only by name, so the writer's takes the reader's before it resolves.
    """
    if not (
        isinstance(writer, dict)
        and isinstance(reader, dict)
        and writer.get("type") == "record" == reader.get("type")
    ):
        return writer
    renamed = {key: value for key, value in writer.items() if key != "namespace"}
    renamed["name"] = reader["name"]
    if "namespace" in reader:
        renamed["namespace"] = reader["namespace"]
    return renamed


def _version_text(version: bytes | None) -> str:
    if version is None:
        return "(none)"
    return str(int.from_bytes(version, "big")) if len(version) == 8 else version.hex()


def _types(schema: Any, topic: str) -> tuple[str, pa.DataType]:
    """(Spark DDL, Arrow type) of an Avro schema in its JSON form."""
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise SchemaError(
                f"topic {topic}: the Avro union {json.dumps(schema)} has no Spark type "
                "(only a union of null and one type does); read it with valueFormat=raw"
            )
        return _types(branches[0], topic)
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[schema]
        raise SchemaError(f"topic {topic}: the Avro type {schema!r} has no Spark type")
    kind = schema.get("type")
    logical = _logical_types(schema)
    if logical is not None:
        return logical
    if kind == "record":
        parts = [(f["name"], *_types(f["type"], topic)) for f in schema["fields"]]
        ddl = ", ".join(f"`{name}`: {ddl}" for name, ddl, _ in parts)
        return f"struct<{ddl}>", pa.struct([(name, arrow) for name, _, arrow in parts])
    if kind == "array":
        ddl, arrow = _types(schema["items"], topic)
        return f"array<{ddl}>", pa.list_(pa.field("element", arrow))
    if kind == "map":
        ddl, arrow = _types(schema["values"], topic)
        return f"map<string,{ddl}>", pa.map_(pa.string(), arrow)
    if kind == "enum":
        return "string", pa.string()
    if kind == "fixed":
        return "binary", pa.binary()
    return _types(kind, topic)


def _logical_types(schema: dict[str, Any]) -> tuple[str, pa.DataType] | None:
    """(Spark DDL, Arrow type) of a logical type with a Spark type of its own; None for the
    others, which take their underlying type's."""
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical == "date" and kind == "int":
        return "date", pa.date32()
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return "timestamp", TIMESTAMP_TYPE
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return "timestamp_ntz", pa.timestamp("us")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return f"decimal({precision},{scale})", pa.decimal128(precision, scale)
    return None


def _conform(value: Any, schema: Any) -> Any:
    """``value`` decoded from JSON as pyarrow takes it for ``schema``'s type."""
    if value is None:
        return None
    if isinstance(schema, list):
        (branch,) = [b for b in schema if b != "null"]
        return _conform(value, branch)
    if isinstance(schema, str):
        if schema == "bytes" and isinstance(value, str):
            return value.encode()  # the official Python client writes bytes as their UTF-8 text
        return value
    kind = schema.get("type")
    if "logicalType" in schema or isinstance(value, uuid.UUID):
        return _conform_logical(value, schema.get("logicalType"))
    if kind == "record":
        return {f["name"]: _conform(value.get(f["name"]), f["type"]) for f in schema["fields"]}
    if kind == "array":
        return [_conform(item, schema["items"]) for item in value]
    if kind == "map":
        return {key: _conform(item, schema["values"]) for key, item in value.items()}
    if isinstance(kind, (dict, list)):
        return _conform(value, kind)
    return value


def _conform_logical(value: Any, logical: str | None) -> Any:
    """A logical type's value (from JSON: its underlying number; from fastavro: a time of day
    or a UUID) as pyarrow takes it."""
    if logical == "date" and isinstance(value, int):
        return _EPOCH_DAY + dt.timedelta(days=value)
    if logical in ("timestamp-millis", "local-timestamp-millis") and isinstance(value, int):
        return value * 1000
    if logical in ("time-millis", "time-micros") and isinstance(value, dt.time):
        micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000
        micros += value.microsecond
        return micros // 1000 if logical == "time-millis" else micros
    if isinstance(value, uuid.UUID):
        return str(value)
    if logical == "decimal" and not isinstance(value, decimal.Decimal):
        return decimal.Decimal(str(value))
    return value
