"""The string columns of a record batch (value, key, property names and values) hold exactly
the strings their spans point at, whether a column is copied entry by entry (every entry's
strings of one length) or taken from the joined buffers; and each case takes the path meant
for it.

Entries come from the real decoder (batches written record by record) or are built by hand
where the decoder cannot make them (property strings that are not UTF-8)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from pulsar_spark.arrow.decode import COPY_MIN_ROWS, _StringColumns, to_record_batch
from pulsar_spark.arrow.schema import ARROW_SCHEMA
from pulsar_spark.common.spans import Spans
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.decode import Entry, decode_entries, entry_info
from pulsar_spark.protocol.messages import MessageColumns, PropertyColumns
from pulsar_spark.protocol.single_runs import SingleRun
from tests.support.decoding import batch, outer, smm, strings

TOPIC = "persistent://public/default/strings"
N = COPY_MIN_ROWS  # rows per entry that are copied entry by entry
Row = tuple[bytes | None, bytes | None, list[tuple[str, str]]]


def entries(*batches: list[dict[str, Any]]) -> list[MessageColumns]:
    """Each batch (one dict of SingleMessageMetadata fields and ``value`` per message) written
    out and decoded together, as the reader decodes a group of entries."""
    group = []
    for entry_id, messages in enumerate(batches):
        records = []
        for i, message in enumerate(messages):
            fields = dict(message)
            value = fields.pop("value")
            fields.setdefault("sequence_id", 1000 * entry_id + i)
            records.append((smm(payload_size=len(value), **fields), value))
        metadata = outer(num_messages_in_batch=len(messages), sequence_id=1000 * entry_id)
        group.append((entry_info(metadata, 9, entry_id, 2), metadata, batch(*records)))
    return decode_entries(group)


def expected(parts: list[MessageColumns]) -> list[Row]:
    """Key, value and properties of every row, sliced from the spans one by one; property
    strings decoded as Java decodes them."""
    out: list[Row] = []
    for part in parts:
        values = strings(part.values)
        keys = [None] * part.count if part.key is None else strings(part.key)
        props: list[list[tuple[str, str]]] = [[] for _ in range(part.count)]
        if part.properties is not None:
            names, items = strings(part.properties.names), strings(part.properties.values)
            offsets = part.properties.offsets.tolist()
            for i in range(part.count):
                props[i] = [
                    (
                        (names[j] or b"").decode(errors="replace"),
                        (items[j] or b"").decode(errors="replace"),
                    )
                    for j in range(offsets[i], offsets[i + 1])
                ]
        out += zip(keys, values, props, strict=True)
    return out


def built(parts: list[MessageColumns]) -> list[Row]:
    record_batch = to_record_batch(parts, TOPIC, 2)
    assert record_batch.schema.equals(ARROW_SCHEMA)
    record_batch.validate(full=True)
    return list(
        zip(
            record_batch.column("key").to_pylist(),
            record_batch.column("value").to_pylist(),
            record_batch.column("properties").to_pylist(),
            strict=True,
        )
    )


def copied(parts: list[MessageColumns]) -> dict[str, bool]:
    """Which string columns are copied entry by entry (the others come from joined buffers)."""
    columns = _StringColumns(parts)
    found = {"value": columns.values, "key": columns.keys}
    found |= {"name": columns.names, "item": columns.items}
    return {name: column.copies is not None for name, column in found.items() if column}


def taken_by_run(parts: list[MessageColumns]) -> dict[str, list[tuple[int, int]] | None]:
    """For each column taken by Arrow, the entries of each run taken from its own buffer (None:
    from the joined buffers)."""
    columns = _StringColumns(parts)
    found = {"value": columns.values, "key": columns.keys}
    found |= {"name": columns.names, "item": columns.items}
    return {name: c.runs for name, c in found.items() if c and c.copies is None}


def copies(parts: list[MessageColumns]) -> dict[str, int]:
    """How many numpy copies lay out each column copied entry by entry."""
    columns = _StringColumns(parts)
    found = {"value": columns.values, "key": columns.keys}
    found |= {"name": columns.names, "item": columns.items}
    return {name: len(c.copies) for name, c in found.items() if c and c.copies is not None}


def value(i: int, size: int) -> bytes:
    return bytes((i * 7 + j) % 251 for j in range(size))


def test_uniform_batches_copy_every_column_entry_by_entry() -> None:
    """Same-size values, one key and one property for all: the uniform decoder's layout (a
    stride for the values, the same span over and over for the rest)."""
    shared = {"partition_key": "user-1", "properties": {"source": "bench"}}
    group = written(*([shared] * 4))
    parts = decode_entries(group)
    assert copied(parts) == {"value": True, "key": True, "name": True, "item": True}
    # the first batch is decoded alone, the other three together, in one buffer: one copy
    # of each column for them
    assert copies(parts) == {"value": 2, "key": 2, "name": 2, "item": 2}
    rows = built(parts)
    assert rows == expected(parts)
    assert rows == [
        (b"user-1", value(e * N + i, 100), [("source", "bench")])
        for e in range(4)
        for i in range(N)
    ]
    alone = [decode_entries([entry])[0] for entry in group]
    assert copies(alone) == {"value": 4, "key": 4, "name": 4, "item": 4}
    assert built(alone) == rows


def written(*shared: dict[str, Any]) -> list[Entry]:
    """Batches of N messages with ``shared`` fields, 100-byte values and sequence ids of three
    bytes each: records of one length in every batch."""
    group = []
    for entry_id, fields in enumerate(shared):
        records = [
            (
                smm(payload_size=100, sequence_id=20_000 + entry_id * N + i, **fields),
                value(entry_id * N + i, 100),
            )
            for i in range(N)
        ]
        metadata = outer(num_messages_in_batch=N, sequence_id=20_000 + entry_id * N)
        group.append((entry_info(metadata, 9, entry_id, 2), metadata, batch(*records)))
    return group


def test_same_size_values_of_batches_scanned_together_are_gathered_at_once() -> None:
    """Keys of varying length before same-size values: neither end to end nor a stride apart."""
    parts = entries(
        *[
            [{"value": value(e * N + i, 50), "partition_key": f"k{i}"} for i in range(N)]
            for e in range(3)
        ]
    )
    assert copies(parts) == {"value": 1}
    assert [v for _, v, _ in built(parts)] == [value(i, 50) for i in range(3 * N)]
    assert built(parts) == expected(parts)


def test_copies_are_not_merged_across_an_entry_of_empty_strings() -> None:
    """The middle batch's values are all empty: no copy, and rows between the other two."""
    parts = entries(
        [{"value": value(i, 20), "partition_key": f"k{i}"} for i in range(N)],
        [{"value": b"", "partition_key": f"k{i}"} for i in range(N)],
        [{"value": value(N + i, 20), "partition_key": f"k{i}"} for i in range(N)],
    )
    assert copies(parts)["value"] == 2
    rows = built(parts)
    assert rows == expected(parts)
    assert [v for _, v, _ in rows] == [value(i, 20) for i in range(N)] + [b""] * N + [
        value(N + i, 20) for i in range(N)
    ]


