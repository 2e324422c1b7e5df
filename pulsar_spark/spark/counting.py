"""Counting messages on the driver, to end a micro-batch after exactly N messages.

Pulsar message ids are not dense (entries hold batches of unknown size), so a limit such as
``maxMessagesPerTrigger`` cannot be turned into an end position by arithmetic. The driver reads
the range's entries itself — parsing only each entry's metadata, never decoding messages — and
stops when it has counted enough, cutting inside a batch if it must. The end it returns is the
id of the last counted message, exact to the batch index.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Protocol, TypeVar

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, RawEntry, ReaderSettings, ReadRange
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.chunks import is_chunk
from pulsar_spark.spark.offsets import has_messages_after

P_co = TypeVar("P_co", covariant=True)
T = TypeVar("T")

# An entry being handed out: its id, the batch indexes not yet taken, whether those run to the
# entry's last message, and how many messages it holds. Indexes are a ``range`` (slicing one
# is O(1)); ``range(-1, 0)`` stands for an unbatched message.
_Held = tuple[MessageId, range, bool, int]


class MessageCounter:
    """Walks (start, last] of one partition, handing out message counts on request."""

    def __init__(
        self, lookup: Lookup, topic: str, start: MessageId, last: MessageId, poll_timeout: float
    ) -> None:
        self.position = start
        self._last = last
        self._reader = RangeReader(
            lookup,
            ReadRange(topic, start, last, start_inclusive=False),
            ReaderSettings(poll_timeout=poll_timeout, request_timeout=lookup.timeout),
        )
        self._entries: Generator[RawEntry, None, None] | None = None
        self._held: _Held | None = None  # an entry partly handed out
        self.exhausted = False
        # Messages in the batched entry ``position`` lies inside; None on a whole entry.
        self.batch_size: int | None = None

    def take(self, wanted: int) -> int:
        """Advance over up to ``wanted`` messages; return how many it advanced over."""
        taken = 0
        while taken < wanted and not self.exhausted:
            held = self._held or self._next_entry()
            if held is None:
                self.exhausted = True
                break
            entry_id, indexes, reaches_entry_end, size = held
            use = indexes[: wanted - taken]
            rest = indexes[len(use) :]
            taken += len(use)
            self._held = (entry_id, rest, reaches_entry_end, size) if rest else None
            # Having consumed a batch to its end is recorded as the whole entry (-1).
            last_index = -1 if not rest and reaches_entry_end else use[-1]
            self.position = MessageId(
                entry_id.ledger_id, entry_id.entry_id, last_index, entry_id.partition
            )
            self.batch_size = size if last_index >= 0 else None
        return taken

    def resumes(self, start: MessageId, last: MessageId) -> bool:
        """Whether this counter stands at ``start`` of the same range, so that counting the
        next micro-batch can go on from here (with what it already received) instead of
        subscribing again."""
        return (
            not self.exhausted
            and self.position.last_key() == start.last_key()
            and self._last.last_key() == last.last_key()
        )

    def close(self) -> None:
        if self._entries is not None:
            self._entries.close()

    def _next_entry(self) -> _Held | None:
        if self._entries is None:
            self._entries = self._reader.entries()
        for raw in self._entries:
            indexes = self._countable(raw)
            if indexes:
                ledger, entry = raw.entry
                partition = raw.message.message_id.partition
                reaches_end = indexes[-1] in (-1, raw.message_count - 1)
                entry_id = MessageId(ledger, entry, -1, partition)
                return entry_id, indexes, reaches_end, raw.message_count
        return None

    def _countable(self, raw: RawEntry) -> range:
        """Batch indexes of this entry inside the range (-1 alone for an unbatched message)."""
        metadata = raw.section.metadata
        if metadata.HasField("marker_type"):
            return range(0)
        if is_chunk(metadata) and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
            return range(0)
        ledger, entry = raw.entry
        low, high = self.position.last_key(), self._last.last_key()
        if raw.message_count == 1 and not metadata.HasField("num_messages_in_batch"):
            whole = MessageId(ledger, entry).last_key()
            return range(-1, 0) if low < whole <= high else range(0)
        return _index_range((ledger, entry), raw.message_count, low, high)


def _index_range(
    entry: tuple[int, int], count: int, low: tuple[int, int, int], high: tuple[int, int, int]
) -> range:
    """Indexes ``i`` of a batch of ``count`` in ``entry`` with ``low < (*entry, i) <= high``.

    Keys of one entry differ only in the index, so the bounds cut the index range at most
    once each: an entry after ``low``'s is whole from index 0, ``low``'s own entry starts
    after its index, an entry before it holds nothing; symmetrically for ``high``.
    """
    if entry > low[:2]:
        first = 0
    elif entry == low[:2]:
        first = low[2] + 1
    else:
        return range(0)
    if entry < high[:2]:
        last = count - 1
    elif entry == high[:2]:
        last = min(high[2], count - 1)
    else:
        return range(0)
    return range(first, last + 1) if first <= last else range(0)


class Countable(Protocol[P_co]):
    """What :func:`limit_ends` shares a budget over: a position that :meth:`take` advances
    over messages, until it is ``exhausted``."""

    @property
    def position(self) -> P_co: ...

    @property
    def exhausted(self) -> bool: ...

    def take(self, wanted: int) -> int: ...


def limit_ends(counters: Mapping[str, Countable[T]], budget: int) -> dict[str, T]:
    """Share ``budget`` messages fairly among partitions; return each one's end position."""
    remaining = budget
    active = list(counters)
    while active and remaining > 0:
        share = max(1, remaining // len(active))
        still = []
        for name in active:
            if remaining <= 0:
                break
            remaining -= counters[name].take(min(share, remaining))
            if not counters[name].exhausted:
                still.append(name)
        active = still
    return {name: counter.position for name, counter in counters.items()}


OpenCounter = Callable[[str, MessageId, MessageId], MessageCounter]
"""Opens a counter over (start, last] of the named partition."""


class KeptCounters:
    """The driver's message counters, kept between micro-batches: the next one usually starts
    where the last ended, and goes on counting from there."""

    def __init__(self, open_counter: OpenCounter) -> None:
        self._open = open_counter
        self._counters: dict[str, MessageCounter] = {}

    def ends(
        self, starts: Mapping[str, MessageId], available: Mapping[str, MessageId], budget: int
    ) -> dict[str, MessageId]:
        """End positions after at most ``budget`` messages past ``starts``.

        A counter that already stands at a partition's start (it ended the previous
        micro-batch there, and the range's end has not moved) goes on from where it is, with
        the entries it has received since; any other is replaced by a new one. Counters are
        kept for the next micro-batch and all dropped on any error.
        """
        counters = {
            name: self._counter(name, starts[name], available[name])
            for name in starts
            if has_messages_after(starts[name], available[name])
        }
        self._keep(counters)
        try:
            ends = limit_ends(counters, budget)
        except BaseException:
            self.close()
            raise
        return {name: ends.get(name, starts[name]) for name in starts}

    def batch_size(self, name: str, position: MessageId) -> int | None:
        """Messages in the batched entry ``position`` lies inside, if the counter of partition
        ``name`` stands there (it ended the last micro-batch there); None otherwise."""
        counter = self._counters.get(name)
        if counter is None or counter.position != position:
            return None
        return counter.batch_size

    def close(self) -> None:
        """Close every counter."""
        self._keep({})

    def _counter(self, name: str, start: MessageId, last: MessageId) -> MessageCounter:
        counter = self._counters.get(name)
        if counter is not None and counter.resumes(start, last):
            return counter
        return self._open(name, start, last)

    def _keep(self, keep: dict[str, MessageCounter]) -> None:
        """Close every counter not in ``keep``, which becomes the set kept."""
        for counter in self._counters.values():
            if counter not in keep.values():
                counter.close()
        self._counters = keep
