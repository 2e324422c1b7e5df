"""failOnDataLoss in ``spark.readStream.format("pulsar")``: a start beyond a partition's end or in
a ledger retention removed, a partition that vanished, data that was wiped. By default the query
fails naming the loss; with failOnDataLoss=false it goes on from what exists.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from support.broker_proxy import apache_proxy
from support.official import official_client
from support.streaming import (
    QUERY_TIMEOUT,
    Batches,
    Message,
    Streams,
    as_messages,
    available_now,
    checkpoint_offsets,
    drafts,
    drain,
    driver,
    ends_of,
    publish,
    stream,
    to_parquet,
)
from support.topics import full, partition_of

from pulsar_spark.errors import DataLossError
from pulsar_spark.local import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import NOTHING_CONSUMED

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_start_beyond_the_end_is_data_loss(streams: Streams, topic_name: str) -> None:
    """A start position the partition does not reach (here a user's startingOffsets; after a
    topic was deleted and re-created it would be the checkpoint) is data loss: by default the
    query fails naming failOnDataLoss; with failOnDataLoss=false it goes on from what the
    partition holds, from its first message."""
    sent = streams.publish(topic_name, drafts(10, "dl"))
    ledger = sent[0].ledger
    beyond = {topic_name: {"ledgerId": ledger, "entryId": 50, "batchIndex": -1}}
    message, read = strict_then_lenient(streams, topic_name, beyond)
    assert "DataLossError" in message
    assert f"partition {full(topic_name)} was read up to {ledger}:49:-1 but now ends at " in (
        message
    )
    assert f"{ledger}:9:-1: data the query expected is gone" in message
    assert "Set failOnDataLoss=false to continue from what exists" in message
    assert read == sent


def strict_then_lenient(
    streams: Streams, topic: str, start: dict[str, Any]
) -> tuple[str, list[Message]]:
    """Run an AvailableNow query from startingOffsets ``start`` by default, which must fail,
    then with failOnDataLoss=false, which must finish: the first one's error text, and what
    the second one read."""

    def run(name: str, **options: str) -> tuple[StreamingQuery, Batches]:
        batches = Batches()
        query = available_now(
            streams.stream(topic, startingOffsets=json.dumps(start), **options),
            batches,
            streams.folder / name,
        )
        return query, batches

    query, _ = run("strict")
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(QUERY_TIMEOUT)
    query, batches = run("lenient", failOnDataLoss="false")
    drain(query)
    return str(info.value), batches.all()


def test_start_in_a_ledger_retention_removed_is_data_loss(
    streams: Streams, broker: LocalBroker, topic_name: str
) -> None:
    """A start position whose ledger retention removed: Apache Pulsar then delivers from the
    first entry left, in a later ledger (a proxy makes pulsar-lite do the same; the start is a
    user's startingOffsets here, a checkpoint's after a restart). By default the task fails
    naming the partition, the start and the first message left; with failOnDataLoss=false the
    query reads what is left."""
    streams.publish(topic_name + "-earlier", drafts(1, "earlier"))
    sent = streams.publish(topic_name, drafts(10, "rm"))
    ledger = sent[0].ledger
    assert ledger > 0
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.first_ledgers = {full(topic_name): ledger}
    removed = {topic_name: {"ledgerId": ledger - 1, "entryId": 5, "batchIndex": -1}}
    try:
        message, read = strict_then_lenient(streams.through(proxy.url), topic_name, removed)
    finally:
        proxy.close()
    assert "DataLossError" in message
    assert (
        f"partition {full(topic_name)} was read up to {ledger - 1}:4:-1, which no longer "
        "exists (removed by retention, or the topic was re-created); the first message "
        f"left is in {ledger}:0:-1: data the query expected is gone. Set "
        "failOnDataLoss=false to continue from what exists"
    ) in message
    assert read == sent


def test_data_loss_warning_and_offsets_on_the_driver(
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The driver side of the above, called directly. With failOnDataLoss=false the loss is
    logged as a warning and the partition starts over through its offsets: the micro-batch
    that notices ends it at "nothing consumed" and reads nothing of it, the next one reads it
    from its first message. Every range follows from the offsets alone, so replaying a batch
    reads the same messages."""
    sent = publish(client, topic_name, drafts(4, "w"), batch_size=2)
    name, ledger = full(topic_name), sent[0].ledger
    start = {name: {"batchIndex": -1, "entryId": 9, "ledgerId": ledger}}

    loss = (
        f"partition {name} was read up to {ledger}:9:-1 but now ends at {ledger}:1:-1: data "
        "the query expected is gone. Set failOnDataLoss=false to continue from what exists "
        "(the missing messages are skipped)"
    )
    with pytest.raises(DataLossError) as info:
        driver(broker.service_url, topic_name).latestOffset(start, ReadAllAvailable())
    assert str(info.value) == loss

    lenient = driver(broker.service_url, topic_name, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="pulsar_spark.spark.stream_reader"):
        reset = lenient.latestOffset(start, ReadAllAvailable())
    assert [r.getMessage() for r in caplog.records] == [loss]
    nothing = NOTHING_CONSUMED.to_json()
    assert reset == {name: nothing}
    assert lenient.partitions(start, reset) == []
    end = lenient.latestOffset(reset, ReadAllAvailable())
    assert end == {name: sent[-1].position(-1)}
    (partition,) = lenient.partitions(reset, end)
    read = partition.value
    assert (read.start, read.end) == (NOTHING_CONSUMED, MessageId(ledger, 1, -1))
    assert (read.start_inclusive, read.end_inclusive) == (False, True)
    # the same under a limit
    assert lenient.latestOffset(start, ReadMaxRows(3)) == {name: nothing}
    assert lenient.latestOffset(reset, ReadMaxRows(3)) == {name: sent[2].position()}


