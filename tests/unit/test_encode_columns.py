"""Messages encoded column by column must be byte for byte those encoded one at a time.

Record batches of every column shape the writer accepts go through ``Rows`` and
``encode_records``; each row is compared with ``BatchBuilder.add`` of the same message, built
here from the Arrow rows, and whole batches cut by ``add_records`` with batches of ``add``.
"""

from __future__ import annotations

import datetime
import itertools
import os
import random
import re

import pyarrow as pa
import pytest

from pulsar_spark.arrow.encode import Rows
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.encode import (
    BatchBuilder,
    Blobs,
    OutgoingColumns,
    OutgoingMessage,
    PropertyBlobs,
    chunks,
    encode_records,
    routing_key,
)

UTC = datetime.UTC
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
SIZES = [0, 1, 100, 127, 128, 300, 20_000]
EVENT_YEARS = [1970, 2024, 9999]  # from a two-byte varint to a seven-byte one


def random_batch(  # noqa: PLR0917
    rng: random.Random,
    rows: int,
    value_type: pa.DataType,
    key_type: pa.DataType | None,
    properties: bool,
    event_times: bool,
) -> pa.RecordBatch:
    """``rows`` rows, about a fifth of them null in every column that may be."""

    def maybe(value: object) -> object:
        return None if rng.random() < 0.2 else value

    values = [maybe(os.urandom(rng.choice(SIZES))) for _ in range(rows)]
    if pa.types.is_string(value_type):
        values = [v.hex() if isinstance(v, bytes) else None for v in values]
    columns: dict[str, pa.Array] = {"value": pa.array(values, value_type)}
    if key_type is not None:
        keys = [maybe(f"k-{rng.randrange(10**6)}-日本") for _ in range(rows)]
        if pa.types.is_binary(key_type):
            keys = [k.encode() if isinstance(k, str) else None for k in keys]
        columns["key"] = pa.array(keys, key_type)
    if properties:
        props = [maybe([("a", "1"), ("b" * rng.randrange(200), "x")]) for _ in range(rows)]
        columns["properties"] = pa.array(props, pa.map_(pa.string(), pa.string()))
    if event_times:
        times = [
            maybe(
                datetime.datetime(
                    rng.choice(EVENT_YEARS),
                    1,
                    1,
                    second=rng.randrange(60),
                    microsecond=rng.randrange(1000, 10**6),  # 1 ms at least, 1970 too
                    tzinfo=UTC,
                )
            )
            for _ in range(rows)
        ]
        columns["eventTime"] = pa.array(times, pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_pydict(columns)


def expected_messages(batch: pa.RecordBatch) -> list[OutgoingMessage]:
    """The rows of ``batch`` as messages, read with ``to_pylist``."""
    rows = batch.to_pylist()
    messages = []
    for row in rows:
        value = row["value"]
        key, key_is_base64 = routing_key(row.get("key"))
        event = row.get("eventTime")
        messages.append(
            OutgoingMessage(
                value.encode() if isinstance(value, str) else value,
                key,
                key_is_base64,
                tuple(row.get("properties") or ()),
                (event - EPOCH) // datetime.timedelta(milliseconds=1) if event else 0,
            )
        )
    return messages


def one_record(message: OutgoingMessage, sequence_id: int) -> bytes:
    builder = BatchBuilder()
    builder.add(message, sequence_id)
    _, payload = builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    return payload


SHAPES = list(
    itertools.product(
        [pa.binary(), pa.string(), pa.large_binary()],
        [None, pa.string(), pa.binary()],
        [False, True],
        [False, True],
    )
)


@pytest.mark.parametrize(("value_type", "key_type", "properties", "event_times"), SHAPES)
@pytest.mark.parametrize("first_sequence_id", [0, 120, 16_380, 2**40])
def test_records_match_one_message_at_a_time(
    value_type: pa.DataType,
    key_type: pa.DataType | None,
    properties: bool,
    event_times: bool,
    first_sequence_id: int,
) -> None:
    rng = random.Random(f"{value_type}{key_type}{properties}{event_times}{first_sequence_id}")
    # a slice, so the Arrow arrays start at an offset
    batch = random_batch(rng, 60, value_type, key_type, properties, event_times).slice(3, 50)
    columns = Rows.of(batch).columns()
    messages = expected_messages(batch)
    assert [columns.message(i) for i in range(len(columns))] == messages

    records = encode_records(columns, first_sequence_id)
    assert [bytes(records.span(i, i + 1)) for i in range(len(records))] == [
        one_record(message, first_sequence_id + i) for i, message in enumerate(messages)
    ]


LONG = "é" * 100  # 200 bytes: its length is a two-byte varint, its pair's too
LONGER = "v" * 20_000  # a three-byte varint
PROPERTY_ROWS: list[list[tuple[str, str]] | None] = [
    [],
    [("a", "1")],
    [("source", "bench"), ("trace-id", "0f1e2d3c")],
    None,
    [("", "")],
    [("日本", "ünïcödé ✓"), ("", "empty name")],
    [("name", "")],
    [("long", "x" * 127)],  # the pair is 134 bytes: a two-byte varint, its value's one byte
    [("long", "x" * 128), (LONG, LONG)],
    [("longer", LONGER), ("k", "v"), (LONG, LONGER)],
    [("k" * 16_384, "v" * 16_383)],
    [],
]


@pytest.mark.parametrize(("start", "stop"), [(0, len(PROPERTY_ROWS)), (2, 10), (3, 4), (0, 1)])
def test_properties_are_encoded_as_one_message_at_a_time(start: int, stop: int) -> None:
    """Each row's properties field, and so its record, as ``BatchBuilder.add`` writes it: with
    no, one and two pairs, empty and non-ASCII names and values, lengths whose varints take
    one, two and three bytes, null maps, and rows cut from an Arrow array at an offset."""
    properties = pa.array(PROPERTY_ROWS, pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array([b"v%d" % i for i in range(len(PROPERTY_ROWS))]),
            "properties": properties,
        }
    ).slice(start, stop - start)
    columns = Rows.of(batch).columns()
    messages = expected_messages(batch)
    assert [columns.message(i) for i in range(len(columns))] == messages

    records = encode_records(columns, 7)
    assert [bytes(records.span(i, i + 1)) for i in range(len(records))] == [
        one_record(message, 7 + i) for i, message in enumerate(messages)
    ]
    halves = len(columns) // 2
    assert [
        bytes(encode_records(columns.slice(0, halves), 7).data),
        bytes(encode_records(columns.slice(halves, len(columns)), 7 + halves).data),
    ] == [bytes(records.span(0, halves)), bytes(records.span(halves, len(records)))]


