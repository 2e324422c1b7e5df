"""The column-by-column Avro decoder against the values themselves: every field of every record,
nulls, empty and multi-block arrays and maps, and every case where it must leave the values to
the one-by-one decoder."""

from __future__ import annotations

import datetime as dt
import io
import random
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from pulsar_spark.arrow.avro_decode import decode_avro, decode_avro_parts
from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo

INNER = {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "int"}]}
RICH: dict[str, Any] = {
    "type": "record",
    "name": "Rich",
    "fields": [
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "opt", "type": ["null", "string"]},
        {"name": "later", "type": ["long", "null"]},
        {"name": "colour", "type": {"type": "enum", "name": "Colour", "symbols": ["R", "G", "B"]}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "local", "type": {"type": "long", "logicalType": "local-timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "nums", "type": {"type": "array", "items": ["null", "long"]}},
        {"name": "weights", "type": {"type": "map", "values": "double"}},
        {
            "name": "place",
            "type": {
                "type": "record",
                "name": "Place",
                "fields": [
                    {"name": "city", "type": "string"},
                    {"name": "inner", "type": {"type": "array", "items": INNER}},
                ],
            },
        },
        {
            "name": "maybe",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Maybe",
                    "fields": [{"name": "m", "type": {"type": "map", "values": "string"}}],
                },
            ],
        },
    ],
}
UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1)


def record(rng: random.Random) -> dict[str, Any]:
    """One random record of RICH: negative numbers, empty strings and collections, nulls."""

    def text(limit: int = 12) -> str:
        return "".join(rng.choice("abcé€😀 ") for _ in range(rng.randint(0, limit)))

    millis = rng.randint(-(10**12), 4 * 10**12)
    return {
        "s": text(),
        "b": rng.randbytes(rng.randint(0, 20)),
        "i": rng.randint(-(2**31), 2**31 - 1),
        "l": rng.choice([rng.randint(-(2**55), 2**55 - 1), rng.randint(-(2**63), 2**63 - 1)]),
        "f": rng.choice([0.0, -1.5, 3.25, 1e30]),
        "d": rng.uniform(-1e9, 1e9),
        "ok": rng.random() < 0.5,
        "opt": None if rng.random() < 0.4 else text(),
        "later": None if rng.random() < 0.4 else rng.randint(-1000, 1000),
        "colour": rng.choice(["R", "G", "B"]),
        "ts": dt.datetime.fromtimestamp(millis / 1000, tz=UTC),
        "tsu": rng.randint(-(10**15), 10**16),
        "day": dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-30_000, 30_000)),
        "tm": rng.randint(0, 86_399_999),
        "local": EPOCH + dt.timedelta(milliseconds=millis),
        "tags": [text(4) for _ in range(rng.randint(0, 4))],
        "nums": [
            None if rng.random() < 0.3 else rng.randint(-9, 9) for _ in range(rng.randint(0, 3))
        ],
        "weights": {text(3) + str(n): rng.uniform(0, 1) for n in range(rng.randint(0, 3))},
        "place": {
            "city": text(),
            "inner": [{"x": rng.randint(-5, 5)} for _ in range(rng.randint(0, 2))],
        },
        "maybe": None
        if rng.random() < 0.5
        else {"m": {"k": text(3)} if rng.random() < 0.5 else {}},
    }


