"""The date and time primitive schemas, from payload bytes as Java's Schema classes write them
(big-endian: DateSchema, TimeSchema and TimestampSchema 8-byte milliseconds, InstantSchema
8-byte seconds and 4-byte nanoseconds, LocalDateSchema 8-byte epoch days, LocalTimeSchema
8-byte nanoseconds of the day, LocalDateTimeSchema epoch days and nanoseconds of the day)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType, DateType, TimestampNTZType, TimestampType, TimeType

from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo

TOPIC = "persistent://public/default/times"
UTC = dt.UTC

CASES: list[tuple[str, str, DataType, list[tuple[str, Any]]]] = [
    (
        "Date",
        "date",
        DateType(),
        [
            ("0000000000000000", dt.date(1970, 1, 1)),
            ("ffffffffffffffff", dt.date(1969, 12, 31)),  # -1 ms: the day before
            ("0000000005265c00", dt.date(1970, 1, 2)),
            ("fffffffffad9a3ff", dt.date(1969, 12, 30)),  # -86,400,001 ms
            ("0000019ca9613183", dt.date(2026, 3, 1)),  # 2026-03-01T12:30:45.123Z
        ],
    ),
    (
        "Time",
        "time(6)",
        TimeType(6),
        [
            ("0000000000000000", dt.time(0, 0)),
            ("ffffffffffffffff", dt.time(23, 59, 59, 999000)),  # -1 ms
            ("0000019ca9613183", dt.time(12, 30, 45, 123000)),
        ],
    ),
    (
        "Timestamp",
        "timestamp",
        TimestampType(),
        [
            ("0000000000000000", dt.datetime(1970, 1, 1, tzinfo=UTC)),
            ("ffffffffffffffff", dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
            ("0000019ca9613183", dt.datetime(2026, 3, 1, 12, 30, 45, 123000, tzinfo=UTC)),
        ],
    ),
    (
        "Instant",
        "timestamp",
        TimestampType(),
        [
            ("000000000000000000000000", dt.datetime(1970, 1, 1, tzinfo=UTC)),
            # 1772368245 s + 123456789 ns: the nanoseconds past the microsecond dropped
            ("0000000069a43175075bcd15", dt.datetime(2026, 3, 1, 12, 30, 45, 123456, tzinfo=UTC)),
            # -1 s + 999999999 ns
            ("ffffffffffffffff3b9ac9ff", dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ],
    ),
    (
        "LocalDate",
        "date",
        DateType(),
        [
            ("0000000000000000", dt.date(1970, 1, 1)),
            ("0000000000005021", dt.date(2026, 3, 1)),  # 20513
            ("fffffffffff506c6", dt.date(1, 1, 1)),  # -719162
            ("00000000002cc0a0", dt.date(9999, 12, 31)),  # 2932896
        ],
    ),
    (
        "LocalTime",
        "time(6)",
        TimeType(6),
        [
            ("0000000000000000", dt.time(0, 0)),
            ("00004e94914effff", dt.time(23, 59, 59, 999999)),  # 86399999999999 ns
            ("000029327b04bf79", dt.time(12, 34, 56, 789012)),  # 45296789012345 ns
        ],
    ),
    (
        "LocalDateTime",
        "timestamp_ntz",
        TimestampNTZType(),
        [
            ("00000000000000000000000000000000", dt.datetime(1970, 1, 1)),
            # day 20513, 45045123456789 ns
            ("0000000000005021000028f7e2951f15", dt.datetime(2026, 3, 1, 12, 30, 45, 123456)),
            # day -1, the last nanosecond of it
            ("ffffffffffffffff00004e94914effff", dt.datetime(1969, 12, 31, 23, 59, 59, 999999)),
        ],
    ),
]


def _schema(kind: str) -> ValueSchema:
    info = SchemaInfo(pb.Schema.Type.Value(kind), b"", kind, (), None)
    schema = ValueSchema.of(TOPIC, info)
    assert schema is not None
    return schema


@pytest.mark.parametrize(("kind", "ddl", "spark", "cases"), CASES, ids=[c[0] for c in CASES])
def test_dates_and_times_decode_exactly(
    kind: str, ddl: str, spark: DataType, cases: list[tuple[str, Any]]
) -> None:
    schema = _schema(kind)
    assert schema.spark_type() == ddl
    assert schema.arrow_type() == to_arrow_type(spark, timezone="UTC")
    payloads = [bytes.fromhex(raw) for raw, _ in cases]
    values = pa.array([*payloads, None], pa.binary())
    decoded = ValueDecoder(schema, lambda v: None).decode(values, [None] * len(values))
    assert decoded.type == schema.arrow_type()
    assert decoded.to_pylist() == [*(value for _, value in cases), None]


def test_nulls_alone_and_between_values() -> None:
    decoder = ValueDecoder(_schema("Instant"), lambda v: None)
    assert decoder.decode(pa.array([None, None], pa.binary()), [None, None]).to_pylist() == [
        None,
        None,
    ]
    one = bytes.fromhex("0000000069a43175075bcd15")
    second = dt.datetime(2026, 3, 1, 12, 30, 45, 123456, tzinfo=UTC)
    values = pa.array([None, one, None, one], pa.binary())
    assert decoder.decode(values, [None] * 4).to_pylist() == [None, second, None, second]
    sliced = decoder.decode(values.slice(1, 2), [None] * 2)
    assert sliced.to_pylist() == [second, None]


def test_a_value_of_the_wrong_length_names_topic_type_and_lengths() -> None:
    decoder = ValueDecoder(_schema("LocalDateTime"), lambda v: None)
    values = pa.array([bytes(16), bytes(8)], pa.binary())
    with pytest.raises(SchemaError, match=r"times: a LocalDateTime value must be 16 bytes.* 8 "):
        decoder.decode(values, [None, None])


def test_a_local_date_out_of_spark_range_is_refused() -> None:
    decoder = ValueDecoder(_schema("LocalDate"), lambda v: None)
    values = pa.array([(2**40).to_bytes(8, "big")], pa.binary())
    with pytest.raises(SchemaError, match=r"times: a date is out of Spark's range"):
        decoder.decode(values, [None])
