"""Where a read starts or ends, as the user said it: earliest, latest, per partition, or a time.

``startingOffsets`` / ``endingOffsets`` take ``earliest``, ``latest`` or a JSON object from topic
or partition name to a position, each either ``"earliest"``, ``"latest"`` or
``{"ledgerId": L, "entryId": E, "batchIndex": B}`` (batchIndex optional, -1 = the whole entry).
User-given positions are inclusive on both sides: the message at a starting position is the
first one read, the message at an ending position the last one.
``startingTime`` / ``endingTime`` are publish times in ms since the epoch, and
``startingOffsetsByTime`` / ``endingOffsetsByTime`` one per partition, as Kafka's
``startingOffsetsByTimestamp`` gives them: JSON from topic to partition index to ms, or from
topic to ms for all its partitions (the only way to name a non-partitioned topic). As in
Kafka's source, every partition read must be given a time, and every one given must be read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

from pulsar_spark.common.bounds import Earliest, Latest, bound_or_json, json_object
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.message_id import MessageId
from pulsar_spark.topic import TopicName, full_topic_name

Bound = Literal["earliest", "latest"]
PositionValue = MessageId | Bound


@dataclass(frozen=True, slots=True)
class Specific:
    """Per topic-partition positions; partitions not named use ``default``."""

    positions: tuple[tuple[str, PositionValue], ...]
    default: Bound

    def for_partition(self, partition_topic: str, base_topic: str) -> PositionValue:
        table = dict(self.positions)
        return table.get(partition_topic, table.get(base_topic, self.default))


@dataclass(frozen=True, slots=True)
class AtTime:
    """The first message published at or after ``millis``."""

    millis: int


class Partition(Protocol):
    """A partition read: its own name, and its topic's (the same for a non-partitioned one)."""

    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> str: ...


@dataclass(frozen=True, slots=True)
class TimesByPartition:
    """Per partition, the first message published at or after its own time (``option``'s
    value: names of partitions, or of topics for all their partitions, to ms)."""

    option: str
    times: tuple[tuple[str, int], ...]

    def millis(self, partition: Partition) -> int:
        """The time given for ``partition`` (which :meth:`check_covers` has checked)."""
        table = dict(self.times)
        return table.get(partition.name, table.get(partition.topic, 0))

    def check_covers(self, partitions: Iterable[Partition]) -> None:
        """Refuse a time missing for a partition read, or given for one not read."""
        table = dict(self.times)
        read = list(partitions)
        missing = [p.name for p in read if p.name not in table and p.topic not in table]
        if missing:
            raise ConfigurationError(
                f"option {self.option!r} gives no time for {', '.join(missing)}: as in Kafka's "
                "startingOffsetsByTimestamp, every partition read needs one (a topic mapped to "
                "one number gives all its partitions that time)"
            )
        named = {p.name for p in read} | {p.topic for p in read}
        unread = [name for name, _ in self.times if name not in named]
        if unread:
            raise ConfigurationError(
                f"option {self.option!r} names {', '.join(unread)}, which the read does not "
                "include (the topic or partition does not exist, or is not selected)"
            )


PositionSpec = Earliest | Latest | Specific | AtTime | TimesByPartition


def parse_offsets(option: str, text: str, *, default: Bound) -> PositionSpec:
    """Parse a startingOffsets/endingOffsets value."""
    data = bound_or_json(
        option,
        text,
        "topic-partition -> position",
        '{"persistent://public/default/t-partition-0": '
        '{"ledgerId": 7, "entryId": 12, "batchIndex": -1}}',
    )
    if not isinstance(data, dict):
        return data
    positions = tuple(
        sorted((_topic_key(option, k), _position(option, k, v)) for k, v in data.items())
    )
    return Specific(positions, default)


def parse_time(option: str, text: str) -> AtTime:
    try:
        millis = int(text.strip())
    except ValueError as exc:
        raise ConfigurationError(
            f"option {option!r}: {text!r} is not a publish time in ms since the epoch"
        ) from exc
    if millis < 0:
        raise ConfigurationError(f"option {option!r}: time must be >= 0, got {millis}")
    return AtTime(millis)


def parse_times(option: str, text: str) -> TimesByPartition:
    """Parse a startingOffsetsByTime/endingOffsetsByTime value."""
    data = json_object(
        option,
        text,
        "topic -> partition -> publish time in ms since the epoch",
        '{"clicks": {"0": 1767225600000, "1": 1767225600000}} or {"events": 1767225600000}',
        "not",
    )
    times: dict[str, int] = {}
    for key, value in data.items():
        topic = _topic_key(option, key)
        if not isinstance(value, dict):
            times[topic] = _millis(option, topic, value)
            continue
        if not value:
            raise ConfigurationError(f"option {option!r}: {topic!r} lists no partition")
        for index, millis in value.items():
            name = TopicName.parse(topic).partition(_index(option, topic, index))
            times[name] = _millis(option, name, millis)
    return TimesByPartition(option, tuple(sorted(times.items())))


def _index(option: str, topic: str, text: str) -> int:
    if not text.isdigit():
        raise ConfigurationError(
            f"option {option!r}: partitions of {topic!r} are indexes 0, 1, ..., got {text!r}"
        )
    return int(text)


def _millis(option: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"option {option!r}: the time of {name!r} must be a publish time in ms since the "
            f"epoch (a whole number >= 0), got {json.dumps(value)}"
        )
    return value


def _topic_key(option: str, name: object) -> str:
    if not isinstance(name, str):
        raise ConfigurationError(f"option {option!r}: topic names must be strings")
    try:
        return full_topic_name(name)
    except ConfigurationError as exc:
        raise ConfigurationError(f"option {option!r}: {exc}") from exc


def _position(option: str, topic: str, value: object) -> PositionValue:
    if isinstance(value, str) and value.lower() in ("earliest", "latest"):
        return "earliest" if value.lower() == "earliest" else "latest"
    try:
        return MessageId.from_json(value)
    except TypeError as exc:
        raise ConfigurationError(
            f"option {option!r}: position of {topic!r} must be 'earliest', 'latest' or "
            f'{{"ledgerId": L, "entryId": E, "batchIndex": B}}: {exc}'
        ) from exc
