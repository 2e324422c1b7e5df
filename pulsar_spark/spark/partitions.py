"""The Spark partitions of a read: each carries one :class:`PartitionRead` to the executor task
that reads it (PySpark pickles the partition; the plan itself knows nothing of Spark)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql.datasource import InputPartition

from pulsar_spark.source.planning import PartitionRead


def as_partitions(reads: Sequence[PartitionRead]) -> list[InputPartition]:
    """One Spark partition per read, in order."""
    return [InputPartition(read) for read in reads]


def planned_read(partition: InputPartition) -> PartitionRead | None:
    """The read ``partition`` carries; None for the placeholder Spark hands a task when the
    plan has no partitions."""
    read = getattr(partition, "value", None)
    return read if isinstance(read, PartitionRead) else None
