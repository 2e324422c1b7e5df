"""Avro values decoded column by column: every value of a record batch at once, with numpy.

How this works
--------------
An Avro value is its fields one after another, each one a varint (int, long, enum, a union's
branch, an array block's count, the length of a string or of bytes), a fixed number of bytes
(float, double, boolean) or bytes whose length came just before. All values of a column are
read in lockstep, one field at a time: a vector holds every value's position, and reading a
field reads it in all of them and moves them all at once (varints with
:func:`~pulsar_spark.common.varints.decode_words`, strings gathered into one Arrow array).

- A union of null and one type reads the branch of every value, then the type for the values
  that have it; the others become nulls.
- Arrays and maps are read round by round: in each round, every value whose current block has
  items left reads one item and the others read their next block's count, until every block
  list has ended. The items, read round by round, are put back in value order at the end.

Whatever this does not cover makes it decline (:func:`decode_avro` returns None), and the
caller decodes the values one by one with fastavro, which also gives the precise error for a
malformed value; :func:`decode_avro_parts` declines part by part instead, so that only the
values near one it cannot read go one by one. It declines on named-type references, fixed,
decimal, uuid and unions other than null and one type (the schema, whatever the values), and
on varints over ten bytes or 64 bits, an array count larger than the bytes left, a date or
time outside Python's (years 1 to 9999, a time of day: fastavro refuses or wraps those), a
value not read exactly to its end, text that is not UTF-8. Every read checks it stays inside
its own value. Longs are read to their full 64 bits (Snowflake ids, hashes, nanosecond times).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pulsar_spark.common.binary_arrays import binary_array
from pulsar_spark.common.spans import Spans
from pulsar_spark.common.varints import byte_words, decode_words

_I64 = npt.NDArray[np.int64]
_U64 = npt.NDArray[np.uint64]
_Bool = npt.NDArray[np.bool_]
_PAD = 16  # zero bytes after the values: a varint or a double read at a value's end stays inside
_ZERO, _ONE, _56, _63 = np.uint64(0), np.uint64(1), np.uint64(56), np.uint64(63)

# Logical types read as their underlying number, times a factor, into their own Arrow type;
# with the range of each (in its own unit) that fastavro, the one-by-one decoder, reads into a
# Python date or time (years 1 to 9999, a time of day): outside it, this decoder declines.
_MILLIS = (-62_135_596_800_000, 253_402_300_799_999)
_MICROS = (_MILLIS[0] * 1000, _MILLIS[1] * 1000 + 999)
_LOGICAL = {
    "timestamp-millis": (1000, *_MILLIS),
    "timestamp-micros": (1, *_MICROS),
    "local-timestamp-millis": (1000, *_MILLIS),
    "local-timestamp-micros": (1, *_MICROS),
    "date": (1, -719_162, 2_932_896),
    "time-millis": (1, 0, 86_399_999),
    "time-micros": (1, 0, 86_399_999_999),
}


class _DeclinedError(Exception):
    """These values need the one-by-one decoder."""


class _UnsupportedError(_DeclinedError):
    """The schema has a type this decoder does not read: so does every part of the values."""


SPLIT_MIN = 64
""":func:`decode_avro_parts` halves what the columnar decoder declines down to parts of this
many values, which the one-by-one decoder then reads."""


def decode_avro(values: pa.Array, schema: Any, arrow_type: pa.DataType) -> pa.Array | None:
    """``values`` (binary, null where the payload is null) decoded with the Avro ``schema`` (its
    JSON form) into ``arrow_type``; None when they need the one-by-one decoder."""
    try:
        column, misread = _decoded(values, schema, arrow_type)
    except _DeclinedError:
        return None
    return None if misread.any() else column


def decode_avro_parts(
    values: pa.Array,
    schema: Any,
    arrow_type: pa.DataType,
    one_by_one: Callable[[pa.Array], pa.Array],
) -> pa.Array:
    """``values`` decoded as :func:`decode_avro` decodes them, declining value by value where
    that is cheap: values not read exactly to their end (the others are right, every read
    stays inside its own value) are taken from ``one_by_one``. A part that declines otherwise
    is halved and each half tried again, down to :data:`SPLIT_MIN` values, which
    ``one_by_one`` decodes: a value it cannot read costs a few more columnar reads, not the
    whole column at the one-by-one decoder's pace. A schema it does not cover goes to
    ``one_by_one`` whole."""
    try:
        column, misread = _decoded(values, schema, arrow_type)
    except _UnsupportedError:
        return one_by_one(values)
    except _DeclinedError:
        if len(values) <= SPLIT_MIN:
            return one_by_one(values)
        half = len(values) // 2
        parts = (values.slice(0, half), values.slice(half))
        return pa.concat_arrays(
            [decode_avro_parts(p, schema, arrow_type, one_by_one) for p in parts]
        )
    if not misread.any():
        return column
    rows = np.flatnonzero(misread)
    index = np.arange(len(column))
    index[rows] = len(column) + np.arange(len(rows))
    again = one_by_one(values.take(pa.array(rows)))
    return pa.concat_arrays([column, again]).take(pa.array(index))


def _decoded(values: pa.Array, schema: Any, arrow_type: pa.DataType) -> tuple[pa.Array, _Bool]:
    """The column, and which values were not read exactly to their end (wrong in it)."""
    buffer, start, end, present = _layout(values)
    reader = _Reader(buffer)
    column, stop = reader.read(schema, arrow_type, start, end)
    misread = stop != end
    if present is None:
        return column, misread
    every = np.zeros(len(present), dtype=np.bool_)
    every[present] = misread
    return _with_nulls(column, present), every


def _layout(values: pa.Array) -> tuple[bytes, _I64, _I64, _Bool | None]:
    """The values' bytes (padded), where each non-null value begins and ends, and which rows
    are not null (None: all of them)."""
    count = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[
        values.offset : values.offset + count + 1
    ].astype(np.int64)
    data = values.buffers()[2]
    buffer = (b"" if data is None else data.to_pybytes()) + bytes(_PAD)
    start, end = offsets[:-1], offsets[1:]
    if values.null_count == 0:
        return buffer, start, end, None
    present = np.asarray(values.is_valid())
    return buffer, start[present], end[present], present


def _with_nulls(column: pa.Array, present: _Bool) -> pa.Array:
    """``column`` (one element per True in ``present``) spread over all rows, null elsewhere."""
    index = np.cumsum(present) - 1
    return column.take(pa.array(index, mask=~present))


class _Reader:
    """Reads fields of many values at once from one buffer."""

    def __init__(self, buffer: bytes) -> None:
        self.buffer = buffer
        size = len(buffer)
        self.u8 = np.frombuffer(buffer, dtype=np.uint8)
        self.u64 = byte_words(buffer)
        self.f64 = np.ndarray(shape=(size - 7,), dtype="<f8", buffer=buffer, strides=(1,))
        self.f32 = np.ndarray(shape=(size - 3,), dtype="<f4", buffer=buffer, strides=(1,))

    def read(self, schema: Any, kind: pa.DataType, at: _I64, end: _I64) -> tuple[pa.Array, _I64]:
        """One value of ``schema`` at each ``at``: the Arrow array and where each one ends."""
        if isinstance(schema, list):
            return self._union(schema, kind, at, end)
        if isinstance(schema, str):
            return self._primitive(schema, kind, at, end)
        logical = schema.get("logicalType")
        if logical in _LOGICAL and schema.get("type") in ("int", "long"):
            number, after = self._long(at, end)
            return _numbers(_logical(number, logical), kind), after
        if logical in ("decimal", "uuid"):
            raise _UnsupportedError
        kind_name = schema.get("type")
        if kind_name == "record":
            return self._record(schema, kind, at, end)
        if kind_name == "array":
            return self._blocks(schema["items"], None, kind, at, end)
        if kind_name == "map":
            return self._blocks(schema["values"], "string", kind, at, end)
        if kind_name == "enum":
            index, after = self._long(at, end)
            symbols = schema["symbols"]
            if len(index) and (index.min() < 0 or index.max() >= len(symbols)):
                raise _DeclinedError
            return pa.array(symbols, pa.string()).take(pa.array(index)), after
        if kind_name == "fixed" or not isinstance(kind_name, (str, list, dict)):
            raise _UnsupportedError
        return self.read(kind_name, kind, at, end)

    def _primitive(
        self, name: str, kind: pa.DataType, at: _I64, end: _I64
    ) -> tuple[pa.Array, _I64]:
        if name in ("int", "long"):
            number, after = self._long(at, end)
            return _numbers(number, kind), after
        if name in ("string", "bytes"):
            return self._bytes(kind, at, end)
        if name == "double":
            return pa.array(self.f64[at], type=kind), self._advance(at, 8, end)
        if name == "float":
            return pa.array(self.f32[at], type=kind), self._advance(at, 4, end)
        if name == "boolean":
            flag = self.u8[at]
            if (flag > 1).any():
                raise _DeclinedError
            return pa.array(flag.astype(np.bool_), type=kind), self._advance(at, 1, end)
        raise _UnsupportedError  # null outside a union, or a named type's reference

    def _advance(self, at: _I64, size: int, end: _I64) -> _I64:
        after = at + size
        if (after > end).any():
            raise _DeclinedError
        return after

    def _long(self, at: _I64, end: _I64) -> tuple[_I64, _I64]:
        """Zigzag varints (Avro int and long), up to the ten bytes of a 64-bit one."""
        first = self.u8[at]
        if (first < 0x80).all():
            raw, after = first.astype(np.uint64), self._advance(at, 1, end)
        else:
            raw, lengths = decode_words(self.u64[at])
            if not lengths.all():
                self._wide(at, raw, lengths)
            after = at + lengths
            if (after > end).any():
                raise _DeclinedError
        decoded: _I64 = ((raw >> _ONE) ^ (_ZERO - (raw & _ONE))).view(np.int64)
        return decoded, after

    def _wide(self, at: _I64, raw: _U64, lengths: _I64) -> None:
        """Complete, in place, the varints longer than the eight bytes ``decode_words`` reads
        (its length 0): their ninth byte, and a tenth that holds the 64th bit only (Java's
        encoder writes no more; a longer one declines)."""
        wide = np.flatnonzero(lengths == 0)
        ninth = self.u8[at[wide] + 8]
        tenth = self.u8[at[wide] + 9]
        nine = ninth < 0x80
        if not (nine | (tenth <= 1)).all():
            raise _DeclinedError
        high = (ninth & 0x7F).astype(np.uint64) << _56
        raw[wide] |= high | (tenth.astype(np.uint64) << _63) * ~nine
        lengths[wide] = np.where(nine, 9, 10)

    def _bytes(self, kind: pa.DataType, at: _I64, end: _I64) -> tuple[pa.Array, _I64]:
        length, begin = self._long(at, end)
        if (length < 0).any() or (length > end - begin).any():
            raise _DeclinedError
        after = begin + length
        array = binary_array(Spans(self.buffer, begin, length))
        if kind == pa.binary():
            return array, after
        text = array.view(pa.string())
        try:
            text.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise _DeclinedError from exc
        return text, after

    def _union(
        self, branches: list[Any], kind: pa.DataType, at: _I64, end: _I64
    ) -> tuple[pa.Array, _I64]:
        if len(branches) != 2 or "null" not in branches:
            raise _UnsupportedError
        typed = 1 - branches.index("null")
        branch, after = self._long(at, end)
        if ((branch != 0) & (branch != 1)).any():
            raise _DeclinedError
        present = branch == typed
        if present.all():
            return self.read(branches[typed], kind, after, end)
        rows = np.flatnonzero(present)
        column, after[rows] = self.read(branches[typed], kind, after[rows], end[rows])
        return _with_nulls(column, present), after

    def _record(
        self, schema: dict[str, Any], kind: pa.DataType, at: _I64, end: _I64
    ) -> tuple[pa.Array, _I64]:
        children = []
        for index, field in enumerate(schema["fields"]):
            child, at = self.read(field["type"], kind.field(index).type, at, end)
            children.append(child)
        fields = [kind.field(index) for index in range(kind.num_fields)]
        return pa.StructArray.from_arrays(children, fields=fields), at

    def _blocks(
        self, item: Any, key: str | None, kind: pa.DataType, at: _I64, end: _I64
    ) -> tuple[pa.Array, _I64]:
        """An array (``key`` None) or a map (``key`` the keys' type): blocks of items, each block
        a count (negative: then its size in bytes follows), ended by a count of 0."""
        rows = len(at)
        at = at.copy()
        left = np.zeros(rows, dtype=np.int64)  # items left in the current block
        open_ = np.ones(rows, dtype=np.bool_)  # the list has not ended
        keys: list[pa.Array] = []
        items: list[pa.Array] = []
        owners: list[_I64] = []
        item_kind = kind.item_type if key is not None else kind.value_type
        while True:
            heads = np.flatnonzero(open_ & (left == 0))
            if len(heads):
                count, at[heads] = self._long(at[heads], end[heads])
                sized = np.flatnonzero(count < 0)
                if len(sized):
                    _, at[heads[sized]] = self._long(at[heads[sized]], end[heads[sized]])
                    count = np.abs(count)  # -2**63 stays negative, and declines
                if (count < 0).any() or (count > end[heads] - at[heads]).any():
                    raise _DeclinedError
                left[heads] = count
                open_[heads[count == 0]] = False
            reading = np.flatnonzero(left > 0)
            if not len(reading):
                break
            if key is not None:
                name, at[reading] = self._bytes(pa.string(), at[reading], end[reading])
                keys.append(name)
            value, at[reading] = self.read(item, item_kind, at[reading], end[reading])
            items.append(value)
            owners.append(reading)
            left[reading] -= 1
        owner = np.concatenate(owners) if owners else np.zeros(0, dtype=np.int64)
        order = pa.array(np.argsort(owner, kind="stable"))
        offsets = np.zeros(rows + 1, dtype=np.int32)
        np.cumsum(np.bincount(owner, minlength=rows), out=offsets[1:])
        values = _joined(items, item_kind).take(order)
        if key is None:
            return pa.ListArray.from_arrays(pa.array(offsets), values, type=kind), at
        names = _joined(keys, pa.string()).take(order)
        return pa.MapArray.from_arrays(pa.array(offsets), names, values, type=kind), at


def _numbers(number: _I64, kind: pa.DataType) -> pa.Array:
    """Decoded ints and longs as ``kind``: int, bigint, or a logical type stored as either."""
    if kind.bit_width == 32:
        if len(number) and (number.min() < -(2**31) or number.max() >= 2**31):
            raise _DeclinedError
        return pa.array(number.astype(np.int32)).view(kind)
    return pa.array(number).view(kind)


def _logical(number: _I64, logical: str) -> _I64:
    """``number`` of a logical type in its Arrow unit; declines outside the type's range."""
    factor, low, high = _LOGICAL[logical]
    if len(number) and (number.min() < low or number.max() > high):
        raise _DeclinedError
    scaled: _I64 = number * factor
    return scaled


def _joined(parts: list[pa.Array], kind: pa.DataType) -> pa.Array:
    return pa.concat_arrays(parts) if parts else pa.array([], type=kind)
