"""Avro binary encoding of whole Arrow columns, with numpy: no Python object per row.

Each Avro type is encoded for every row of a column at once into *pieces*: one byte buffer and
the offsets where each row's bytes start (``offsets[i]:offsets[i + 1]``). A record's pieces are
its fields' pieces laid side by side row by row; an array's are, per row, the item count, the
span its items' pieces take, and the end marker; a union of null and a type is the branch
number and, for the rows that are not null, the type's pieces.

The encoding is Avro's: ints and longs as zigzag varints, floats and doubles as little-endian
IEEE 754, booleans as one byte, strings and bytes as a varint length and the bytes, arrays and
maps as one block of items (count, items) and a zero, union branches as varints, records as
their fields in order, enums as their symbol's position, fixed as the bytes alone. Logical
types ``date``, ``timestamp-millis`` / ``-micros`` and ``local-timestamp-millis`` / ``-micros``
are their underlying int or long, ``decimal`` (as bytes) the unscaled value's minimal two's
complement, big-endian.

:func:`encode_avro_column` returns None for a schema it does not :func:`cover <covers>`
(decimals other than bytes of the column's scale, other logical types, named type references,
unions of other shapes, a record whose fields the column does not have in the same order): the
caller encodes those row by row.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from pulsar_spark.common.byte_rows import ranges
from pulsar_spark.common.varints import encode_varints
from pulsar_spark.errors import SchemaError

_Bytes = npt.NDArray[np.uint8]
_Ints = npt.NDArray[np.int64]
Pieces = tuple[_Bytes, _Ints]


_SIMPLE = {
    "int": pa.types.is_integer,
    "long": pa.types.is_integer,
    "float": lambda t: pa.types.is_integer(t) or pa.types.is_floating(t),
    "double": lambda t: pa.types.is_integer(t) or pa.types.is_floating(t),
    "boolean": pa.types.is_boolean,
    "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "bytes": lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t),
}
_TIMESTAMPS = (
    "timestamp-millis",
    "timestamp-micros",
    "local-timestamp-millis",
    "local-timestamp-micros",
)


def encode_avro_column(column: pa.Array, schema: Any, what: str) -> pa.Array | None:
    """``column`` in Avro binary, one value per row (null rows stay null); None when the schema
    has a type this module does not cover."""
    if not covers(schema, column.type):
        return None
    valid = column.is_valid()
    present = column.filter(valid) if column.null_count else column
    data, offsets = _encode(present, schema, what)
    if column.null_count:
        offsets = _spread(offsets, valid.to_numpy(zero_copy_only=False))
    validity = valid.buffers()[1] if column.null_count else None
    return pa.Array.from_buffers(
        pa.large_binary(),
        len(column),
        [validity, pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=column.null_count,
    ).cast(pa.binary())


def covers(schema: Any, data_type: pa.DataType) -> bool:
    """Whether this module encodes ``data_type`` values with the Avro ``schema``."""
    if isinstance(schema, list):
        others = [b for b in schema if b != "null"]
        return len(schema) == 2 and len(others) == 1 and covers(others[0], data_type)
    if isinstance(schema, str):
        return schema in _SIMPLE and bool(_SIMPLE[schema](data_type))
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical in _TIMESTAMPS:
        return bool(pa.types.is_timestamp(data_type))
    if logical == "date":
        return bool(pa.types.is_date(data_type))
    if logical == "decimal" and kind == "bytes" and pa.types.is_decimal128(data_type):
        return bool(data_type.scale == int(schema.get("scale", 0)))
    if logical is not None:
        return False
    if kind == "record":
        return pa.types.is_struct(data_type) and _covers_fields(schema["fields"], data_type)
    if kind == "array":
        lists = pa.types.is_list(data_type) or pa.types.is_large_list(data_type)
        return lists and covers(schema["items"], data_type.value_type)
    if kind == "map":
        return pa.types.is_map(data_type) and covers(schema["values"], data_type.item_type)
    if kind in ("enum", "fixed"):
        return bool(_SIMPLE["string" if kind == "enum" else "bytes"](data_type))
    return isinstance(kind, (str, list)) and covers(kind, data_type)


def _covers_fields(fields: list[dict[str, Any]], data_type: pa.StructType) -> bool:
    names = [data_type.field(i).name for i in range(data_type.num_fields)]
    if names != [f["name"] for f in fields]:
        return False  # fields the column lacks take their defaults: left to the row encoder
    return all(covers(f["type"], data_type.field(f["name"]).type) for f in fields)


def _encode(array: pa.Array, schema: Any, path: str) -> Pieces:
    if isinstance(schema, list):
        return _union(array, schema, path)
    if array.null_count:
        raise SchemaError(
            f"{path}: a row has a null where the Avro schema it is written with, "
            f"{schema if isinstance(schema, str) else schema.get('type')}, takes no null"
        )
    if isinstance(schema, dict):
        return _complex(array, schema, path)
    if schema in ("int", "long"):
        return _varints(_as_ints(array))
    if schema in ("float", "double"):
        dtype = "<f4" if schema == "float" else "<f8"
        values = np.asarray(array.to_numpy(zero_copy_only=False), dtype=dtype)
        return _fixed(values.view(np.uint8), values.dtype.itemsize, len(array))
    if schema == "boolean":
        values = np.asarray(array.to_numpy(zero_copy_only=False), dtype=np.uint8)
        return _fixed(values, 1, len(array))
    return _blobs(array)  # string or bytes


def _complex(array: pa.Array, schema: dict[str, Any], path: str) -> Pieces:
    kind, logical = schema.get("type"), schema.get("logicalType")
    if logical in _TIMESTAMPS:
        micros = array.cast(pa.timestamp("us", tz=getattr(array.type, "tz", None)))
        values = np.asarray(micros.cast(pa.int64()).to_numpy(zero_copy_only=False))
        return _varints(values // 1000 if logical.endswith("millis") else values)
    if logical == "date":
        return _varints(_as_ints(array.cast(pa.date32()).cast(pa.int32())))
    if logical == "decimal":
        return _decimals(array)
    if kind == "record":
        children = array.flatten()
        parts = [
            _encode(child, field["type"], f"{path}.{field['name']}")
            for child, field in zip(children, schema["fields"], strict=True)
        ]
        return _side_by_side(parts, len(array))
    if kind == "array":
        items = _encode(array.flatten(), schema["items"], f"{path}[]")
        return _blocks(array, items)
    if kind == "map":
        # a map's keys and items are its whole children, whatever slice the map is
        bounds = array.offsets
        start, stop = bounds[0].as_py(), bounds[-1].as_py()
        keys, values = array.keys.slice(start, stop - start), array.items.slice(start, stop - start)
        entries = [_blobs(keys), _encode(values, schema["values"], f"{path}{{}}")]
        return _blocks(array, _side_by_side(entries, len(keys)))
    if kind == "enum":
        return _symbols(array, schema["symbols"], path)
    if kind == "fixed":
        return _fixed_bytes(array, int(schema["size"]), path)
    return _encode(array, kind, path)


def _symbols(array: pa.Array, symbols: list[str], path: str) -> Pieces:
    """An enum: each value's position among the symbols."""
    positions = pc.index_in(array, value_set=pa.array(symbols, pa.string()))
    if positions.null_count:
        first = array.filter(positions.is_null())[0].as_py()
        raise SchemaError(
            f"{path}: {first!r} is not a symbol of the Avro enum it is written as "
            f"(its symbols: {', '.join(symbols)})"
        )
    return _varints(_as_ints(positions))