def test_same_size_values_whose_records_differ_in_size_are_gathered() -> None:
    """Sequence ids that grow from one to two varint bytes: the values are of one size but not
    at one distance from each other."""
    parts = entries(
        [{"value": value(i, 40), "sequence_id": 100 + i} for i in range(N)],
        [{"value": value(i, 40)} for i in range(N)],
    )
    starts = np.diff(parts[0].values.starts)
    assert len(set(starts.tolist())) == 2
    assert copied(parts) == {"value": True}
    rows = built(parts)
    assert rows == expected(parts)
    assert [v for _, v, _ in rows] == [value(i, 40) for i in range(N)] * 2


def test_values_of_varying_size_come_from_the_joined_buffers() -> None:
    parts = entries([{"value": value(i, i % 17)} for i in range(100)])
    assert copied(parts) == {"value": False}
    assert built(parts) == expected(parts)
    assert [v for _, v, _ in built(parts)] == [value(i, i % 17) for i in range(100)]


def test_uniform_and_varying_entries_in_one_record_batch() -> None:
    uniform = [{"value": value(i, 30), "partition_key": "k"} for i in range(N)]
    varying = [{"value": value(i, 10 + i % 3), "partition_key": f"key-{i}"} for i in range(100)]
    parts = entries(uniform, varying, uniform)
    assert copied(parts) == {"value": False, "key": False}
    rows = built(parts)
    assert rows == expected(parts)
    assert [k for k, _, _ in rows] == [b"k"] * N + [f"key-{i}".encode() for i in range(100)] + [
        b"k"
    ] * N


def test_null_and_empty_values() -> None:
    """A batch of null values, one of empty values, one where some values are null."""
    nulls = [{"value": b"", "null_value": True} for _ in range(N)]
    empty = [{"value": b""} for _ in range(N)]
    some = [{"value": b"" if i % 2 else value(i, 8), "null_value": bool(i % 2)} for i in range(N)]
    parts = entries(nulls, empty)
    assert copied(parts) == {"value": True}
    assert [v for _, v, _ in built(parts)] == [None] * N + [b""] * N
    assert built(parts) == expected(parts)
    mixed = entries(nulls, empty, some)
    assert copied(mixed) == {"value": False}
    assert [v for _, v, _ in built(mixed)] == [None] * N + [b""] * N + [
        None if i % 2 else value(i, 8) for i in range(N)
    ]
    assert built(mixed) == expected(mixed)


