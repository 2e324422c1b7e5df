"""minPartitions: ranges cut at entry boundaries into pieces that together read every message of
the range exactly once, checked message by message against the range reader's own bounds."""

from __future__ import annotations

import pytest

from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.source.planning import PartitionRead, PartitionRef
from pulsar_spark.source.splitting import split, split_reads

TOPIC = "persistent://public/default/t"
REF = PartitionRef(TOPIC, 0, f"{TOPIC}-partition-0")

Key = tuple[int, int, int]


def topic_messages(ledgers: dict[int, int], per_entry: int) -> list[Key]:
    """Every message key of a topic: ``ledgers[L]`` entries in ledger L, ``per_entry`` messages
    per entry (1: unbatched, batch index -1)."""
    indexes = [-1] if per_entry == 1 else list(range(per_entry))
    return [
        (ledger, entry, index)
        for ledger, entries in sorted(ledgers.items())
        for entry in range(entries)
        for index in indexes
    ]


def read_of(start: MessageId, start_in: bool, end: MessageId, end_in: bool) -> PartitionRead:
    return PartitionRead(
        client=ClientSettings("pulsar://localhost:6650"),
        ref=REF,
        start=start,
        start_inclusive=start_in,
        end=end,
        end_inclusive=end_in,
        poll_timeout=30.0,
    )


def selected(read: PartitionRead, messages: list[Key]) -> list[Key]:
    """The messages the range reader delivers for ``read``."""
    bounds = ReadRange(TOPIC, read.start, read.end, read.start_inclusive, read.end_inclusive)
    first, last = bounds.bounds()
    return [m for m in messages if first <= m <= last]


def ids(ledger: int, entry: int, index: int = -1) -> MessageId:
    return MessageId(ledger, entry, index, 0)


ONE_LEDGER = {5: 100}
THREE_LEDGERS = {1: 80, 4: 30, 9: 21}
RANGES = [
    # (ledgers, messages per entry, read)
    (ONE_LEDGER, 10, read_of(MessageId.earliest(), True, ids(5, 99), True)),
    (ONE_LEDGER, 10, read_of(ids(5, 10, 4), True, ids(5, 57, 2), True)),
    (ONE_LEDGER, 10, read_of(ids(5, 10, 4), False, ids(5, 57, 0), False)),
    (ONE_LEDGER, 10, read_of(ids(5, 10), False, ids(5, 57, 9), True)),
    (ONE_LEDGER, 10, read_of(ids(5, 10), False, ids(5, 57), False)),
    (ONE_LEDGER, 1, read_of(ids(5, 0), True, ids(5, 99), True)),
    (ONE_LEDGER, 1, read_of(ids(5, 40), False, ids(5, 43), True)),
    (THREE_LEDGERS, 10, read_of(ids(1, 50, 3), True, ids(9, 20), True)),
    (THREE_LEDGERS, 1, read_of(MessageId.earliest(), True, ids(9, 20), True)),
    (THREE_LEDGERS, 10, read_of(ids(4, 7), False, ids(9, 0, 5), True)),
]


@pytest.mark.parametrize("parts", [2, 3, 4, 7, 200])
@pytest.mark.parametrize("case", range(len(RANGES)))
def test_pieces_read_every_message_of_the_range_exactly_once(case: int, parts: int) -> None:
    ledgers, per_entry, read = RANGES[case]
    messages = topic_messages(ledgers, per_entry)
    expected = selected(read, messages)
    assert expected  # every case reads something
    pieces = split(read, parts)
    got = [m for piece in pieces for m in selected(piece, messages)]
    assert got == expected  # in order, none twice, none missing
    assert all(selected(piece, messages) for piece in pieces)  # no empty task
    entries_in_last_ledger = len({m[:2] for m in expected if m[0] == read.end.ledger_id})
    assert len(pieces) == min(parts, entries_in_last_ledger)
    assert (pieces[0].start, pieces[0].start_inclusive) == (read.start, read.start_inclusive)
    assert (pieces[-1].end, pieces[-1].end_inclusive) == (read.end, read.end_inclusive)


def test_pieces_are_whole_entries_as_even_as_can_be() -> None:
    read = read_of(ids(5, 0), True, ids(5, 9), True)
    pieces = split(read, 3)
    assert [
        (p.start.entry_id, p.start.batch_index, p.end.entry_id, p.end.batch_index) for p in pieces
    ] == [
        (0, -1, 2, -1),
        (3, -1, 5, -1),
        (6, -1, 9, -1),
    ]
    assert all(p.start_inclusive and p.end_inclusive for p in pieces)
    assert all(p.ref == REF and p.start.partition == 0 for p in pieces[1:])


def test_a_range_over_several_ledgers_cuts_only_its_last_ledger() -> None:
    read = read_of(ids(1, 50), True, ids(9, 19), True)
    pieces = split(read, 4)
    assert [(p.start.entry, p.end.entry) for p in pieces] == [
        ((1, 50), (9, 4)),
        ((9, 5), (9, 9)),
        ((9, 10), (9, 14)),
        ((9, 15), (9, 19)),
    ]


def test_a_single_entry_and_one_part_stay_one_read() -> None:
    one_entry = read_of(ids(5, 7, 2), True, ids(5, 7, 8), True)
    assert split(one_entry, 4) == [one_entry]
    several = read_of(ids(5, 0), True, ids(5, 9), True)
    assert split(several, 1) == [several]


def test_tasks_are_shared_in_proportion_to_size() -> None:
    small = read_of(ids(5, 0), True, ids(5, 99), True)
    large = read_of(ids(6, 0), True, ids(6, 299), True)
    pieces = split_reads([small, large], 8)
    assert [p.start.ledger_id for p in pieces] == [5, 5, 6, 6, 6, 6, 6, 6]
    assert split_reads([small, large], 2) == [small, large]
    assert split_reads([small, large], None) == [small, large]
    assert len(split_reads([small], 5)) == 5
