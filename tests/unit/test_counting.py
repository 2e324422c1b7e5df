"""Counting messages for maxMessagesPerTrigger, on entries built in memory (no broker).

:class:`MessageCounter` is fed a model partition through a stand-in for its range reader, which
hands out the entries from the start entry to the end entry, as the real one does. The tests
check that a limit ends a micro-batch after exactly N messages (cutting inside a batch), that
the ends of consecutive batches partition the messages, how a budget is shared between
partitions, which counters are kept, replaced and closed between micro-batches, and that the
per-entry index range equals the message-by-message definition.
"""

from __future__ import annotations

import gc
import itertools
import random
import threading
import time
from collections.abc import Callable, Generator, Iterable
from types import SimpleNamespace
from typing import Any

import pytest

from pulsar_spark.common.limits import limit_ends
from pulsar_spark.errors import PulsarConnectionError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.payload import PayloadSection
from pulsar_spark.protocol.read_stage import RawEntry, kept_indexes
from pulsar_spark.source.counting import (
    Ahead,
    KeptCounters,
    MessageCounter,
    ahead_for,
    countable,
)
from pulsar_spark.source.offsets import NOTHING_CONSUMED

# --- building entries ------------------------------------------------------------------------


def entry(
    ledger: int,
    entry_id: int,
    batch: int | None = None,
    *,
    partition: int = 0,
    marker: bool = False,
    chunk: tuple[int, int] | None = None,
) -> RawEntry:
    """One entry as delivered: a batch of ``batch`` messages, or one unbatched message."""
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=entry_id, publish_time=1)
    if batch is not None:
        metadata.num_messages_in_batch = batch
    if marker:
        metadata.marker_type = 1
    if chunk is not None:
        metadata.uuid = "u"
        metadata.chunk_id, metadata.num_chunks_from_msg = chunk
    message = pb.CommandMessage(
        consumer_id=1,
        message_id=pb.MessageIdData(ledgerId=ledger, entryId=entry_id, partition=partition),
    )
    return RawEntry.of(message, PayloadSection(metadata, b""))


def ids_of(entries: Iterable[RawEntry]) -> list[MessageId]:
    """Every countable message id, in order."""
    out = []
    for raw in entries:
        metadata = raw.section.metadata
        if metadata.HasField("marker_type"):
            continue
        if metadata.HasField("uuid") and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
            continue
        ledger, entry_id = raw.entry
        if metadata.HasField("num_messages_in_batch"):
            out += [MessageId(ledger, entry_id, i) for i in range(metadata.num_messages_in_batch)]
        else:
            out.append(MessageId(ledger, entry_id))
    return out


class FakeReader:
    """Hands out the entries from ``start``'s entry through ``last``'s, like the range reader."""

    def __init__(self, entries: list[RawEntry], start: MessageId, last: MessageId) -> None:
        self._entries = entries
        self._start, self._last = start, last

    def entries(
        self, stopped: Callable[[], bool] = lambda: False
    ) -> Generator[RawEntry, None, None]:
        for raw in self._entries:
            if stopped():
                return
            if (self._start.is_earliest or raw.entry >= self._start.entry) and (
                raw.entry <= self._last.entry
            ):
                yield raw


def counter(
    entries: list[RawEntry],
    start: MessageId,
    last: MessageId,
    kind: type[MessageCounter] = MessageCounter,
    ahead: Ahead | None = None,
) -> MessageCounter:
    lookup: Any = SimpleNamespace(timeout=1.0)
    made = kind(lookup, "t", start, last, poll_timeout=1.0, ahead=ahead)
    made._reader = FakeReader(entries, start, last)  # type: ignore[assignment]
    return made


def between(messages: list[MessageId], start: MessageId, end: MessageId) -> list[MessageId]:
    """The messages in (start, end] by the offsets' ordering."""
    return [
        m
        for m in messages
        if (start.is_earliest or start.last_key() < m.last_key()) and m.last_key() <= end.last_key()
    ]


