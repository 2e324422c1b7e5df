"""The read stage on entries built byte by byte: a range of one-message entries, batches (one
partly acknowledged), a marker and a chunked message gives exactly the messages whose keys lie
in the range, in order, by the one rule (``kept_indexes``) the driver's counting shares."""

from __future__ import annotations

import itertools

import pytest
from support.decoding import batch, outer, smm, strings

from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.payload import PayloadSection
from pulsar_spark.protocol.read_stage import RangeAssembler, RawEntry, ReadRange, kept_indexes

TOPIC = "persistent://public/default/stage"
LEDGER = 7


def raw(
    entry: int, metadata: pb.MessageMetadata, payload: bytes, ack_set: tuple[int, ...] = ()
) -> RawEntry:
    message = pb.CommandMessage(
        consumer_id=1,
        message_id=pb.MessageIdData(ledgerId=LEDGER, entryId=entry),
        ack_set=list(ack_set),
    )
    return RawEntry.of(message, PayloadSection(metadata, payload))


def single(entry: int) -> RawEntry:
    return raw(entry, outer(sequence_id=entry), b"s%d" % entry)


def batched(entry: int, count: int, ack_set: tuple[int, ...] = ()) -> RawEntry:
    records = [(smm(payload_size=4, sequence_id=i), b"b%d.%d" % (entry, i)) for i in range(count)]
    metadata = outer(num_messages_in_batch=count, sequence_id=entry)
    return raw(entry, metadata, batch(*records), ack_set)


def chunk(entry: int, index: int, part: bytes) -> RawEntry:
    metadata = outer(
        sequence_id=99,
        uuid="chunked",
        chunk_id=index,
        num_chunks_from_msg=2,
        total_chunk_msg_size=6,
    )
    return raw(entry, metadata, part)


ENTRIES = [
    single(1),
    batched(2, 4),
    batched(3, 5, ack_set=(0b11011,)),  # index 2 acknowledged already
    raw(4, outer(marker_type=10), b""),
    single(5),
    chunk(6, 0, b"c6-"),
    chunk(7, 1, b"end"),
    batched(8, 3),
    single(9),
]
MESSAGES = [
    ((1, -1), b"s1"),
    *(((2, i), b"b2.%d" % i) for i in range(4)),
    *(((3, i), b"b3.%d" % i) for i in (0, 1, 3, 4)),
    ((5, -1), b"s5"),
    ((7, -1), b"c6-end"),  # a chunked message has the id of its last chunk
    *(((8, i), b"b8.%d" % i) for i in range(3)),
    ((9, -1), b"s9"),
]


def key(where: tuple[int, int]) -> tuple[int, int, int]:
    """The key a message is read by: a chunked message by its first chunk (the range that
    holds that chunk reads on to the last one, and the next range leaves the message out)."""
    return (LEDGER, 6, -1) if where == (7, -1) else (LEDGER, *where)


def read(window: ReadRange) -> list[tuple[tuple[int, int], bytes]]:
    def no_keys(entry: RawEntry) -> bytes | MessageColumns | None:
        raise AssertionError("no entry here is encrypted")

    stage = RangeAssembler(window, no_keys)
    parts = [part for entry in ENTRIES for part in stage.add(entry)]
    parts += list(stage.finish())
    got = []
    for part in parts:
        assert part.entry_column("ledger_id").tolist() == [LEDGER] * part.count
        entries = part.entry_column("entry_id").tolist()
        values = strings(part.values)
        got += zip(zip(entries, part.batch_index.tolist(), strict=True), values, strict=True)
    return got


POSITIONS = [MessageId(LEDGER, e, b) for e, b in itertools.product(range(11), (-1, 0, 1, 2, 3))]


@pytest.mark.parametrize("inclusive", [(True, True), (False, True), (True, False), (False, False)])
def test_a_range_gives_exactly_its_messages(inclusive: tuple[bool, bool]) -> None:
    for start, end in itertools.product(POSITIONS[::3], POSITIONS[1::4]):
        window = ReadRange(TOPIC, start, end, *inclusive)
        first, last = window.bounds()
        expected = [(where, value) for where, value in MESSAGES if first <= key(where) <= last]
        assert read(window) == expected, (start, end, inclusive)


def test_kept_indexes_cut_an_entry_at_each_bound() -> None:
    assert kept_indexes((7, 3), 5, (7, 3, 1), (7, 3, 3)) == range(1, 4)
    assert kept_indexes((7, 3), 5, (7, 2, 9), (7, 4, -1)) == range(5)
    assert kept_indexes((7, 3), 5, (7, 3, 1 << 31), (7, 9, 0)) == range(0)
    assert kept_indexes((7, 3), None, (7, 3, -1), (7, 3, 1 << 31)) == range(-1, 0)
    assert kept_indexes((7, 3), None, (7, 3, 0), (7, 9, 0)) == range(0)
    assert kept_indexes((7, 3), None, (7, 1, 0), (7, 3, -2)) == range(0)