def test_null_absent_and_base64_keys() -> None:
    """Entries whose keys are all null, absent, base64 or plain text, next to each other."""
    raw = [bytes([i, 255 - i, 0, 7]) for i in range(N)]
    b64 = [
        {
            "value": b"v",
            "partition_key": base64.b64encode(k).decode(),
            "partition_key_b64_encoded": True,
        }
        for k in raw
    ]
    null = [{"value": b"v", "partition_key": "", "null_partition_key": True} for _ in range(N)]
    absent = [{"value": b"v"} for _ in range(N)]
    text = [{"value": b"v", "partition_key": f"key-{i:04}"} for i in range(N)]
    parts = entries(b64, null, absent, text)
    assert copied(parts) == {"value": True, "key": True}
    rows = built(parts)
    assert rows == expected(parts)
    keys = raw + [None] * 2 * N + [f"key-{i:04}".encode() for i in range(N)]
    assert [k for k, _, _ in rows] == keys


def test_properties_of_one_size_and_of_varying_sizes() -> None:
    same = [{"value": b"v", "properties": {"n": f"{i:03}"}} for i in range(N)]
    varying = [{"value": b"v", "properties": {"trace": str(i), "src": "b"}} for i in range(N)]
    parts = entries(same, [{"value": b"w"} for _ in range(N)])
    assert copied(parts) == {"value": True, "name": True, "item": True}
    rows = built(parts)
    assert rows == expected(parts)
    assert [p for _, _, p in rows] == [[("n", f"{i:03}")] for i in range(N)] + [[]] * N
    parts = entries(same, varying)
    assert copied(parts) == {"value": True, "name": False, "item": False}
    rows = built(parts)
    assert rows == expected(parts)
    assert [p for _, _, p in rows][N:] == [[("trace", str(i)), ("src", "b")] for i in range(N)]


def keyed(first: int, count: int) -> list[dict[str, Any]]:
    """Messages with a key (some null) and two properties, of varying sizes."""
    return [
        {
            "value": value(i, 20 + i % 50),
            "partition_key": f"user-{i * 37 % 1000}",
            "null_partition_key": i % 9 == 0,
            "properties": {"source": ["web", "mobile", "api"][i % 3], "trace-id": f"t{i:x}"},
        }
        for i in range(first, first + count)
    ]


def keyed_rows(first: int, count: int) -> list[Row]:
    return [
        (
            None if i % 9 == 0 else f"user-{i * 37 % 1000}".encode(),
            value(i, 20 + i % 50),
            [("source", ["web", "mobile", "api"][i % 3]), ("trace-id", f"t{i:x}")],
        )
        for i in range(first, first + count)
    ]


def test_entries_read_together_are_taken_run_by_run_from_their_buffer() -> None:
    """Two groups of batches, each decoded together into one buffer: keys, names and values
    of varying sizes are taken from each group's buffer, not from the buffers joined."""
    half = N // 2
    one = entries(keyed(0, half), keyed(half, half), keyed(N, half))  # one buffer
    two = entries(keyed(N + half, N), keyed(2 * N + half, half))  # another
    parts = one + two
    assert len({id(p.values.buffer) for p in parts}) == 2
    runs = {"value": [(0, 3), (3, 5)], "key": [(0, 3), (3, 5)]}
    assert taken_by_run(parts) == runs | {"name": [(0, 3), (3, 5)], "item": [(0, 3), (3, 5)]}
    rows = built(parts)
    assert rows == expected(parts)
    assert rows == keyed_rows(0, 3 * N)


def test_a_run_too_small_for_a_call_of_its_own_takes_the_joined_buffers() -> None:
    parts = entries(keyed(0, N), keyed(N, N)) + entries(keyed(2 * N, 5), keyed(2 * N + 5, 5))
    assert taken_by_run(parts) == {"value": None, "key": None, "name": None, "item": None}
    rows = built(parts)
    assert rows == expected(parts)
    assert rows == keyed_rows(0, 2 * N + 10)


def pairs(names: list[bytes], items: list[bytes]) -> tuple[Spans, Spans]:
    """Names and values over one buffer, each name followed by its value (as in a batch)."""
    buffer = b"".join(n + i for n, i in zip(names, items, strict=True))
    lengths = np.array([len(x) for pair in zip(names, items, strict=True) for x in pair])
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return Spans(buffer, starts[0::2], lengths[0::2]), Spans(buffer, starts[1::2], lengths[1::2])


