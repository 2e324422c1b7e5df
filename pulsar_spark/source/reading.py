"""Executor-side reading shared by batch and streaming: one PartitionRead to record batches."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from pulsar_spark.arrow.decode import record_batches
from pulsar_spark.client.reader import RangeReader, ReaderSettings, StartGone
from pulsar_spark.common.worker_gc import freeze_worker_objects
from pulsar_spark.protocol.crypto import CryptoFailureAction
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.source.planning import PartitionRead, make_lookup
from pulsar_spark.source.value_schemas import value_decoder


def read_partition(
    work: PartitionRead, on_start_gone: StartGone | None = None
) -> Iterator[pa.RecordBatch]:
    """Read exactly the range in ``work`` and yield Arrow batches of the read schema (the fixed
    one, or with ``value`` typed by the topic's schema).

    ``on_start_gone`` is told when the range's start no longer exists (see the range reader).
    """
    freeze_worker_objects()
    lookup = make_lookup(work.client)
    reader = RangeReader(
        lookup,
        ReadRange(
            topic=work.ref.name,
            start=work.start,
            end=work.end,
            start_inclusive=work.start_inclusive,
            end_inclusive=work.end_inclusive,
        ),
        ReaderSettings(
            queue_size=work.queue_size,
            poll_timeout=work.poll_timeout,
            request_timeout=lookup.timeout,
            decryption=work.decryption,
        ),
        on_start_gone,
    )
    entries: Iterable[MessageColumns] = reader
    if work.min_publish_time is not None or work.max_publish_time is not None:
        entries = _published_between(reader, work.min_publish_time, work.max_publish_time)
    values = value_decoder(work.value_schema, work.ref.topic, lookup)
    yield from record_batches(
        entries,
        work.ref.topic,
        work.ref.partition,
        values=values,
        encrypted_column=work.decryption.action is CryptoFailureAction.CONSUME,
    )


def _published_between(
    entries: Iterable[MessageColumns], low: int | None, high: int | None
) -> Iterator[MessageColumns]:
    """The rows whose entry's publish time is in [low, high)."""
    for columns in entries:
        if columns.rows is None:  # one entry: one publish time for every row
            at = columns.entry.publish_time
            if (low is None or at >= low) and (high is None or at < high):
                yield columns
            continue
        published = columns.entry_column("publish_time")
        keep = np.ones(columns.count, dtype=np.bool_)
        if low is not None:
            keep &= published >= low
        if high is not None:
            keep &= published < high
        if keep.all():
            yield columns
        elif keep.any():
            yield columns.take(np.flatnonzero(keep))
