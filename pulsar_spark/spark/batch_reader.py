"""``spark.read.format("pulsar")``: plan one task per non-empty topic-partition range, or
more with ``minPartitions``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.common.bounds import Earliest
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import consumed_before
from pulsar_spark.source.planning import (
    PartitionRead,
    PartitionRef,
    first_published,
    last_message_id,
    make_lookup,
    partition_read,
    resolve_partitions,
)
from pulsar_spark.source.positions import AtTime, PositionSpec, Specific, TimesByPartition
from pulsar_spark.source.read_options import ReadOptions
from pulsar_spark.source.reading import read_partition
from pulsar_spark.source.splitting import split_reads
from pulsar_spark.spark.partitions import as_partitions, planned_read


class PulsarBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        lookup = make_lookup(self.options.client)

        def plan() -> list[PartitionRead]:
            refs = resolve_partitions(lookup, self.options.topics)
            for spec in (self.options.starting, self.options.ending):
                if isinstance(spec, TimesByPartition):
                    spec.check_covers(refs)
            reads = [self._plan(lookup, ref) for ref in refs]
            planned = [r for r in reads if r is not None]
            return split_reads(planned, self.options.min_partitions)

        return as_partitions(
            lookup.retrying(plan, "planning the read (partitions and last message ids)")
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        read = planned_read(partition)
        if read is None:
            return iter(())  # Spark's placeholder when every range is empty
        return read_partition(read)

    def _plan(self, lookup: Lookup, ref: PartitionRef) -> PartitionRead | None:
        last = last_message_id(lookup, ref)
        if last is None:
            return None
        start = self._start(lookup, ref, last)
        if start is None:
            return None
        end = self._end(lookup, ref, last)
        if end.last_key() < start.first_key():
            return None
        return partition_read(
            self.options,
            ref,
            start,
            end,
            start_inclusive=True,
            min_publish_time=_time(self.options.starting, ref),
            max_publish_time=_time(self.options.ending, ref),
        )

    def _start(self, lookup: Lookup, ref: PartitionRef, last: MessageId) -> MessageId | None:
        """The first position to read (inclusive); None when nothing is left to read."""
        spec = self.options.starting
        millis = _time(spec, ref)
        if millis is not None:
            return first_published(lookup, ref, last, millis, self.options.poll_timeout)
        if isinstance(spec, Specific):
            value = spec.for_partition(ref.name, ref.topic)
            if isinstance(value, MessageId):
                return value.with_partition(ref.partition)
        assert isinstance(spec, (Earliest, Specific))  # latest is refused for batch reads
        return MessageId.earliest()

    def _end(self, lookup: Lookup, ref: PartitionRef, last: MessageId) -> MessageId:
        """The last position to read (inclusive)."""
        spec = self.options.ending
        millis = _time(spec, ref)
        if millis is not None:
            found = first_published(lookup, ref, last, millis, self.options.poll_timeout)
            return last if found is None else consumed_before(found)
        if isinstance(spec, Specific):
            value = spec.for_partition(ref.name, ref.topic)
            if isinstance(value, MessageId):
                return min(value, last).with_partition(ref.partition)
        return last


def _time(spec: PositionSpec, ref: PartitionRef) -> int | None:
    """The publish time ``spec`` gives for ``ref``, if it is a time."""
    if isinstance(spec, TimesByPartition):
        return spec.millis(ref)
    return spec.millis if isinstance(spec, AtTime) else None
