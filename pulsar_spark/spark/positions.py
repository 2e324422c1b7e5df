"""Where a read starts or ends, as the user said it: earliest, latest, per partition, or a time.

``startingOffsets`` / ``endingOffsets`` take ``earliest``, ``latest`` or a JSON object from topic
or partition name to a position, each either ``"earliest"``, ``"latest"`` or
``{"ledgerId": L, "entryId": E, "batchIndex": B}`` (batchIndex optional, -1 = the whole entry).
User-given positions are inclusive on both sides: the message at a starting position is the
first one read, the message at an ending position the last one.
``startingTime`` / ``endingTime`` are publish times in ms since the epoch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pulsar_spark.errors import ConfigurationError
from pulsar_spark.message_id import MessageId
from pulsar_spark.topic import full_topic_name

Bound = Literal["earliest", "latest"]
PositionValue = MessageId | Bound


@dataclass(frozen=True, slots=True)
class Earliest:
    pass


@dataclass(frozen=True, slots=True)
class Latest:
    pass


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


PositionSpec = Earliest | Latest | Specific | AtTime


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


def bound_or_json(
    option: str, text: str, what: str, example: str
) -> Earliest | Latest | dict[str, Any]:
    """``earliest``, ``latest`` or a non-empty JSON object of ``what`` (errors name ``option``
    and show ``example``), as startingOffsets/endingOffsets take them."""
    value = text.strip()
    if value.lower() == "earliest":
        return Earliest()
    if value.lower() == "latest":
        return Latest()
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"option {option!r}: {text!r} is neither 'earliest', 'latest' nor a JSON object "
            f"of {what} ({exc.msg})"
        ) from exc
    if not isinstance(data, dict) or not data:
        raise ConfigurationError(
            f"option {option!r}: expected a non-empty JSON object of {what}, e.g. {example}"
        )
    return data


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
