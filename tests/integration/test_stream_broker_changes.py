"""``spark.readStream.format("pulsar")`` across changes on the broker's side: a long silence
with only keep-alive pings, a restart with more partitions, a broker that went away.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadAllAvailable
from support.fake_broker import closed_port
from support.official import firsts_held, official_client, send_one_to_each
from support.streaming import (
    QUERY_TIMEOUT,
    Batches,
    Message,
    Streams,
    as_messages,
    checkpoint_offsets,
    drafts,
    drain,
    driver,
    ends_of,
    processing_time,
    publish,
    stream,
    to_parquet,
)
from support.topics import full, partition_of
from support.waiting import wait_until

from pulsar_spark.client.pool import default_pool
from pulsar_spark.common.address import parse_service_url
from pulsar_spark.errors import BrokerUnreachableError, RetriesExhaustedError
from pulsar_spark.local import LocalBroker
from pulsar_spark.source.offsets import NOTHING_CONSUMED

pytestmark = [pytest.mark.integration, pytest.mark.spark]


# --- an idle query ----------------------------------------------------------------------------


IDLE_SECONDS = 65.0
"""More than two keep-alive intervals (30 s, fixed) of the connector's connections."""


def test_idle_query_receives_messages_after_a_long_silence(
    streams: Streams, topic_name: str
) -> None:
    """A processing-time query with nothing to read for longer than two keep-alive intervals
    of the connector's connections (30 s each, not configurable; the broker pings every 30 s
    too) still reads exactly what is published afterwards.

    Such a query polls the broker every trigger from its driver process, so to also cover a
    connection that carries nothing but pings and pongs for the whole silence (as with a long
    trigger interval), the driver's side of a query is run here as well, in this process: its
    pooled connection must be the very same one after the silence, and still serve reads.
    """
    streams.publish(topic_name, drafts(3, "before"))  # the topic exists, not read (latest)
    batches = Batches()
    query = processing_time(streams.stream(topic_name), batches, "1 second")
    source = streams.driver(topic_name)
    address = parse_service_url(streams.url)[0]
    try:
        start = source.initialOffset()
        connection = default_pool().get(address, source.options.client.connection)
        wait_until(lambda: query.lastProgress is not None, "the first trigger", QUERY_TIMEOUT)
        first = streams.publish(topic_name, drafts(5, "first"))
        wait_until(lambda: len(batches.all()) == 5, "the first messages", QUERY_TIMEOUT)
        seen = dict(batches.by_id)
        time.sleep(IDLE_SECONDS)
        assert query.isActive
        assert query.exception() is None
        assert batches.by_id == seen
        assert not connection.closed
        second = streams.publish(topic_name, drafts(7, "second", first=5))
        wait_until(lambda: len(batches.all()) == 12, "the messages after the silence", 60)
    finally:
        query.stop()
    assert batches.all() == first + second
    assert query.exception() is None

    end = source.latestOffset(start, ReadAllAvailable())
    assert end == ends_of(first + second)
    (work,) = source.partitions(start, end)
    table = pa.Table.from_batches(list(source.read(work)))
    assert table.column("value").to_pylist() == [m.value for m in first + second]
    assert default_pool().get(address, source.options.client.connection) is connection
    assert not connection.closed


# --- partitions added while a query runs ----------------------------------------------------


