"""``minMessagesPerTrigger`` and ``maxTriggerDelay``: a stream's next micro-batch waits until
at least that many messages are available or that long has passed since the last micro-batch
was triggered, with the semantics of Spark's Kafka source (``minOffsetsPerTrigger``).

While it waits, ``latestOffset`` returns the previous end, so Spark plans no micro-batch. The
clock starts at zero as the Kafka source's does: the first ``latestOffset`` of a query (and of
a query started again) proceeds at once, and from then on each time the delay has passed the
clock restarts, whether or not messages arrived. Under ``Trigger.AvailableNow`` nothing new can
arrive, so the stream does not wait (the caller does not ask).

Message ids are not dense, so the messages available are counted by receiving the entries
after each partition's start (:class:`~pulsar_spark.source.counting.MessageCounter`). Counts
are kept per start: each ``latestOffset`` while the stream waits counts only what arrived
since the last, and stops counting once ``minimum`` is reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pulsar_spark.message_id import MessageId
from pulsar_spark.source.counting import MessageCounter
from pulsar_spark.source.offsets import has_messages_after

Counter = Callable[[str, MessageId, MessageId], MessageCounter]
"""Opens a counter over (start, last] of the named partition."""


@dataclass(frozen=True, slots=True)
class _Counted:
    """Messages of one partition counted after ``start``, through ``through``."""

    start: MessageId
    through: MessageId
    count: int


class TriggerWait:
    """Whether the next micro-batch waits for more messages (``minimum``, within ``delay``
    seconds of the last one)."""

    def __init__(
        self,
        minimum: int,
        delay: float,
        open_counter: Counter,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._minimum = minimum
        self._delay = delay
        self._open = open_counter
        self._clock = clock
        self._last_trigger: float | None = None  # None: no micro-batch triggered yet
        self._counted: dict[str, _Counted] = {}

    def waits(self, starts: Mapping[str, MessageId], ends: Mapping[str, MessageId]) -> bool:
        """Whether the micro-batch over (``starts``, ``ends``] is to wait; when not, the
        clock restarts."""
        now = self._clock()
        if self._last_trigger is None or now - self._last_trigger >= self._delay:
            self._last_trigger = now
            return False
        if self._available(starts, ends) < self._minimum:
            return True
        self._last_trigger = now
        return False

    def _available(self, starts: Mapping[str, MessageId], ends: Mapping[str, MessageId]) -> int:
        """The messages after ``starts`` up to ``ends``, counted up to the minimum."""
        kept = {
            name: counted
            for name, counted in self._counted.items()
            if starts.get(name) == counted.start
        }
        self._counted = {
            name: kept.get(name) or _Counted(start, start, 0) for name, start in starts.items()
        }
        total = sum(counted.count for counted in self._counted.values())
        for name, counted in self._counted.items():
            if total >= self._minimum:
                break
            if not has_messages_after(counted.through, ends[name]):
                continue
            counter = self._open(name, counted.through, ends[name])
            try:
                taken = counter.take(self._minimum - total)
            finally:
                counter.close()
            total += taken
            self._counted[name] = _Counted(counted.start, counter.position, counted.count + taken)
        return total