def test_available_now_start_after_its_recorded_end_is_not_data_loss(
    broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Spark calls prepareForTriggerAvailableNow (which records each partition's end) before
    initialOffset: a start resolved after messages arrived in between (startingOffsets latest)
    lies beyond the recorded end. That is no loss; the run has nothing to read there."""
    publish(client, topic_name, drafts(3, "x"))
    reader = driver(broker.service_url, topic_name)
    reader.prepareForTriggerAvailableNow()
    later = publish(client, topic_name, drafts(2, "y"))
    start = reader.initialOffset()
    assert start == {full(topic_name): later[-1].position(-1)}
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert reader.latestOffset(start, ReadMaxRows(10)) == start
    assert reader.partitions(start, start) == []


def test_vanished_partition_and_wiped_data(
    spark: SparkSession, own_broker: Callable[..., LocalBroker], tmp_path: Path
) -> None:
    """The broker loses its data and comes back with the topic at 2 partitions instead of 3,
    and fewer messages than the checkpoint had read. By default the query fails, naming the
    vanished partition and failOnDataLoss; with failOnDataLoss=false it drops that partition
    and reads the surviving ones from their (new) beginnings."""
    data = tmp_path / "broker"
    local = own_broker(data_dir=data, partitioned_topics={"lossy": 3})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    official = official_client(local.service_url)
    # other topics take the broker's first ledger ids, so after the wipe "lossy" gets lower ones
    for filler in ("filler-a", "filler-b", "filler-c"):
        publish(official, filler, drafts(1, filler))
    before = [
        m
        for p in range(3)
        for m in publish(official, partition_of("lossy", p), drafts(12, f"a{p}"), batch_size=5)
    ]
    official.close()
    assert min(m.ledger for m in before) >= 3

    def run(**options: str) -> StreamingQuery:
        df = stream(spark, local.service_url, "lossy", startingOffsets="earliest", **options)
        return to_parquet(df, out, checkpoint, availableNow=True)

    drain(run())
    assert as_messages(spark.read.parquet(str(out))) == sorted(before)

    local.stop()
    shutil.rmtree(data / "db.rocksdb")
    (data / "db.metadata.json").unlink()
    local = own_broker(data_dir=data, partitioned_topics={"lossy": 2})
    official = official_client(local.service_url)
    after = [
        m for p in range(2) for m in publish(official, partition_of("lossy", p), drafts(3, f"b{p}"))
    ]
    official.close()
    assert max(m.ledger for m in after) < 3

    query = run()
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(QUERY_TIMEOUT)
    message = str(info.value)
    assert "DataLossError" in message
    assert f"partition {partition_of('lossy', 2)} no longer exists" in message
    assert "Set failOnDataLoss=false" in message

    query = run(failOnDataLoss="false")
    drain(query)
    assert as_messages(spark.read.parquet(str(out))) == sorted(before + after)
    offsets = checkpoint_offsets(checkpoint)
    assert json.loads(offsets[max(offsets)]) == ends_of(after)
