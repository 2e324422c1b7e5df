"""Avro schemas and encodings the schema tests share."""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import fastavro

from pulsar_spark.local import LocalBrokerError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.key_value import java_type_name, join_key_value, split_key_value

from .topics import full
from .waiting import wait_until

if TYPE_CHECKING:
    import pulsar

    from pulsar_spark.local import ApacheBroker

    from .broker_proxy import ApacheAnswers

EVOLVED: list[dict[str, Any]] = [
    {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}]},
    {
        "type": "record",
        "name": "Event",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "label", "type": "string", "default": "unlabelled"},
            {"name": "weight", "type": "double", "default": 0.0},
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
"""Three versions of one record: two fields with defaults added, then one of them removed. Each
version reads data written with the one before and the one before reads its data, as Apache
Pulsar's default compatibility strategy (FULL) asks."""


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


def _java_type_names() -> dict[str, int]:
    """pb.Schema.Type values by Java's name of the type, as Apache's admin API names them."""
    names = {"KEY_VALUE": pb.Schema.Type.Value("KeyValue")}
    for wire, number in pb.Schema.Type.items():
        if wire not in ("None", "KeyValue", "AutoConsume"):
            names[java_type_name(number)] = number
    return names


JAVA_TYPES = _java_type_names()


class SchemaRegistry:
    """The schema registry a schema test reads and writes through, on the broker it runs on.

    On Apache Pulsar it is the broker's own, seen through the admin API. pulsar-lite keeps no
    schemas, so there a proxy emulating Apache's registry stands in front of it
    (:func:`broker_proxy.apache_proxy`) and keeps them. ``url`` is the service URL the test
    uses (the proxy's, or the broker's), ``client`` an official client of it.
    """

    def __init__(
        self,
        url: str,
        client: pulsar.Client,
        *,
        apache: ApacheBroker | None = None,
        answers: ApacheAnswers | None = None,
    ) -> None:
        self.url = url
        self.client = client
        self.apache = apache
        self.answers = answers

    def versions(self, topic: str) -> list[pb.Schema]:
        """Every version of ``topic``'s schema the broker keeps, oldest first."""
        name = full(topic)
        if self.answers is not None:
            return list(self.answers.schemas.get(name, []))
        assert self.apache is not None
        try:
            kept = self.apache.admin("GET", _schemas_path(name) + "/schemas")
        except LocalBrokerError as exc:
            if "HTTP 404" in str(exc):
                return []
            raise
        return [_from_admin(version, name) for version in kept["getSchemaResponses"]]

    def register(self, topic: str, schema: pb.Schema) -> None:
        """Register ``schema`` for ``topic``, as a Java producer with that schema would."""
        name = full(topic)
        if self.answers is not None:
            self.answers.schemas.setdefault(name, []).append(schema)
            return
        assert self.apache is not None
        self.apache.admin("POST", _schemas_path(name) + "/schema", _to_admin(schema))

    def set_compatibility(self, topic: str, strategy: str) -> None:
        """Give ``topic`` the schema compatibility ``strategy`` (``ALWAYS_COMPATIBLE``,
        ``BACKWARD``, ``FULL``...) through the admin API, creating the topic if need be.

        The proxy's emulation has no strategies: it refuses only what every strategy but
        ``ALWAYS_COMPATIBLE`` refuses, so there is nothing to set.
        """
        apache = self.apache
        if apache is None:
            return
        path = full(topic).replace("persistent://", "/admin/v2/persistent/", 1)
        try:
            apache.admin("PUT", path)
        except LocalBrokerError as exc:
            if "HTTP 409" not in str(exc):  # the topic exists already
                raise
        apache.admin("PUT", f"{path}/schemaCompatibilityStrategy", strategy)
        wait_until(
            lambda: apache.admin("GET", f"{path}/schemaCompatibilityStrategy") == strategy,
            f"the topic's schema compatibility strategy {strategy}",
        )


def _schemas_path(topic: str) -> str:
    """The admin API's path of ``topic``'s schemas."""
    return "/admin/v2/schemas/" + topic.partition("://")[2]


def _to_admin(schema: pb.Schema) -> dict[str, Any]:
    """``schema`` as the admin API takes one: Java's type name, the data as text (a KEY_VALUE
    schema's two halves as a JSON object of ``key`` and ``value``), the properties."""
    if schema.type == pb.Schema.Type.Value("KeyValue"):
        halves = split_key_value(schema.schema_data)
        data = json.dumps({"key": _half_text(halves[0]), "value": _half_text(halves[1])})
    else:
        data = schema.schema_data.decode()
    return {
        "type": next(java for java, number in JAVA_TYPES.items() if number == schema.type),
        "schema": data,
        "properties": {p.key: p.value for p in schema.properties},
    }


def _half_text(half: bytes | None) -> Any:
    """A KEY_VALUE schema's half as the admin API's JSON holds it (parsed, or as text)."""
    text = (half or b"").decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def _from_admin(version: dict[str, Any], topic: str) -> pb.Schema:
    """A version of a schema as the admin API lists it, as a pb.Schema (a KEY_VALUE schema's
    halves laid out as the binary protocol carries them, each as compact JSON)."""
    kind = JAVA_TYPES[version["type"]]
    data = str(version["data"]).encode()
    if kind == pb.Schema.Type.Value("KeyValue"):
        halves = json.loads(version["data"])
        data = join_key_value(*(_half_bytes(halves[h]) for h in ("key", "value")))
    return pb.Schema(
        name=topic.partition("://")[2],
        type=kind,
        schema_data=data,
        properties=[pb.KeyValue(key=k, value=v) for k, v in version["properties"].items()],
    )


def _half_bytes(half: Any) -> bytes:
    return (half if isinstance(half, str) else json.dumps(half, separators=(",", ":"))).encode()
