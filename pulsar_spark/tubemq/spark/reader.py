"""``spark.read.format("tubemq")`` and ``spark.readStream.format("tubemq")``.

How this works
--------------
The driver asks the master for the topic's partitions and each broker for every partition's
first and end offsets (:mod:`pulsar_spark.tubemq.client`), and plans one Spark task per
partition with a non-empty range ``[start, end)``. A task opens its own broker connection,
registers on its partition at ``start`` and yields one Arrow record batch per GetMessage
reply, the last one cut at ``end`` (:func:`~pulsar_spark.tubemq.client.consumer.read_range`,
exact also while messages are being written). Tasks use nothing but their :class:`TubeRead`:
Spark runs ``read`` on a fresh copy of the reader.

With ``minPartitions``, ranges are cut into more tasks by the rule the ``pulsar`` source uses
(:mod:`pulsar_spark.common.task_shares`), counted in index entries (28 bytes each, the store's
messages, all partitions of the store together): each piece is a range ``[cut_k, cut_k+1)``
read exactly as a whole partition is, so the pieces hold each message of the range once. The
broker keeps one registration and one offset per group and partition, so the pieces of a
partition read under groups of their own: ``consumerGroup`` for the first, with ``_piece<k>``
appended for the k-th after it.

With ``filterConds``, each task registers with the message types and keeps, of what the
broker returns, the messages whose ``$msgType$`` is one of them (see
:mod:`pulsar_spark.tubemq.client.consumer`).

A stream's offsets are :class:`~pulsar_spark.tubemq.spark.offsets.TubeMQOffset` (next offset
to read, per partition). A micro-batch ends where each partition ended when it was planned;
under Trigger.AvailableNow, where they ended when the query started; with
``maxMessagesPerTrigger``, where :mod:`.limits` cuts each store. A partition that vanished,
whose end moved back (a broker that lost what it held in memory), or whose checkpointed
offset the store no longer holds is lost data (``failOnDataLoss``). Planning and reads retry
for ``retryTimeoutMs`` while the master or broker is out of reach.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pulsar_spark.common.bounds import Earliest, Latest
from pulsar_spark.common.data_loss import DataLossPolicy
from pulsar_spark.common.retry import retrying
from pulsar_spark.common.task_shares import even_cuts, task_shares
from pulsar_spark.common.worker_gc import freeze_worker_objects
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.tubemq.arrow import messages_to_batch
from pulsar_spark.tubemq.client.cluster import TubePartition, by_broker, connect, lookup_partitions
from pulsar_spark.tubemq.client.connection import NO_SECURITY, TubeMQSecurity
from pulsar_spark.tubemq.client.consumer import (
    INDEX_ENTRY_SIZE,
    RETRY_OPTION,
    Batch,
    Bounds,
    offset_bounds,
    read_range,
)
from pulsar_spark.tubemq.spark.limits import limited_ends
from pulsar_spark.tubemq.spark.offsets import TubeMQOffset
from pulsar_spark.tubemq.spark.options import (
    ENDING_OFFSETS,
    STARTING_OFFSETS,
    OffsetSpec,
    PerPartition,
    TubeMQReadOptions,
)
from pulsar_spark.tubemq.wire.messages import of_types


@dataclass(frozen=True)
class TubeRead(InputPartition):
    """One task: read ``partition`` from ``start`` (inclusive) to ``end`` (exclusive)."""

    partition: TubePartition
    start: int
    end: int
    group: str
    timeout: float
    fail_on_data_loss: bool
    retry_for: float
    check_start: bool = True
    filters: tuple[str, ...] = ()
    security: TubeMQSecurity = NO_SECURITY

    @property
    def client(self) -> str:
        """The task's client id: stable, so a retried task takes over its registration."""
        return f"{self.group}-{self.partition.broker.broker_id}-{self.partition.partition_id}"


def task(
    options: TubeMQReadOptions, partition: TubePartition, start: int, end: int, *, check_start: bool
) -> TubeRead:
    """The task that reads ``partition`` over ``[start, end)``; ``check_start`` reports a
    start the store no longer holds as lost data."""
    return TubeRead(
        partition,
        start,
        end,
        options.group,
        options.timeout,
        options.fail_on_data_loss,
        options.retry_for,
        check_start,
        options.filters,
        options.security,
    )


