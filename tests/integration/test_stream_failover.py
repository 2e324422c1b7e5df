"""A stream that fails over: reading ``c1`` of a pair of geo-replicated Apache clusters of its
own (``geo_pair``: this test kills ``c1``), with a replicated subscription and
``failover.secondaryServiceUrls`` naming ``c2``.

``c1`` is SIGKILLed mid-stream; the stream goes on on ``c2`` from the replicated
subscription's position; every message (produced on ``c1`` before the kill, and on ``c2``
after it) lands in the Parquet sink, and the only duplicates are the copies on ``c2`` after
that position. The query restarted after the failover resumes on ``c2``. A task given a range
of ``c1`` once ``c1`` is gone (a micro-batch planned before the kill) reads exactly that range
from the copies on ``c2``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming import StreamingQuery
from support.geo_fixtures import (
    GeoClusters,
    geo_pair,
    held_on,
    publish_in_bursts,
    with_replicated_subscription,
)
from support.official import official_client
from support.streaming import (
    QUERY_TIMEOUT,
    Message,
    drafts,
    driver,
    publish,
    stream,
)
from support.streaming import to_parquet as start_to_parquet
from support.waiting import wait_until

from pulsar_spark.common.address import cluster_name
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.planning import PartitionRef, partition_read

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.apache]

SUBSCRIPTION = "spark-failover"
FAILOVER_DELAY_MS = 3000
TASK_SUBSCRIPTION = "tasks"
TASK_TIMEOUT_MS = 2000
TASK_FAILOVER_DELAY_MS = 1000


def failover_stream(
    spark: SparkSession, geo: GeoClusters, topic: str, out: Path, **switch_back: str
) -> StreamingQuery:
    """The stream under test, from ``c1`` (failing over to ``c2``) into Parquet files."""
    df = stream(
        spark,
        geo.c1.service_url,
        topic,
        startingOffsets="earliest",
        subscriptionName=SUBSCRIPTION,
        replicateSubscriptionState="true",
        **{
            "failover.secondaryServiceUrls": geo.c2.service_url,
            "failover.failoverDelayMs": str(FAILOVER_DELAY_MS),
            "failover.checkIntervalMs": "250",
            "pulsar.client.operationTimeoutMs": "10000",
            **switch_back,
        },
    )
    return start_to_parquet(df, out / "rows", out / "checkpoint", processingTime="500 milliseconds")


def sunk(spark: SparkSession, out: Path) -> list[tuple[bytes, str | None]]:
    """(value, replicatedFrom) of every row in the sink."""
    if not (out / "rows" / "_spark_metadata").exists():
        return []
    rows = spark.read.schema("value binary, replicatedFrom string").parquet(str(out / "rows"))
    return [(bytes(r[0]), r[1]) for r in rows.collect()]


def wait_for_sink(
    spark: SparkSession, query: StreamingQuery, out: Path, wanted: set[bytes], what: str
) -> None:
    """Wait, while ``query`` runs, until the sink holds exactly the values ``wanted``."""
    wait_until(
        lambda: alive(query) and {value for value, _ in sunk(spark, out)} == wanted,
        what,
        QUERY_TIMEOUT,
    )


def alive(query: StreamingQuery) -> bool:
    """True while ``query`` runs; its error once it has stopped (so a wait fails at once)."""
    assert query.isActive, f"the query stopped: {query.exception()}"
    return True


def for_tasks(
    spark: SparkSession, geo: GeoClusters, topic: str
) -> tuple[list[Message], list[Message]]:
    """``topic`` with a replicated subscription on both clusters, 12 messages unbatched and
    12 in batches of 4 written on ``c1`` (2 written on ``c2`` between them): the originals, and
    their copies as ``c2`` holds them."""
    for broker in (geo.c1, geo.c2):
        with_replicated_subscription(broker, topic, TASK_SUBSCRIPTION)
    originals = publish_in_bursts(geo.c1, topic, 3, 4)
    client = official_client(geo.c2.service_url)
    try:
        publish(client, topic, drafts(2, "local"))
    finally:
        client.close()
    originals += publish_in_bursts(geo.c1, topic, 3, 4, batch_size=4, first=12)
    held = held_on(spark, geo.c2, topic, len(originals) + 2)
    return originals, [m for m in held if not m.value.startswith(b"local-")]


def task_rows(geo: GeoClusters, topic: str, after: Message, last: Message) -> list[Message]:
    """What a stream's task given ``(after, last]`` on ``c1`` reads (``c1`` being gone)."""
    reader = driver(
        geo.c1.service_url,
        topic,
        subscriptionName=TASK_SUBSCRIPTION,
        replicateSubscriptionState="true",
        **{
            "failover.secondaryServiceUrls": geo.c2.service_url,
            "failover.failoverDelayMs": str(TASK_FAILOVER_DELAY_MS),
            "failover.checkIntervalMs": "250",
            "pulsar.client.operationTimeoutMs": str(TASK_TIMEOUT_MS),
        },
    )
    work = partition_read(
        reader.options,
        PartitionRef(topic, -1, topic),
        MessageId(after.ledger, after.entry, after.batch),
        MessageId(last.ledger, last.entry, last.batch),
        start_inclusive=False,
    )
    rows = pa.Table.from_batches(list(reader.read(InputPartition(work)))).to_pylist()
    assert {row["replicatedFrom"] for row in rows} == {"c1"}
    return [
        Message(
            partition=row["partition"],
            ledger=row["messageId"]["ledgerId"],
            entry=row["messageId"]["entryId"],
            batch=row["messageId"]["batchIndex"],
            topic=row["topic"],
            key=None if row["key"] is None else bytes(row["key"]).decode(),
            value=bytes(row["value"]),
            properties=tuple(sorted(row["properties"])),
            producer=row["producerName"],
        )
        for row in rows
    ]


