"""Protobuf messages for the PROTOBUF_NATIVE tests, built from descriptors (no protoc).

``test/place.proto`` defines ``test.Place``; ``test/reading.proto`` imports it and defines
``test.Reading`` (proto3) with a field of most kinds: scalars of each Spark mapping, a proto3
``optional``, an enum, a repeated string, a map, a message, a repeated message.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message

_F = descriptor_pb2.FieldDescriptorProto
_OPTIONAL, _REPEATED = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED


def _field(
    name: str, number: int, kind: int, label: int = _OPTIONAL, type_name: str = "", **more: Any
) -> descriptor_pb2.FieldDescriptorProto:
    if type_name:
        more["type_name"] = type_name
    return _F(name=name, number=number, type=kind, label=label, **more)


def _files() -> list[descriptor_pb2.FileDescriptorProto]:
    place = descriptor_pb2.FileDescriptorProto(name="test/place.proto", package="test")
    place.syntax = "proto3"
    message = place.message_type.add(name="Place")
    message.field.extend([_field("city", 1, _F.TYPE_STRING), _field("zip", 2, _F.TYPE_INT32)])

    reading = descriptor_pb2.FileDescriptorProto(name="test/reading.proto", package="test")
    reading.syntax = "proto3"
    reading.dependency.append("test/place.proto")
    reading.enum_type.add(name="Color").value.extend(
        [
            descriptor_pb2.EnumValueDescriptorProto(name="RED", number=0),
            descriptor_pb2.EnumValueDescriptorProto(name="BLUE", number=1),
        ]
    )
    root = reading.message_type.add(name="Reading")
    entry = root.nested_type.add(name="CountsEntry")
    entry.options.map_entry = True
    entry.field.extend([_field("key", 1, _F.TYPE_STRING), _field("value", 2, _F.TYPE_INT64)])
    root.oneof_decl.add(name="_note")
    root.field.extend(
        [
            _field("name", 1, _F.TYPE_STRING),
            _field("count", 2, _F.TYPE_INT64),
            _field("ratio", 3, _F.TYPE_DOUBLE),
            _field("ok", 4, _F.TYPE_BOOL),
            _field("note", 5, _F.TYPE_STRING, oneof_index=0, proto3_optional=True),
            _field("tags", 6, _F.TYPE_STRING, _REPEATED),
            _field("counts", 7, _F.TYPE_MESSAGE, _REPEATED, ".test.Reading.CountsEntry"),
            _field("color", 8, _F.TYPE_ENUM, type_name=".test.Color"),
            _field("place", 9, _F.TYPE_MESSAGE, type_name=".test.Place"),
            _field("places", 10, _F.TYPE_MESSAGE, _REPEATED, ".test.Place"),
            _field("blob", 11, _F.TYPE_BYTES),
            _field("big", 12, _F.TYPE_UINT64),
            _field("small", 13, _F.TYPE_SINT32),
            _field("ratio32", 14, _F.TYPE_FLOAT),
            _field("unsigned", 15, _F.TYPE_UINT32),
        ]
    )
    return [place, reading]


FILES = _files()
_POOL = descriptor_pool.DescriptorPool()
for _file in FILES:
    _POOL.Add(_file)
Reading: type[Message] = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("test.Reading")
)
Place: type[Message] = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("test.Place"))

READING_SPARK = (
    "struct<name:string,count:bigint,ratio:double,ok:boolean,note:string,tags:array<string>,"
    "counts:map<string,bigint>,color:string,place:struct<city:string,zip:int>,"
    "places:array<struct<city:string,zip:int>>,blob:binary,big:decimal(20,0),small:int,"
    "ratio32:float,unsigned:bigint>"
)
"""The Spark type ``test.Reading`` reads as."""


def schema_data(files: list[descriptor_pb2.FileDescriptorProto] = FILES) -> bytes:
    """A PROTOBUF_NATIVE schema's data for ``test.Reading``, as Java's
    ``ProtobufNativeSchemaUtils`` writes it."""
    descriptors = descriptor_pb2.FileDescriptorSet(file=files)
    return json.dumps(
        {
            "fileDescriptorSet": base64.b64encode(descriptors.SerializeToString()).decode(),
            "rootMessageTypeName": "test.Reading",
            "rootFileDescriptorName": "test/reading.proto",
        }
    ).encode()
