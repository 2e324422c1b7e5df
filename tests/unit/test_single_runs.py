"""One-message entries decoded together: the run gives, row by row, exactly what decoding each
entry alone gives, with each row's own entry fields; slices and takes keep them."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from support.decoding import entry_fields, outer, rows

from pulsar_spark.protocol import pb
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns
from pulsar_spark.protocol.single_runs import SingleRun, single


def info(entry: int, **fields: object) -> EntryInfo:
    base: dict[str, object] = {
        "ledger_id": 9,
        "entry_id": entry,
        "partition": 3,
        "producer_name": "producer-a",
        "publish_time": 1_700_000_000_000 + entry,
        "replicated_from": None,
    }
    base.update(fields)
    return EntryInfo(**base)  # type: ignore[arg-type]


ENTRIES: list[tuple[EntryInfo, pb.MessageMetadata, bytes]] = [
    (info(0), outer(sequence_id=1, partition_key="k-0"), b"first"),
    (info(1), outer(sequence_id=2), b""),
    (info(2), outer(sequence_id=3, null_value=True, partition_key="nk"), b""),
    (
        info(3, producer_name="producer-b", replicated_from="east"),
        outer(
            sequence_id=(1 << 64) - 1,
            properties=[pb.KeyValue(key="a", value="1"), pb.KeyValue(key="ü", value="✓")],
            event_time=1_690_000_000_000,
        ),
        b"\x00\xff binary",
    ),
    (
        info(4),
        outer(
            sequence_id=5,
            partition_key=base64.b64encode(b"\x00\x01raw").decode(),
            partition_key_b64_encoded=True,
        ),
        b"five",
    ),
    (info(5), outer(sequence_id=6, null_partition_key=True), b"six"),
    (info(6), outer(sequence_id=7, partition_key=""), b"seven"),
]


def run_of(entries: list[tuple[EntryInfo, pb.MessageMetadata, bytes]]) -> MessageColumns:
    run = SingleRun()
    for entry in entries:
        run.add(*entry)
    assert len(run) == len(entries)
    return run.take()


def test_a_run_reads_as_each_entry_alone() -> None:
    together = run_of(ENTRIES)
    alone = [single(*entry) for entry in ENTRIES]
    assert rows(together) == [r for columns in alone for r in rows(columns)]
    assert entry_fields(together) == [f for columns in alone for f in entry_fields(columns)]
    assert entry_fields(together) == [
        (9, e.entry_id, e.publish_time, e.producer_name, e.replicated_from) for e, _, _ in ENTRIES
    ]
    assert together.entry == ENTRIES[0][0]
    assert together.batch_index.tolist() == [-1] * len(ENTRIES)
    assert rows(together)[3]["sequence_id"] == -1  # 2^64 - 1, as Java's signed long
    assert [r["key"] for r in rows(together)] == [
        b"k-0",
        None,
        b"nk",
        None,
        b"\x00\x01raw",
        None,
        b"",
    ]
    assert [r["value"] for r in rows(together)] == [
        b"first",
        b"",
        None,
        b"\x00\xff binary",
        b"five",
        b"six",
        b"seven",
    ]


def test_a_run_without_keys_or_properties_has_none() -> None:
    plain = [(info(i), outer(sequence_id=i), b"v%d" % i) for i in range(3)]
    columns = run_of(plain)
    assert columns.key is None
    assert columns.properties is None
    assert columns.values.valid is None


@pytest.mark.parametrize("picked", [[1, 2, 3], [0], [6, 4, 4, 0]])
def test_slices_and_takes_keep_each_rows_entry(picked: list[int]) -> None:
    together = run_of(ENTRIES)
    taken = together.take(np.array(picked, dtype=np.intp))
    expected = entry_fields(together)
    assert entry_fields(taken) == [expected[i] for i in picked]
    assert rows(taken) == [rows(together)[i] for i in picked]
    sliced = together.slice(2, 5)
    assert entry_fields(sliced) == expected[2:5]
    assert rows(sliced) == rows(together)[2:5]


def test_take_empties_the_run() -> None:
    run = SingleRun()
    run.add(*ENTRIES[0])
    assert run.size == 5
    first = run.take()
    assert len(run) == 0 and run.size == 0
    run.add(*ENTRIES[1])
    assert entry_fields(run.take()) == [(9, 1, 1_700_000_000_001, "producer-a", None)]
    assert first.count == 1
    with pytest.raises(ValueError, match="empty run"):
        run.take()
