"""Batches decoded as one group (``decode_group``): every row, and every row's entry fields,
must be what decoding each entry alone gives, message by message, and so must the record
batch made of them."""

from __future__ import annotations

import base64

import numpy as np
import pyarrow as pa
import pytest
from support.decoding import INFO, batch, entry_fields, outer, rows, smm

from pulsar_spark.arrow.decode import to_record_batch
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.decode import Entry, decode_entries, decode_group
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.payload import PayloadSection
from pulsar_spark.protocol.read_stage import BatchGroup, RawEntry

TOPIC = "persistent://public/default/groups"


def message(n: int) -> tuple[dict[str, object], bytes]:
    """Fields and value of message ``n``: keys (some base64, some absent or null), properties
    (some none), event times, null values and sizes that vary."""
    fields: dict[str, object] = {}
    if n % 7 == 3:
        fields.update(partition_key=base64.b64encode(b"\x00\xffk%d" % n).decode())
        fields.update(partition_key_b64_encoded=True)
    elif n % 11 == 5:
        fields.update(null_partition_key=True)
    elif n % 5:
        fields.update(partition_key=f"user-{n % 13}")
    if n % 4:
        fields.update(properties={"source": "web" if n % 3 else "mobile", "id": f"t-{n}"})
    if n % 6 == 1:
        fields.update(event_time=1_700_000_000_000 + n)
    if n % 9 == 8:
        fields.update(null_value=True)
        return fields, b""
    return fields, b"v%d-" % n + b"x" * (n % 17)


def keyed_entry(index: int, first: int, count: int) -> Entry:
    """Entry ``index`` of a group: a batch of messages ``first`` to ``first + count``, of its own
    producer every third entry, published a millisecond after the one before."""
    records = []
    for n in range(first, first + count):
        fields, value = message(n)
        records.append((smm(payload_size=len(value), sequence_id=5000 + n, **fields), value))
    info = INFO._replace(
        ledger_id=12 + index // 50,
        entry_id=index,
        producer_name=f"producer-{index // 3}",
        publish_time=INFO.publish_time + index,
        replicated_from="east" if index % 4 == 1 else None,
    )
    metadata = outer(num_messages_in_batch=count, sequence_id=5000 + first)
    return info, metadata, batch(*records)


def uniform_entry(index: int, count: int) -> Entry:
    """A batch of ``count`` 8-byte values without keys, the records alike but for the sequence
    id (the uniform path)."""
    records = [
        (smm(payload_size=8, sequence_id=100 * index + i), b"u%03d-%03d" % (index, i))
        for i in range(count)
    ]
    info = INFO._replace(entry_id=index, publish_time=INFO.publish_time + index)
    return info, outer(num_messages_in_batch=count, sequence_id=100 * index), batch(*records)


def keyed_group(counts: list[int]) -> list[Entry]:
    firsts = np.cumsum([0, *counts[:-1]]).tolist()
    pairs = zip(firsts, counts, strict=True)
    return [keyed_entry(i, first, count) for i, (first, count) in enumerate(pairs)]


def each_alone(entries: list[Entry]) -> tuple[list[dict[str, object]], list[tuple[object, ...]]]:
    """Rows and entry fields (with the schema version) of the entries decoded one by one."""
    alone = [decode_entries([entry])[0] for entry in entries]
    return [r for c in alone for r in rows(c)], [f for c in alone for f in with_versions(c)]


def with_versions(columns: MessageColumns) -> list[tuple[object, ...]]:
    """Every row's entry fields and schema version."""
    versions = columns.schema_versions()
    return [(*f, v) for f, v in zip(entry_fields(columns), versions, strict=True)]