# A partition of 1000 messages: three single messages, 142 batches of 7 and one of 3.
SEVENS = [entry(2, e) for e in range(3)] + [
    entry(2, 3 + e, 7 if e < 142 else 3) for e in range(143)
]
LAST = MessageId(2, 145)

# --- one partition ---------------------------------------------------------------------------


def test_take_counts_exactly_and_cuts_inside_batches() -> None:
    messages = ids_of(SEVENS)
    assert len(messages) == 1000
    start = NOTHING_CONSUMED
    ends = []
    while True:
        walker = counter(SEVENS, start, LAST)
        taken = walker.take(100)
        walker.close()
        if not taken:
            assert walker.exhausted
            break
        got = between(messages, start, walker.position)
        assert len(got) == taken
        ends.append(walker.position)
        start = walker.position
    # each end is the 100th message of its batch; one that ends its entry names the whole entry
    assert [str(e) for e in ends] == [
        "2:16:5",
        "2:31:0",
        "2:45:2",
        "2:59:4",
        "2:73:-1",
        "2:88:1",
        "2:102:3",
        "2:116:5",
        "2:131:0",
        "2:145:-1",
    ]
    assert [str(m) for m in messages[99::100]] == [
        "2:16:5",
        "2:31:0",
        "2:45:2",
        "2:59:4",
        "2:73:6",
        "2:88:1",
        "2:102:3",
        "2:116:5",
        "2:131:0",
        "2:145:2",
    ]
    batches = [between(messages, a, b) for a, b in itertools.pairwise([NOTHING_CONSUMED, *ends])]
    assert [len(b) for b in batches] == [100] * 10
    assert [m for b in batches for m in b] == messages


def test_a_batch_consumed_to_its_end_is_recorded_as_the_whole_entry() -> None:
    entries = [entry(5, 0, 4), entry(5, 1, 4)]
    walker = counter(entries, NOTHING_CONSUMED, MessageId(5, 1))
    assert walker.batch_size is None
    assert walker.take(3) == 3
    assert walker.position == MessageId(5, 0, 2)
    assert walker.batch_size == 4  # standing inside a batch of 4
    assert walker.take(1) == 1
    assert walker.position == MessageId(5, 0, -1)  # not 5:0:3
    assert walker.batch_size is None
    assert walker.take(4) == 4
    assert walker.position == MessageId(5, 1, -1)
    assert walker.exhausted is False  # it has not looked past what it was asked for
    assert walker.take(1) == 0
    assert walker.exhausted is True
    assert walker.position == MessageId(5, 1, -1)


def test_starting_inside_a_batch_and_ending_inside_one() -> None:
    entries = [entry(5, 0, 4), entry(5, 1, 4), entry(5, 2, 4)]
    # after 5:0:1, through 5:2:1 (an end inside a batch, as a user's endingOffsets can be)
    walker = counter(entries, MessageId(5, 0, 1), MessageId(5, 2, 1))
    assert walker.take(2) == 2
    assert walker.position == MessageId(5, 0, -1)
    assert walker.take(100) == 6
    # the end cuts the last batch, so its end is that index, not the whole entry
    assert walker.position == MessageId(5, 2, 1)
    assert walker.take(1) == 0
    assert walker.exhausted


def test_markers_and_leading_chunks_are_not_messages() -> None:
    entries = [
        entry(1, 0),
        entry(1, 1, marker=True),
        entry(1, 2, chunk=(0, 3)),
        entry(1, 3, chunk=(1, 3)),
        entry(1, 4, chunk=(2, 3)),  # the chunked message's id is its last chunk's
        entry(1, 5, 2),
    ]
    walker = counter(entries, NOTHING_CONSUMED, MessageId(1, 5))
    assert walker.take(2) == 2
    assert walker.position == MessageId(1, 4, -1)
    assert walker.take(5) == 2
    assert walker.position == MessageId(1, 5, -1)


def test_single_messages_across_ledgers() -> None:
    entries = [entry(1, 0), entry(1, 1), entry(3, 0), entry(3, 1)]
    walker = counter(entries, MessageId(1, 0), MessageId(3, 1))
    assert walker.take(2) == 2
    assert walker.position == MessageId(3, 0, -1)
    assert walker.take(2) == 1
    assert walker.position == MessageId(3, 1, -1)