@pytest.mark.parametrize("subscription", [None, "grows"])
def test_partition_added_mid_stream_is_read_from_its_beginning(
    spark: SparkSession,
    own_broker: Callable[..., LocalBroker],
    tmp_path: Path,
    subscription: str | None,
) -> None:
    """A topic grows from 2 to 3 partitions while a checkpointed query runs: the broker
    restarts with the new count (pulsar-lite reads partition counts only at startup), the
    query rides out the restart and finds the new partition, which is not in its offsets and
    is read from its first message. Then the query is stopped and started again. Nothing is
    read twice or missed. With ``subscriptionName``, the new partition gets the durable
    subscription too, and in the end it stands right after the last message on every one."""
    local = own_broker(data_dir=tmp_path / "broker", partitioned_topics={"grow": 2})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    options = {"subscriptionName": subscription} if subscription else {}

    def start(**trigger: Any) -> StreamingQuery:
        df = stream(spark, local.service_url, "grow", startingOffsets="earliest", **options)
        return to_parquet(df, out, checkpoint, **trigger)

    def publish_to(partitions: list[int], tag: str) -> list[Message]:
        official = official_client(local.service_url)
        sent: list[Message] = []
        for p in partitions:
            batch_size = 4 if p != 1 else 0
            sent += publish(
                official,
                partition_of("grow", p),
                drafts(10 + p, f"{tag}{p}"),
                batch_size=batch_size,
            )
        official.close()
        return sent

    def read_so_far(query: StreamingQuery) -> int:
        return sum(p.numInputRows for p in query.recentProgress)

    before = publish_to([0, 1], "a")
    query = start(processingTime="500 milliseconds")
    wait_until(lambda: read_so_far(query) == len(before), "the first messages", QUERY_TIMEOUT)

    local.restart(partitioned_topics={"grow": 3})
    assert local.partitioned_topics() == {full("grow"): 3}
    after = publish_to([2, 0, 1], "b")
    wait_until(
        lambda: read_so_far(query) == len(before + after),
        "the messages after restart",
        QUERY_TIMEOUT,
    )
    query.stop()
    assert query.exception() is None
    # the first micro-batch that read the new partition started it from nothing consumed
    new = partition_of("grow", 2)
    nothing = NOTHING_CONSUMED.to_json()
    first = next(
        p
        for p in query.recentProgress
        if json.loads(p.sources[0].endOffset).get(new, nothing) != nothing
    )
    assert json.loads(first.sources[0].startOffset).get(new, nothing) == nothing

    later = publish_to([0, 1, 2], "c")
    query = start(availableNow=True)
    drain(query)
    assert [p.numInputRows for p in query.recentProgress] == [len(later)]

    got = as_messages(spark.read.parquet(str(out)))
    assert got == sorted(before + after + later)
    assert [m for m in got if m.partition == 2] == [m for m in after + later if m.partition == 2]
    offsets = checkpoint_offsets(checkpoint)
    assert json.loads(offsets[max(offsets)]) == ends_of(before + after + later)
    if subscription:
        partitions = [partition_of("grow", p) for p in range(3)]
        assert firsts_held(local.service_url, partitions, subscription) == [[]] * 3
        last = send_one_to_each(local.service_url, partitions, "last")
        assert firsts_held(local.service_url, partitions, subscription) == [[v] for v in last]


# --- a broker that went away ----------------------------------------------------------------------


def test_latest_offset_retries_a_lost_broker_until_the_operation_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """latestOffset retries a refused or lost connection, pausing 0.1 s, 0.2 s, ... between
    attempts, for pulsar.client.operationTimeoutMs (a broker restart takes a second or two);
    a broker that stays away fails the trigger after that, saying what was tried."""
    port = closed_port()
    reader = driver(
        f"pulsar://127.0.0.1:{port}", "t", **{"pulsar.client.operationTimeoutMs": "1000"}
    )
    started = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="pulsar_spark.common.retry"),
        pytest.raises(RetriesExhaustedError) as info,
    ):
        reader.latestOffset({full("t"): NOTHING_CONSUMED.to_json()}, ReadAllAvailable())
    elapsed = time.monotonic() - started
    message = str(info.value)
    assert message.startswith("finding the end of the next micro-batch: gave up after ")
    assert "(pulsar.client.operationTimeoutMs is 1s); last error: cannot connect to Pulsar " in (
        message
    )
    assert isinstance(info.value.__cause__, BrokerUnreachableError)
    assert f"cannot connect to Pulsar broker at 127.0.0.1:{port}" in str(info.value.__cause__)
    assert 1.0 <= elapsed < 10, elapsed
    pauses = [r.getMessage().split(" after: ")[0] for r in caplog.records]
    # attempts at about 0, 0.1, 0.3, 0.7 and 1.5 s: four pauses (three on a stalled machine)
    what = "finding the end of the next micro-batch: retrying in"
    expected = [f"{what} {pause:.2f}s" for pause in (0.1, 0.2, 0.4, 0.8)]
    assert len(pauses) in (3, 4)
    assert pauses == expected[: len(pauses)]
