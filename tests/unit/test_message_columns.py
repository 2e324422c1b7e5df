"""MessageColumns.slice and MessageColumns.take on decoded columns."""

from __future__ import annotations

import numpy as np
import pytest
from support.decoding import (
    INFO,
    batch,
    check_shape,
    joined_values,
    keys_of,
    null_values,
    outer,
    row,
    rows,
    smm,
    value_offsets,
)

from pulsar_spark.protocol.decode import decode_entry
from pulsar_spark.protocol.messages import MessageColumns


def mixed_columns() -> MessageColumns:
    payload = batch(
        (
            smm(
                payload_size=2,
                partition_key="k0",
                properties={"i": "0"},
                event_time=10,
                sequence_id=100,
            ),
            b"v0",
        ),
        (smm(payload_size=0, null_value=True, sequence_id=101), b""),
        (smm(payload_size=3, partition_key="k2", event_time=12, sequence_id=102), b"v22"),
        (smm(payload_size=1, properties={"i": "3"}, sequence_id=103), b"3"),
        (smm(payload_size=4, partition_key="k4", event_time=14, sequence_id=104), b"v444"),
    )
    return decode_entry(INFO, outer(num_messages_in_batch=5), payload)


MIXED_ROWS = [
    row(0, b"v0", key=b"k0", props=(("i", "0"),), event_time=10, seq=100),
    row(1, None, seq=101),
    row(2, b"v22", key=b"k2", event_time=12, seq=102),
    row(3, b"3", props=(("i", "3"),), seq=103),
    row(4, b"v444", key=b"k4", event_time=14, seq=104),
]


def test_mixed_columns_decode() -> None:
    columns = mixed_columns()
    check_shape(columns)
    assert rows(columns) == MIXED_ROWS
    assert joined_values(columns) == b"v0v223v444"
    assert value_offsets(columns) == [0, 2, 2, 5, 6, 10]


@pytest.mark.parametrize(
    ("start", "stop"), [(0, 5), (1, 4), (0, 1), (4, 5), (2, 3), (3, 3), (0, 0)]
)
def test_slice(start: int, stop: int) -> None:
    columns = mixed_columns()
    part = columns.slice(start, stop)
    check_shape(part)
    assert part.count == stop - start
    assert part.entry is INFO
    assert rows(part) == MIXED_ROWS[start:stop]
    expected_values = b"".join(r["value"] or b"" for r in MIXED_ROWS[start:stop])
    assert joined_values(part) == expected_values
    if (start, stop) == (0, 5):
        assert part is columns


def test_slice_keeps_none_columns_none() -> None:
    payload = batch(
        (smm(payload_size=1, sequence_id=0), b"a"),
        (smm(payload_size=2, sequence_id=1), b"bc"),
        (smm(payload_size=1, sequence_id=2), b"d"),
    )
    columns = decode_entry(INFO, outer(num_messages_in_batch=3), payload)
    part = columns.slice(1, 3)
    assert part.key is None and part.properties is None and null_values(part) is None
    assert rows(part) == [row(1, b"bc", seq=1), row(2, b"d", seq=2)]
    assert value_offsets(part) == [0, 2, 3]


@pytest.mark.parametrize("order", [[4, 0, 2], [1], [3, 3], [], [0, 1, 2, 3, 4], [4, 3, 2, 1, 0]])
def test_take(order: list[int]) -> None:
    columns = mixed_columns()
    part = columns.take(np.array(order, dtype=np.intp))
    check_shape(part)
    assert part.count == len(order)
    assert part.entry is INFO
    assert rows(part) == [MIXED_ROWS[i] for i in order]
    assert joined_values(part) == b"".join(MIXED_ROWS[i]["value"] or b"" for i in order)


def test_slice_of_a_single_message() -> None:
    columns = decode_entry(INFO, outer(partition_key="k"), b"abc")
    assert columns.slice(0, 1) is columns
    empty = columns.slice(1, 1)
    check_shape(empty)
    assert empty.count == 0 and joined_values(empty) == b"" and keys_of(empty) == []
