"""Spark's ceiling for a Python source: a data source that does no I/O and no decoding.

``spark.read.format("ceiling")`` yields, per partition, prebuilt Arrow record batches of the
connector's schema (:data:`~pulsar_spark.arrow.schema.ARROW_SCHEMA`) and of the same size the
connector yields (up to 65,536 rows or 32 MiB of values), until the partition's row count is
reached. The batch is built once per Python worker and kept (Spark reuses its workers, so a
warm-up run builds it), which leaves only what Spark itself costs a Python source: moving Arrow
batches from the worker into the JVM. No real source can be faster; ``bench_read`` reports the
connector as a share of it. Like the connector, it freezes what a worker holds at its first
task and planning call (:mod:`pulsar_spark.common.worker_gc`), so the collection PySpark runs
after each is as cheap for it: a source that does so is faster, and a ceiling must not be beaten.

Options: ``counts`` (rows per partition, comma-separated), ``size`` (value bytes), ``keyed``
(``true``: a key and two properties per row, like :class:`common.Shape`), ``work_ns`` (CPU time
to spend per row before each batch is yielded, in a loop that touches no data; default 0).
With ``work_ns`` set to what a real source's Python workers spend per row, it reads as fast as
that source could if it cost nothing else: no broker sharing the cores, no memory traffic.

``df.write.format("ceiling")`` is the same for a Python sink: it takes any rows and drops
each Arrow record batch as it arrives, which leaves what Spark costs a Python sink, moving the
rows from the JVM into the worker as Arrow; ``bench_write`` reports the connector's writes as a
share of it.

``spark.readStream.format("ceiling")`` reads the same rows as a stream, with
``maxMessagesPerTrigger`` (each micro-batch takes an even share of the limit from every
partition, up to its rows left; equal partitions, as the benchmarks use, so split it as the
connector does) and ``Trigger.AvailableNow``: what Spark itself costs a streaming query of a
Python source, per query and per micro-batch.

With ``rate`` (rows per second over all partitions) the stream is a live one instead: from its
first ``latestOffset`` on, row ``n`` (row ``n // partitions`` of partition ``n % partitions``)
becomes available ``n / rate`` seconds later, until ``counts`` rows of each partition have. Each
row's value starts with its ``n`` and the instant it became available (microseconds since the
epoch) as two little-endian int64s, as ``bench_latency``'s producer writes them, and that
instant is also its ``publishTime``: the latency a streaming query adds to a source that costs
nothing.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from pulsar_spark.arrow.decode import DEFAULT_MAX_BYTES, DEFAULT_MAX_ROWS
from pulsar_spark.arrow.schema import ARROW_SCHEMA, SCHEMA_DDL
from pulsar_spark.common.worker_gc import freeze_worker_objects

_BUILT: dict[tuple[int, bool, int], pa.RecordBatch] = {}


class CeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "ceiling"

    def schema(self) -> str:
        freeze_worker_objects()
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        freeze_worker_objects()
        return CeilingReader(
            [int(c) for c in self.options["counts"].split(",")],
            int(self.options["size"]),
            self.options.get("keyed", "false") == "true",
            int(self.options.get("work_ns", "0")),
        )

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        reader = self.reader(schema)
        if "rate" in self.options:
            return LiveCeilingStreamReader(reader, float(self.options["rate"]))
        limit = self.options.get("maxMessagesPerTrigger")
        return CeilingStreamReader(reader, None if limit is None else int(limit))

    def writer(self, schema: Any, overwrite: bool) -> DataSourceWriter:
        return CeilingWriter()


class CeilingWriter(DataSourceArrowWriter):
    """Drops every record batch: no encoding, no I/O."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        freeze_worker_objects()
        for _ in iterator:
            pass
        return WriterCommitMessage()


class CeilingPartition(InputPartition):  # type: ignore[misc]
    def __init__(self, index: int, rows: int) -> None:
        super().__init__(index)
        self.index = index
        self.rows = rows