def switch_progress(query: StreamingQuery) -> tuple[dict[str, object], dict[str, object]]:
    """(startOffset, endOffset) of the micro-batch that changed clusters."""
    found = switches(query)
    assert found, "no micro-batch changed clusters"
    return found[0]


def switches(query: StreamingQuery) -> list[tuple[dict[str, object], dict[str, object]]]:
    """(startOffset, endOffset) of each micro-batch that changed clusters."""
    found = []
    for progress in query.recentProgress:
        source = progress.sources[0]
        start, end = json.loads(source.startOffset or "null") or {}, json.loads(source.endOffset)
        if start and start.get("cluster") != end.get("cluster"):
            found.append((start, end))
    return found


def test_stream_fails_over_to_c2_and_resumes_there(
    spark: SparkSession, topic_name: str, tmp_path: Path
) -> None:
    """40 messages on c1, all read and replicated to c2 when c1 is killed, between
    micro-batches (c2's subscription may still be a snapshot behind: duplicates); 10
    messages then produced on c2."""
    with geo_pair() as geo:
        c1, c2 = geo.c1, geo.c2
        topic = geo.topic(topic_name)
        c1.admin("PUT", topic.replace("persistent://", "/admin/v2/persistent/"))
        before = publish_in_bursts(c1, topic, 2, 10)
        held_on(spark, geo.c2, topic, len(before))  # the topic exists on c2 when the query starts
        query = failover_stream(spark, geo, topic, tmp_path)
        try:
            wait_until(
                lambda: alive(query) and len(sunk(spark, tmp_path)) == 20,
                "the first 20 rows",
                QUERY_TIMEOUT,
            )
            before += publish_in_bursts(c1, topic, 2, 10, first=20)
            wait_until(
                lambda: alive(query) and len(sunk(spark, tmp_path)) == 40, "40 rows", QUERY_TIMEOUT
            )
            copies = held_on(spark, geo.c2, topic, len(before))
            tasks_topic = geo.topic(f"{topic_name}-tasks")
            originals, task_copies = for_tasks(spark, geo, tasks_topic)

            c1.kill()
            killed = time.monotonic()
            client = official_client(c2.service_url)
            try:
                after = publish(client, topic, drafts(10, "c2"))
            finally:
                client.close()
            wait_until(
                lambda: (
                    alive(query)
                    and any(
                        replicated == "c1" or value.startswith(b"c2-")
                        for value, replicated in sunk(spark, tmp_path)
                    )
                ),
                "a row from c2",
                QUERY_TIMEOUT,
            )
            failover_seconds = time.monotonic() - killed
            wanted = {m.value for m in before + after}
            wait_for_sink(spark, query, tmp_path, wanted, "every message in the sink")
            start, end = switch_progress(query)
        finally:
            query.stop()

        assert "cluster" not in start
        assert end["cluster"] == cluster_name(c2.service_url)
        resumed = end[topic]
        assert isinstance(resumed, dict)
        through = (resumed["ledgerId"], resumed["entryId"])
        again = [c.value for c in copies if (c.ledger, c.entry) > through]
        counts = Counter(value for value, _ in sunk(spark, tmp_path))
        duplicates = sorted(value for value, n in counts.items() if n > 1)
        assert duplicates == sorted(again)
        assert set(counts.values()) <= {1, 2}
        assert sorted(counts) == sorted(wanted)
        print(
            f"failover: first row from c2 {failover_seconds:.1f} s after the kill "
            f"(failover delay {FAILOVER_DELAY_MS / 1000:g} s); {len(duplicates)} duplicate(s) "
            f"of {len(before)} messages read on c1"
        )

        # Micro-batches planned on c1 before the kill: unbatched messages through the middle
        # of a batch (c2's own messages lie between them), and from inside a batch on.
        assert [m.value for m in originals] == [m.value for m in task_copies]
        began = time.monotonic()
        assert task_rows(geo, tasks_topic, originals[3], originals[17]) == task_copies[4:18]
        task_seconds = time.monotonic() - began
        assert task_rows(geo, tasks_topic, originals[13], originals[23]) == task_copies[14:24]
        print(f"a task whose cluster is gone read the copies on c2 after {task_seconds:.1f} s")

        client = official_client(c2.service_url)
        try:
            later = publish(client, topic, drafts(5, "later"))
        finally:
            client.close()
        query = failover_stream(spark, geo, topic, tmp_path)
        try:
            wanted |= {m.value for m in later}
            wait_for_sink(
                spark, query, tmp_path, wanted, "the messages published after the restart"
            )
        finally:
            query.stop()
        counts_after = Counter(value for value, _ in sunk(spark, tmp_path))
        assert counts_after == counts + Counter(m.value for m in later)
        ends = [json.loads(p.sources[0].endOffset) for p in query.recentProgress]
        assert {e.get("cluster") for e in ends} == {cluster_name(c2.service_url)}

        # c1 is back: with failover.switchBackDelayMs the stream returns to it.
        c1.restart(kill=True)
        query = failover_stream(
            spark, geo, topic, tmp_path, **{"failover.switchBackDelayMs": "2000"}
        )
        try:
            wait_until(lambda: alive(query) and switches(query), "the switch back", QUERY_TIMEOUT)
            home = publish_in_bursts(c1, topic, 1, 5, first=1000)
            wanted |= {m.value for m in home}
            wait_for_sink(
                spark, query, tmp_path, wanted, "the messages published on c1 after the switch back"
            )
        finally:
            query.stop()
        ((start, end),) = switches(query)
        assert (start["cluster"], end.get("cluster")) == (cluster_name(c2.service_url), None)
        counts_back = Counter(value for value, _ in sunk(spark, tmp_path))
        again = counts_back - counts_after - Counter(m.value for m in home)
        assert set(again) <= wanted
        print(f"switch back to c1: {sum(again.values())} message(s) read again")