# --- several partitions ----------------------------------------------------------------------


def partition(index: int, sizes: list[int]) -> tuple[list[RawEntry], MessageId]:
    entries = [entry(10 + index, e, n, partition=index) for e, n in enumerate(sizes)]
    return entries, MessageId(10 + index, len(sizes) - 1)


def test_limit_shares_the_budget_evenly_then_gives_the_rest_to_who_has_more() -> None:
    p0, last0 = partition(0, [7] * 85 + [5])  # 600 messages
    p1, last1 = partition(1, [7] * 57 + [1])  # 400 messages
    starts = {"p0": NOTHING_CONSUMED, "p1": NOTHING_CONSUMED}
    counts = []
    while True:
        counters = {
            name: counter(entries, starts[name], last)
            for name, entries, last in (("p0", p0, last0), ("p1", p1, last1))
            if last.last_key() > starts[name].last_key() or starts[name].is_earliest
        }
        if not counters:
            break
        ends = limit_ends(counters, 100)
        taken = {
            name: len(between(ids_of(entries), starts[name], ends.get(name, starts[name])))
            for name, entries in (("p0", p0), ("p1", p1))
        }
        counts.append((taken["p0"], taken["p1"]))
        starts.update(ends)
    assert counts == [(50, 50)] * 8 + [(100, 0)] * 2
    assert starts == {"p0": MessageId(10, 85), "p1": MessageId(11, 57)}


def test_limit_with_three_partitions_and_a_small_budget() -> None:
    entries = {f"p{i}": partition(i, [7] * 3) for i in range(3)}
    counters = {n: counter(e, NOTHING_CONSUMED, last) for n, (e, last) in entries.items()}
    ends = limit_ends(counters, 10)
    # 10 // 3 = 3 each, then the remaining one to the first partition
    assert ends == {"p0": MessageId(10, 0, 3), "p1": MessageId(11, 0, 2), "p2": MessageId(12, 0, 2)}


def test_limit_larger_than_the_backlog_takes_everything() -> None:
    entries = {f"p{i}": partition(i, [3, 4]) for i in range(2)}
    counters = {n: counter(e, NOTHING_CONSUMED, last) for n, (e, last) in entries.items()}
    ends = limit_ends(counters, 1000)
    assert ends == {"p0": MessageId(10, 1), "p1": MessageId(11, 1)}
    assert all(c.exhausted for c in counters.values())


# --- counters kept between micro-batches ------------------------------------------------------


class Tracked(MessageCounter):
    """A counter that records whether it was closed."""

    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


class Failing(Tracked):
    def take(self, wanted: int) -> int:
        raise PulsarConnectionError("connection lost")


class Opener:
    """Opens counters over in-memory partitions and remembers each one, in order."""

    def __init__(self, partitions: dict[str, list[RawEntry]], failing: str = "") -> None:
        self._partitions = partitions
        self._failing = failing
        self.opened: list[tuple[str, MessageId, Tracked]] = []

    def __call__(self, name: str, start: MessageId, last: MessageId) -> MessageCounter:
        kind = Failing if name == self._failing else Tracked
        made = counter(self._partitions[name], start, last, kind)
        assert isinstance(made, Tracked)
        self.opened.append((name, start, made))
        return made

    def closed(self) -> list[bool]:
        return [made.closed for _, _, made in self.opened]


FOURS = {"p0": [entry(10, e, 4) for e in range(3)]}  # 12 messages in 10:0..10:2
FOURS_LAST = MessageId(10, 2)


