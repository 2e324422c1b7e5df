"""TriggerWait: minMessagesPerTrigger and maxTriggerDelay with the Kafka source's semantics, on a
clock the test moves, over partitions whose messages are consecutive entries of one ledger."""

from __future__ import annotations

from typing import Any

from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import NOTHING_CONSUMED
from pulsar_spark.source.trigger_wait import TriggerWait


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class EntryCounter:
    """Counts unbatched messages (ledger 1, entries 0, 1, ...) in (start, last]."""

    def __init__(self, start: MessageId, last: MessageId) -> None:
        self.position = start
        self.last = last
        self.closed = False

    def take(self, wanted: int) -> int:
        first = 0 if self.position == NOTHING_CONSUMED else self.position.entry_id + 1
        taken = max(0, min(wanted, self.last.entry_id - first + 1))
        if taken:
            self.position = MessageId(1, first + taken - 1)
        return taken


class Opener:
    """Opens :class:`EntryCounter`s, remembering each range counted."""

    def __init__(self) -> None:
        self.ranges: list[tuple[str, MessageId, MessageId]] = []

    def __call__(self, name: str, start: MessageId, last: MessageId) -> Any:
        self.ranges.append((name, start, last))
        counter = EntryCounter(start, last)
        counter.close = lambda: None  # type: ignore[method-assign]
        return counter


def upto(entry: int) -> MessageId:
    return MessageId(1, entry)


def test_the_first_trigger_proceeds_then_waits_for_the_minimum() -> None:
    clock, opener = Clock(), Opener()
    wait = TriggerWait(10, 60, opener, clock)
    starts = {"p0": NOTHING_CONSUMED}
    # a query's first micro-batch proceeds at once, with whatever there is (as Kafka's does)
    assert not wait.waits(starts, {"p0": upto(2)})
    assert opener.ranges == []
    clock.now += 1
    assert wait.waits(starts, {"p0": upto(8)})  # 9 messages
    assert not wait.waits(starts, {"p0": upto(9)})  # 10
    # counting went on where it stopped: only what arrived since was received
    assert opener.ranges == [
        ("p0", NOTHING_CONSUMED, upto(8)),
        ("p0", upto(8), upto(9)),
    ]


def test_the_delay_since_the_last_trigger_ends_the_wait() -> None:
    clock, opener = Clock(), Opener()
    wait = TriggerWait(100, 30, opener, clock)
    assert not wait.waits({"p0": NOTHING_CONSUMED}, {"p0": upto(4)})
    starts = {"p0": upto(4)}
    clock.now += 29.9
    assert wait.waits(starts, {"p0": upto(9)})
    clock.now += 0.1
    assert not wait.waits(starts, {"p0": upto(9)})  # 30 s: the 5 messages are read
    clock.now += 10
    assert wait.waits({"p0": upto(9)}, {"p0": upto(12)})
    # the clock restarts when the delay passes, whether or not messages arrived
    clock.now += 20
    assert not wait.waits({"p0": upto(9)}, {"p0": upto(9)})
    clock.now += 29
    assert wait.waits({"p0": upto(9)}, {"p0": upto(11)})


def test_messages_of_every_partition_count_and_a_new_start_counts_again() -> None:
    clock, opener = Clock(), Opener()
    wait = TriggerWait(6, 60, opener, clock)
    wait.waits({}, {})
    clock.now += 1
    starts = {"p0": NOTHING_CONSUMED, "p1": NOTHING_CONSUMED}
    assert wait.waits(starts, {"p0": upto(2), "p1": upto(1)})  # 3 + 2
    assert not wait.waits(starts, {"p0": upto(2), "p1": upto(2)})  # 3 + 3
    # p0 moved (a micro-batch read it): its count starts over, p1's is kept
    opener.ranges.clear()
    assert wait.waits({"p0": upto(2), "p1": NOTHING_CONSUMED}, {"p0": upto(4), "p1": upto(2)})
    assert opener.ranges == [("p0", upto(2), upto(4))]


def test_counting_stops_at_the_minimum() -> None:
    clock, opener = Clock(), Opener()
    wait = TriggerWait(5, 60, opener, clock)
    wait.waits({}, {})
    clock.now += 1
    starts = {"p0": NOTHING_CONSUMED, "p1": NOTHING_CONSUMED}
    assert not wait.waits(starts, {"p0": upto(99), "p1": upto(99)})
    # p0 alone holds enough: p1 is not read at all
    assert opener.ranges == [("p0", NOTHING_CONSUMED, upto(99))]