def avro(value: Any, schema: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def one_by_one(schema: Any, payloads: list[bytes | None]) -> pa.Array:
    """What the one-by-one decoder makes of ``payloads``: the reference."""
    info = SchemaInfo(pb.Schema.Type.Value("Avro"), fastavro_json(schema), "t", (), None)
    value_schema = ValueSchema.of("t", info)
    assert value_schema is not None
    decoder = ValueDecoder(value_schema, lambda version: None)
    values = [None if p is None else decoder._avro(p, None) for p in payloads]
    return pa.array(values, type=value_schema.arrow_type())


def fastavro_json(schema: Any) -> bytes:
    import json

    return json.dumps(schema).encode()


def arrow_type(schema: Any) -> pa.DataType:
    info = SchemaInfo(pb.Schema.Type.Value("Avro"), fastavro_json(schema), "t", (), None)
    value_schema = ValueSchema.of("t", info)
    assert value_schema is not None
    return value_schema.arrow_type()


def test_every_field_of_every_record_matches_the_one_by_one_decoder() -> None:
    rng = random.Random(7)
    payloads: list[bytes | None] = [
        None if n % 17 == 5 else avro(record(rng), RICH) for n in range(600)
    ]
    column = decode_avro(pa.array(payloads, pa.binary()), RICH, arrow_type(RICH))
    assert column is not None
    expected = one_by_one(RICH, payloads)
    assert column.type == expected.type
    assert column.to_pylist() == expected.to_pylist()
    assert column.null_count == sum(p is None for p in payloads)


def test_a_slice_of_a_larger_array_is_decoded_from_its_own_offset() -> None:
    rng = random.Random(3)
    payloads: list[bytes | None] = [avro(record(rng), RICH) for _ in range(40)]
    whole = pa.array(payloads, pa.binary())
    column = decode_avro(whole.slice(11, 20), RICH, arrow_type(RICH))
    assert column is not None
    assert column.to_pylist() == one_by_one(RICH, payloads[11:31]).to_pylist()


def test_blocks_with_byte_sizes_and_several_blocks_per_array() -> None:
    schema = {"type": "array", "items": "long"}
    # [1, 2, 3] as a block of -2 items (then its size: 2 bytes), a block of 1, then the end;
    # [] as just the end; [-1] as one block. Longs are zigzag varints: 1 -> 02, -1 -> 01.
    payloads: list[bytes | None] = [
        bytes([0x03, 0x04, 0x02, 0x04, 0x02, 0x06, 0x00]),
        bytes([0x00]),
        bytes([0x02, 0x01, 0x00]),
    ]
    column = decode_avro(pa.array(payloads, pa.binary()), schema, arrow_type(schema))
    assert column is not None
    assert column.to_pylist() == [[1, 2, 3], [], [-1]]
    assert column.to_pylist() == one_by_one(schema, payloads).to_pylist()


FULL_RANGE = [
    -(2**63),
    2**63 - 1,
    -(2**55),
    2**55,
    2**56,
    -(2**62),
    (1_764_000_000_000 << 22) | 4095,  # a Snowflake id
    1_764_000_000_123_456_789,  # a time in nanoseconds
    -1,
    0,
]


def test_longs_of_nine_and_ten_bytes_are_read_to_their_full_64_bits() -> None:
    values = [{"n": n} for n in FULL_RANGE]
    payloads: list[bytes | None] = [avro(v, LONG) for v in values]
    assert [len(p or b"") for p in payloads] == [10, 10, 8, 9, 9, 9, 10, 9, 1, 1]
    column = decode_avro(pa.array(payloads, pa.binary()), LONG, arrow_type(LONG))
    assert column is not None
    assert column.to_pylist() == values
    assert column.to_pylist() == one_by_one(LONG, payloads).to_pylist()


def test_multi_byte_varints_and_strings_longer_than_a_word() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}],
    }
    values = [
        {"n": 2**55 - 1, "s": "x" * 300},
        {"n": -(2**55), "s": ""},
        {"n": 127, "s": "ü" * 70},
        {"n": -64, "s": "z"},
    ]
    payloads: list[bytes | None] = [avro(v, schema) for v in values]
    column = decode_avro(pa.array(payloads, pa.binary()), schema, arrow_type(schema))
    assert column is not None
    assert column.to_pylist() == values


def _declined(schema: Any, payloads: list[bytes | None]) -> bool:
    return decode_avro(pa.array(payloads, pa.binary()), schema, arrow_type(schema)) is None


LONG = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
DAY = {"type": "int", "logicalType": "date"}
TIME_MILLIS = {"type": "int", "logicalType": "time-millis"}
TEXT = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"}]}