def _fixed_bytes(array: pa.Array, size: int, path: str) -> Pieces:
    """A fixed: the bytes alone, each value exactly ``size`` of them."""
    data, offsets = _blobs_of(array)
    if np.any(np.diff(offsets) != size):
        raise SchemaError(f"{path}: a value is not {size} bytes long, as the Avro fixed type says")
    return data, offsets


def _union(array: pa.Array, schema: list[Any], path: str) -> Pieces:
    null_branch = schema.index("null")
    other = schema[1 - null_branch]
    valid = array.is_valid().to_numpy(zero_copy_only=False)
    branch = np.where(valid, 1 - null_branch, null_branch).astype(np.int64)
    present = array.filter(pa.array(valid)) if array.null_count else array
    data, offsets = _encode(present, other, path)
    if array.null_count:
        offsets = _spread(offsets, valid)
    return _side_by_side([_varints(branch), (data, offsets)], len(array))


def _as_ints(array: pa.Array) -> _Ints:
    return np.asarray(array.cast(pa.int64()).to_numpy(zero_copy_only=False), dtype=np.int64)


def _fixed(data: _Bytes, width: int, count: int) -> Pieces:
    return data, np.arange(count + 1, dtype=np.int64) * width


def _varints(values: _Ints) -> Pieces:
    """Zigzag varints of ``values`` (Avro's ints and longs)."""
    values = np.asarray(values, dtype=np.int64)
    return encode_varints(((values << 1) ^ (values >> 63)).view(np.uint64))