def test_kept_counters_go_on_from_where_the_last_micro_batch_ended() -> None:
    opener = Opener(FOURS)
    kept = KeptCounters(opener)
    first = kept.ends({"p0": NOTHING_CONSUMED}, {"p0": FOURS_LAST}, 5)
    assert first == {"p0": MessageId(10, 1, 0)}
    assert kept.batch_size("p0", MessageId(10, 1, 0)) == 4
    second = kept.ends(first, {"p0": FOURS_LAST}, 5)
    assert second == {"p0": MessageId(10, 2, 1)}
    assert kept.batch_size("p0", MessageId(10, 2, 1)) == 4
    assert kept.batch_size("p0", MessageId(10, 1, 0)) is None  # it stands elsewhere now
    assert kept.batch_size("p1", MessageId(10, 2, 1)) is None  # no counter there
    assert [(name, start) for name, start, _ in opener.opened] == [("p0", NOTHING_CONSUMED)]
    assert opener.closed() == [False]


def test_a_counter_is_replaced_when_its_start_or_end_moved() -> None:
    opener = Opener(FOURS)
    kept = KeptCounters(opener)
    assert kept.ends({"p0": NOTHING_CONSUMED}, {"p0": FOURS_LAST}, 5) == {"p0": MessageId(10, 1, 0)}
    # Spark plans the same micro-batch again (after a restart, say): counted from its start
    assert kept.ends({"p0": NOTHING_CONSUMED}, {"p0": FOURS_LAST}, 5) == {"p0": MessageId(10, 1, 0)}
    # the range's end moved: the rest of entry 10:1, recorded as the whole entry
    moved = MessageId(10, 1)
    assert kept.ends({"p0": MessageId(10, 1, 0)}, {"p0": moved}, 5) == {"p0": moved}
    assert [start for _, start, _ in opener.opened] == [
        NOTHING_CONSUMED,
        NOTHING_CONSUMED,
        MessageId(10, 1, 0),
    ]
    assert opener.closed() == [True, True, False]


def test_a_partition_without_messages_keeps_its_start_and_gets_no_counter() -> None:
    opener = Opener({})
    starts = {"p0": NOTHING_CONSUMED, "p1": MessageId(11, 4)}
    assert KeptCounters(opener).ends(starts, starts, 5) == starts
    assert opener.opened == []


def test_close_closes_every_kept_counter() -> None:
    opener = Opener({"p0": FOURS["p0"], "p1": [entry(11, 0, 4)]})
    kept = KeptCounters(opener)
    starts = {"p0": NOTHING_CONSUMED, "p1": NOTHING_CONSUMED}
    kept.ends(starts, {"p0": FOURS_LAST, "p1": MessageId(11, 0)}, 2)
    assert opener.closed() == [False, False]
    kept.close()
    assert opener.closed() == [True, True]


def test_an_error_while_counting_closes_every_counter() -> None:
    opener = Opener({"p0": FOURS["p0"], "p1": [entry(11, 0, 4)]}, failing="p1")
    kept = KeptCounters(opener)
    first = kept.ends({"p0": NOTHING_CONSUMED}, {"p0": FOURS_LAST}, 5)
    with pytest.raises(PulsarConnectionError, match="connection lost"):
        kept.ends({**first, "p1": NOTHING_CONSUMED}, {"p0": FOURS_LAST, "p1": MessageId(11, 0)}, 5)
    assert [name for name, _, _ in opener.opened] == ["p0", "p1"]
    assert opener.closed() == [True, True]


# --- the index range per entry -----------------------------------------------------------------


def countable_one_by_one(
    ledger: int, entry_id: int, count: int, *, batched: bool, after: MessageId, upto: MessageId
) -> list[int]:
    """The definition, message by message: a message's key is its own id (batch index -1 for
    one not in a batch), after the position ``after`` and at or before ``upto``, as the range
    reader keeps it."""
    candidates = list(range(count)) if batched else [-1]
    low, high = after.last_key(), upto.last_key()
    return [i for i in candidates if low < MessageId(ledger, entry_id, i).first_key() <= high]


BOUNDS = [
    NOTHING_CONSUMED,
    *(
        MessageId(ledger, e, b)
        for ledger in (3, 4)
        for e in (-1, 0, 1, 2)
        for b in (-1, 0, 1, 3, 4, 6, 9)
    ),
]