def test_null_maps_over_pairs_have_no_properties() -> None:
    """A null map's offsets may still span pairs (Arrow allows it): they are not sent."""
    properties = pa.MapArray.from_arrays(
        pa.array([0, 1, 3, 4, 4], pa.int32()),
        pa.array(["a", "b", "c", "d"]),
        pa.array(["1", "2", "3", "4"]),
        mask=pa.array([False, True, False, True]),
    )
    batch = pa.RecordBatch.from_pydict({"value": pa.array([b"w"] * 4), "properties": properties})
    columns = Rows.of(batch.slice(1)).columns()
    assert [columns.message(i).properties for i in range(3)] == [(), (("d", "4"),), ()]
    records = encode_records(columns, 0)
    assert bytes(records.data) == b"".join(
        one_record(columns.message(i), i) for i in range(len(columns))
    )


def test_property_blobs_of_rows() -> None:
    rows = [(), (("a", "1"), ("日本", "")), (), (("k", "v"),)]
    properties = PropertyBlobs.of(rows)
    assert [properties[i] for i in range(len(rows))] == rows
    assert [properties.slice(1, 4)[i] for i in range(3)] == rows[1:]
    assert PropertyBlobs.of([(), ()]).encoded() is None
    encoded = properties.encoded()
    assert encoded is not None
    assert [encoded[i] for i in range(len(rows))] == [
        b"",
        b"\x0a\x06\x0a\x01a\x12\x011" + b"\x0a\x0a\x0a\x06" + "日本".encode() + b"\x12\x00",
        b"",
        b"\x0a\x06\x0a\x01k\x12\x01v",
    ]
    columns = OutgoingColumns(Blobs.of([b"x"] * len(rows)), properties=properties)
    assert [columns.message(i).properties for i in range(len(rows))] == rows


def test_rows_without_any_key_value_are_unkeyed() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"value": pa.array([b"a", b"b"]), "key": pa.array([None, None], pa.string())}
    )
    columns = Rows.of(batch).columns()
    assert columns.keys is None
    assert columns.message(1) == OutgoingMessage(b"b")


