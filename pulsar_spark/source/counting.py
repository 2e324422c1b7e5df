"""Counting messages on the driver, to end a micro-batch after exactly N messages.

Pulsar message ids are not dense (entries hold batches of unknown size), so a limit such as
``maxMessagesPerTrigger`` cannot be turned into an end position by arithmetic. The driver reads
the range's entries itself — parsing only each entry's metadata, never decoding messages — and
stops when it has counted enough, cutting inside a batch if it must. The end it returns is the
id of the last counted message, exact to the batch index.

A counter given an :class:`Ahead` receives its entries on a thread of its own
(:mod:`pulsar_spark.common.lookahead`). While a micro-batch is being counted the thread keeps a
little ahead of the count (:data:`WHILE_COUNTING`); once its end has been returned
(:meth:`MessageCounter.count_ahead`) it goes on, up to a bound: while the executors read that
micro-batch, the driver already counts the next. The entries counted, and so every end, are
the same either way; only who waits for the broker changes.

``maxBytesPerTrigger`` is counted the same way, over each message's payload bytes: the size of
its value as the producer gave it (uncompressed; key, properties and metadata not counted).
An unbatched message's size is in its metadata; a batched entry is decompressed and its
messages' headers walked, still without decoding a value (:func:`payload_sizes`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Generator, Mapping
from typing import NamedTuple, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.common.limits import limit_ends
from pulsar_spark.common.lookahead import Direct, Lookahead, Stopped
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.batch_scan import scan_batch
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.chunks import is_chunk
from pulsar_spark.protocol.compression import decompress
from pulsar_spark.protocol.crypto import is_encrypted
from pulsar_spark.protocol.decode import SCAN_MIN_MESSAGES, is_batch
from pulsar_spark.protocol.read_stage import Key, RawEntry, ReadRange, kept_indexes
from pulsar_spark.source.offsets import has_messages_after

P_co = TypeVar("P_co", covariant=True)
T = TypeVar("T")

Sizes = npt.NDArray[np.int64]

# An entry being handed out: its id, the batch indexes not yet taken, whether those run to the
# entry's last message, how many messages it holds, and (counting bytes) the payload bytes of
# the messages not yet taken, one per index. Indexes are a ``range`` and sizes an array
# (slicing either is O(1)); ``range(-1, 0)`` stands for an unbatched message.
_Held = tuple[MessageId, range, bool, int, Sizes | None]


class Ahead(NamedTuple):
    """How far a counter's thread may receive ahead of what it has handed out: at most
    ``messages`` messages in at most ``entries`` entries."""

    messages: int
    entries: int


WHILE_COUNTING = 10_000
"""Messages a counter's thread may hold ahead while a micro-batch is counted: one large batched
entry, or enough one-message entries that the thread and the count do not wait on each other
at every entry (which made counting those two to three times slower)."""

MAX_AHEAD_ENTRIES = 200_000
"""Entries all of a driver's counters may hold received ahead (a few hundred bytes each)."""


