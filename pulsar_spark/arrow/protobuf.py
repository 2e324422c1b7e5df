"""PROTOBUF_NATIVE schemas: the root message as a Spark struct, and payloads decoded to it.

The schema's data is JSON, as Java's ``ProtobufNativeSchemaUtils`` writes it:
``fileDescriptorSet`` (a base64 ``FileDescriptorSet`` holding the root message's file and every
file it imports), ``rootMessageTypeName`` (the root message's full name) and
``rootFileDescriptorName``. The files are loaded into a pool of their own and payloads are
parsed with protobuf's dynamic messages (``message_factory``).

======================================  ====================================================
Protobuf field                          Spark type
======================================  ====================================================
double / float                          double / float
int32, sint32, sfixed32                 int
int64, sint64, sfixed64, uint32,        bigint
fixed32
uint64, fixed64                         decimal(20,0)
bool / string / bytes                   boolean / string / binary
enum                                    string (the value's name; its number when unknown)
message                                 struct, one field per field, in declaration order
repeated                                array
map<K, V>                               map<K, V>
======================================  ====================================================

A message field that is not set is null, as is any field with presence (proto2 ``optional``,
proto3 ``optional``) that is not set; other scalars read as their default. Messages that refer
to themselves have no Spark type and are refused. Protobuf's own compatibility rules (by field
number) let every version be parsed with the latest schema, so versions are not asked for.
"""

from __future__ import annotations

import base64
import decimal
import functools
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from pulsar_spark.errors import SchemaError

_F = FieldDescriptor
_SCALARS: dict[int, tuple[str, pa.DataType]] = {
    _F.TYPE_DOUBLE: ("double", pa.float64()),
    _F.TYPE_FLOAT: ("float", pa.float32()),
    _F.TYPE_INT32: ("int", pa.int32()),
    _F.TYPE_SINT32: ("int", pa.int32()),
    _F.TYPE_SFIXED32: ("int", pa.int32()),
    _F.TYPE_INT64: ("bigint", pa.int64()),
    _F.TYPE_SINT64: ("bigint", pa.int64()),
    _F.TYPE_SFIXED64: ("bigint", pa.int64()),
    _F.TYPE_UINT32: ("bigint", pa.int64()),
    _F.TYPE_FIXED32: ("bigint", pa.int64()),
    _F.TYPE_UINT64: ("decimal(20,0)", pa.decimal128(20, 0)),
    _F.TYPE_FIXED64: ("decimal(20,0)", pa.decimal128(20, 0)),
    _F.TYPE_BOOL: ("boolean", pa.bool_()),
    _F.TYPE_STRING: ("string", pa.string()),
    _F.TYPE_BYTES: ("binary", pa.binary()),
    _F.TYPE_ENUM: ("string", pa.string()),
}
_UNSIGNED_64 = (_F.TYPE_UINT64, _F.TYPE_FIXED64)


class ProtobufSchema:
    """A PROTOBUF_NATIVE schema's root message: its Spark and Arrow types and a decoder."""

    def __init__(self, data: bytes, topic: str) -> None:
        self.topic = topic
        try:
            spec = json.loads(data)
            files = descriptor_pb2.FileDescriptorSet.FromString(
                base64.b64decode(spec["fileDescriptorSet"])
            )
            root = spec["rootMessageTypeName"]
        except (ValueError, KeyError, TypeError, DecodeError) as exc:
            raise SchemaError(
                f"topic {topic}: the ProtobufNative schema is not the JSON of a base64 "
                "fileDescriptorSet and a rootMessageTypeName"
            ) from exc
        pool = descriptor_pool.DescriptorPool()
        _add_in_import_order(pool, list(files.file), topic)
        try:
            self.descriptor: Descriptor = pool.FindMessageTypeByName(root)
        except KeyError as exc:
            raise SchemaError(
                f"topic {topic}: the ProtobufNative schema has no message {root!r}"
            ) from exc
        self._message = message_factory.GetMessageClass(self.descriptor)
        self.spark_type, self.arrow_type = _message_types(self.descriptor, (), topic)
        self._convert = _message_converter(self.descriptor)

    def decode(self, values: pa.Array) -> pa.Array:
        """``values`` (binary payloads, null for null values) as :attr:`arrow_type`."""
        rows: list[Any] = []
        for payload in values.to_pylist():
            if payload is None:
                rows.append(None)
                continue
            try:
                message = self._message.FromString(payload)
            except DecodeError as exc:
                raise SchemaError(
                    f"topic {self.topic}: a value is not a {self.descriptor.full_name} "
                    f"message: {exc}"
                ) from exc
            rows.append(self._convert(message))
        return pa.array(rows, type=self.arrow_type)


