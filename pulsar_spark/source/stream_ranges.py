"""Where the next micro-batch starts and ends in each partition, before any read limit.

A partition starts where the previous micro-batch ended (new partitions at "nothing consumed")
and ends at its last message, or stays where it is when there is nothing after its start. A
start the partition no longer holds is data loss (see :mod:`pulsar_spark.common.data_loss`);
when the query goes on, the partition starts over through the offsets themselves: this
micro-batch ends it at "nothing consumed" (reading nothing of it), the next reads it from its
first message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from pulsar_spark.common.data_loss import DataLossPolicy
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import NOTHING_CONSUMED, has_messages_after
from pulsar_spark.source.planning import PartitionRef

EndOf = Callable[[PartitionRef], MessageId | None]


class Ranges(NamedTuple):
    """Per partition name: the exclusive start and the inclusive end."""

    starts: dict[str, MessageId]
    ends: dict[str, MessageId]


def next_ranges(
    begin: Mapping[str, MessageId],
    refs: Sequence[PartitionRef],
    policy: DataLossPolicy,
    end_of: EndOf,
    current_end_of: EndOf | None = None,
) -> Ranges:
    """The ranges of the micro-batch after ``begin``, over the partitions ``refs``.

    ``end_of`` gives the last message a micro-batch may read up to (None: the partition is
    empty). Under Trigger.AvailableNow that is the end recorded when the query started, and
    ``current_end_of`` the end now, to tell a start beyond the recorded end from lost data.
    """
    policy.check_vanished(begin, (ref.name for ref in refs))
    ranges = Ranges({}, {})
    for ref in refs:
        last = end_of(ref)
        first = begin.get(ref.name, NOTHING_CONSUMED)
        current = None if current_end_of is None else functools.partial(current_end_of, ref)
        if policy.check_start(ref.name, first, last, current):
            first = last = NOTHING_CONSUMED
        ranges.starts[ref.name] = first
        ranges.ends[ref.name] = (
            last if last is not None and has_messages_after(first, last) else first
        )
    return ranges
