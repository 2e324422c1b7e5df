"""Reading a geo-replicated topic: two Apache clusters, ``c1`` and ``c2``, replicating one
namespace (``geo_clusters``).

Messages written on ``c1`` (by our writer and by the official client) are read on ``c2`` as
copies with ``replicatedFrom`` = ``c1``; the snapshot markers the brokers write into such a
topic (every ``SNAPSHOT_MS`` while it has a replicated subscription and new messages) are
never rows, never counted by ``maxMessagesPerTrigger`` and never an offset, on either
cluster; and a stream's durable subscription with ``replicateSubscriptionState`` moves on
``c2`` as the stream commits on ``c1``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from support.geo_fixtures import (
    SNAPSHOT_MS,
    GeoClusters,
    publish_in_bursts,
    with_replicated_subscription,
)
from support.streaming import Batches, Message, as_messages, read_available_now
from support.waiting import wait_until
from support.written import write

from pulsar_spark.local import ApacheBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.apache]

SOURCE_POSITION = "__MSG_PROP_REPL_SOURCE_POSITION"
"""The property Apache adds to a replicated copy: ``ledger:entry`` of the original."""

REPLICATION_TIMEOUT = 60.0


def read(spark: SparkSession, broker: ApacheBroker, topic: str) -> DataFrame:
    """``spark.read.format("pulsar")`` of all of ``topic`` on ``broker``."""
    return (
        spark.read.format("pulsar")
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .load()
    )


def replicated(spark: SparkSession, broker: ApacheBroker, topic: str, count: int) -> DataFrame:
    """``topic`` on ``broker`` once it holds ``count`` messages."""
    wait_until(
        lambda: read(spark, broker, topic).count() >= count,
        f"{count} messages replicated to {topic}",
        REPLICATION_TIMEOUT,
    )
    return read(spark, broker, topic)


def marker_entries(geo: GeoClusters, broker: ApacheBroker, messages: list[Message]) -> int:
    """Entries of the topic on ``broker`` that hold none of ``messages`` (read there)."""
    topic = messages[0].topic
    entries = geo.internal_stats(broker, topic)["numberOfEntries"]
    assert isinstance(entries, int)
    return entries - len({(m.ledger, m.entry) for m in messages})


def copy_of(original: Message, copy: Message) -> Message:
    """``original`` as ``c2`` holds it: ``copy``'s id and, unbatched, the property naming its
    source (the broker adds it to the entry's metadata; a batched message's properties are
    its own, inside the batch)."""
    batched = original.batch >= 0
    source = () if batched else ((SOURCE_POSITION, f"{original.ledger}:{original.entry}"),)
    return dataclasses.replace(
        original,
        ledger=copy.ledger,
        entry=copy.entry,
        batch=copy.batch,
        properties=tuple(sorted(original.properties + source)),
    )


def test_messages_written_on_c1_are_read_on_c2(
    spark: SparkSession, geo_clusters: GeoClusters, topic_name: str
) -> None:
    """30 messages from the official client (unbatched and in batches of 4, in bursts with
    snapshots between them) and 12 from our writer, on ``c1``: a batch read on ``c1`` gives
    exactly them, with no ``replicatedFrom``; one on ``c2`` gives exactly their copies, in
    order, each with ``replicatedFrom`` = ``c1`` and (unbatched) the id of its original in
    its properties. Both topics hold marker entries besides the messages; none is a row."""
    c1, c2 = geo_clusters.c1, geo_clusters.c2
    topic = geo_clusters.topic(topic_name)
    with_replicated_subscription(c1, topic, "holder")
    sent = publish_in_bursts(c1, topic, 2, 10) + publish_in_bursts(c1, topic, 1, 10, batch_size=4)
    ours = spark.createDataFrame(
        [(f"key-{i}", f"ours-{i}".encode(), {"i": str(i), "by": "ours"}) for i in range(12)],
        "key string, value binary, properties map<string,string>",
    )
    write(ours, c1, topic=topic)

    on_c1 = read(spark, c1, topic)
    originals = as_messages(on_c1)
    assert originals[:30] == sent
    written = sorted((m.key, m.value, dict(m.properties)) for m in originals[30:])
    assert written == sorted(
        (f"key-{i}", f"ours-{i}".encode(), {"i": str(i), "by": "ours"}) for i in range(12)
    )
    assert [r[0] for r in on_c1.select("replicatedFrom").collect()] == [None] * 42

    on_c2 = replicated(spark, c2, topic, 42)
    copies = as_messages(on_c2)
    assert len(copies) == 42
    assert copies == [copy_of(o, c) for o, c in zip(originals, copies, strict=True)]
    assert [r[0] for r in on_c2.select("replicatedFrom").collect()] == ["c1"] * 42

    assert marker_entries(geo_clusters, c1, originals) > 0
    assert marker_entries(geo_clusters, c2, copies) > 0


def test_markers_are_neither_counted_nor_offsets(
    spark: SparkSession, geo_clusters: GeoClusters, topic_name: str, tmp_path: Path
) -> None:
    """40 messages in 5 bursts with markers between them, streamed with
    maxMessagesPerTrigger=7 on each cluster: micro-batches of exactly 7, 7, 7, 7, 7 and 5
    messages, each ending at the offset of its last message (never a marker's), together
    exactly the messages, in order."""
    c1, c2 = geo_clusters.c1, geo_clusters.c2
    topic = geo_clusters.topic(topic_name)
    with_replicated_subscription(c1, topic, "holder")
    sent = publish_in_bursts(c1, topic, 5, 8)
    copies = as_messages(replicated(spark, c2, topic, 40))
    for broker, messages in ((c1, sent), (c2, copies)):
        assert marker_entries(geo_clusters, broker, messages) > 0
        batches = Batches()
        query = read_available_now(
            spark,
            broker.service_url,
            topic,
            batches,
            tmp_path / broker.config["clusterName"],
            startingOffsets="earliest",
            maxMessagesPerTrigger="7",
        )
        assert batches.sizes() == [7, 7, 7, 7, 7, 5]
        assert batches.all() == messages
        ends = [json.loads(p.sources[0].endOffset) for p in query.recentProgress]
        assert ends == [{topic: messages[i].position()} for i in (6, 13, 20, 27, 34, 39)]


def mark_delete(geo: GeoClusters, broker: ApacheBroker, topic: str, name: str) -> tuple[int, int]:
    """(ledger, entry) through which subscription ``name`` of ``topic`` on ``broker`` is
    acknowledged without gaps."""
    cursors = geo.internal_stats(broker, topic)["cursors"]
    assert isinstance(cursors, dict)
    ledger, entry = cursors[name]["markDeletePosition"].split(":")
    return int(ledger), int(entry)


def still_held(geo: GeoClusters, broker: ApacheBroker, name: str, messages: list[Message]) -> int:
    """How many of ``messages`` (read on ``broker``) subscription ``name`` still holds."""
    through = mark_delete(geo, broker, messages[0].topic, name)
    return sum((m.ledger, m.entry) > through for m in messages)


def test_replicated_subscription_follows_on_c2(
    spark: SparkSession, geo_clusters: GeoClusters, topic_name: str, tmp_path: Path
) -> None:
    """A stream on ``c1`` with subscriptionName and replicateSubscriptionState=true, run
    (AvailableNow) after each of three bursts of 10 messages: its subscription on ``c1`` is a
    replicated one, and the subscription of the same name on ``c2`` follows each commit
    within a few snapshot periods. After each run, ``c2``'s holds at most the burst just
    committed (its position moves at snapshot granularity: it may stop at the snapshot taken
    before that burst), and by the end of the next run none of the bursts before."""
    c1, c2 = geo_clusters.c1, geo_clusters.c2
    topic = geo_clusters.topic(topic_name)
    name = "spark-geo"
    c1.admin("PUT", topic.replace("persistent://", "/admin/v2/persistent/"))
    with_replicated_subscription(c2, topic, name)  # Apache moves an existing one only
    sent: list[Message] = []
    held: list[int] = []
    for burst in range(3):
        sent += publish_in_bursts(c1, topic, 1, 10, first=10 * burst)
        batches = Batches()
        read_available_now(
            spark,
            c1.service_url,
            topic,
            batches,
            tmp_path / "checkpoint",
            startingOffsets="earliest",
            subscriptionName=name,
            replicateSubscriptionState="true",
        )
        assert batches.all() == sent[-10:]
        assert still_held(geo_clusters, c1, name, sent) == 0
        copies = as_messages(replicated(spark, c2, topic, len(sent)))
        wait_until(
            lambda copies=copies: still_held(geo_clusters, c2, name, copies) <= 10,
            f"{name} on c2 past the bursts before burst {burst}",
            timeout=20 * SNAPSHOT_MS / 1000,
        )
        held.append(still_held(geo_clusters, c2, name, copies))
    stats = geo_clusters.stats(c1, topic)["subscriptions"]
    assert isinstance(stats, dict)
    assert stats[name]["isReplicated"] is True
    print(f"messages {name} still held on c2 after each run: {held}")
