"""Where a stream starts: ``startingOffsets`` / ``startingTime`` / ``startingOffsetsByTime``
turned into concrete offsets.

An offset holds, per partition, the last message consumed (see :mod:`pulsar_spark.source.offsets`),
so a start is resolved to the position just *before* the first message to read: a user-given
id (inclusive) becomes the position before it, ``earliest`` is "nothing consumed", ``latest``
the partition's last message, and a time (the same for all, or each partition's own) the
position before the first entry published at or after it. Resolving asks the broker only the
two questions of :class:`PartitionPositions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.common.bounds import Earliest, Latest
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import NOTHING_CONSUMED, PulsarOffset, consumed_before
from pulsar_spark.source.planning import PartitionRef, first_published, last_message_id
from pulsar_spark.source.positions import AtTime, PositionSpec, Specific, TimesByPartition


class PartitionPositions(Protocol):
    """What resolving a start needs to know of a partition."""

    def last_message_id(self, ref: PartitionRef) -> MessageId | None:
        """The partition's last message (None when it is empty)."""

    def first_entry_since(
        self, ref: PartitionRef, millis: int, last: MessageId
    ) -> MessageId | None:
        """The whole entry, up to ``last``, first published at or after ``millis`` (None: none
        is)."""


def initial_offset(
    spec: PositionSpec, refs: Iterable[PartitionRef], positions: PartitionPositions
) -> PulsarOffset:
    """The offset a stream starts from: for each partition, the position before its first
    message to read."""
    read = list(refs)
    if isinstance(spec, TimesByPartition):
        spec.check_covers(read)
    return PulsarOffset({ref.name: start_position(spec, ref, positions) for ref in read})


def start_position(
    spec: PositionSpec, ref: PartitionRef, positions: PartitionPositions
) -> MessageId:
    """The position just before the first message of ``ref`` that ``spec`` reads."""
    if isinstance(spec, Specific):
        value = spec.for_partition(ref.name, ref.topic)
        if isinstance(value, MessageId):
            return consumed_before(value.with_partition(ref.partition))
        spec = Latest() if value == "latest" else Earliest()
    if isinstance(spec, Latest):
        return positions.last_message_id(ref) or NOTHING_CONSUMED
    if isinstance(spec, AtTime):
        return _before_time(ref, spec.millis, positions)
    if isinstance(spec, TimesByPartition):
        return _before_time(ref, spec.millis(ref), positions)
    return NOTHING_CONSUMED


def _before_time(ref: PartitionRef, millis: int, positions: PartitionPositions) -> MessageId:
    """The position just before the first entry published at or after ``millis``; the last
    message when every one is older."""
    last = positions.last_message_id(ref)
    if last is None:
        return NOTHING_CONSUMED
    first = positions.first_entry_since(ref, millis, last)
    return last if first is None else consumed_before(first)


class BrokerPositions:
    """:class:`PartitionPositions` asked of the broker."""

    def __init__(self, lookup: Lookup, poll_timeout: float) -> None:
        self._lookup = lookup
        self._poll_timeout = poll_timeout

    def last_message_id(self, ref: PartitionRef) -> MessageId | None:
        return last_message_id(self._lookup, ref)

    def first_entry_since(
        self, ref: PartitionRef, millis: int, last: MessageId
    ) -> MessageId | None:
        return first_published(self._lookup, ref, last, millis, self._poll_timeout)