@pytest.mark.parametrize(
    ("schema", "payloads"),
    [
        pytest.param(LONG, [bytes([0x80] * 10 + [0x00])], id="varint-over-10-bytes"),
        pytest.param(
            {"type": "record", "name": "T", "fields": [{"name": "t", "type": MILLIS}]},
            [avro({"n": 253_402_300_800_000}, LONG)],
            id="millis-past-year-9999",
        ),
        pytest.param(
            {"type": "record", "name": "D", "fields": [{"name": "d", "type": DAY}]},
            [avro({"n": -719_163}, LONG)],
            id="date-before-year-1",
        ),
        pytest.param(
            {"type": "record", "name": "M", "fields": [{"name": "m", "type": TIME_MILLIS}]},
            [avro({"n": -1}, LONG)],
            id="time-before-midnight",
        ),
        pytest.param(LONG, [bytes([0xFE] * 9 + [0x03])], id="varint-over-64-bits"),
        pytest.param(
            {"type": "record", "name": "T", "fields": [{"name": "t", "type": MILLIS}]},
            [avro({"n": 2**63 // 1000 + 1}, LONG)],
            id="millis-past-int64-micros",
        ),
        pytest.param(TEXT, [avro({"n": 2**62}, LONG) + b"abc"], id="length-past-int64"),
        pytest.param(
            {"type": "array", "items": "long"},
            [avro({"n": -(2**63)}, LONG) + avro({"n": 2}, LONG) + b"\x02\x00"],
            id="block-count-min-long",
        ),
        pytest.param(LONG, [avro({"n": 300}, LONG)[:-1]], id="truncated-varint"),
        pytest.param(LONG, [avro({"n": 3}, LONG) + b"\x00"], id="trailing-byte"),
        pytest.param(TEXT, [avro({"s": "abc"}, TEXT)[:-1]], id="truncated-string"),
        pytest.param(TEXT, [bytes([0x04, 0xFF, 0xFE])], id="not-utf8"),
        pytest.param(TEXT, [bytes([0x03, 0x41])], id="negative-length"),
        pytest.param(
            {
                "type": "record",
                "name": "U",
                "fields": [{"name": "u", "type": {"type": "string", "logicalType": "uuid"}}],
            },
            [
                avro(
                    {"u": "0b7f3a58-3c3e-4d7c-9d2a-7a1f5e9b0c11"},
                    {
                        "type": "record",
                        "name": "U",
                        "fields": [
                            {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}
                        ],
                    },
                )
            ],
            id="uuid",
        ),
        pytest.param(
            {"type": "array", "items": "long"}, [bytes([0x7E, 0x02, 0x00])], id="count-past-the-end"
        ),
        pytest.param(
            {"type": "record", "name": "B", "fields": [{"name": "ok", "type": "boolean"}]},
            [bytes([0x02])],
            id="boolean-not-0-or-1",
        ),
    ],
)
def test_values_it_cannot_read_exactly_are_left_to_the_one_by_one_decoder(
    schema: Any, payloads: list[bytes | None]
) -> None:
    assert _declined(schema, payloads)


def test_all_null_and_empty_columns() -> None:
    kind = arrow_type(RICH)
    nulls = decode_avro(pa.array([None, None], pa.binary()), RICH, kind)
    assert nulls is not None and nulls.to_pylist() == [None, None] and nulls.type == kind
    empty = decode_avro(pa.array([], pa.binary()), RICH, kind)
    assert empty is not None and len(empty) == 0 and empty.type == kind


class Counted:
    """The one-by-one decoder of a schema, counting the values it is given."""

    def __init__(self, schema: Any) -> None:
        self.schema = schema
        self.calls: list[int] = []

    def __call__(self, values: pa.Array) -> pa.Array:
        self.calls.append(len(values))
        return one_by_one(self.schema, values.to_pylist())


def test_a_value_not_read_to_its_end_alone_goes_one_by_one() -> None:
    rng = random.Random(11)
    payloads: list[bytes | None] = [
        None if n % 13 == 4 else avro(record(rng), RICH) for n in range(1000)
    ]
    payloads[700] = avro(record(rng), RICH) + b"\x00"  # a byte past its end: fastavro ignores it
    slow = Counted(RICH)
    column = decode_avro_parts(pa.array(payloads, pa.binary()), RICH, arrow_type(RICH), slow)
    assert column.to_pylist() == one_by_one(RICH, payloads).to_pylist()
    assert column.type == arrow_type(RICH)
    assert slow.calls == [1]


FLAG = {
    "type": "record",
    "name": "B",
    "fields": [{"name": "ok", "type": "boolean"}, {"name": "s", "type": "string"}],
}


def test_a_value_the_columns_decline_goes_one_by_one_with_its_neighbours_only() -> None:
    payloads: list[bytes | None] = [
        None if n % 9 == 2 else avro({"ok": n % 2 == 0, "s": "x" * (n % 5)}, FLAG)
        for n in range(1000)
    ]
    payloads[700] = b"\x02\x02y"  # a boolean byte of 2: fastavro reads it as true
    slow = Counted(FLAG)
    column = decode_avro_parts(pa.array(payloads, pa.binary()), FLAG, arrow_type(FLAG), slow)
    assert column.to_pylist() == one_by_one(FLAG, payloads).to_pylist()
    assert column.to_pylist()[700] == {"ok": True, "s": "y"}
    assert slow.calls == [63]  # halved four times: values 687 to 749 go one by one


def test_a_schema_the_columns_do_not_cover_goes_one_by_one_at_once() -> None:
    schema = {
        "type": "record",
        "name": "F",
        "fields": [{"name": "f", "type": {"type": "fixed", "name": "Four", "size": 4}}],
    }
    payloads: list[bytes | None] = [avro({"f": b"%04d" % n}, schema) for n in range(200)]
    slow = Counted(schema)
    column = decode_avro_parts(pa.array(payloads, pa.binary()), schema, arrow_type(schema), slow)
    assert slow.calls == [200]
    assert column.to_pylist() == [{"f": b"%04d" % n} for n in range(200)]


def test_values_the_columns_read_whole_never_go_one_by_one() -> None:
    payloads: list[bytes | None] = [avro({"n": n}, LONG) for n in FULL_RANGE * 10]
    slow = Counted(LONG)
    column = decode_avro_parts(pa.array(payloads, pa.binary()), LONG, arrow_type(LONG), slow)
    assert slow.calls == []
    assert column.to_pylist() == [{"n": n} for n in FULL_RANGE * 10]