@functools.lru_cache(maxsize=16)
def protobuf_schema(data: bytes, topic: str) -> ProtobufSchema:
    """The parsed schema of ``data`` (kept: parsing builds descriptors and a message class)."""
    return ProtobufSchema(data, topic)


def _add_in_import_order(
    pool: descriptor_pool.DescriptorPool,
    files: list[descriptor_pb2.FileDescriptorProto],
    topic: str,
) -> None:
    """Add ``files`` to ``pool``, each after the files it imports."""
    added: set[str] = set()
    while files:
        ready = [f for f in files if all(d in added for d in f.dependency)]
        if not ready:
            missing = sorted({d for f in files for d in f.dependency} - added)
            raise SchemaError(
                f"topic {topic}: the ProtobufNative schema's files import {missing}, "
                "which it does not carry"
            )
        for proto in ready:
            pool.Add(proto)
            added.add(proto.name)
        files = [f for f in files if f.name not in added]


def _is_map(field: FieldDescriptor) -> bool:
    message = field.message_type
    return field.is_repeated and message is not None and message.GetOptions().map_entry


def _message_of(field: FieldDescriptor) -> Descriptor:
    assert field.message_type is not None
    return field.message_type


def _entry(field: FieldDescriptor) -> tuple[FieldDescriptor, FieldDescriptor]:
    """The key and value fields of a map field's entry message."""
    entry = _message_of(field)
    return entry.fields_by_number[1], entry.fields_by_number[2]


def _message_types(
    descriptor: Descriptor, seen: tuple[str, ...], topic: str
) -> tuple[str, pa.DataType]:
    if descriptor.full_name in seen:
        raise SchemaError(
            f"topic {topic}: the Protobuf message {descriptor.full_name} contains itself, "
            "which no Spark type can hold; read it with valueFormat=raw"
        )
    inner = (*seen, descriptor.full_name)
    parts = [(f.name, *_field_types(f, inner, topic)) for f in descriptor.fields]
    ddl = ", ".join(f"`{name}`: {kind}" for name, kind, _ in parts)
    return f"struct<{ddl}>", pa.struct([(name, arrow) for name, _, arrow in parts])


def _field_types(
    field: FieldDescriptor, seen: tuple[str, ...], topic: str
) -> tuple[str, pa.DataType]:
    if _is_map(field):
        key, value = _entry(field)
        key_ddl, key_arrow = _single_types(key, seen, topic)
        value_ddl, value_arrow = _single_types(value, seen, topic)
        return f"map<{key_ddl},{value_ddl}>", pa.map_(key_arrow, value_arrow)
    ddl, arrow = _single_types(field, seen, topic)
    if field.is_repeated:
        return f"array<{ddl}>", pa.list_(pa.field("element", arrow))
    return ddl, arrow


def _single_types(
    field: FieldDescriptor, seen: tuple[str, ...], topic: str
) -> tuple[str, pa.DataType]:
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        return _message_types(_message_of(field), seen, topic)
    return _SCALARS[field.type]


Converter = Callable[[Any], Any]


def _message_converter(descriptor: Descriptor) -> Callable[[Message], dict[str, Any]]:
    """A function from a message of ``descriptor`` to the dict pyarrow takes for its struct."""
    fields = [(f.name, _field_converter(f), _nullable(f)) for f in descriptor.fields]

    def convert(message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, to_python, nullable in fields:
            if nullable and not message.HasField(name):
                out[name] = None
            else:
                out[name] = to_python(getattr(message, name))
        return out

    return convert


def _nullable(field: FieldDescriptor) -> bool:
    return not field.is_repeated and field.has_presence


def _field_converter(field: FieldDescriptor) -> Converter:
    if _is_map(field):
        key_field, value_field = _entry(field)
        key, value = _single_converter(key_field), _single_converter(value_field)
        return lambda items: [(key(k), value(v)) for k, v in items.items()]
    single = _single_converter(field)
    if field.is_repeated:
        return lambda items: [single(item) for item in items]
    return single


def _single_converter(field: FieldDescriptor) -> Converter:
    if field.type in (_F.TYPE_MESSAGE, _F.TYPE_GROUP):
        return _message_converter(_message_of(field))
    if field.type == _F.TYPE_ENUM:
        assert field.enum_type is not None
        names = {value.number: value.name for value in field.enum_type.values}
        return lambda number: names.get(number, str(number))
    if field.type in _UNSIGNED_64:
        return decimal.Decimal
    return _same


def _same(value: Any) -> Any:
    return value
