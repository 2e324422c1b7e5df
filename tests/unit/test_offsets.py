"""Streaming offsets: the canonical JSON form and what "last consumed" means as a bound.

An offset names, per partition, the last message consumed: a micro-batch reads
``(start, end]``. These tests pin the JSON text Spark stores and compares, and check the bound
semantics message by message on a model partition, against the range reader's own filter.
"""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from pulsar_spark.errors import ConfigurationError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.source.offsets import (
    NOTHING_CONSUMED,
    PulsarOffset,
    consumed_before,
    has_messages_after,
)

P0 = "persistent://public/default/t-partition-0"
P1 = "persistent://public/default/t-partition-1"
SINGLE = "persistent://public/default/plain"

# --- the canonical JSON form ------------------------------------------------------------------


def test_to_json_sorts_keys_at_every_level() -> None:
    offset = PulsarOffset(
        {P1: MessageId(4, 0, -1), SINGLE: MessageId(0, 12), P0: MessageId(3, 5, 2)}
    )
    data = offset.to_json()
    assert list(data) == [SINGLE, P0, P1]
    assert all(
        list(position) == ["batchIndex", "entryId", "ledgerId"] for position in data.values()
    )
    assert json.dumps(data) == json.dumps(data, sort_keys=True)


def test_to_json_text_exactly() -> None:
    offset = PulsarOffset({P1: MessageId(4, 0, -1, partition=1), P0: MessageId(3, 5, 2, 0)})
    assert json.dumps(offset.to_json()) == (
        '{"persistent://public/default/t-partition-0": '
        '{"batchIndex": 2, "entryId": 5, "ledgerId": 3}, '
        '"persistent://public/default/t-partition-1": '
        '{"batchIndex": -1, "entryId": 0, "ledgerId": 4}}'
    )


def test_both_key_orders_parse_to_equal_offsets_and_the_same_text() -> None:
    forward = {
        P0: {"ledgerId": 3, "entryId": 5, "batchIndex": 2},
        P1: {"ledgerId": 4, "entryId": 0, "batchIndex": -1},
    }
    backward = {
        P1: {"batchIndex": -1, "entryId": 0, "ledgerId": 4},
        P0: {"batchIndex": 2, "entryId": 5, "ledgerId": 3},
    }
    a, b = PulsarOffset.from_json(forward), PulsarOffset.from_json(backward)
    assert a == b
    assert a.positions == {P0: MessageId(3, 5, 2), P1: MessageId(4, 0, -1)}
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    assert json.dumps(a.to_json()) != json.dumps(forward)  # what the canonical form fixes


def test_round_trip_is_the_identity_on_canonical_json() -> None:
    canonical = {
        SINGLE: {"batchIndex": -1, "entryId": 7, "ledgerId": 0},
        P0: {"batchIndex": 2, "entryId": 5, "ledgerId": 3},
        P1: {"batchIndex": -1, "entryId": -1, "ledgerId": -1},
    }
    assert PulsarOffset.from_json(canonical).to_json() == canonical
    text = json.dumps(canonical)
    assert json.dumps(PulsarOffset.from_json(json.loads(text)).to_json()) == text


def test_batch_index_is_optional_and_missing_partitions_read_as_nothing_consumed() -> None:
    offset = PulsarOffset.from_json({P0: {"entryId": 9, "ledgerId": 2}})
    assert offset.positions[P0] == MessageId(2, 9, -1)
    assert offset.get(P0) == MessageId(2, 9, -1)
    assert offset.get(P1) == NOTHING_CONSUMED == MessageId(-1, -1, -1)
    assert PulsarOffset({}).to_json() == {}


C2 = "pulsar://c2.example:6650"
NON_PERSISTENT = "non-persistent://public/default/np"


def test_a_secondary_cluster_is_recorded_in_the_canonical_text() -> None:
    offset = PulsarOffset({P0: MessageId(3, 5, -1, 0), NON_PERSISTENT: MessageId(1, 2)}, C2)
    assert json.dumps(offset.to_json()) == (
        '{"cluster": "pulsar://c2.example:6650", '
        '"non-persistent://public/default/np": {"batchIndex": -1, "entryId": 2, "ledgerId": 1}, '
        '"persistent://public/default/t-partition-0": '
        '{"batchIndex": -1, "entryId": 5, "ledgerId": 3}}'
    )
    back = PulsarOffset.from_json(json.loads(json.dumps(offset.to_json())))
    assert back == PulsarOffset({P0: MessageId(3, 5, -1), NON_PERSISTENT: MessageId(1, 2)}, C2)
    assert back.to_json() == offset.to_json()


