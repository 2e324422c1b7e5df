"""Counting payload bytes for maxBytesPerTrigger: each message's size as the producer gave its
value, found in the metadata of an unbatched message and by walking a batch's headers
(decompressed first); the budget shared over partitions, with every partition that has a
message taking at least its first one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from test_counting import FakeReader

from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.compression import codec_from_name, compress
from pulsar_spark.protocol.encode import OutgoingMessage, encode_single_message_metadata
from pulsar_spark.protocol.payload import PayloadSection
from pulsar_spark.protocol.read_stage import RawEntry
from pulsar_spark.source.counting import (
    KeptCounters,
    MessageCounter,
    limit_byte_ends,
    payload_sizes,
)
from pulsar_spark.source.offsets import NOTHING_CONSUMED


def raw_entry(
    ledger: int,
    entry_id: int,
    values: list[bytes] | bytes,
    *,
    partition: int = 0,
    codec: str = "none",
) -> RawEntry:
    """A batch of ``values`` (a list), or one unbatched message (bytes)."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1)
    if isinstance(values, list):
        metadata.num_messages_in_batch = len(values)
        data = b""
        for index, value in enumerate(values):
            header = encode_single_message_metadata(OutgoingMessage(value), index)
            data += len(header).to_bytes(4, "big") + header + value
    else:
        data = values
    metadata.uncompressed_size = len(data)
    metadata.compression = codec_from_name(codec)  # type: ignore[assignment]
    message = pb.CommandMessage(
        consumer_id=1,
        message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry_id, partition=partition),
    )
    return RawEntry.of(message, PayloadSection(metadata, compress(metadata.compression, data)))


def sized_counter(entries: list[RawEntry], last: MessageId) -> MessageCounter:
    lookup: Any = SimpleNamespace(timeout=1.0)
    made = MessageCounter(lookup, "t", NOTHING_CONSUMED, last, poll_timeout=1.0, sized=True)
    made._reader = FakeReader(entries, NOTHING_CONSUMED, last)  # type: ignore[assignment]
    return made


def test_payload_sizes_of_single_messages_and_batches() -> None:
    assert payload_sizes(raw_entry(1, 0, b"x" * 37)).tolist() == [37]
    values = [b"a" * 3, b"", b"b" * 120, b"c"]
    assert payload_sizes(raw_entry(1, 1, values)).tolist() == [3, 0, 120, 1]
    # compressed: the sizes are the values', not the compressed payload's
    assert payload_sizes(raw_entry(1, 2, values, codec="zstd")).tolist() == [3, 0, 120, 1]
    assert payload_sizes(raw_entry(1, 3, b"z" * 5000, codec="lz4")).tolist() == [5000]
    # a batch large enough for the vectorised scan
    many = [bytes(i % 7) for i in range(100)]
    assert payload_sizes(raw_entry(1, 4, many)).tolist() == [i % 7 for i in range(100)]


def test_take_bytes_cuts_inside_a_batch_and_across_entries() -> None:
    entries = [raw_entry(5, 0, [b"x" * 10] * 4), raw_entry(5, 1, b"y" * 25)]
    counter = sized_counter(entries, MessageId(5, 1))
    assert counter.next_size() == 10
    assert counter.take_bytes(35) == (30, 3)
    assert counter.position == MessageId(5, 0, 2)
    assert counter.next_size() == 10
    assert counter.take_bytes(34) == (10, 1)  # the batch's last; the 25 bytes after do not fit
    assert counter.position == MessageId(5, 0)  # a batch taken to its end is the whole entry
    assert counter.take_bytes(25) == (25, 1)
    assert counter.position == MessageId(5, 1)
    assert counter.next_size() is None
    assert counter.exhausted


def test_take_bytes_stops_at_the_messages_wanted() -> None:
    entries = [raw_entry(5, 0, [b"x" * 10] * 4), raw_entry(5, 1, b"y" * 25)]
    counter = sized_counter(entries, MessageId(5, 1))
    assert counter.take_bytes(1000, 3) == (30, 3)
    assert counter.position == MessageId(5, 0, 2)
    assert counter.take_bytes(1000, 2) == (35, 2)
    assert counter.position == MessageId(5, 1)
    assert counter.take_bytes(1000, 2) == (0, 0)


def partition(index: int, batches: list[list[int]]) -> tuple[MessageCounter, MessageId]:
    entries = [
        raw_entry(10 + index, e, [b"v" * size for size in sizes], partition=index)
        for e, sizes in enumerate(batches)
    ]
    last = MessageId(10 + index, len(batches) - 1)
    return sized_counter(entries, last), last


