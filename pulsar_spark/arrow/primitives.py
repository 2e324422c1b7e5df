"""Primitive schemas: their Spark types, and payloads decoded to those types' Arrow arrays.

Each primitive is encoded as Java's ``Schema`` classes encode it, big-endian:

=================  ===================================  ==================  =====================
Pulsar schema      payload                              Spark type          value
=================  ===================================  ==================  =====================
String             UTF-8 text                           string              not UTF-8: as Java
                                                                            reads it (U+FFFD)
Bool               1 byte, 0 false                      boolean
Int8 ... Int64     1, 2, 4, 8-byte two's complement     tinyint ... bigint
Float / Double     4 / 8-byte IEEE 754                  float / double
Date               8 bytes: ms since the epoch          date                the UTC day
                   (``java.util.Date``)
Time               8 bytes: ms since the epoch          time(6)             the UTC time of day
                   (``java.sql.Time``)
Timestamp          8 bytes: ms since the epoch          timestamp           the instant
Instant            12 bytes: seconds since the epoch    timestamp           the instant, to the
                   (8) and nanoseconds (4)                                  microsecond (floored)
LocalDate          8 bytes: days since 1970-01-01       date
LocalTime          8 bytes: nanoseconds of the day      time(6)             to the microsecond
LocalDateTime      16 bytes: days since 1970-01-01 (8)  timestamp_ntz       to the microsecond
                   and nanoseconds of the day (8)                           (floored)
=================  ===================================  ==================  =====================

Decoding is vectorised: the bytes of every non-null value are gathered with numpy and read as
one array; a value of another length is refused with an error naming the topic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pulsar_spark.arrow.decode import java_text
from pulsar_spark.common.arrow_types import TIMESTAMP_TYPE
from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol import pb

SchemaType = pb.Schema.Type

_MS_PER_DAY = 86_400_000
_US_PER_DAY = 86_400_000_000
TIME_TYPE = pa.time64("ns")  # what Spark's time(6) is in Arrow
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Primitive:
    """One primitive schema: Spark DDL, Arrow type, payload layout and conversion."""

    ddl: str
    arrow: pa.DataType
    layout: np.dtype[np.void] | np.dtype[np.generic] | None  # None: UTF-8 text
    convert: Callable[[np.ndarray], np.ndarray]

    @property
    def width(self) -> int:
        assert self.layout is not None
        return self.layout.itemsize

    def decode(self, values: pa.Array, topic: str, name: str) -> pa.Array:
        """``values`` (binary, null for null values) as an array of :attr:`arrow`."""
        if self.layout is None:
            return java_text(values.cast(pa.binary()))
        valid = ~np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=np.bool_)
        raw = _gather(values, valid, self.width, topic, name).view(self.layout)
        try:
            converted = self.convert(raw)
        except SchemaError as exc:
            raise SchemaError(f"topic {topic}: {exc}") from exc
        return pa.array(converted, type=self.arrow, mask=~valid)


def _gather(
    values: pa.Array, valid: npt.NDArray[np.bool_], width: int, topic: str, name: str
) -> npt.NDArray[np.uint8]:
    """The bytes of every value, ``width`` each (zeros for null values), end to end."""
    values = values.cast(pa.binary())
    count = len(values)
    offsets = np.frombuffer(values.buffers()[1], np.int32, count + 1, values.offset * 4)
    starts = offsets[:-1].astype(np.int64)
    lengths = np.diff(offsets)
    wrong = valid & (lengths != width)
    if wrong.any():
        bad = int(lengths[np.flatnonzero(wrong)[0]])
        raise SchemaError(
            f"topic {topic}: a {name} value must be {width} bytes, but one is {bad} bytes"
        )
    data = values.buffers()[2]
    buffer = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
    if buffer.size < width:  # no value that is not null
        buffer = np.zeros(width, np.uint8)
    # a null value takes the first bytes of the buffer, zeroed below
    gathered = buffer[np.where(valid, starts, 0)[:, None] + np.arange(width)]
    gathered[~valid] = 0
    return np.ascontiguousarray(gathered).reshape(-1)


def _plain(dtype: str) -> Callable[[np.ndarray], np.ndarray]:
    return lambda raw: raw.astype(dtype)


def _date_of_millis(raw: Ints) -> np.ndarray:
    return _days(np.floor_divide(raw.astype(np.int64), _MS_PER_DAY))


def _time_of_millis(raw: Ints) -> Ints:
    return np.mod(raw.astype(np.int64), _MS_PER_DAY) * 1_000_000


def _micros_of_millis(raw: Ints) -> Ints:
    return raw.astype(np.int64) * 1000


def _micros_of_instant(raw: np.ndarray) -> Ints:
    seconds = raw["seconds"].astype(np.int64)
    return seconds * 1_000_000 + np.floor_divide(raw["nanos"].astype(np.int64), 1000)


def _days(raw: Ints) -> np.ndarray:
    days = raw.astype(np.int64)
    if days.size and (days.min() < -(2**31) or days.max() >= 2**31):
        raise SchemaError("a date is out of Spark's range (days must fit 32 bits)")
    return days.astype(np.int32)


def _time_of_nanos(raw: Ints) -> Ints:
    nanos = raw.astype(np.int64)
    return nanos - np.mod(nanos, 1000)  # Spark keeps microseconds


def _micros_of_local(raw: np.ndarray) -> Ints:
    days = raw["day"].astype(np.int64)
    return days * _US_PER_DAY + np.floor_divide(raw["nanos"].astype(np.int64), 1000)


_LONG = np.dtype(">i8")
PRIMITIVES: dict[int, Primitive] = {
    SchemaType.Value("String"): Primitive("string", pa.string(), None, _plain("U")),
    SchemaType.Value("Bool"): Primitive("boolean", pa.bool_(), np.dtype("u1"), lambda r: r != 0),
    SchemaType.Value("Int8"): Primitive("tinyint", pa.int8(), np.dtype("i1"), _plain("i1")),
    SchemaType.Value("Int16"): Primitive("smallint", pa.int16(), np.dtype(">i2"), _plain("i2")),
    SchemaType.Value("Int32"): Primitive("int", pa.int32(), np.dtype(">i4"), _plain("i4")),
    SchemaType.Value("Int64"): Primitive("bigint", pa.int64(), _LONG, _plain("i8")),
    SchemaType.Value("Float"): Primitive("float", pa.float32(), np.dtype(">f4"), _plain("f4")),
    SchemaType.Value("Double"): Primitive("double", pa.float64(), np.dtype(">f8"), _plain("f8")),
    SchemaType.Value("Date"): Primitive("date", pa.date32(), _LONG, _date_of_millis),
    SchemaType.Value("Time"): Primitive("time(6)", TIME_TYPE, _LONG, _time_of_millis),
    SchemaType.Value("Timestamp"): Primitive("timestamp", TIMESTAMP_TYPE, _LONG, _micros_of_millis),
    SchemaType.Value("Instant"): Primitive(
        "timestamp",
        TIMESTAMP_TYPE,
        np.dtype([("seconds", ">i8"), ("nanos", ">i4")]),
        _micros_of_instant,
    ),
    SchemaType.Value("LocalDate"): Primitive("date", pa.date32(), _LONG, _days),
    SchemaType.Value("LocalTime"): Primitive("time(6)", TIME_TYPE, _LONG, _time_of_nanos),
    SchemaType.Value("LocalDateTime"): Primitive(
        "timestamp_ntz",
        pa.timestamp("us"),
        np.dtype([("day", ">i8"), ("nanos", ">i8")]),
        _micros_of_local,
    ),
}