def test_offsets_without_a_cluster_are_the_primary_and_keep_their_text() -> None:
    text = (
        '{"persistent://public/default/t-partition-0": '
        '{"batchIndex": -1, "entryId": 5, "ledgerId": 3}}'
    )
    offset = PulsarOffset.from_json(json.loads(text))
    assert offset.cluster is None
    assert json.dumps(offset.to_json()) == text
    assert PulsarOffset({}, C2).to_json() == {"cluster": C2}


def test_a_cluster_that_is_no_string_is_refused() -> None:
    with pytest.raises(ConfigurationError) as info:
        PulsarOffset.from_json({"cluster": 2, P0: {"entryId": 1, "ledgerId": 1}})
    assert str(info.value) == (
        "invalid Pulsar offset {'cluster': 2, 'persistent://public/default/t-partition-0': "
        "{'entryId': 1, 'ledgerId': 1}}: cluster 2"
    )


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ({P0: [3, 5]}, "expected an object with ledgerId/entryId"),
        ({P0: {"ledgerId": 3}}, "missing 'entryId'"),
        ({P0: {"ledgerId": "3", "entryId": 5}}, "ledgerId must be an integer"),
        ({P0: {"ledgerId": 3, "entryId": True}}, "entryId must be an integer"),
        ({P0: {"ledgerId": 3, "entryId": 5, "batchIndex": 1.5}}, "batchIndex must be an integer"),
    ],
)
def test_invalid_offsets_are_configuration_errors(value: dict, fragment: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        PulsarOffset.from_json(value)
    assert "invalid Pulsar offset" in str(info.value)
    assert fragment in str(info.value)


# --- consumed_before ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "before"),
    [
        # inside a batch: the previous index of the same entry
        (MessageId(3, 7, 5, 1), MessageId(3, 7, 4, 1)),
        (MessageId(3, 7, 1, 1), MessageId(3, 7, 0, 1)),
        # index 0 and whole entries: all of the previous entry
        (MessageId(3, 7, 0, 1), MessageId(3, 6, -1, 1)),
        (MessageId(3, 7, -1, 1), MessageId(3, 6, -1, 1)),
        # entry 0: "all of entry -1" of that ledger, which exists nowhere and excludes nothing
        (MessageId(3, 0, -1, 2), MessageId(3, -1, -1, 2)),
        (MessageId(3, 0, 0, 2), MessageId(3, -1, -1, 2)),
        (NOTHING_CONSUMED, NOTHING_CONSUMED),
    ],
)
def test_consumed_before(first: MessageId, before: MessageId) -> None:
    got = consumed_before(first)
    assert (got.ledger_id, got.entry_id, got.batch_index) == (
        before.ledger_id,
        before.entry_id,
        before.batch_index,
    )
    assert got.partition == before.partition


def test_consumed_before_entry_zero_still_admits_that_entry() -> None:
    start = consumed_before(MessageId(3, 0, -1))
    assert has_messages_after(start, MessageId(3, 0, -1))
    assert has_messages_after(start, MessageId(3, 0, 0))
    assert not start.is_earliest


# --- bounds: MessageId.last_key and has_messages_after --------------------------------------


def test_last_key_a_whole_entry_covers_all_its_indexes() -> None:
    whole = MessageId(2, 5, -1).last_key()
    assert MessageId(2, 5, 0).last_key() < whole
    assert MessageId(2, 5, 999_999).last_key() < whole
    assert whole < MessageId(2, 6, 0).last_key()
    assert whole < MessageId(3, 0, -1).last_key()
    assert NOTHING_CONSUMED.last_key() < MessageId(0, 0, 0).last_key()


@pytest.mark.parametrize(
    ("start", "last", "expected"),
    [
        (NOTHING_CONSUMED, None, False),  # empty partition
        (NOTHING_CONSUMED, NOTHING_CONSUMED, False),  # empty range
        (MessageId(2, 5, -1), NOTHING_CONSUMED, False),
        (NOTHING_CONSUMED, MessageId(0, 0, -1), True),
        (MessageId(2, 5, -1), MessageId(2, 5, -1), False),
        (MessageId(2, 5, 3), MessageId(2, 5, 3), False),
        (MessageId(2, 5, 3), MessageId(2, 5, -1), True),  # indexes 4.. of entry 5
        (MessageId(2, 5, -1), MessageId(2, 5, 3), False),  # end inside what was consumed
        (MessageId(2, 5, -1), MessageId(2, 6, 0), True),
        (MessageId(2, 5, 3), MessageId(2, 5, 4), True),
        (MessageId(2, 9, -1), MessageId(3, 0, -1), True),  # next ledger
        (MessageId(3, 0, -1), MessageId(2, 9, -1), False),
        (MessageId(2, 5, -1), None, False),
    ],
)
def test_has_messages_after(start: MessageId, last: MessageId | None, expected: bool) -> None:
    assert has_messages_after(start, last) is expected


# --- the semantics message by message ---------------------------------------------------------

