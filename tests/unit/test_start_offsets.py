"""Where a stream starts: each start spec resolved against a partition model (no broker).

The model answers the two questions resolving asks (the last message, the first entry
published since a time) and records them, so the tests also show what is asked and when.
"""

from __future__ import annotations

import pytest

from pulsar_spark.common.bounds import Earliest, Latest
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import NOTHING_CONSUMED
from pulsar_spark.source.planning import PartitionRef
from pulsar_spark.source.positions import AtTime, PositionSpec, Specific, TimesByPartition
from pulsar_spark.source.start_offsets import initial_offset, start_position

T = "persistent://public/default/t"
P0 = PartitionRef(T, 0, f"{T}-partition-0")
P1 = PartitionRef(T, 1, f"{T}-partition-1")
EMPTY = PartitionRef("persistent://public/default/e", -1, "persistent://public/default/e")


class Partitions:
    """Entries per partition name, each ``(publish time, entry id)``, in order."""

    def __init__(self, entries: dict[str, list[tuple[int, MessageId]]]) -> None:
        self._entries = entries
        self.asked: list[tuple[str, str]] = []

    def last_message_id(self, ref: PartitionRef) -> MessageId | None:
        self.asked.append(("last", ref.name))
        entries = self._entries.get(ref.name, [])
        return entries[-1][1] if entries else None

    def first_entry_since(
        self, ref: PartitionRef, millis: int, last: MessageId
    ) -> MessageId | None:
        self.asked.append(("since", ref.name))
        for published, entry in self._entries[ref.name]:
            if published >= millis and entry <= last:
                return entry
        return None


def model() -> Partitions:
    return Partitions(
        {
            P0.name: [(100, MessageId(3, 0, -1, 0)), (200, MessageId(3, 1, -1, 0))],
            P1.name: [(150, MessageId(4, 7, -1, 1)), (300, MessageId(5, 0, -1, 1))],
        }
    )


def test_earliest_is_nothing_consumed_without_asking_the_broker() -> None:
    partitions = model()
    assert start_position(Earliest(), P0, partitions) == NOTHING_CONSUMED
    assert partitions.asked == []


def test_latest_is_the_last_message_or_nothing_consumed_when_empty() -> None:
    partitions = model()
    assert start_position(Latest(), P1, partitions) == MessageId(5, 0, -1, 1)
    assert start_position(Latest(), EMPTY, partitions) == NOTHING_CONSUMED
    assert partitions.asked == [("last", P1.name), ("last", EMPTY.name)]


@pytest.mark.parametrize(
    ("given", "before"),
    [
        (MessageId(7, 12, -1), MessageId(7, 11, -1, 1)),  # the whole entry before
        (MessageId(7, 12, 3), MessageId(7, 12, 2, 1)),  # the index before
        (MessageId(7, 12, 0), MessageId(7, 11, -1, 1)),  # index 0: the entry before
        (MessageId(7, 0, -1), MessageId(7, -1, -1, 1)),  # resumes at entry 0 of ledger 7
    ],
)
def test_a_given_id_is_read_first(given: MessageId, before: MessageId) -> None:
    spec = Specific(((P1.name, given),), "earliest")
    resolved = start_position(spec, P1, model())
    assert resolved == before
    assert resolved.partition == 1


def test_specific_words_per_partition_topic_and_default() -> None:
    partitions = model()
    per_partition = Specific(((P0.name, "latest"),), "earliest")
    assert start_position(per_partition, P0, partitions) == MessageId(3, 1, -1, 0)
    assert start_position(per_partition, P1, partitions) == NOTHING_CONSUMED
    per_topic = Specific(((T, MessageId(9, 9)),), "latest")
    assert start_position(per_topic, P0, partitions) == MessageId(9, 8, -1, 0)
    assert start_position(Specific((), "latest"), P1, partitions) == MessageId(5, 0, -1, 1)
    assert partitions.asked == [("last", P0.name), ("last", P1.name)]


@pytest.mark.parametrize(
    ("millis", "before"),
    [
        (0, MessageId(3, -1, -1, 0)),  # before the first entry
        (100, MessageId(3, -1, -1, 0)),  # published exactly then: read it
        (101, MessageId(3, 0, -1, 0)),
        (200, MessageId(3, 0, -1, 0)),
        (201, MessageId(3, 1, -1, 0)),  # all older: start after the last message
    ],
)
def test_a_time_starts_at_the_first_entry_published_since(millis: int, before: MessageId) -> None:
    partitions = model()
    assert start_position(AtTime(millis), P0, partitions) == before
    assert partitions.asked == [("last", P0.name), ("since", P0.name)]


def test_a_time_in_an_empty_partition_asks_only_for_the_last_message() -> None:
    partitions = model()
    assert start_position(AtTime(5), EMPTY, partitions) == NOTHING_CONSUMED
    assert partitions.asked == [("last", EMPTY.name)]


@pytest.mark.parametrize(
    ("spec", "json"),
    [
        (
            Earliest(),
            {
                P0.name: {"batchIndex": -1, "entryId": -1, "ledgerId": -1},
                P1.name: {"batchIndex": -1, "entryId": -1, "ledgerId": -1},
            },
        ),
        (
            Latest(),
            {
                P0.name: {"batchIndex": -1, "entryId": 1, "ledgerId": 3},
                P1.name: {"batchIndex": -1, "entryId": 0, "ledgerId": 5},
            },
        ),
        (
            AtTime(150),
            {
                P0.name: {"batchIndex": -1, "entryId": 0, "ledgerId": 3},
                P1.name: {"batchIndex": -1, "entryId": 6, "ledgerId": 4},
            },
        ),
        (
            TimesByPartition("startingOffsetsByTime", ((P0.name, 0), (P1.name, 151))),
            {
                P0.name: {"batchIndex": -1, "entryId": -1, "ledgerId": 3},
                P1.name: {"batchIndex": -1, "entryId": -1, "ledgerId": 5},  # before (5, 0)
            },
        ),
        (
            TimesByPartition("startingOffsetsByTime", ((T, 200),)),
            {
                P0.name: {"batchIndex": -1, "entryId": 0, "ledgerId": 3},
                P1.name: {"batchIndex": -1, "entryId": -1, "ledgerId": 5},
            },
        ),
    ],
)
def test_initial_offset_has_every_partition(spec: PositionSpec, json: dict) -> None:
    assert initial_offset(spec, [P0, P1], model()).to_json() == json


def test_times_by_partition_must_name_every_partition_read_and_only_those() -> None:
    partitions = model()
    missing = TimesByPartition("startingOffsetsByTime", ((P0.name, 5),))
    with pytest.raises(ConfigurationError) as info:
        initial_offset(missing, [P0, P1], partitions)
    assert str(info.value) == (
        f"option 'startingOffsetsByTime' gives no time for {P1.name}: as in Kafka's "
        "startingOffsetsByTimestamp, every partition read needs one (a topic mapped to one "
        "number gives all its partitions that time)"
    )
    extra = TimesByPartition("startingOffsetsByTime", ((T, 5), (EMPTY.name, 5)))
    with pytest.raises(ConfigurationError) as info:
        initial_offset(extra, [P0, P1], partitions)
    assert str(info.value) == (
        f"option 'startingOffsetsByTime' names {EMPTY.name}, which the read does not include "
        "(the topic or partition does not exist, or is not selected)"
    )
    assert partitions.asked == []  # refused before asking the broker anything