@pytest.mark.parametrize(
    ("count", "batched"),
    [(1, True), (4, True), (7, True), (1, False)],
    ids=["batch-of-1", "batch-of-4", "batch-of-7", "single"],
)
def test_kept_indexes_equal_the_message_by_message_definition(count: int, batched: bool) -> None:
    for ledger, entry_id in ((4, 1), (3, 2), (4, 0)):
        raw = entry(ledger, entry_id, count if batched else None)
        for after, upto in itertools.product(BOUNDS, BOUNDS):
            expected = countable_one_by_one(
                ledger, entry_id, count, batched=batched, after=after, upto=upto
            )
            got_raw = countable(raw, after.key_after(), upto.last_key())
            assert list(got_raw) == expected, (after, upto, ledger, entry_id)
            if batched:
                got = kept_indexes((ledger, entry_id), count, after.key_after(), upto.last_key())
                assert list(got) == expected


def test_kept_indexes_of_random_entries() -> None:
    rng = random.Random(7)
    for _ in range(3_000):
        count = rng.randint(1, 40)
        ledger, entry_id = rng.randint(0, 2), rng.randint(0, 5)
        after = MessageId(rng.randint(0, 2), rng.randint(-1, 5), rng.randint(-1, 41))
        upto = MessageId(rng.randint(0, 2), rng.randint(0, 5), rng.randint(-1, 41))
        expected = countable_one_by_one(
            ledger, entry_id, count, batched=True, after=after, upto=upto
        )
        got = kept_indexes((ledger, entry_id), count, after.key_after(), upto.last_key())
        assert list(got) == expected


# --- counting ahead on a thread --------------------------------------------------------------


def counting_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pulsar-count-")]


def kept_ends(
    partitions: dict[str, tuple[list[RawEntry], MessageId]], budget: int, ahead: Ahead | None
) -> tuple[list[dict[str, MessageId]], int]:
    """Every micro-batch's ends over ``partitions`` (kept counters), and how many were opened."""
    opened = []

    def open_counter(name: str, start: MessageId, last: MessageId) -> MessageCounter:
        opened.append(name)
        return counter(partitions[name][0], start, last, ahead=ahead)

    kept = KeptCounters(open_counter)
    lasts = {name: last for name, (_, last) in partitions.items()}
    starts = dict.fromkeys(partitions, NOTHING_CONSUMED)
    ends = []
    try:
        while (end := kept.ends(starts, lasts, budget)) != starts:
            ends.append(end)
            starts = end
    finally:
        kept.close()
    return ends, len(opened)


@pytest.mark.parametrize(
    "ahead",
    [Ahead(1, 1), Ahead(20, 3), Ahead(100, 1000), Ahead(10_000, 100_000)],
    ids=["one-entry", "small", "one-budget", "everything"],
)
def test_counting_ahead_gives_exactly_the_same_ends(ahead: Ahead) -> None:
    partitions = {"p0": partition(0, [7] * 85 + [5]), "p1": partition(1, [7] * 57 + [1])}
    without, opened_without = kept_ends(partitions, 100, None)
    with_ahead, opened_with = kept_ends(partitions, 100, ahead)
    assert with_ahead == without
    assert opened_with == opened_without == 2  # each kept for the whole stream
    assert len(with_ahead) == 10
    assert with_ahead[0] == {"p0": MessageId(10, 7, 0), "p1": MessageId(11, 7, 0)}  # 50 = 7*7+1
    assert with_ahead[-1] == {"p0": MessageId(10, 85), "p1": MessageId(11, 57)}
    assert counting_threads() == []


def test_a_counter_that_counted_ahead_hands_out_the_same_positions() -> None:
    entries = [entry(5, 0, 4), entry(5, 1, 4), entry(5, 2, 4)]
    walker = counter(entries, MessageId(5, 0, 1), MessageId(5, 2, 1), ahead=Ahead(100, 100))
    assert walker.take(2) == 2
    assert walker.position == MessageId(5, 0, -1)
    assert walker.batch_size is None
    assert walker.take(3) == 3
    assert walker.position == MessageId(5, 1, 2)
    assert walker.batch_size == 4
    assert walker.take(100) == 3
    assert walker.position == MessageId(5, 2, 1)  # the range's end cuts the last batch
    assert walker.exhausted is True
    walker.close()
    assert counting_threads() == []


