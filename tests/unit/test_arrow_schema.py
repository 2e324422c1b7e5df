"""The fixed read schema: SCHEMA_DDL, ARROW_SCHEMA and Spark's own Arrow mapping agree, and
to_record_batch / record_batches turn hand-built MessageColumns into exactly the expected rows."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pulsar_spark.arrow.decode import RecordBatchBuilder, record_batches, to_record_batch
from pulsar_spark.arrow.schema import ARROW_SCHEMA, ENCRYPTED_DDL, ENCRYPTED_FIELD, SCHEMA_DDL
from pulsar_spark.common.spans import Spans
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns, PropertyColumns
from pulsar_spark.protocol.single_runs import SingleRun

# The documented schema, written out by hand: parsing SCHEMA_DDL with Spark needs a running
# session, and a hand-written copy also catches an accidental change to the DDL.
SPARK_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField(
            "messageId",
            StructType(
                [
                    StructField("ledgerId", LongType()),
                    StructField("entryId", LongType()),
                    StructField("batchIndex", IntegerType()),
                ]
            ),
        ),
        StructField("publishTime", TimestampType()),
        StructField("eventTime", TimestampType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("producerName", StringType()),
        StructField("sequenceId", LongType()),
        StructField("replicatedFrom", StringType()),
    ]
)

TOPIC = "persistent://public/default/events"
UTC = dt.timezone.utc


# --- the schema -----------------------------------------------------------------------------


def _split_top_level(ddl: str) -> list[str]:
    """Split a DDL column list on the commas that are not inside ``<...>``."""
    parts, depth, current = [], 0, []
    for char in ddl:
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    parts.append("".join(current).strip())
    return parts


def test_schema_ddl_describes_the_documented_columns_in_order() -> None:
    columns = []
    for column in _split_top_level(SCHEMA_DDL):
        name, _, type_text = column.partition(" ")
        columns.append(f"{name}:{type_text.replace(' ', '')}")
    assert "struct<" + ",".join(columns) + ">" == SPARK_SCHEMA.simpleString()


def test_arrow_schema_is_what_spark_derives_from_the_ddl() -> None:
    derived = to_arrow_schema(SPARK_SCHEMA, timezone="UTC")
    assert derived.equals(ARROW_SCHEMA, check_metadata=True)
    assert ARROW_SCHEMA.equals(derived, check_metadata=True)


def test_arrow_schema_field_types_spelled_out() -> None:
    types = {f.name: f.type for f in ARROW_SCHEMA}
    assert ARROW_SCHEMA.names == [f.name for f in SPARK_SCHEMA.fields]
    assert types["key"] == pa.binary()
    assert types["value"] == pa.binary()
    assert types["topic"] == pa.string()  # not large_string: Spark refuses large types
    assert types["partition"] == pa.int32()
    assert types["messageId"] == pa.struct(
        [("ledgerId", pa.int64()), ("entryId", pa.int64()), ("batchIndex", pa.int32())]
    )
    assert types["publishTime"] == pa.timestamp("us", tz="UTC")
    assert types["eventTime"] == pa.timestamp("us", tz="UTC")
    assert types["properties"] == pa.map_(pa.string(), pa.string())
    assert types["producerName"] == pa.string()
    assert types["sequenceId"] == pa.int64()
    assert types["replicatedFrom"] == pa.string()
    assert all(f.nullable for f in ARROW_SCHEMA)
    assert all(f.nullable for f in types["messageId"])


def test_the_consume_column_is_what_spark_derives_from_its_ddl() -> None:
    """A read with cryptoFailureAction CONSUME has one more column, ``encrypted``, last."""
    assert ENCRYPTED_DDL == ", encrypted boolean"
    spark_schema = StructType([*SPARK_SCHEMA.fields, StructField("encrypted", BooleanType())])
    derived = to_arrow_schema(spark_schema, timezone="UTC")
    assert derived.equals(ARROW_SCHEMA.append(ENCRYPTED_FIELD), check_metadata=True)


def test_the_encrypted_column_flags_rows_left_encrypted() -> None:
    plain = columns(info(1), [b"a", b"b"])
    sealed = dataclasses.replace(
        columns(info(2), [b"\x00sealed"], batched=False), encrypted=np.ones(1, dtype=np.bool_)
    )
    batch = to_record_batch([plain, sealed], TOPIC, 2, encrypted_column=True)
    assert batch.schema.equals(ARROW_SCHEMA.append(ENCRYPTED_FIELD), check_metadata=True)
    batch.validate(full=True)
    assert batch.column("encrypted").to_pylist() == [False, False, True]
    assert batch.column("value").to_pylist() == [b"a", b"b", b"\x00sealed"]
    assert to_record_batch([plain], TOPIC, 2).schema.equals(ARROW_SCHEMA)


# --- building MessageColumns by hand -----------------------------------------------------------


def info(
    entry_id: int,
    *,
    ledger_id: int = 7,
    producer: str = "producer-a",
    publish_time: int = 1_700_000_000_001,
    replicated_from: str | None = None,
) -> EntryInfo:
    return EntryInfo(
        ledger_id=ledger_id,
        entry_id=entry_id,
        partition=2,
        producer_name=producer,
        publish_time=publish_time,
        replicated_from=replicated_from,
    )


def columns(
    entry: EntryInfo,
    values: list[bytes | None],
    *,
    batched: bool = True,
    keys: list[bytes | None] | None = None,
    properties: list[tuple[tuple[str, str], ...]] | None = None,
    event_time: list[int] | None = None,
    sequence_id: list[int] | None = None,
) -> MessageColumns:
    """The columns of one entry; a None value is a null value."""
    count = len(values)
    return MessageColumns(
        entry=entry,
        count=count,
        batch_index=(
            np.arange(count, dtype=np.int32) if batched else np.full(count, -1, dtype=np.int32)
        ),
        values=Spans.of(values),
        key=None if keys is None else Spans.of(keys),
        properties=None if properties is None else PropertyColumns.of(properties),
        event_time=np.array(event_time or [0] * count, dtype=np.int64),
        sequence_id=np.array(sequence_id or list(range(count)), dtype=np.int64),
    )


def ts(millis: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(millis // 1000, UTC).replace(microsecond=millis % 1000 * 1000)


def row(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "key": None,
        "value": None,
        "topic": TOPIC,
        "partition": 2,
        "messageId": None,
        "publishTime": None,
        "eventTime": None,
        "properties": [],
        "producerName": "producer-a",
        "sequenceId": None,
        "replicatedFrom": None,
    }
    assert set(fields) <= set(base)
    base.update(fields)
    return base


def mid(ledger: int, entry: int, batch: int) -> dict[str, int]:
    return {"ledgerId": ledger, "entryId": entry, "batchIndex": batch}


def check(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    """Validate ``batch`` against the schema and return its rows."""
    assert batch.schema.equals(ARROW_SCHEMA, check_metadata=True)
    batch.validate(full=True)
    return batch.to_pylist()


# --- to_record_batch ---------------------------------------------------------------------------


def test_single_message_and_batched_entry_every_field() -> None:
    single = columns(
        info(3, publish_time=1_700_000_000_001),
        [b"hello"],
        batched=False,
        keys=[b"k"],
        properties=[(("a", "1"),)],
        event_time=[0],
        sequence_id=[41],
    )
    batch_entry = columns(
        info(4, producer="producer-b", publish_time=1_700_000_009_999, replicated_from="east"),
        [b"x", None, b"", "z\u00fc".encode()],
        keys=[b"kx", None, b"", "\u043a\u043b\u044e\u0447".encode()],
        properties=[(("p", "1"), ("q", "2")), (), (("r", "3"),), ()],
        event_time=[1_600_000_000_123, 0, 5, 0],
        sequence_id=[100, 101, 102, 103],
    )
    rows = check(to_record_batch([single, batch_entry], TOPIC, 2))
    b = {
        "producerName": "producer-b",
        "replicatedFrom": "east",
        "publishTime": ts(1_700_000_009_999),
    }
    assert rows == [
        row(
            key=b"k",
            value=b"hello",
            messageId=mid(7, 3, -1),
            publishTime=ts(1_700_000_000_001),
            properties=[("a", "1")],
            sequenceId=41,
        ),
        row(
            key=b"kx",
            value=b"x",
            messageId=mid(7, 4, 0),
            eventTime=ts(1_600_000_000_123),
            properties=[("p", "1"), ("q", "2")],
            sequenceId=100,
            **b,
        ),
        row(messageId=mid(7, 4, 1), sequenceId=101, **b),
        row(
            key=b"",
            value=b"",
            messageId=mid(7, 4, 2),
            eventTime=ts(5),
            properties=[("r", "3")],
            sequenceId=102,
            **b,
        ),
        row(
            key="\u043a\u043b\u044e\u0447".encode(),
            value="z\u00fc".encode(),
            messageId=mid(7, 4, 3),
            sequenceId=103,
            **b,
        ),
    ]


def test_timestamps_are_microseconds_in_utc_and_event_time_zero_is_null() -> None:
    parts = [
        columns(info(0, publish_time=1_700_000_009_999), [b"a", b"b"], event_time=[0, 1]),
        columns(info(1, publish_time=1), [b"c"], batched=False, event_time=[1_234_567_890_123]),
    ]
    batch = to_record_batch(parts, TOPIC, 2)
    publish, event = batch.column("publishTime"), batch.column("eventTime")
    assert publish.type == pa.timestamp("us", tz="UTC")
    assert publish.cast(pa.int64()).to_pylist() == [1_700_000_009_999_000] * 2 + [1_000]
    assert event.is_null().to_pylist() == [True, False, False]
    assert event.cast(pa.int64()).to_pylist() == [None, 1_000, 1_234_567_890_123_000]
    assert publish.null_count == 0


def test_no_keys_no_properties_no_nulls_anywhere() -> None:
    parts = [
        columns(info(0), [b"a", b"bb"]),
        columns(info(1), [b"ccc"], batched=False),
    ]
    batch = to_record_batch(parts, TOPIC, -1)
    check(batch)
    assert batch.column("key").null_count == 3
    assert batch.column("value").to_pylist() == [b"a", b"bb", b"ccc"]
    assert batch.column("value").null_count == 0
    properties = batch.column("properties")
    assert properties.null_count == 0  # an empty map, never null
    assert properties.to_pylist() == [[], [], []]
    assert batch.column("partition").to_pylist() == [-1, -1, -1]
    assert batch.column("replicatedFrom").null_count == 3


def test_keys_and_properties_present_on_some_entries_only() -> None:
    parts = [
        columns(info(0), [b"a"], keys=None, properties=None),
        columns(info(1), [b"b", b"c"], keys=[b"k1", b"k2"], properties=[(("x", "1"),), ()]),
        columns(info(2), [b"d"], keys=None, properties=None),
        columns(info(3), [b"e"], keys=[None], properties=[(("y", "2"), ("z", "3"))]),
    ]
    rows = check(to_record_batch(parts, TOPIC, 2))
    assert [r["key"] for r in rows] == [None, b"k1", b"k2", None, None]
    assert [r["properties"] for r in rows] == [
        [],
        [("x", "1")],
        [],
        [],
        [("y", "2"), ("z", "3")],
    ]


def test_entries_without_keys_or_properties_next_to_entries_with_them() -> None:
    # Every buffer here is non-empty: the rows of entries without keys or properties must not
    # rely on an empty buffer that some other entry happens to share.
    parts = [
        columns(info(0), [b"a1", b"a2"]),
        columns(info(1), [b"b"], keys=[b"kb"], properties=[(("p", "q"),)]),
        columns(info(2), [b"c"]),
    ]
    rows = check(to_record_batch(parts, TOPIC, 2))
    assert [r["value"] for r in rows] == [b"a1", b"a2", b"b", b"c"]
    assert [r["key"] for r in rows] == [None, None, b"kb", None]
    assert [r["properties"] for r in rows] == [[], [], [("p", "q")], []]


def test_a_run_of_one_message_entries_keeps_each_rows_entry_fields() -> None:
    run = SingleRun()
    run.add(
        info(5, producer="producer-b", publish_time=1_700_000_000_005),
        pb.MessageMetadata(sequence_id=50, partition_key="k5"),
        b"five",
    )
    run.add(
        info(6, ledger_id=8, publish_time=1_700_000_000_006, replicated_from="east"),
        pb.MessageMetadata(sequence_id=60),
        b"six",
    )
    parts = [columns(info(4), [b"a", b"b"]), run.take(), columns(info(7), [b"c"])]
    got = check(to_record_batch(parts, TOPIC, 2))
    assert [
        (r["messageId"], r["publishTime"], r["producerName"], r["replicatedFrom"]) for r in got
    ] == [
        (mid(7, 4, 0), ts(1_700_000_000_001), "producer-a", None),
        (mid(7, 4, 1), ts(1_700_000_000_001), "producer-a", None),
        (mid(7, 5, -1), ts(1_700_000_000_005), "producer-b", None),
        (mid(8, 6, -1), ts(1_700_000_000_006), "producer-a", "east"),
        (mid(7, 7, 0), ts(1_700_000_000_001), "producer-a", None),
    ]
    assert [r["value"] for r in got] == [b"a", b"b", b"five", b"six", b"c"]
    assert [r["key"] for r in got] == [None, None, b"k5", None, None]
    assert [r["sequenceId"] for r in got] == [0, 1, 50, 60, 0]


def test_null_values_mixed_with_entries_without_nulls() -> None:
    parts = [
        columns(info(0), [b"a", b"b"]),
        columns(info(1), [None, b"c", None]),
        columns(info(2), [None], batched=False),
    ]
    batch = to_record_batch(parts, TOPIC, 2)
    check(batch)
    assert batch.column("value").to_pylist() == [b"a", b"b", None, b"c", None, None]


def test_repeated_strings_per_entry_with_non_ascii_and_nulls() -> None:
    topic = "persistent://t\u00e9nant/ns/\u65e5\u672c-topic"
    parts = [
        columns(info(0, producer="pr\u00f6ducer-1"), [b"a", b"b"]),
        columns(info(1, producer="", replicated_from="\u00e9ast"), [b"c"]),
        columns(info(2, producer="p3"), [b"d", b"e", b"f"]),
    ]
    batch = to_record_batch(parts, topic, 0)
    check(batch)
    assert batch.column("topic").to_pylist() == [topic] * 6
    assert batch.column("producerName").to_pylist() == [
        "pr\u00f6ducer-1",
        "pr\u00f6ducer-1",
        "",
        "p3",
        "p3",
        "p3",
    ]
    assert batch.column("replicatedFrom").to_pylist() == [None, None, "\u00e9ast", None, None, None]


def test_entries_of_one_producer_without_event_times_or_replication() -> None:
    parts = [
        columns(info(0, replicated_from="west"), [b"a"]),
        columns(info(1), [b"b", b"c"]),
        columns(info(2), [b"d"], batched=False),
        columns(info(3, producer="producer-b"), [b"e", b"f"]),
        columns(info(4), [b"g"]),
    ]
    batch = to_record_batch(parts, TOPIC, 2)
    check(batch)
    producers = batch.column("producerName").to_pylist()
    assert producers == ["producer-a"] * 4 + ["producer-b"] * 2 + ["producer-a"]
    assert batch.column("replicatedFrom").to_pylist() == ["west"] + [None] * 6
    assert batch.column("eventTime").null_count == 7
    alone = to_record_batch(parts[1:3], TOPIC, 2)
    check(alone)
    assert alone.column("producerName").to_pylist() == ["producer-a"] * 3
    assert alone.column("replicatedFrom").null_count == 3
    assert alone.column("eventTime").to_pylist() == [None] * 3


def test_message_ids_and_sequence_ids() -> None:
    parts = [
        columns(info(9, ledger_id=2**40), [b"a"], batched=False, sequence_id=[2**40]),
        columns(info(10, ledger_id=2**40), [b"b", b"c"], sequence_id=[7, 8]),
    ]
    rows = check(to_record_batch(parts, TOPIC, 2))
    assert [r["messageId"] for r in rows] == [
        mid(2**40, 9, -1),
        mid(2**40, 10, 0),
        mid(2**40, 10, 1),
    ]
    assert [r["sequenceId"] for r in rows] == [2**40, 7, 8]


def test_sliced_and_taken_columns() -> None:
    """The reader clips the first and last entries of a range with slice/take."""
    whole = columns(
        info(5),
        [b"aa", None, b"cccc", b"d"],
        keys=[b"1", b"2", None, b"4"],
        properties=[(("a", "1"),), (), (("c", "3"),), ()],
        event_time=[1, 2, 3, 0],
    )
    sliced = whole.slice(1, 3)
    taken = whole.take(np.array([0, 3], dtype=np.intp))
    rows = check(to_record_batch([sliced, taken], TOPIC, 2))
    assert [(r["messageId"]["batchIndex"], r["value"], r["key"]) for r in rows] == [
        (1, None, b"2"),
        (2, b"cccc", None),
        (0, b"aa", b"1"),
        (3, b"d", b"4"),
    ]
    assert [r["properties"] for r in rows] == [[], [("c", "3")], [("a", "1")], []]
    assert [r["eventTime"] for r in rows] == [ts(2), ts(3), ts(1), None]


def test_rows_taken_out_of_order_and_repeated() -> None:
    whole = columns(
        info(6),
        [b"a" * 20, b"bb", None],
        keys=[b"k0", None, b"k2-is-longer-than-twelve"],
        properties=[(("p", "0"),), (("p", "1"), ("q", "x" * 30)), ()],
    )
    taken = whole.take(np.array([2, 0, 2, 1], dtype=np.intp))
    rows = check(to_record_batch([taken], TOPIC, 2))
    assert [(r["value"], r["key"], r["properties"]) for r in rows] == [
        (None, b"k2-is-longer-than-twelve", []),
        (b"a" * 20, b"k0", [("p", "0")]),
        (None, b"k2-is-longer-than-twelve", []),
        (b"bb", None, [("p", "1"), ("q", "x" * 30)]),
    ]


def test_properties_that_are_not_utf8_are_read_as_java_reads_them() -> None:
    entry = MessageColumns(
        entry=info(7),
        count=2,
        batch_index=np.arange(2, dtype=np.int32),
        values=Spans.of([b"v0", b"v1"]),
        key=None,
        properties=PropertyColumns(
            offsets=np.array([0, 1, 2], dtype=np.int64),
            names=Spans.of([b"ok", b"bad\xff"]),
            values=Spans.of([b"caf\xc3\xa9", b"\xc3(x"]),
        ),
        event_time=np.zeros(2, dtype=np.int64),
        sequence_id=np.arange(2, dtype=np.int64),
    )
    rows = check(to_record_batch([entry], TOPIC, 2))
    assert [r["properties"] for r in rows] == [[("ok", "café")], [("bad\ufffd", "\ufffd(x")]]


# --- record_batches ----------------------------------------------------------------------------


def test_record_batches_split_at_entry_boundaries_without_losing_rows() -> None:
    parts = [columns(info(i), [bytes([i]) * (i + 1)] * (i % 3 + 1)) for i in range(10)]
    expected = to_record_batch(parts, TOPIC, 2).to_pylist()
    batches = list(record_batches(iter(parts), TOPIC, 2, max_rows=4))
    assert len(batches) > 1
    assert all(b.num_rows >= 4 for b in batches[:-1])
    assert [r for b in batches for r in check(b)] == expected

    by_bytes = list(record_batches(iter(parts), TOPIC, 2, max_bytes=10))
    assert len(by_bytes) > 1
    assert [r for b in by_bytes for r in check(b)] == expected


def test_record_batches_of_nothing_is_nothing() -> None:
    assert list(record_batches(iter(()), TOPIC, 2)) == []
    assert RecordBatchBuilder(TOPIC, 2).flush() is None


@pytest.mark.parametrize("count", [1, 1000])
def test_uniform_batch_shapes(count: int) -> None:
    entry = columns(info(0), [b"v"] * count, keys=[b"k"] * count)
    batch = to_record_batch([entry], TOPIC, 3)
    check(batch)
    assert batch.num_rows == count
    assert batch.column("messageId").field("batchIndex").to_pylist() == list(range(count))
    assert set(batch.column("key").to_pylist()) == {b"k"}