def test_the_budget_is_shared_and_never_exceeded_past_the_first_messages() -> None:
    p0, _ = partition(0, [[10] * 5, [10] * 5])  # 100 bytes
    p1, _ = partition(1, [[30, 30, 30]])  # 90 bytes
    ends = limit_byte_ends({"p0": p0, "p1": p1}, 100)
    # first messages: 10 + 30, leaving 60; shares of 30: p0 takes 3 more (30), p1 one (30)
    assert ends == {"p0": MessageId(10, 0, 3), "p1": MessageId(11, 0, 1)}


def test_a_message_larger_than_the_budget_is_read_alone() -> None:
    p0, _ = partition(0, [[500, 1, 1]])
    p1, _ = partition(1, [[2, 2]])
    ends = limit_byte_ends({"p0": p0, "p1": p1}, 100)
    # each partition's first message whatever its size; then nothing is left for more
    assert ends == {"p0": MessageId(10, 0, 0), "p1": MessageId(11, 0, 0)}


def test_what_one_partition_cannot_use_goes_to_the_others() -> None:
    p0, _ = partition(0, [[5]])
    p1, _ = partition(1, [[5] * 20])
    p2, _ = partition(2, [[60, 5]])
    ends = limit_byte_ends({"p0": p0, "p1": p1, "p2": p2}, 100)
    # first messages 5 + 5 + 60 leave 30; p2's next (5) and p1's share 15 each; the 10 left
    # go to p1 (its next messages are 5 bytes each), p2 has nothing more
    assert ends == {"p0": MessageId(10, 0), "p1": MessageId(11, 0, 5), "p2": MessageId(12, 0)}
    assert p0.exhausted and p2.exhausted


def kept_sized(entries: dict[str, list[RawEntry]]) -> KeptCounters:
    """Kept counters of payload bytes over the given entries of each partition."""

    def opener(name: str, start: MessageId, end: MessageId) -> MessageCounter:
        lookup: Any = SimpleNamespace(timeout=1.0)
        made = MessageCounter(lookup, name, start, end, poll_timeout=1.0, sized=True)
        made._reader = FakeReader(entries[name], start, end)  # type: ignore[assignment]
        return made

    return KeptCounters(opener)


def test_kept_counters_count_bytes_when_asked() -> None:
    kept = kept_sized({"p0": [raw_entry(10, e, [b"v" * 8] * 4) for e in range(3)]})  # 96 bytes
    last = MessageId(10, 2)
    starts = {"p0": NOTHING_CONSUMED}
    ends = []
    while starts["p0"] != last:
        starts = kept.ends(starts, {"p0": last}, None, 40)
        ends.append(starts["p0"])
    assert ends == [MessageId(10, 1, 0), MessageId(10, 2, 1), MessageId(10, 2)]


# --- maxBytesPerTrigger together with maxMessagesPerTrigger ----------------------------------


def test_the_message_budget_ends_the_batch_when_it_is_tighter() -> None:
    p0, _ = partition(0, [[10] * 5, [10] * 5])  # 100 bytes in 10 messages
    p1, _ = partition(1, [[30, 30, 30]])  # 90 bytes in 3 messages
    ends = limit_byte_ends({"p0": p0, "p1": p1}, 1000, 6)
    # first messages (2 left 4); then even shares of the messages left: 2 each, then none left
    assert ends == {"p0": MessageId(10, 0, 2), "p1": MessageId(11, 0)}


def test_the_byte_budget_ends_the_batch_when_it_is_tighter() -> None:
    p0, _ = partition(0, [[10] * 5, [10] * 5])
    p1, _ = partition(1, [[30, 30, 30]])
    # the same as bytes alone (see above): 4 + 2 messages, fewer than the 100 allowed
    ends = limit_byte_ends({"p0": p0, "p1": p1}, 100, 100)
    assert ends == {"p0": MessageId(10, 0, 3), "p1": MessageId(11, 0, 1)}


def test_fewer_messages_than_partitions_moves_the_first_partitions_only() -> None:
    p0, _ = partition(0, [[10, 10]])
    p1, _ = partition(1, [[10, 10]])
    p2, _ = partition(2, [[10, 10]])
    ends = limit_byte_ends({"p0": p0, "p1": p1, "p2": p2}, 1000, 2)
    assert ends == {"p0": MessageId(10, 0, 0), "p1": MessageId(11, 0, 0), "p2": NOTHING_CONSUMED}


def test_kept_counters_apply_both_budgets() -> None:
    kept = kept_sized({"p0": [raw_entry(10, e, [b"v" * 8] * 4) for e in range(3)]})  # 12 of 8
    last = MessageId(10, 2)
    starts = {"p0": NOTHING_CONSUMED}
    ends = []
    while starts["p0"] != last:
        starts = kept.ends(starts, {"p0": last}, 3, 40)  # 3 messages (24 bytes) a batch
        ends.append(starts["p0"])
    assert ends == [MessageId(10, 0, 2), MessageId(10, 1, 1), MessageId(10, 2, 0), last]