def _blobs(array: pa.Array) -> Pieces:
    """Strings or bytes: each its varint length, then the bytes."""
    data, offsets = _blobs_of(array)
    return _side_by_side([_varints(np.diff(offsets)), (data, offsets)], len(array))


def _blobs_of(array: pa.Array) -> Pieces:
    """The bytes of strings or bytes, read in place, and where each begins in them."""
    if not pa.types.is_large_binary(array.type):
        array = array.cast(pa.large_binary())
    _, offset_buffer, data_buffer = array.buffers()
    offsets = np.frombuffer(
        offset_buffer, dtype=np.int64, count=len(array) + 1, offset=array.offset * 8
    )
    data = np.frombuffer(data_buffer if data_buffer is not None else b"", dtype=np.uint8)
    return data, offsets


def _decimals(array: pa.Array) -> Pieces:
    """Decimals as bytes: the unscaled value in two's complement, big-endian, in as few bytes
    as hold it (Java's ``BigInteger.toByteArray``)."""
    count = len(array)
    _, buffer = array.buffers()
    little = np.frombuffer(buffer, dtype=np.uint8, count=count * 16, offset=array.offset * 16)
    big = little.reshape(count, 16)[:, ::-1]
    # a leading byte can go when it only repeats the sign of the byte after it
    redundant = ((big[:, :-1] == 0x00) & (big[:, 1:] < 0x80)) | (
        (big[:, :-1] == 0xFF) & (big[:, 1:] >= 0x80)
    )
    dropped = np.cumprod(redundant, axis=1).sum(axis=1).astype(np.int64)
    sizes = 16 - dropped
    starts = np.arange(count, dtype=np.int64) * 16 + dropped
    flat = np.ascontiguousarray(big).reshape(-1)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    data = flat[_ranges(starts, sizes)]
    return _side_by_side([_varints(sizes), (data, offsets)], count)


def _blocks(array: pa.Array, items: Pieces) -> Pieces:
    """Arrays and maps: per row, the count and its items (when any), then the end marker."""
    item_data, item_offsets = items
    bounds = np.asarray(array.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    bounds = bounds - bounds[0]
    counts = np.diff(bounds)
    filled = counts > 0  # an empty one is the end marker alone
    count_data, count_offsets = _varints(counts[filled])
    counted = (count_data, _spread(count_offsets, filled))
    end = _fixed(np.zeros(len(array), dtype=np.uint8), 1, len(array))
    return _side_by_side([counted, (item_data, item_offsets[bounds]), end], len(array))


def _spread(offsets: _Ints, valid: npt.NDArray[np.bool_]) -> _Ints:
    """Offsets of the valid rows' pieces widened to every row, the others empty."""
    sizes = np.zeros(len(valid), dtype=np.int64)
    sizes[valid] = np.diff(offsets)
    out = np.zeros(len(valid) + 1, dtype=np.int64)
    np.cumsum(sizes, out=out[1:])
    return out


def _ranges(starts: _Ints, sizes: _Ints) -> npt.NDArray[np.intp]:
    """Every index ``starts[i] .. starts[i] + sizes[i] - 1``, in order."""
    return ranges(starts, starts + sizes)[0]


def _side_by_side(parts: list[Pieces], count: int) -> Pieces:
    """Each row's bytes from every part, in order: row 0 of every part, then row 1..."""
    sizes = [np.diff(offsets) for _, offsets in parts]
    total = np.sum(sizes, axis=0) if parts else np.zeros(count, dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int64)
    np.cumsum(total, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    position = offsets[:-1].copy()
    for (data, part_offsets), size in zip(parts, sizes, strict=True):
        out[_ranges(position, size)] = data[_ranges(part_offsets[:-1], size)]
        position += size
    return out, offsets
