"""Avro schemas and encodings the schema tests share."""

from __future__ import annotations

import io
from typing import Any

import fastavro

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


def avro_bytes(value: dict[str, Any], schema: dict[str, Any]) -> bytes:
    """``value`` in Avro binary encoding without a header, as Pulsar producers write it."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


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
array<string> and a nested record."""