def test_an_error_while_counting_ahead_is_raised_by_the_count_that_reaches_it() -> None:
    lost = PulsarConnectionError("connection lost")

    class Breaking(FakeReader):
        def entries(
            self, stopped: Callable[[], bool] = lambda: False
        ) -> Generator[RawEntry, None, None]:
            yield from super().entries(stopped)
            raise lost

    walker = counter(FOURS["p0"], NOTHING_CONSUMED, FOURS_LAST, ahead=Ahead(100, 100))
    walker._reader = Breaking(FOURS["p0"], NOTHING_CONSUMED, FOURS_LAST)  # type: ignore[assignment]
    assert walker.take(12) == 12  # all three entries came before the failure
    assert walker.position == MessageId(10, 2, -1)
    with pytest.raises(PulsarConnectionError, match="connection lost") as raised:
        walker.take(1)
    assert raised.value is lost
    walker.close()
    assert counting_threads() == []


def test_kept_counters_closed_on_an_error_leave_no_thread() -> None:
    opener = Opener({"p0": FOURS["p0"], "p1": [entry(11, 0, 4)]}, failing="p1")
    kept = KeptCounters(opener)
    first = kept.ends({"p0": NOTHING_CONSUMED}, {"p0": FOURS_LAST}, 5)
    assert first == {"p0": MessageId(10, 1, 0)}
    with pytest.raises(PulsarConnectionError, match="connection lost"):
        kept.ends({**first, "p1": NOTHING_CONSUMED}, {"p0": FOURS_LAST, "p1": MessageId(11, 0)}, 5)
    assert opener.closed() == [True, True]
    assert counting_threads() == []


def test_a_counter_dropped_unclosed_lets_its_thread_end() -> None:
    endless = [entry(10, e, 4) for e in range(1000)]
    walker = counter(endless, NOTHING_CONSUMED, MessageId(10, 999), ahead=Ahead(8, 2))
    assert walker.take(1) == 1
    assert len(counting_threads()) == 1
    del walker
    gc.collect()
    deadline = time.monotonic() + 2.0
    while counting_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert counting_threads() == []


def test_each_counter_counts_ahead_its_even_share_of_the_next_micro_batch() -> None:
    assert ahead_for(2_500_000, 4) == Ahead(messages=625_000, entries=50_000)
    assert ahead_for(100, 3) == Ahead(messages=34, entries=66_666)  # rounded up
    assert ahead_for(7, 1) == Ahead(messages=7, entries=200_000)


class CountingReader(FakeReader):
    """Records how many entries it has handed out."""

    handed = 0

    def entries(
        self, stopped: Callable[[], bool] = lambda: False
    ) -> Generator[RawEntry, None, None]:
        for raw in super().entries(stopped):
            self.handed += 1
            yield raw


def test_counters_receive_ahead_up_to_their_bound_once_the_ends_are_found() -> None:
    entries = [entry(10, e, 4) for e in range(100)]
    last = MessageId(10, 99)
    readers = []

    def open_counter(name: str, start: MessageId, end: MessageId) -> MessageCounter:
        made = counter(entries, start, end, ahead=Ahead(messages=12, entries=100))
        made._reader = CountingReader(entries, start, end)  # type: ignore[assignment]
        readers.append(made._reader)
        return made

    kept = KeptCounters(open_counter)
    first = kept.ends({"p0": NOTHING_CONSUMED}, {"p0": last}, 5)
    assert first == {"p0": MessageId(10, 1, 0)}
    # entries 0 and 1 counted (3 messages of 1 left), then 2, 3 and 4: 12 messages ahead
    deadline = time.monotonic() + 2.0
    while readers[0].handed < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    assert readers[0].handed == 5
    second = kept.ends(first, {"p0": last}, 15)
    assert second == {"p0": MessageId(10, 4, -1)}  # all from what was received ahead
    assert len(readers) == 1
    kept.close()
    assert counting_threads() == []