LAYOUTS = {
    "keyed, 40 per batch": keyed_group([40] * 6),
    "keyed, one per batch": keyed_group([1] * 300),
    "keyed, sizes mixed": keyed_group([1, 2, 60, 1, 7, 120, 3, 1, 1, 49]),
    "uniform": [uniform_entry(i, 50 + i) for i in range(5)],
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_group_reads_as_each_entry_alone(layout: str) -> None:
    entries = LAYOUTS[layout]
    together = decode_group(entries)
    assert together is not None
    expected_rows, expected_fields = each_alone(entries)
    assert together.count == len(expected_rows)
    assert rows(together) == expected_rows
    assert with_versions(together) == expected_fields
    assert together.entry == entries[0][0]
    parts = decode_entries(entries)
    one = to_record_batch([together], TOPIC, 3)
    assert one.equals(to_record_batch(parts, TOPIC, 3))
    assert one.schema.equals(to_record_batch(parts, TOPIC, 3).schema)


def sent(n: int) -> dict[str, object]:
    """What message ``n`` reads as, from what :func:`message` sends."""
    fields, value = message(n)
    key = fields.get("partition_key")
    if fields.get("partition_key_b64_encoded"):
        key = base64.b64decode(str(key))
    elif key is not None:
        key = str(key).encode()
    properties = fields.get("properties") or {}
    assert isinstance(properties, dict)
    return {
        "key": key,
        "value": None if fields.get("null_value") else value,
        "properties": list(properties.items()),
        "sequenceId": 5000 + n,
    }


def test_a_group_of_keyed_messages_holds_exactly_what_was_sent() -> None:
    counts = [1, 3, 2, 1, 50, 1]
    together = decode_group(keyed_group(counts))
    assert together is not None
    table = pa.Table.from_batches([to_record_batch([together], TOPIC, 1)])
    got = table.select(["key", "value", "properties", "sequenceId"]).to_pylist()
    assert got == [sent(n) for n in range(sum(counts))]
    ids = [(e, i) for e, count in enumerate(counts) for i in range(count)]
    assert table.column("messageId").to_pylist() == [
        {"ledgerId": 12, "entryId": e, "batchIndex": i} for e, i in ids
    ]
    assert table.column("producerName").to_pylist() == [f"producer-{e // 3}" for e, _ in ids]
    assert table.column("replicatedFrom").to_pylist() == [
        "east" if e % 4 == 1 else None for e, _ in ids
    ]
    assert table.column("partition").to_pylist() == [1] * sum(counts)


@pytest.mark.parametrize(("start", "stop"), [(0, 1), (3, 17), (39, 41), (0, 240), (100, 100)])
def test_rows_of_a_group_slice_with_their_entries(start: int, stop: int) -> None:
    entries = keyed_group([40] * 6)
    together = decode_group(entries)
    assert together is not None
    expected_rows, expected_fields = each_alone(entries)
    part = together.slice(start, stop)
    assert rows(part) == expected_rows[start:stop]
    assert with_versions(part) == expected_fields[start:stop]


@pytest.mark.parametrize("picked", [[5, 6, 7, 0], [239, 239, 1], [], [45]])
def test_rows_of_a_group_taken_keep_their_entries(picked: list[int]) -> None:
    entries = keyed_group([40] * 6)
    together = decode_group(entries)
    assert together is not None
    expected_rows, expected_fields = each_alone(entries)
    part = together.take(np.array(picked, dtype=np.intp))
    assert rows(part) == [expected_rows[i] for i in picked]
    assert with_versions(part) == [expected_fields[i] for i in picked]


def test_what_a_group_cannot_read_at_once_is_left_to_each_entry() -> None:
    keyed = keyed_group([30, 30])
    assert decode_group(keyed[:1]) is None  # one entry: nothing to group
    assert decode_group(keyed_group([1, 1, 1])) is None  # too few messages for a scan
    single = (INFO._replace(entry_id=99), outer(), b"one message")
    assert decode_group([*keyed, single]) is None  # not a batch
    compacted = keyed_entry(2, 60, 30)
    records = [(smm(payload_size=1, sequence_id=i, compacted_out=i == 3), b"c") for i in range(30)]
    compacted = (compacted[0], compacted[1], batch(*records))
    assert decode_group([*keyed, compacted]) is None
    assert [c.count for c in decode_entries([*keyed, compacted])] == [30, 30, 29]


# --- the reader's group: one set of columns only when every message is read ----------------


def raw_entries(counts: list[int], ack_sets: dict[int, list[int]]) -> list[RawEntry]:
    """The entries of :func:`keyed_group` as the reader receives them (``ack_sets``: entry
    index to the entry's ``ack_set`` words)."""
    raws = []
    for index, (info, metadata, payload) in enumerate(keyed_group(counts)):
        message = pb.CommandMessage(
            consumer_id=1,
            message_id=pb.MessageIdData(ledgerId=info.ledger_id, entryId=info.entry_id),
            ack_set=ack_sets.get(index, []),
        )
        section = PayloadSection(metadata, payload)
        raws.append(RawEntry(message, section, (info.ledger_id, info.entry_id)))
    return raws


def taken(raws: list[RawEntry], first: tuple[int, int, int]) -> list[MessageColumns]:
    group = BatchGroup((first, (12, 99, 10**6)))
    for raw in raws:
        group.add(raw)
    return list(group.take())


def row_ids(parts: list[MessageColumns]) -> list[tuple[int, int]]:
    return [
        (int(e), int(i))
        for p in parts
        for e, i in zip(p.entry_column("entry_id"), p.batch_index, strict=True)
    ]


def test_a_group_read_whole_comes_out_as_one() -> None:
    parts = taken(raw_entries([30, 30, 30], {}), (-1, -1, -1))
    assert len(parts) == 1
    assert row_ids(parts) == [(e, i) for e in range(3) for i in range(30)]
    expected, _ = each_alone(keyed_group([30, 30, 30]))
    assert rows(parts[0]) == expected


def test_a_group_with_an_ack_set_or_a_clipped_entry_comes_out_entry_by_entry() -> None:
    # bits 10 to 29 set in entry 1: its first ten messages were acknowledged
    acked = taken(raw_entries([30, 30, 30], {1: [((1 << 30) - 1) ^ ((1 << 10) - 1)]}), (-1, -1, -1))
    assert len(acked) == 3
    assert row_ids(acked) == (
        [(0, i) for i in range(30)] + [(1, i) for i in range(10, 30)] + [(2, i) for i in range(30)]
    )
    clipped = taken(raw_entries([30, 30, 30], {}), (12, 0, 25))
    assert len(clipped) == 3
    assert row_ids(clipped) == [(0, i) for i in range(25, 30)] + [
        (e, i) for e in (1, 2) for i in range(30)
    ]
