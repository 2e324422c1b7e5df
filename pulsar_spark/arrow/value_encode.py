"""A column written with a schema: Arrow values to the payloads (or keys) Pulsar's schemas make.

- Primitive schemas, whole columns at once with numpy, as Java's schemas encode one value:
  STRING its UTF-8 bytes, INT32 / INT64 4 / 8 bytes big-endian two's complement, FLOAT /
  DOUBLE the IEEE 754 bits big-endian, BOOLEAN one byte (1 true, 0 false), BYTES the bytes.
- AVRO: each value in Avro binary encoding without a header or fingerprint (what Java's
  ``AvroSchema`` writes): a column at a time with numpy
  (:mod:`~pulsar_spark.arrow.avro_encode`) when it covers the schema, else with fastavro, row
  by row into one buffer.
- JSON: each value as a JSON object text following the Avro schema's fields, as Java's
  ``JSONSchema`` (Jackson) writes it: records as objects, maps as objects, arrays as arrays,
  bytes as base64 text, decimals as decimal text, dates as days since the epoch, timestamps
  as the number of milli- or microseconds its logical type says.

A null value stays null (the message is sent with ``null_value``, as Java does for a null).
The result is a binary column of the same length.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fastavro
import numpy as np
import pyarrow as pa

from pulsar_spark.arrow.avro_encode import encode_avro_column
from pulsar_spark.errors import SchemaError

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_NAIVE = dt.datetime(1970, 1, 1)
_EPOCH_DAY = dt.date(1970, 1, 1)

# Primitive encodings: big-endian numpy dtype by name.
PRIMITIVE_DTYPES: dict[str, str] = {
    "int64": ">i8",
    "int32": ">i4",
    "double": ">f8",
    "float": ">f4",
    "boolean": "u1",
}


@dataclass(frozen=True)
class ColumnEncoding:
    """How a column becomes bytes: ``format`` is ``avro``, ``json``, ``string``, ``bytes``
    or one of :data:`PRIMITIVE_DTYPES`; ``avro`` the Avro schema (JSON form) for the first two.
    """

    format: str
    avro: Any = None
    _parsed: Any = field(default=None, init=False, repr=False, compare=False)

    def encode(self, column: pa.Array, what: str) -> pa.Array:
        """``column`` encoded (see the module); ``what`` names the column in errors."""
        if self.format == "avro":
            columnar = encode_avro_column(column, self.avro, what)
            if columnar is not None:
                return columnar
            return _avro(column, self._parsed_schema(), self.avro, what)
        if self.format == "json":
            return _json(column, self.avro, what)
        if self.format in ("string", "bytes"):
            return column.cast(pa.binary())
        return _fixed_width(column, np.dtype(PRIMITIVE_DTYPES[self.format]))

    def _parsed_schema(self) -> Any:
        if self._parsed is None:
            object.__setattr__(self, "_parsed", fastavro.parse_schema(self.avro))
        return self._parsed


def _fixed_width(column: pa.Array, dtype: np.dtype[Any]) -> pa.Array:
    """Each value as ``dtype``'s bytes, laid out as a binary column (no per-row objects)."""
    count = len(column)
    filled = column.fill_null(False if dtype.kind == "u" else 0)
    values = np.asarray(filled.to_numpy(zero_copy_only=False)).astype(dtype)
    offsets = np.arange(count + 1, dtype=np.int32) * dtype.itemsize
    validity = column.is_valid().buffers()[1] if column.null_count else None
    return pa.Array.from_buffers(
        pa.binary(),
        count,
        [validity, pa.py_buffer(offsets.tobytes()), pa.py_buffer(values.tobytes())],
        null_count=column.null_count,
    )


def _avro(column: pa.Array, parsed: Any, schema: Any, what: str) -> pa.Array:
    out = io.BytesIO()
    ends = np.zeros(len(column) + 1, dtype=np.int64)
    has_maps = '"map"' in json.dumps(schema)
    write = fastavro.schemaless_writer
    for index, value in enumerate(column.to_pylist()):
        if value is not None:
            try:
                write(out, parsed, _maps_as_dicts(value, schema) if has_maps else value)
            except (ValueError, TypeError, KeyError, AttributeError) as exc:
                raise SchemaError(
                    f"{what}: a row does not fit the Avro schema it is written with: {exc!r} "
                    f"(row value: {_shown(value)})"
                ) from exc
        ends[index + 1] = out.tell()
    return _binary(out.getbuffer(), ends, column)


def _binary(data: memoryview, ends: np.ndarray[Any, Any], column: pa.Array) -> pa.Array:
    validity = column.is_valid().buffers()[1] if column.null_count else None
    return pa.Array.from_buffers(
        pa.large_binary(),
        len(column),
        [validity, pa.py_buffer(ends.tobytes()), pa.py_buffer(bytes(data))],
        null_count=column.null_count,
    ).cast(pa.binary())


def _json(column: pa.Array, schema: Any, what: str) -> pa.Array:
    texts: list[bytes | None] = []
    for value in column.to_pylist():
        if value is None:
            texts.append(None)
            continue
        try:
            converted = _for_json(value, schema)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SchemaError(
                f"{what}: a row does not fit the schema it is written with as JSON: {exc!r} "
                f"(row value: {_shown(value)})"
            ) from exc
        texts.append(json.dumps(converted, separators=(",", ":"), ensure_ascii=False).encode())
    return pa.array(texts, pa.binary())


def _maps_as_dicts(value: Any, schema: Any) -> Any:
    """``value`` with Arrow's maps (lists of pairs) as dicts, as fastavro takes them."""
    return _walk(value, schema, _same, _same)


def _for_json(value: Any, schema: Any) -> Any:
    """``value`` as the JSON value Pulsar's JSON schema writes for ``schema`` (see module)."""
    return _walk(value, schema, _json_scalar, _json_logical)


def _same(value: Any, *_: Any) -> Any:
    return value


def _walk(
    value: Any,
    schema: Any,
    scalar: Callable[[Any], Any],
    logical: Callable[[Any, str], Any],
) -> Any:
    """``value`` rebuilt along ``schema``: records and maps as dicts, arrays as lists, other
    values through ``scalar``, values of logical types through ``logical``."""
    if value is None:
        return None
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        return _walk(value, branches[0], scalar, logical) if len(branches) == 1 else value
    if not isinstance(schema, dict):
        return scalar(value)
    kind = schema.get("type")
    if "logicalType" in schema:
        return logical(value, schema["logicalType"])
    if kind == "record":
        return {
            f["name"]: _walk(value.get(f["name"]), f["type"], scalar, logical)
            for f in schema["fields"]
        }
    if kind == "array":
        return [_walk(item, schema["items"], scalar, logical) for item in value]
    if kind == "map":
        pairs = value.items() if isinstance(value, dict) else value
        return {k: _walk(v, schema["values"], scalar, logical) for k, v in pairs}
    if isinstance(kind, (dict, list)):
        return _walk(value, kind, scalar, logical)
    return scalar(value)


def _json_scalar(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return value


def _json_logical(value: Any, logical: str) -> Any:
    if isinstance(value, dt.datetime):
        epoch = _EPOCH if value.tzinfo is not None else _EPOCH_NAIVE
        micros = (value - epoch) // dt.timedelta(microseconds=1)
        return micros // 1000 if logical.endswith("-millis") else micros
    if isinstance(value, dt.date):
        return (value - _EPOCH_DAY).days
    if isinstance(value, decimal.Decimal):
        return str(value)
    return _json_scalar(value)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."
