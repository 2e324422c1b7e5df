"""``spark.read.format("pulsar")``: plan one task per non-empty topic-partition range."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.message_id import MessageId
from pulsar_spark.spark.planning import (
    PartitionRead,
    PartitionRef,
    last_message_id,
    make_lookup,
    partition_read,
    resolve_partitions,
)
from pulsar_spark.spark.positions import AtTime, Earliest, PositionSpec, Specific
from pulsar_spark.spark.read_options import ReadOptions
from pulsar_spark.spark.reading import read_partition


class PulsarBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        lookup = make_lookup(self.options.client)

        def plan() -> list[PartitionRead]:
            refs = resolve_partitions(lookup, self.options.topics)
            reads = [self._plan(lookup, ref) for ref in refs]
            return [r for r in reads if r is not None]

        return lookup.retrying(plan, "planning the read (partitions and last message ids)")

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, PartitionRead):
            return iter(())  # Spark's placeholder when every range is empty
        return read_partition(partition)

    def _plan(self, lookup: Lookup, ref: PartitionRef) -> PartitionRead | None:
        last = last_message_id(lookup, ref)
        if last is None:
            return None
        start, start_inclusive = _start(self.options.starting, ref)
        end = _end(self.options.ending, ref, last)
        return partition_read(
            self.options,
            ref,
            start,
            end,
            start_inclusive=start_inclusive,
            min_publish_time=_time(self.options.starting),
            max_publish_time=_time(self.options.ending),
        )


def _start(spec: PositionSpec, ref: PartitionRef) -> tuple[MessageId, bool]:
    if isinstance(spec, Specific):
        value = spec.for_partition(ref.name, ref.topic)
        if isinstance(value, MessageId):
            return value.with_partition(ref.partition), True
    assert isinstance(spec, (Earliest, AtTime, Specific))  # latest is refused for batch reads
    return MessageId.earliest(), True


def _end(spec: PositionSpec, ref: PartitionRef, last: MessageId) -> MessageId:
    if isinstance(spec, Specific):
        value = spec.for_partition(ref.name, ref.topic)
        if isinstance(value, MessageId):
            return min(value, last).with_partition(ref.partition)
    return last


def _time(spec: PositionSpec) -> int | None:
    return spec.millis if isinstance(spec, AtTime) else None