def event_batch(micros: list[int | None]) -> pa.RecordBatch:
    """One row per event time, given in microseconds since the epoch as Spark holds them."""
    times = pa.array(micros, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_pydict({"value": pa.array([b"v"] * len(micros)), "eventTime": times})


def test_event_times_are_rounded_down_to_the_millisecond() -> None:
    """As Spark's ``unix_millis`` does; 1970-01-01 00:00:00.001 UTC is the earliest event time
    Pulsar carries, and a null one is sent as none (0)."""
    micros = [1000, 1999, 2000, 1_700_000_000_123_999, None, 253_402_300_799_999_999]
    columns = Rows.of(event_batch(micros)).columns()
    assert columns.event_times is not None
    assert columns.event_times.tolist() == [1, 1, 2, 1_700_000_000_123, 0, 253_402_300_799_999]
    assert [columns.message(i).event_time for i in (0, 4)] == [1, 0]


EARLY_EVENT_TIMES: list[tuple[int, str]] = [
    # (microseconds since the epoch, as the error shows it)
    (999, "1970-01-01 00:00:00.000999+00:00 (0 ms since the epoch)"),
    (0, "1970-01-01 00:00:00+00:00 (0 ms since the epoch)"),
    (-1, "1969-12-31 23:59:59.999999+00:00 (-1 ms since the epoch)"),
    (-1000, "1969-12-31 23:59:59.999000+00:00 (-1 ms since the epoch)"),
    (-1500, "1969-12-31 23:59:59.998500+00:00 (-2 ms since the epoch)"),
    (-315_619_200_000_000, "1960-01-01 00:00:00+00:00 (-315619200000 ms since the epoch)"),
]


@pytest.mark.parametrize(
    ("micros", "shown"), EARLY_EVENT_TIMES, ids=[f"{m}us" for m, _ in EARLY_EVENT_TIMES]
)
def test_event_times_before_the_first_millisecond_are_refused(micros: int, shown: str) -> None:
    """Pulsar's event time is an unsigned number of milliseconds with 0 for none: 0 ms would
    arrive as no event time, a negative one as a huge number. The batch is refused, naming
    the column and the row's time (rounded down: -1.5 ms is -2 ms)."""
    batch = event_batch([1_700_000_000_000_000, None, micros, -5_000_000])
    with pytest.raises(
        ConfigurationError, match=re.escape(f"column 'eventTime': a row has event time {shown}")
    ):
        Rows.of(batch)


def test_rows_of_one_topic_spelled_two_ways_are_one_group_in_row_order() -> None:
    """A topic is grouped by its full name, so its rows go to one producer in row order."""
    spellings = ["foo", "persistent://public/default/foo", "bar", "foo", None, "public/default/bar"]
    batch = pa.RecordBatch.from_pydict(
        {"value": pa.array([f"v{i}" for i in range(6)]), "topic": pa.array(spellings)}
    )
    groups = [
        (topic, rows.batch.column("value").to_pylist()) for topic, rows in Rows.of(batch).by_topic()
    ]
    assert groups == [
        ("persistent://public/default/foo", ["v0", "v1", "v3"]),
        ("persistent://public/default/bar", ["v2", "v5"]),
        (None, ["v4"]),
    ]


Batches = list[tuple[bytes, bytes]]


def _built(builder: BatchBuilder, done: Batches) -> None:
    metadata, payload = builder.build(producer_name="p", publish_time=1, codec=compression.NONE)
    done.append((metadata.SerializeToString(), payload))


def batches_by_message(columns: OutgoingColumns, max_messages: int, max_bytes: int) -> Batches:
    builder, done = BatchBuilder(), []
    for index in range(len(columns)):
        builder.add(columns.message(index), 5 + index)
        if builder.count >= max_messages or builder.size >= max_bytes:
            _built(builder, done)
    if builder.count:
        _built(builder, done)
    return done


def batches_by_records(columns: OutgoingColumns, max_messages: int, max_bytes: int) -> Batches:
    builder, done = BatchBuilder(), []
    records = encode_records(columns, 5)
    start = 0
    while start < len(records):
        start += builder.add_records(records, start, max_messages, max_bytes)
        if builder.count >= max_messages or builder.size >= max_bytes:
            _built(builder, done)
    if builder.count:
        _built(builder, done)
    return done


@pytest.mark.parametrize(
    ("max_messages", "max_bytes"), [(1000, 128 * 1024), (7, 10**9), (1000, 500), (1, 1)]
)
def test_add_records_cuts_batches_as_add_does(max_messages: int, max_bytes: int) -> None:
    rng = random.Random(max_messages + max_bytes)
    batch = random_batch(rng, 201, pa.binary(), pa.string(), True, True)
    columns = Rows.of(batch).columns()
    expected = batches_by_message(columns, max_messages, max_bytes)
    assert len(expected) > 1
    assert batches_by_records(columns, max_messages, max_bytes) == expected


def test_chunks_take_an_already_compressed_payload() -> None:
    payload = b"compressible" * 20_000
    compressed = compression.compress(compression.LZ4, payload)

    def pieces(**extra: bytes) -> list[tuple[bytes, bytes]]:
        metadata = pb.MessageMetadata(producer_name="w", sequence_id=1, publish_time=1)
        return [
            (part.SerializeToString(), piece)
            for part, piece in chunks(
                metadata, payload, codec=compression.LZ4, max_message_size=4096, **extra
            )
        ]

    assert pieces(compressed=compressed) == pieces()
    assert b"".join(piece for _, piece in pieces(compressed=compressed)) == compressed
