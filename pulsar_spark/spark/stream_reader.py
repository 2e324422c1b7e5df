"""``spark.readStream.format("pulsar")``: micro-batches over checkpointed message ids.

Offsets are described in :mod:`pulsar_spark.spark.offsets`: per partition, the last message
read; each micro-batch reads ``(start, end]``. The driver object lives for the whole query in
one process and keeps its connections; it only ever *computes* positions. ``read`` runs on
executors on a fresh copy of this object and uses nothing but its InputPartition, so results
depend on checkpointed offsets alone — never on ``commit`` (which Spark calls late) or ``stop``
(which Spark may never call).

A partition that vanished, or that no longer reaches the checkpointed position (deleted and
re-created, say), is data loss: the query fails unless ``failOnDataLoss=false``. Then a warning
is logged and the partition starts over through the offsets themselves: the micro-batch that
notices ends it at "nothing consumed", the next one reads it from its first message. A task
whose start position no longer exists (retention removed its ledger: the first entry delivered
lies in a later ledger) is data loss too; with ``failOnDataLoss=false`` it warns and reads what
is left of its range.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings, ReadRange
from pulsar_spark.errors import DataLossError, PulsarSparkError
from pulsar_spark.message_id import MessageId
from pulsar_spark.spark.counting import MessageCounter, limit_ends
from pulsar_spark.spark.offsets import (
    NOTHING_CONSUMED,
    PulsarOffset,
    consumed_before,
    has_messages_after,
)
from pulsar_spark.spark.planning import (
    PartitionRead,
    PartitionRef,
    last_message_id,
    make_lookup,
    resolve_partitions,
)
from pulsar_spark.spark.positions import AtTime, Earliest, Latest, PositionSpec, Specific
from pulsar_spark.spark.read_options import ReadOptions
from pulsar_spark.spark.reading import read_partition

log = logging.getLogger(__name__)

T = TypeVar("T")


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._lookup: Lookup | None = None
        self._refs: dict[str, PartitionRef] = {}
        self._available_now: dict[str, MessageId | None] | None = None
        self._latest: dict[str, Any] | None = None
        self._initial: dict[str, Any] | None = None
        # The driver's message counters, kept between micro-batches: the next one usually
        # starts where the last ended, and goes on counting from there (see ``_limited``).
        self._counters: dict[str, MessageCounter] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only: read() is stateless by design.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # --- driver ----------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where the query starts, resolved once: Spark asks twice (the first answer starts
        the range of the first ``latestOffset``, the second that of its micro-batch), and a
        ``latest`` that moved in between would skip the messages published meanwhile."""
        if self._initial is None:
            self._initial = self._retrying(self._resolve_initial, "finding the start offsets")
        return self._initial

    def _resolve_initial(self) -> dict[str, Any]:
        lookup = self._connect()
        spec = self.options.starting
        positions = {}
        for ref in self._discover(lookup):
            positions[ref.name] = self._initial_position(lookup, ref, spec)
        return PulsarOffset(positions).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        def last_ids() -> dict[str, MessageId | None]:
            lookup = self._connect()
            return {ref.name: last_message_id(lookup, ref) for ref in self._discover(lookup)}

        self._available_now = self._retrying(last_ids, "finding where AvailableNow stops")

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch. A lost broker connection (a broker restarting,
        say) is retried, with growing pauses, for up to ``pulsar.client.operationTimeoutMs``
        without progress, so a restart between micro-batches fails no batch."""

        def attempt() -> dict[str, Any]:
            try:
                return self._latest_offset(start, limit)
            except PulsarSparkError:
                self._close_counters({})
                raise

        return self._retrying(attempt, "finding the end of the next micro-batch")

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = PulsarOffset.from_json(start), PulsarOffset.from_json(end)
        reads = []
        for name in sorted(finish.positions):
            first, last = begin.get(name), finish.positions[name]
            if not has_messages_after(first, last):
                continue
            reads.append(
                PartitionRead(
                    client=self.options.client,
                    ref=self._refs.get(name) or _ref_from_name(name),
                    start=first,
                    start_inclusive=False,
                    end=last,
                    end_inclusive=True,
                    poll_timeout=self.options.poll_timeout,
                    queue_size=self.options.receiver_queue_size,
                )
            )
        return reads

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the broker."""

    def stop(self) -> None:
        """Close the driver's counters (connections belong to the process-wide pool). Spark
        may never call this; nothing depends on it."""
        self._close_counters({})

    # --- executors -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, PartitionRead)

        def start_gone(first: MessageId) -> None:
            self._data_loss(
                f"partition {partition.ref.name} was read up to {partition.start}, which no "
                f"longer exists (removed by retention, or the topic was re-created); the first "
                f"message left is in {first}"
            )

        return read_partition(partition, start_gone)

    # --- helpers ---------------------------------------------------------------------------

    def _retrying(self, operation: Callable[[], T], what: str) -> T:
        return self._connect().retrying(operation, what)

    def _connect(self) -> Lookup:
        if self._lookup is None:
            self._lookup = make_lookup(self.options.client)
        return self._lookup

    def _discover(self, lookup: Lookup) -> list[PartitionRef]:
        refs = resolve_partitions(lookup, self.options.topics)
        self._refs = {ref.name: ref for ref in refs}
        return refs

    def _initial_position(self, lookup: Lookup, ref: PartitionRef, spec: PositionSpec) -> MessageId:
        if isinstance(spec, Specific):
            value = spec.for_partition(ref.name, ref.topic)
            if isinstance(value, MessageId):
                return consumed_before(value.with_partition(ref.partition))
            spec = Latest() if value == "latest" else Earliest()
        if isinstance(spec, Latest):
            return last_message_id(lookup, ref) or NOTHING_CONSUMED
        if isinstance(spec, AtTime):
            return self._before_time(lookup, ref, spec.millis)
        return NOTHING_CONSUMED

    def _before_time(self, lookup: Lookup, ref: PartitionRef, millis: int) -> MessageId:
        """The position just before the first entry published at or after ``millis``."""
        last = last_message_id(lookup, ref)
        if last is None:
            return NOTHING_CONSUMED
        reader = RangeReader(
            lookup,
            ReadRange(ref.name, MessageId.earliest(), last),
            ReaderSettings(poll_timeout=self.options.poll_timeout, request_timeout=lookup.timeout),
        )
        entries = reader.entries()
        try:
            for raw in entries:
                if raw.section.metadata.publish_time >= millis:
                    ledger, entry = raw.entry
                    return consumed_before(MessageId(ledger, entry, -1, ref.partition))
        finally:
            entries.close()
        return last

    def _latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        lookup = self._connect()
        begin = PulsarOffset.from_json(start).positions
        refs = self._discover(lookup)
        self._check_vanished(begin, refs)
        starts: dict[str, MessageId] = {}
        available: dict[str, MessageId] = {}
        for ref in refs:
            last = self._last_for_trigger(lookup, ref)
            first = begin.get(ref.name, NOTHING_CONSUMED)
            if self._lost(lookup, ref, first, last):
                # Start over in the offsets themselves: this micro-batch ends the partition at
                # "nothing consumed" (reading nothing of it), the next reads it from the start.
                first = last = NOTHING_CONSUMED
            starts[ref.name] = first
            available[ref.name] = (
                last if last is not None and has_messages_after(first, last) else first
            )
        self._latest = PulsarOffset(available).to_json()
        if isinstance(limit, ReadMaxRows):
            return PulsarOffset(self._limited(lookup, starts, available, limit.max_rows)).to_json()
        return self._latest

    def _last_for_trigger(self, lookup: Lookup, ref: PartitionRef) -> MessageId | None:
        if self._available_now is None:
            return last_message_id(lookup, ref)
        return self._available_now.get(ref.name)

    def _limited(
        self,
        lookup: Lookup,
        starts: dict[str, MessageId],
        available: dict[str, MessageId],
        budget: int,
    ) -> dict[str, MessageId]:
        """End positions after at most ``budget`` messages past ``starts``.

        A counter that already stands at a partition's start (it ended the previous
        micro-batch there, and the range's end has not moved) goes on from where it is, with
        the entries it has received since; any other is replaced by a new one. Counters are
        kept for the next micro-batch and all dropped on any error.
        """
        counters = {
            name: self._counter(lookup, name, starts[name], available[name])
            for name in starts
            if has_messages_after(starts[name], available[name])
        }
        self._close_counters(counters)
        try:
            ends = limit_ends(counters, budget)
        except BaseException:
            self._close_counters({})
            raise
        return {name: ends.get(name, starts[name]) for name in starts}

    def _counter(
        self, lookup: Lookup, name: str, start: MessageId, last: MessageId
    ) -> MessageCounter:
        counter = self._counters.get(name)
        if counter is not None and counter.resumes(start, last):
            return counter
        return MessageCounter(lookup, name, start, last, self.options.poll_timeout)

    def _close_counters(self, keep: dict[str, MessageCounter]) -> None:
        """Close every counter not in ``keep``, which becomes the set kept."""
        for counter in self._counters.values():
            if counter not in keep.values():
                counter.close()
        self._counters = keep

    def _check_vanished(self, begin: Mapping[str, MessageId], refs: list[PartitionRef]) -> None:
        current = {ref.name for ref in refs}
        for name in sorted(set(begin) - current):
            self._data_loss(f"partition {name} no longer exists")

    def _lost(
        self, lookup: Lookup, ref: PartitionRef, first: MessageId, last: MessageId | None
    ) -> bool:
        """Whether the partition no longer holds position ``first`` (reported as data loss).

        Under Trigger.AvailableNow ``last`` is the end recorded when the query started. A start
        can lie beyond it without loss (Spark records the ends before it asks for the initial
        offset, which may be ``latest``), so such a start is checked against the current end.
        """
        if first.is_earliest or not _beyond(first, last):
            return False
        if self._available_now is not None:
            last = last_message_id(lookup, ref)
            if not _beyond(first, last):
                return False
        self._data_loss(
            f"partition {ref.name} was read up to {first} but now ends at "
            f"{last if last is not None else 'nothing (it is empty)'}"
        )
        return True

    def _data_loss(self, what: str) -> None:
        message = (
            f"{what}: data the query expected is gone. Set failOnDataLoss=false to continue "
            "from what exists (the missing messages are skipped)"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(message)
        log.warning(message)


def _beyond(first: MessageId, last: MessageId | None) -> bool:
    """Whether a partition ending at ``last`` (None: empty) ends before position ``first``."""
    return last is None or last.last_key() < first.last_key()


def _ref_from_name(name: str) -> PartitionRef:
    from pulsar_spark.topic import TopicName

    topic = TopicName.parse(name)
    return PartitionRef(topic.base_name, topic.partition_index, name)