# A model partition: ledger 4 entries 0..3 and ledger 6 entries 0..1. Entries 1 and 4 are
# batches of 3 and 4, entry 2 a batch of one, the others single (unbatched) messages.
ENTRIES: list[tuple[int, int, int | None]] = [
    (4, 0, None),
    (4, 1, 3),
    (4, 2, 1),
    (4, 3, None),
    (6, 0, 4),
    (6, 1, None),
]
MESSAGES = [
    MessageId(ledger, entry, index)
    for ledger, entry, size in ENTRIES
    for index in ([-1] if size is None else range(size))
]
# Every position an offset can hold: each message, each batched entry as a whole, nothing yet.
POSITIONS = [
    NOTHING_CONSUMED,
    *MESSAGES,
    *(MessageId(ledger, entry) for ledger, entry, size in ENTRIES if size is not None),
]


def in_range(start: MessageId, end: MessageId) -> list[MessageId]:
    """The messages a micro-batch ``(start, end]`` holds, by the offsets' own ordering."""
    low = None if start.is_earliest else start.last_key()
    return [
        m
        for m in MESSAGES
        if (low is None or low < m.last_key()) and m.last_key() <= end.last_key()
    ]


def read_by_reader(start: MessageId, end: MessageId) -> list[MessageId]:
    """The messages the range reader keeps for an exclusive start and an inclusive end."""
    window = ReadRange("t", start, end, start_inclusive=False, end_inclusive=True)
    first, last = window.bounds()
    return [m for m in MESSAGES if first <= (m.ledger_id, m.entry_id, m.batch_index) <= last]


def test_examples_of_exclusive_start_and_inclusive_end() -> None:
    b = {(m.ledger_id, m.entry_id, m.batch_index): m for m in MESSAGES}
    # after index 0 of entry 4:1, through the whole of entry 6:0
    assert in_range(MessageId(4, 1, 0), MessageId(6, 0, -1)) == [
        b[4, 1, 1],
        b[4, 1, 2],
        b[4, 2, 0],
        b[4, 3, -1],
        b[6, 0, 0],
        b[6, 0, 1],
        b[6, 0, 2],
        b[6, 0, 3],
    ]
    # after all of entry 4:1, through index 1 of entry 6:0
    assert in_range(MessageId(4, 1, -1), MessageId(6, 0, 1)) == [
        b[4, 2, 0],
        b[4, 3, -1],
        b[6, 0, 0],
        b[6, 0, 1],
    ]
    # one message: after index 1, through index 2
    assert in_range(MessageId(6, 0, 1), MessageId(6, 0, 2)) == [b[6, 0, 2]]
    # an unbatched message as its own start excludes it, as its own end includes it
    assert in_range(MessageId(4, 3, -1), MessageId(6, 1, -1)) == MESSAGES[-5:]
    assert in_range(NOTHING_CONSUMED, MessageId(4, 0, -1)) == [b[4, 0, -1]]
    # the start of a range built with consumed_before reads that message first
    assert in_range(consumed_before(MessageId(4, 1, 2)), MessageId(4, 1, 2)) == [b[4, 1, 2]]
    assert in_range(consumed_before(MessageId(6, 0, 0)), MessageId(6, 0, 0)) == [b[6, 0, 0]]


LAST_OF_BATCH = {MessageId(4, 1, 2), MessageId(4, 2, 0), MessageId(6, 0, 3)}


@pytest.mark.parametrize("start", POSITIONS, ids=str)
def test_the_reader_keeps_exactly_the_range_the_offsets_describe(start: MessageId) -> None:
    """``has_messages_after`` never misses a message. It cannot know batch sizes, so after the
    last index of a batch it still expects more of that entry; the counter never leaves such a
    position (a batch consumed to its end is recorded as the whole entry)."""
    for end in POSITIONS:
        if end.is_earliest:
            continue
        expected = in_range(start, end)
        assert read_by_reader(start, end) == expected, (start, end)
        if start in LAST_OF_BATCH and end == MessageId(start.ledger_id, start.entry_id):
            assert expected == []
            assert has_messages_after(start, end)
        else:
            assert has_messages_after(start, end) is bool(expected), (start, end)


def test_consecutive_batches_cover_every_message_once() -> None:
    # ends as a limit would choose them: inside batches, at whole entries, across ledgers
    ends = [
        NOTHING_CONSUMED,
        MessageId(4, 1, 1),
        MessageId(4, 1, -1),
        MessageId(4, 3, -1),
        MessageId(6, 0, 0),
        MessageId(6, 0, 2),
        MessageId(6, 1, -1),
    ]
    batches = [in_range(a, b) for a, b in pairwise(ends)]
    assert [m for batch in batches for m in batch] == MESSAGES
    assert [len(batch) for batch in batches] == [3, 1, 2, 1, 2, 2]
    for a, b in pairwise(ends):
        assert read_by_reader(a, b) == in_range(a, b)