def split_reads(reads: Sequence[TubeRead], min_partitions: int | None) -> list[TubeRead]:
    """``reads`` cut into at least ``min_partitions`` pieces where the index entries allow
    (see the module docstring)."""
    entries = [(read.end - read.start) // INDEX_ENTRY_SIZE for read in reads]
    pieces: list[TubeRead] = []
    for read, count, share in zip(
        reads, entries, task_shares(entries, min_partitions), strict=True
    ):
        cuts = [read.start + INDEX_ENTRY_SIZE * cut for cut in even_cuts(0, count, share)]
        bounds = itertools.pairwise([read.start, *cuts, read.end])
        pieces += [
            dataclasses.replace(
                read, start=start, end=end, group=read.group if k == 0 else f"{read.group}_piece{k}"
            )
            for k, (start, end) in enumerate(bounds)
        ]
    return pieces


def read_partition(read: TubeRead) -> Iterator[pa.RecordBatch]:
    """The rows of ``read``, a record batch per reply; the request for a later reply is on
    its way while Spark takes the rows of one (see :func:`read_range`)."""
    freeze_worker_objects()
    policy = DataLossPolicy(read.fail_on_data_loss)

    def moved(first: int) -> None:
        if read.check_start:
            policy.report(
                f"partition {read.partition.key} was to be read from offset {read.start}, "
                f"which the store no longer holds (its first offset is {first})"
            )

    batches = read_range(
        read.partition,
        read.group,
        read.client,
        read.start,
        read.end,
        timeout=read.timeout,
        on_start_moved=moved,
        retry_for=read.retry_for,
        filters=read.filters,
        security=read.security,
    )
    with contextlib.closing(batches):
        for batch in batches:
            yield from _rows(read, batch)


def _rows(read: TubeRead, batch: Batch) -> Iterator[pa.RecordBatch]:
    """The record batch of one reply's messages (of the read's types, with filters)."""
    offsets = batch.message_offsets()
    if offsets is None:
        offsets = np.full(len(batch.messages), batch.offset, dtype=np.int64)
    messages = batch.messages
    if read.filters:
        kept = of_types(messages, read.filters)
        offsets, messages = offsets[kept], messages.take(kept)
    if messages:
        yield messages_to_batch(read.partition.topic, read.partition.key, offsets, messages)


def current_bounds(options: TubeMQReadOptions) -> dict[str, tuple[TubePartition, Bounds]]:
    """Every partition of the topic with its first and end offsets now; retried while the
    master or a broker is out of reach, for up to ``retryTimeoutMs`` without progress."""
    return retrying(
        lambda: _bounds_now(options),
        what=f"finding the partitions of {options.topic} and their offsets",
        timeout=options.retry_for,
        option=RETRY_OPTION,
    )


def _bounds_now(options: TubeMQReadOptions) -> dict[str, tuple[TubePartition, Bounds]]:
    partitions = lookup_partitions(
        options.masters, options.topic, timeout=options.timeout, security=options.security
    )
    group, client = f"{options.group}_bounds", f"{options.group}-bounds"
    found = {}
    for indexes in by_broker(partitions):
        with connect(partitions[indexes[0]], options.timeout, options.security) as conn:
            for partition in (partitions[i] for i in indexes):
                bounds = offset_bounds(conn, partition, group, client, timeout=options.timeout)
                found[partition.key] = (partition, bounds)
    return found


def _resolve(spec: OffsetSpec, key: str, bounds: Bounds, option: str) -> int:
    value = spec.for_partition(key) if isinstance(spec, PerPartition) else spec
    if isinstance(value, Earliest):
        return bounds.first
    if isinstance(value, Latest):
        return bounds.end
    if value > bounds.end:
        raise ConfigurationError(
            f"option {option!r}: offset {value} of partition {key} is past its end ({bounds.end})"
        )
    return value


def _check_named(spec: OffsetSpec, known: dict[str, Any], option: str) -> None:
    if isinstance(spec, PerPartition):
        for key, _ in spec.offsets:
            if key not in known:
                raise ConfigurationError(
                    f"option {option!r}: the topic has no partition {key!r}; its partitions "
                    f"are {', '.join(sorted(known))}"
                )


class TubeMQBatchReader(DataSourceReader):
    def __init__(self, options: TubeMQReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        found = current_bounds(options)
        _check_named(options.starting, found, STARTING_OFFSETS)
        _check_named(options.ending, found, ENDING_OFFSETS)
        reads = []
        for key in sorted(found):
            partition, bounds = found[key]
            start = _resolve(options.starting, key, bounds, STARTING_OFFSETS)
            end = _resolve(options.ending, key, bounds, ENDING_OFFSETS)
            if start < end:
                reads.append(task(options, partition, start, end, check_start=True))
        return split_reads(reads, options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TubeRead):
            return iter(())  # Spark's placeholder when every range is empty
        return read_partition(partition)


class TubeMQStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: TubeMQReadOptions) -> None:
        self.options = options
        self._policy = DataLossPolicy(options.fail_on_data_loss)
        self._partitions: dict[str, TubePartition] = {}
        self._firsts: dict[str, int] = {}
        self._initial: dict[str, Any] | None = None
        self._available_now: dict[str, int] | None = None
        self._latest: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options}  # read() uses its InputPartition only

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # --- driver ----------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where the query starts, resolved once (Spark asks twice)."""
        if self._initial is None:
            found = self._bounds()
            _check_named(self.options.starting, found, STARTING_OFFSETS)
            positions = {
                key: _resolve(self.options.starting, key, bounds, STARTING_OFFSETS)
                for key, (_, bounds) in found.items()
            }
            self._initial = TubeMQOffset(positions).to_json()
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_messages_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {key: b.end for key, (_, b) in self._bounds().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = TubeMQOffset.from_json(start).positions
        found = self._bounds()
        self._policy.check_vanished(begin, found)
        starts, ends = {}, {}
        for key, (_, bounds) in found.items():
            end = bounds.end
            if self._available_now is not None:
                end = min(end, self._available_now.get(key, bounds.first))
            first = begin.get(key, bounds.first)
            if first > bounds.end:
                self._policy.report(
                    f"partition {key} was read up to offset {first} but now ends at {bounds.end}"
                )
                first = bounds.first
            starts[key], ends[key] = first, max(end, first)
        if isinstance(limit, ReadMaxRows):
            stores = {key: partition.store for key, (partition, _) in found.items()}
            ends = limited_ends(starts, ends, stores, limit.max_rows)
        self._latest = TubeMQOffset({k: b.end for k, (_, b) in found.items()}).to_json()
        return TubeMQOffset(ends).to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = TubeMQOffset.from_json(start).positions
        finish = TubeMQOffset.from_json(end).positions
        if any(key not in self._partitions for key in finish):
            self._bounds()  # a restarted query replays a batch before asking for offsets
        reads = []
        for key in sorted(finish):
            partition = self._partitions.get(key)
            if partition is None:
                continue  # vanished (reported when the batch was planned)
            first = begin.get(key)
            last = finish[key]
            if first is None or first > last:
                # A partition that appeared, or whose store went back (reported as lost data
                # when the batch was planned): from its first offset on.
                first = self._firsts.get(key, 0)
                if first < last:
                    reads.append(task(self.options, partition, first, last, check_start=False))
            elif first < last:
                reads.append(task(self.options, partition, first, last, check_start=True))
        return split_reads(reads, self.options.min_partitions)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in the broker."""

    # --- executors -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, TubeRead)
        return read_partition(partition)

    # --- helpers ---------------------------------------------------------------------------

    def _bounds(self) -> dict[str, tuple[TubePartition, Bounds]]:
        found = current_bounds(self.options)
        self._partitions = {key: partition for key, (partition, _) in found.items()}
        self._firsts = {key: bounds.first for key, (_, bounds) in found.items()}
        return found