@pytest.mark.parametrize("count", [N, 2 * N])
def test_property_strings_that_are_not_utf8_are_read_as_java_reads_them(count: int) -> None:
    names = [b"ok", b"\xffx"] * (count // 2)
    items = [b"caf\xc3\xa9", b"\xc3(x"] * (count // 2)
    entry = MessageColumns(
        entry=entries([{"value": b"v"}])[0].entry,
        count=count,
        batch_index=np.arange(count, dtype=np.int32),
        values=Spans.of([b"v"] * count),
        key=None,
        properties=PropertyColumns(np.arange(count + 1, dtype=np.int64), *pairs(names, items)),
        event_time=np.zeros(count, dtype=np.int64),
        sequence_id=np.arange(count, dtype=np.int64),
    )
    assert copied([entry]) == {"value": True, "name": True, "item": False}
    rows = built([entry])
    assert rows == expected([entry])
    assert [p for _, _, p in rows] == [[("ok", "café")], [("\ufffdx", "\ufffd(x")]] * (count // 2)


def test_one_message_entries_alone_and_in_runs() -> None:
    """Entries of one message each: as the reader collects them (runs) their values and keys
    lie end to end and are copied as they lie; one MessageColumns per message is left to the
    joined buffers."""
    metadata = [
        outer(
            partition_key=f"key-{i}",
            null_value=i % 5 == 0,
            properties=[pb.KeyValue(key="n", value=str(i))],
        )
        for i in range(200)
    ]
    payloads = [b"" if i % 5 == 0 else value(i, i % 30) for i in range(200)]
    run = SingleRun()
    alone = []
    for i, (meta, payload) in enumerate(zip(metadata, payloads, strict=True)):
        info = entry_info(meta, 9, i, 2)
        run.add(info, meta, payload)
        single = SingleRun()
        single.add(info, meta, payload)
        alone.append(single.take())
    runs = [run.take()]
    assert copied(runs) == {"value": True, "key": True, "name": True, "item": False}
    assert copied(alone) == {"value": False, "key": False, "name": False, "item": False}
    rows = [
        (f"key-{i}".encode(), None if i % 5 == 0 else value(i, i % 30), [("n", str(i))])
        for i in range(200)
    ]
    assert built(runs) == expected(runs) == rows
    assert built(alone) == expected(alone) == rows


def test_runs_and_batches_in_one_record_batch() -> None:
    """A run (strings end to end) next to batches of same-size values (strided, gathered)."""
    run = SingleRun()
    meta = outer()
    for i in range(N):
        run.add(entry_info(meta, 9, 100 + i, 2), meta, value(i, i % 7))
    strided = entries([{"value": value(i, 9)} for i in range(N)])
    gathered = entries([{"value": value(i, 9), "sequence_id": 100 + i} for i in range(N)])
    parts = [*strided, run.take(), *gathered]
    assert copied(parts) == {"value": True}
    rows = built(parts)
    assert rows == expected(parts)
    assert [v for _, v, _ in rows] == [value(i, 9) for i in range(N)] + [
        value(i, i % 7) for i in range(N)
    ] + [value(i, 9) for i in range(N)]


def test_compacted_out_rows_are_left_out() -> None:
    messages = [{"value": value(i, 12), "compacted_out": i % 3 == 0} for i in range(200)]
    parts = entries(messages)
    assert parts[0].count == 133
    assert copied(parts) == {"value": True}
    rows = built(parts)
    assert rows == expected(parts)
    assert [v for _, v, _ in rows] == [value(i, 12) for i in range(200) if i % 3]


def test_taken_rows_out_of_order_and_repeated() -> None:
    whole = entries([{"value": value(i, 16), "partition_key": f"k{i:03}"} for i in range(200)])[0]
    order = np.array([5, 5, 199, 0, *range(190, 60, -1)], dtype=np.intp)
    parts = [whole.take(order)]
    assert copied(parts) == {"value": True, "key": True}
    rows = built(parts)
    assert rows == expected(parts)
    assert rows == [(f"k{i:03}".encode(), value(i, 16), []) for i in order.tolist()]


def test_string_columns_are_plain_binary_and_string_arrays() -> None:
    parts = entries([{"value": value(i, 10), "properties": {"a": "b"}} for i in range(N)])
    record_batch = to_record_batch(parts, TOPIC, 2)
    assert record_batch.column("value").type == pa.binary()
    assert record_batch.column("properties").type.key_type == pa.string()
    assert record_batch.column("value").offset == 0
    assert record_batch.column("value").buffers()[2].size == 10 * N
