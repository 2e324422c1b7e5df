"""Batches of one record length decoded on the uniform path together: each entry's rows must be
exactly what that entry gives alone and what the reference walk gives, message by message."""

from __future__ import annotations

from typing import Any

from support.decoding import (
    INFO,
    assert_same_columns,
    batch,
    keys_of,
    outer,
    properties_of,
    row,
    rows,
    smm,
)

from pulsar_spark.protocol import decode
from pulsar_spark.protocol.batch_fields import to_columns
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.decode import Entry, decode_entries, decode_entry
from pulsar_spark.protocol.messages import MessageColumns


def uniform_entry(n: int, count: int, first_seq: int | None, **shared: Any) -> Entry:
    """Entry ``n``: ``count`` records of 6-byte values ``e<n>-<i>``, sequence ids counting up
    from ``first_seq`` in each record (None: none in the records, the batch's own is 40 * n)."""
    records = []
    for i in range(count):
        seq = {} if first_seq is None else {"sequence_id": first_seq + i}
        records.append((smm(payload_size=6, **seq, **shared), b"e%d-%03d" % (n, i)))
    metadata = outer(num_messages_in_batch=count, sequence_id=40 * n)
    return INFO._replace(entry_id=n), metadata, batch(*records)


def walked(entry: Entry) -> MessageColumns:
    info, metadata, payload = entry
    count = metadata.num_messages_in_batch
    return to_columns(info, payload, walk_batch(payload, count, metadata.sequence_id))


def check_each(together: list[MessageColumns], entries: list[Entry]) -> None:
    assert [c.entry for c in together] == [info for info, _, _ in entries]
    for columns, entry in zip(together, entries, strict=True):
        assert_same_columns(columns, walked(entry))
        assert_same_columns(columns, decode_entry(*entry))


def test_batches_of_one_layout_are_read_at_once() -> None:
    shared = {"partition_key": "k", "properties": {"p": "q"}, "event_time": 77}
    entries = [uniform_entry(n, 30 + n, 20_000 + 100 * n, **shared) for n in range(4)]
    at_once = decode._uniform(entries)
    assert at_once is not None
    check_each(at_once, entries)
    together = decode_entries(entries)
    check_each(together, entries)
    assert rows(together[2]) == [
        row(i, b"e2-%03d" % i, key=b"k", props=(("p", "q"),), event_time=77, seq=20_200 + i)
        for i in range(32)
    ]
    assert [c.batch_index.tolist() for c in together] == [list(range(30 + n)) for n in range(4)]


def test_batches_without_sequence_ids_count_each_from_its_own() -> None:
    entries = [uniform_entry(n, 5, None) for n in (3, 1, 7)]
    together = decode_entries(entries)
    check_each(together, entries)
    assert [c.sequence_id.tolist() for c in together] == [
        list(range(base, base + 5)) for base in (120, 40, 280)
    ]


def test_batches_with_a_key_each_are_read_each_alone() -> None:
    entries = [uniform_entry(n, 10, 10 * n, partition_key=f"key-{n}") for n in range(3)]
    assert decode._uniform(entries) is None
    assert all(decode._uniform([entry]) is not None for entry in entries)
    together = decode_entries(entries)
    check_each(together, entries)
    assert [keys_of(c) for c in together] == [[b"key-%d" % n] * 10 for n in range(3)]
    assert [properties_of(c) for c in together] == [[()] * 10] * 3


def test_runs_split_where_the_record_length_changes() -> None:
    varied = batch(
        *((smm(payload_size=1 + i % 2, sequence_id=i), b"v" * (1 + i % 2)) for i in range(9))
    )
    entries = [
        uniform_entry(0, 8, 16_380),  # sequence ids of two bytes, then three: not uniform
        uniform_entry(1, 8, 16_384),  # three bytes
        uniform_entry(2, 8, 16_392),
        (INFO._replace(entry_id=3), outer(num_messages_in_batch=9), varied),
        uniform_entry(4, 8, 300),  # two bytes
        uniform_entry(5, 8, 308),
    ]
    runs = list(decode._one_length_runs(entries))
    assert [[e[0].entry_id for e in run] for run in runs] == [[0], [1, 2], [3], [4, 5]]
    together = decode_entries(entries)
    check_each(together, entries)
    assert [r["value"] for r in rows(together[3])] == [b"v" * (1 + i % 2) for i in range(9)]
    assert together[5].sequence_id.tolist() == list(range(308, 316))


def test_a_run_whose_first_batch_has_a_key_per_message() -> None:
    keyed = batch(
        *(
            (smm(payload_size=6, sequence_id=i, partition_key=f"k{i}"), b"k0-%03d" % i)
            for i in range(8)
        )
    )
    entries = [
        (INFO._replace(entry_id=0), outer(num_messages_in_batch=8), keyed),
        uniform_entry(1, 8, 0, partition_key="kk"),  # records as long as the first batch's
        uniform_entry(2, 8, 8, partition_key="kk"),
    ]
    assert len({decode._record_length(entry) for entry in entries}) == 1
    assert decode._uniform(entries[:1]) is None
    together = decode_entries(entries)
    check_each(together, entries)
    assert keys_of(together[0]) == [b"k%d" % i for i in range(8)]
    assert keys_of(together[2]) == [b"kk"] * 8