def ahead_for(budget: int, partitions: int) -> Ahead:
    """Each of ``partitions`` counters may count ahead its even share of one more
    micro-batch's ``budget`` (what the next one takes from it when all have messages), in its
    share of :data:`MAX_AHEAD_ENTRIES` entries.

    Not the whole budget each: while a micro-batch is counted, every counter's thread reads
    at once, and one reading far ahead would slow the others down, whose messages this
    micro-batch needs now."""
    share = max(partitions, 1)
    return Ahead(max(-(-budget // share), 1), max(MAX_AHEAD_ENTRIES // share, 1))


class MessageCounter:
    """Walks (start, last] of one partition, handing out message counts on request."""

    def __init__(
        self,
        lookup: Lookup,
        topic: str,
        start: MessageId,
        last: MessageId,
        poll_timeout: float,
        *,
        ahead: Ahead | None = None,
        sized: bool = False,
    ) -> None:
        self.position = start
        self._sized = sized
        self._topic = topic
        counted = ReadRange(topic, start, last, start_inclusive=False)
        self._bounds = counted.bounds()
        self._request_timeout = lookup.timeout
        self._poll_timeout = poll_timeout
        self._reader = RangeReader(
            lookup,
            counted,
            ReaderSettings(poll_timeout=poll_timeout, request_timeout=lookup.timeout),
        )
        self._ahead = ahead
        self._feed: Lookahead[_Held] | Direct[_Held] | None = None
        self._held: _Held | None = None  # an entry partly handed out
        self.exhausted = False
        # Messages in the batched entry ``position`` lies inside; None on a whole entry.
        self.batch_size: int | None = None

    def take(self, wanted: int) -> int:
        """Advance over up to ``wanted`` messages; return how many it advanced over."""
        taken = 0
        while taken < wanted:
            held = self._peek()
            if held is None:
                break
            use = min(len(held[1]), wanted - taken)
            self._advance(held, use)
            taken += use
        return taken

    def next_size(self) -> int | None:
        """The payload bytes of the next message (None when there is none). Only for a
        counter made ``sized``."""
        held = self._peek()
        if held is None:
            return None
        assert held[4] is not None, "a counter made without sized=True counts no bytes"
        return int(held[4][0])

    def take_bytes(self, allowance: int, wanted: int | None = None) -> tuple[int, int]:
        """Advance over the messages whose payload bytes add up to at most ``allowance``, and
        over at most ``wanted`` of them (None: any number); return how many bytes and how many
        messages it advanced over. Only for a counter made ``sized``."""
        taken = messages = 0
        while wanted is None or messages < wanted:
            held = self._peek()
            if held is None:
                break
            sizes = held[4]
            assert sizes is not None, "a counter made without sized=True counts no bytes"
            totals = np.cumsum(sizes)
            use = int(np.searchsorted(totals, allowance - taken, side="right"))
            if wanted is not None:
                use = min(use, wanted - messages)
            if use == 0:
                break
            self._advance(held, use)
            taken += int(totals[use - 1])
            messages += use
        return taken, messages

    def _peek(self) -> _Held | None:
        """The entry the next message is in, received if need be (None: no more)."""
        if self._held is None and not self.exhausted:
            self._held = self._next_entry()
            self.exhausted = self._held is None
        return self._held

    def _advance(self, held: _Held, use: int) -> None:
        """Hand out the first ``use`` messages left in ``held``."""
        entry_id, indexes, reaches_entry_end, size, sizes = held
        rest = indexes[use:]
        rest_sizes = None if sizes is None else sizes[use:]
        self._held = (entry_id, rest, reaches_entry_end, size, rest_sizes) if rest else None
        # Having consumed a batch to its end is recorded as the whole entry (-1).
        last_index = -1 if not rest and reaches_entry_end else indexes[use - 1]
        self.position = MessageId(
            entry_id.ledger_id, entry_id.entry_id, last_index, entry_id.partition
        )
        self.batch_size = size if last_index >= 0 else None

    def count_ahead(self, ahead: bool) -> None:
        """With an :class:`Ahead`: let the thread receive up to its bound beyond what was
        handed out (between micro-batches), or only a little (while one is counted, so that
        the partitions it needs now share the broker with little else)."""
        if isinstance(self._feed, Lookahead) and self._ahead is not None:
            self._feed.set_limit(self._ahead.messages if ahead else self._while_counting())

    def _while_counting(self) -> int:
        assert self._ahead is not None
        return min(self._ahead.messages, WHILE_COUNTING)

    def resumes(self, start: MessageId, last: MessageId) -> bool:
        """Whether this counter stands at ``start`` of the same range, so that counting the
        next micro-batch can go on from here (with what it already received) instead of
        subscribing again."""
        return (
            not self.exhausted
            and self.position.last_key() == start.last_key()
            and self._bounds[1] == last.last_key()
        )

    def close(self) -> None:
        """Stop reading (and the thread reading ahead, waiting for it a bounded time)."""
        if self._feed is not None:
            self._feed.close(self._request_timeout)

    def __del__(self) -> None:
        # A counter dropped unclosed lets its thread end (no lock taken: see Lookahead).
        feed = getattr(self, "_feed", None)
        if isinstance(feed, Lookahead):
            feed.stop_soon()

    def _next_entry(self) -> _Held | None:
        if self._feed is None:
            self._feed = self._open_feed()
        return self._feed.next()

    def _open_feed(self) -> Lookahead[_Held] | Direct[_Held]:
        # Not a bound method: the thread must not keep the counter alive (see __del__).
        entries = functools.partial(
            _countable_entries, self._reader, *self._bounds, sized=self._sized
        )
        if self._ahead is None:
            return Direct(entries)
        return Lookahead(
            entries,
            _message_count,
            limit=self._while_counting(),  # until the count is done (see count_ahead)
            max_items=self._ahead.entries,
            # the reader's own limits end a silent read first; this only guards the thread
            patience=self._poll_timeout + 3 * self._request_timeout,
            name=f"pulsar-count-{self._topic}",
        )


def _countable_entries(
    reader: RangeReader, first: Key, last: Key, stopped: Stopped, *, sized: bool = False
) -> Generator[_Held, None, None]:
    """The entries of ``reader`` holding messages, each with its countable indexes.

    The bounds are the range's own: entries arrive in order and a counter's position only
    ever lies in one already handed out, so the start filters the same entries as the
    position would (whichever thread reads them, and however far ahead)."""
    with contextlib.closing(reader.entries(stopped=stopped)) as entries:
        for raw in entries:
            indexes = countable(raw, first, last)
            if indexes:
                ledger, entry = raw.entry
                partition = raw.message.message_id.partition
                reaches_end = indexes[-1] in (-1, raw.message_count - 1)
                entry_id = MessageId(ledger, entry, -1, partition)
                sizes = _sizes_of(raw, indexes) if sized else None
                yield entry_id, indexes, reaches_end, raw.message_count, sizes


def _sizes_of(raw: RawEntry, indexes: range) -> Sizes:
    """The payload bytes of the messages at ``indexes`` of ``raw``."""
    sizes = payload_sizes(raw)
    if indexes.start < 0:
        return sizes
    return sizes[indexes.start : indexes.stop]


def payload_sizes(raw: RawEntry) -> Sizes:
    """The payload bytes of each message of an entry, by batch index (one for an unbatched
    message; for a chunked one, its whole value's)."""
    metadata = raw.section.metadata
    if not is_batch(metadata):
        if metadata.HasField("uncompressed_size"):
            size = metadata.uncompressed_size
        elif is_chunk(metadata):
            size = metadata.total_chunk_msg_size
        else:
            size = len(raw.section.payload)
        return np.array([size], dtype=np.int64)
    count = metadata.num_messages_in_batch
    if is_encrypted(metadata):
        # The sizes inside an encrypted batch are not known here: its size shared evenly.
        return np.full(count, metadata.uncompressed_size // max(count, 1), dtype=np.int64)
    data = decompress(metadata.compression, raw.section.payload, metadata.uncompressed_size)
    fields = scan_batch(data, count, 0) if count >= SCAN_MIN_MESSAGES else None
    if fields is None:
        fields = walk_batch(data, count, 0)
    return np.asarray(fields.value_length, dtype=np.int64)


def _message_count(held: _Held) -> int:
    return len(held[1])


def countable(raw: RawEntry, first: Key, last: Key) -> range:
    """Batch indexes of this entry with keys in [first, last] (-1 alone for an unbatched
    message), by the range reader's own rule; none for markers and chunks before a message's
    last."""
    metadata = raw.section.metadata
    if metadata.HasField("marker_type"):
        return range(0)
    if is_chunk(metadata) and metadata.chunk_id != metadata.num_chunks_from_msg - 1:
        return range(0)
    count = raw.message_count if is_batch(metadata) else None
    return kept_indexes(raw.entry, count, first, last)


class ByteCountable(Protocol[P_co]):
    """What :func:`limit_byte_ends` shares a budget of bytes over."""

    @property
    def position(self) -> P_co: ...

    def next_size(self) -> int | None: ...

    def take_bytes(self, allowance: int, wanted: int | None = None) -> tuple[int, int]: ...


def limit_byte_ends(
    counters: Mapping[str, ByteCountable[T]], budget: int, messages: int | None = None
) -> dict[str, T]:
    """Share ``budget`` payload bytes, and at most ``messages`` messages when given, among
    partitions; return each one's end position.

    Every partition with a message takes its first one whatever its size, so that a stream
    always progresses, even past a message larger than the budget. Then, in rounds, each
    partition whose next message still fits in what is left takes messages up to an even share
    of it (or its next message, when that is larger than the share), until no next message
    fits: the micro-batch holds at most ``budget`` bytes beyond those first messages. With
    ``messages``, each of those takes (the first messages included) is also held to an even
    share of the messages left, at least one, and they stop when none is left: whichever
    budget runs out first ends the micro-batch."""
    remaining, left = budget, messages
    for counter in counters.values():
        first = counter.next_size()
        if first is not None and (left is None or left > 0):
            took = counter.take_bytes(first, None if left is None else 1)
            remaining, left = _took(took, remaining, left)
    while left is None or left > 0:
        active = [c for c in counters.values() if _fits(c.next_size(), remaining)]
        if not active:
            break
        share = remaining // len(active)
        count_share = None if left is None else max(1, left // len(active))
        for counter in active:
            size = counter.next_size()
            if size is None or size > remaining or (left is not None and left <= 0):
                continue
            wanted = None if left is None or count_share is None else min(count_share, left)
            took = counter.take_bytes(min(max(share, size), remaining), wanted)
            remaining, left = _took(took, remaining, left)
    return {name: counter.position for name, counter in counters.items()}


def _took(took: tuple[int, int], remaining: int, left: int | None) -> tuple[int, int | None]:
    """The bytes and messages left once ``took`` (bytes, messages) is taken from them."""
    size, count = took
    return remaining - size, None if left is None else left - count


def _fits(size: int | None, remaining: int) -> bool:
    return size is not None and size <= remaining


OpenCounter = Callable[[str, MessageId, MessageId], MessageCounter]
"""Opens a counter over (start, last] of the named partition."""


class KeptCounters:
    """The driver's message counters, kept between micro-batches: the next one usually starts
    where the last ended, and goes on counting from there."""

    def __init__(self, open_counter: OpenCounter) -> None:
        self._open = open_counter
        self._counters: dict[str, MessageCounter] = {}

    def ends(
        self,
        starts: Mapping[str, MessageId],
        available: Mapping[str, MessageId],
        messages: int | None,
        size: int | None = None,
    ) -> dict[str, MessageId]:
        """End positions after at most ``messages`` messages past ``starts`` and, with
        ``size``, at most that many payload bytes (see :func:`limit_byte_ends`; the counters
        must have been opened ``sized``). At least one of the two is given.

        A counter that already stands at a partition's start (it ended the previous
        micro-batch there, and the range's end has not moved) goes on from where it is, with
        the entries it has received since; any other is replaced by a new one. Counters are
        kept for the next micro-batch and all dropped on any error. Counters with an
        :class:`Ahead` receive ahead only once the ends are found.
        """
        counters = {
            name: self._counter(name, starts[name], available[name])
            for name in starts
            if has_messages_after(starts[name], available[name])
        }
        self._keep(counters)
        try:
            for counter in counters.values():
                counter.count_ahead(False)
            if size is not None:
                ends = limit_byte_ends(counters, size, messages)
            else:
                assert messages is not None, "a micro-batch is limited in messages or bytes"
                ends = limit_ends(counters, messages)
        except BaseException:
            self.close()
            raise
        for counter in counters.values():
            counter.count_ahead(True)
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
