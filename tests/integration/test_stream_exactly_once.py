"""``spark.readStream.format("pulsar")`` into a file sink, stopped, replayed and restarted while
the official client publishes: every message lands exactly once.

Offsets name, per partition, the last message consumed (see :mod:`pulsar_spark.source.offsets`),
so each micro-batch reads ``(start, end]`` and a restarted query resumes right after the last
committed end; a micro-batch run again reads the same messages.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support.streaming import (
    QUERY_TIMEOUT,
    BackgroundPublisher,
    Streams,
    as_messages,
    by_partition,
    checkpoint_offsets,
    drain,
    ends_of,
    to_parquet,
)
from support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_exactly_once_across_restarts_while_publishing(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """A parquet query is stopped and started again four times (processing-time and
    AvailableNow runs) while the official client publishes batches of keyed messages to three
    partitions; once, the last micro-batch is made to look as if the query died after writing
    it but before committing it, so the next run reads that batch again from its logged
    offsets. A final AvailableNow run after publishing stops drains the rest. The output holds
    every published message exactly once, and each partition's messages in publish order.

    Spark's file sink records which files each batch committed, so a batch read twice must
    produce the same messages for the output to be exact: that is what this checks of the
    source.
    """
    topic = pooled_partitioned_topic(3)
    out, checkpoint = streams.folder / "out", streams.checkpoint
    limit = 300
    # batch id -> input rows, per run; a replayed batch appears in two runs
    runs: list[dict[int, int]] = []

    def start(**trigger: Any) -> StreamingQuery:
        df = streams.stream(topic, startingOffsets="earliest", maxMessagesPerTrigger=str(limit))
        return to_parquet(df, out, checkpoint, **trigger)

    def finish(query: StreamingQuery) -> None:
        assert query.exception() is None
        runs.append({p.batchId: p.numInputRows for p in query.recentProgress})

    def run_for_a_while() -> None:
        query = start(processingTime="200 milliseconds")
        wait_until(
            lambda: any(p.numInputRows > 0 for p in query.recentProgress),
            "a micro-batch with data",
            QUERY_TIMEOUT,
        )
        query.stop()
        finish(query)

    def run_available_now() -> None:
        query = start(availableNow=True)
        drain(query)
        finish(query)

    with uncompacted_sink_log(streams.spark):
        with BackgroundPublisher(streams.client, topic) as publisher:
            run_for_a_while()
            run_available_now()
            replayed = forget_last_batch(checkpoint, out)
            run_for_a_while()
            run_for_a_while()
            sent = publisher.stop()
        run_available_now()
        got = as_messages(streams.spark.read.parquet(str(out)))

    assert {m.partition for m in sent} == {0, 1, 2}
    assert {m.batch for m in sent} > {0, 1}  # batched
    assert got == sorted(sent)  # every message once, every field as published
    # within a partition, message-id order is publish order
    for partition, messages in by_partition(got).items():
        published = [m.value for m in sent if m.partition == partition]
        assert [m.value for m in messages] == published
    # the forgotten batch ran again, with the same messages
    assert runs[1][replayed] > 0
    assert runs[2][replayed] == runs[1][replayed]
    sizes = [n for run in runs for n in run.values()]
    assert max(sizes) <= limit
    offsets = checkpoint_offsets(checkpoint)
    assert json.loads(offsets[max(offsets)]) == ends_of(sent)


@contextlib.contextmanager
def uncompacted_sink_log(spark: SparkSession) -> Iterator[None]:
    """File sinks started (and read) inside keep one log file per batch (no ``N.compact``
    files standing for all batches up to N), so one batch's record can be removed."""
    conf = "spark.sql.streaming.fileSink.log.compactInterval"
    before = spark.conf.get(conf, None)
    spark.conf.set(conf, "1000")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(conf)
        else:
            spark.conf.set(conf, before)


def forget_last_batch(checkpoint: Path, out: Path) -> int:
    """Make the last micro-batch of a query that ended cleanly look planned but never
    written, as a query killed in between leaves it: remove its commit and the file sink's
    record of its files (the files stay, unlisted). Return its id."""
    batches = [
        {int(p.name) for p in directory.iterdir() if p.name.isdigit()}
        for directory in (checkpoint / "offsets", checkpoint / "commits", out / "_spark_metadata")
    ]
    batch = max(batches[0])
    assert batch == max(batches[1]) == max(batches[2])
    sink_log = out / "_spark_metadata"
    for directory in (checkpoint / "commits", sink_log):
        for name in (str(batch), f".{batch}.crc"):
            (directory / name).unlink(missing_ok=True)
    return batch