class CeilingReader(DataSourceReader):
    def __init__(self, counts: list[int], size: int, keyed: bool, work_ns: int = 0) -> None:
        self.counts = counts
        self.size = size
        self.keyed = keyed
        self.work_ns = work_ns

    def partitions(self) -> list[InputPartition]:
        return [CeilingPartition(i, rows) for i, rows in enumerate(self.counts)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, CeilingPartition)
        freeze_worker_objects()
        rows_per_batch = max(1, min(DEFAULT_MAX_ROWS, DEFAULT_MAX_BYTES // self.size))
        batch = prebuilt(rows_per_batch, self.keyed, self.size, partition.index)
        left = partition.rows
        while left > 0:
            rows = min(left, len(batch))
            _spend(self.work_ns * rows)
            yield batch if rows == len(batch) else batch.slice(0, rows)
            left -= rows


class CeilingStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The batch reader's rows as a stream; offsets are the rows read from each partition."""

    def __init__(self, batch: CeilingReader, limit: int | None) -> None:
        self.batch = batch
        self.limit = limit

    def initialOffset(self) -> dict[str, Any]:
        return {"rows": [0] * len(self.batch.counts)}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable() if self.limit is None else ReadMaxRows(self.limit)

    def prepareForTriggerAvailableNow(self) -> None:
        pass  # the rows are fixed: all of them are available now

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        counts = self.batch.counts
        if not isinstance(limit, ReadMaxRows):
            return {"rows": list(counts)}
        share = max(1, limit.max_rows // len(counts))
        done = start["rows"]
        return {"rows": [min(n, d + share) for n, d in zip(counts, done, strict=True)]}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        spans = enumerate(zip(start["rows"], end["rows"], strict=True))
        return [CeilingPartition(i, last - first) for i, (first, last) in spans if last > first]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.batch.read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass


class LivePartition(InputPartition):  # type: ignore[misc]
    """Rows ``first`` to ``last`` (exclusive) of partition ``index`` of a live stream."""

    def __init__(self, index: int, first: int, last: int, clock: tuple[float, float, int]) -> None:
        super().__init__(index)
        self.index = index
        self.first = first
        self.last = last
        self.clock = clock  # the stream's start (epoch seconds), rate, partitions


class LiveCeilingStreamReader(DataSourceStreamReader):
    """The ceiling's rows, each available at its instant (see the module's ``rate``)."""

    def __init__(self, batch: CeilingReader, rate: float) -> None:
        self.batch = batch
        self.rate = rate
        self.start: float | None = None

    def initialOffset(self) -> dict[str, Any]:
        return {"rows": [0] * len(self.batch.counts)}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        now = time.time()
        if self.start is None:
            self.start = now
        counts = self.batch.counts
        available = int((now - self.start) * self.rate)
        return {
            "rows": [
                min(n, max(0, available - p + len(counts) - 1) // len(counts))
                for p, n in enumerate(counts)
            ]
        }

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        assert self.start is not None
        clock = (self.start, self.rate, len(self.batch.counts))
        spans = enumerate(zip(start["rows"], end["rows"], strict=True))
        return [LivePartition(i, first, last, clock) for i, (first, last) in spans if last > first]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, LivePartition)
        freeze_worker_objects()
        size = self.batch.size
        rows_per_batch = max(1, min(DEFAULT_MAX_ROWS, DEFAULT_MAX_BYTES // size))
        batch = prebuilt(rows_per_batch, self.batch.keyed, size, partition.index)
        start, rate, partitions = partition.clock
        for first in range(partition.first, partition.last, rows_per_batch):
            rows = min(rows_per_batch, partition.last - first)
            numbers = np.arange(first, first + rows, dtype=np.int64) * partitions + partition.index
            micros = ((start + numbers / rate) * 1e6).astype(np.int64)
            yield _stamped(batch.slice(0, rows), numbers, micros, size)

    def commit(self, end: dict[str, Any]) -> None:
        pass


STAMP = struct.Struct("<qq")
"""A live row's value starts with its number and its instant in microseconds."""


def _stamped(
    batch: pa.RecordBatch, numbers: np.ndarray, micros: np.ndarray, size: int
) -> pa.RecordBatch:
    """``batch`` with its values and publish times those of the rows ``numbers``."""
    rows = len(numbers)
    data = np.zeros((rows, max(size, STAMP.size)), dtype=np.uint8)
    data[:, : STAMP.size] = np.stack([numbers, micros], axis=1).view(np.uint8)
    width = data.shape[1]
    offsets = pa.py_buffer(np.arange(0, (rows + 1) * width, width, dtype=np.int32).tobytes())
    values = pa.Array.from_buffers(pa.binary(), rows, [None, offsets, pa.py_buffer(data)])
    columns = dict(zip(batch.schema.names, batch.columns, strict=True))
    columns["value"] = values
    columns["publishTime"] = pa.array(micros).cast(batch.schema.field("publishTime").type)
    return pa.RecordBatch.from_arrays(list(columns.values()), schema=batch.schema)


def _spend(nanoseconds: int) -> None:
    """Keep this thread busy for ``nanoseconds`` of its own CPU time."""
    if nanoseconds <= 0:
        return
    stop = time.thread_time_ns() + nanoseconds
    while time.thread_time_ns() < stop:
        pass


def prebuilt(rows: int, keyed: bool, size: int, partition: int) -> pa.RecordBatch:
    """The batch a worker yields over and over, built on first use."""
    key = (rows, keyed, size)
    if key not in _BUILT:
        _BUILT[key] = _build(rows, keyed, size, partition)
    return _BUILT[key]


def _build(rows: int, keyed: bool, size: int, partition: int) -> pa.RecordBatch:
    timestamp = 1_700_000_000_000_000
    values = [os.urandom(size) for _ in range(rows)]
    keys = [f"user-{n % 10_000}".encode() for n in range(rows)] if keyed else [None] * rows
    sources = ("web", "mobile", "batch", "partner")
    properties = (
        [[("source", sources[n % 4]), ("trace-id", str(uuid.uuid4()))] for n in range(rows)]
        if keyed
        else [[] for _ in range(rows)]
    )
    return pa.RecordBatch.from_pydict(
        {
            "key": keys,
            "value": values,
            "topic": ["persistent://public/default/ceiling"] * rows,
            "partition": [partition] * rows,
            "messageId": [
                {"ledgerId": 10, "entryId": n // 1000, "batchIndex": n % 1000} for n in range(rows)
            ],
            "publishTime": [timestamp + n for n in range(rows)],
            "eventTime": [None] * rows,
            "properties": properties,
            "producerName": ["producer-1"] * rows,
            "sequenceId": list(range(rows)),
            "replicatedFrom": [None] * rows,
        },
        schema=ARROW_SCHEMA,
    )
