"""``subscriptionName``: a streaming query keeps a durable subscription that each commit moves,
and the checkpoint, not the subscription, still says what each micro-batch reads.

What the subscription holds is checked the way a user would: the official client attaches its
own consumer to the same subscription and lists what the broker delivers to it (without
acknowledging anything), which starts right after the last committed message.

pulsar-lite takes a batch-index ack as an ack of the whole entry, so on it an end inside a
batched entry moves the subscription only through the entry before; what it then holds starts
at that entry's first message. Apache Pulsar takes the batch index: what it holds starts right
after the end.

Apache Pulsar refuses a consumer of another type than the one a subscription has attached: a
Shared consumer looking while the query's Failover consumer acknowledges (or the other way
round) fails with ConsumerBusy. Looks taken while a query runs are therefore taken in
``foreachBatch`` (the driver acknowledges on the same thread, before and after), or through the
admin API's backlog (:func:`holds_nothing`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from support.broker_proxy import apache_proxy
from support.clients import settings_for
from support.official import SUBSCRIPTION, held, official_client
from support.streaming import (
    QUERY_TIMEOUT,
    Batches,
    Message,
    Streams,
    available_now,
    by_partition,
    checkpoint_offsets,
    drafts,
    drain,
    publish,
)
from support.topics import full, partition_of
from support.waiting import wait_until
from support.written import read_topic

from pulsar_spark.client.durable import (
    DISPATCH_GRANT,
    AttachedConsumer,
    acknowledge_through,
    mark_delete_position,
)
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.commands import ack_set_words
from pulsar_spark.source.subscription import SubscriptionKeeper

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def start_query(streams: Streams, topic: str, batches: Batches, **options: str) -> None:
    """Run an AvailableNow query on ``topic`` with the subscription, from the checkpoint."""
    df = streams.stream(topic, startingOffsets="earliest", subscriptionName=SUBSCRIPTION, **options)
    drain(available_now(df, batches, streams.checkpoint))


def values(messages: list[Message]) -> list[bytes]:
    return [m.value for m in messages]


def first_held_after(
    messages: list[Message], end: dict[str, int], *, whole_entries: bool
) -> list[bytes]:
    """What a consumer of a subscription acknowledged through ``end`` gets first: the next
    entry's first message after a whole entry; inside an entry, the message after ``end``, or
    with ``whole_entries`` (pulsar-lite, where only the entries before are acknowledged) the
    entry's own first; nothing after the last message."""
    entry = (end["ledgerId"], end["entryId"])
    if end["batchIndex"] < 0:
        rest = [m for m in messages if (m.ledger, m.entry) > entry]
    elif whole_entries:
        rest = [m for m in messages if (m.ledger, m.entry) >= entry]
    else:
        rest = [m for m in messages if m.id > (*entry, end["batchIndex"])]
    return values(rest[:1])


def subscription_stats(broker: ApacheBroker, topic: str) -> dict[str, Any] | None:
    """The admin API's statistics of the subscription on ``topic`` (one partition or a
    non-partitioned topic), backlog counted exactly; None while it does not exist."""
    stats = broker.admin("GET", f"{admin_path(topic)}/stats?getPreciseBacklog=true")
    found: dict[str, Any] | None = stats["subscriptions"].get(SUBSCRIPTION)
    return found


def admin_path(topic: str) -> str:
    return full(topic).replace("persistent://", "/admin/v2/persistent/", 1)


def holds_nothing(broker: LocalBroker | ApacheBroker, client: pulsar.Client, topic: str) -> bool:
    """Whether the subscription holds no message of ``topic``, asked while a query runs: on
    Apache Pulsar by its backlog (a consumer of ours could refuse the query's, see the module
    docstring), on pulsar-lite by a Shared consumer beside the query's."""
    if isinstance(broker, ApacheBroker):
        stats = subscription_stats(broker, topic)
        return stats is not None and stats["msgBacklog"] == 0
    return held(client, topic, kind=pulsar.ConsumerType.Shared) == []


def seek_subscription(client: pulsar.Client, topic: str, to: Message) -> None:
    """Move the subscription by hand, as a user would: a consumer of it seeks to ``to``, the
    first message it then holds."""
    consumer = client.subscribe(full(topic), SUBSCRIPTION)
    try:
        consumer.seek(pulsar.MessageId(-1, to.ledger, to.entry, -1))
    finally:
        consumer.close()


def test_each_commit_moves_the_subscription_past_the_committed_messages(
    streams: Streams, topic_name: str
) -> None:
    """Ten single messages read four per micro-batch: while micro-batch N runs, the previous
    one is committed and a Shared consumer of the subscription starts at N's first message
    (at the very first message for micro-batch 0: the subscription is created at the query's
    start). Once the query has stopped, the subscription holds nothing; messages published
    afterwards are held, and a restarted query reads exactly those, once, after which the
    subscription holds nothing again."""
    sent = streams.publish(topic_name, drafts(10, "m"))
    batches = Batches()
    first_held: dict[int, list[bytes]] = {}
    batches.hook = lambda batch_id: first_held.setdefault(
        batch_id,
        held(streams.client, topic_name, kind=pulsar.ConsumerType.Shared, first_only=True),
    )
    start_query(streams, topic_name, batches, maxMessagesPerTrigger="4")

    assert batches.sizes() == [4, 4, 2]
    assert batches.all() == sent
    assert first_held == {0: [sent[0].value], 1: [sent[4].value], 2: [sent[8].value]}
    assert held(streams.client, topic_name) == []

    later = streams.publish(topic_name, drafts(3, "later", first=10))
    assert held(streams.client, topic_name) == values(later)

    again = Batches()
    start_query(streams, topic_name, again, maxMessagesPerTrigger="4")
    assert again.all() == later
    assert held(streams.client, topic_name) == []


def test_a_running_query_acknowledges_its_last_micro_batch_on_idle_triggers(
    streams: Streams, topic_name: str, broker: LocalBroker | ApacheBroker
) -> None:
    """A processing-time query reads five messages and then only has idle triggers: Spark
    commits no further micro-batch, yet the subscription comes to hold nothing while it runs.
    Stopped, it holds what is published next; restarted, it reads exactly that, once."""
    batches = Batches()
    df = streams.stream(topic_name, subscriptionName=SUBSCRIPTION)
    query = (
        df.writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(streams.checkpoint))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        wait_until(lambda: query.lastProgress is not None, "the first trigger", QUERY_TIMEOUT)
        sent = streams.publish(topic_name, drafts(5, "m"))
        wait_until(lambda: len(batches.all()) == 5, "the messages", QUERY_TIMEOUT)
        wait_until(
            lambda: holds_nothing(broker, streams.client, topic_name),
            "the last micro-batch acknowledged",
            QUERY_TIMEOUT,
        )
    finally:
        query.stop()
    assert batches.all() == sent
    later = streams.publish(topic_name, drafts(3, "later", first=5))
    assert held(streams.client, topic_name) == values(later)
    again = Batches()
    start_query(streams, topic_name, again)
    assert again.all() == later
    assert held(streams.client, topic_name) == []


def test_ends_inside_batches_on_partitions(
    streams: Streams,
    pooled_partitioned_topic: Callable[[int], str],
    broker: LocalBroker | ApacheBroker,
) -> None:
    """Batches of five keyed messages on two partitions, read three messages per micro-batch,
    so most micro-batches end inside a batched entry. While micro-batch N runs, what the
    subscription holds on each partition starts at the first message N reads there (on
    pulsar-lite, where only whole entries are acknowledged, at the first message of its
    entry). After the last commit it holds nothing, on both partitions."""
    whole_entries = isinstance(broker, LocalBroker)
    topic = pooled_partitioned_topic(2)
    sent = streams.publish(topic, drafts(40, "b"), batch_size=5)
    per_partition = by_partition(sent)
    assert sorted(per_partition) == [0, 1]
    batches = Batches()
    seen: dict[int, dict[int, list[bytes]]] = {}

    def look(batch_id: int) -> None:
        seen[batch_id] = {
            p: held(
                streams.client,
                partition_of(topic, p),
                kind=pulsar.ConsumerType.Shared,
                first_only=True,
            )
            for p in (0, 1)
        }

    batches.hook = look
    start_query(streams, topic, batches, maxMessagesPerTrigger="3")

    assert sorted(batches.all()) == sorted(sent)
    offsets = {i: json.loads(text) for i, text in checkpoint_offsets(streams.checkpoint).items()}
    ends_inside = 0
    for batch_id in sorted(seen):
        for p in (0, 1):
            messages = per_partition[p]
            previous = offsets.get(batch_id - 1, {}).get(partition_of(topic, p))
            if previous is None:
                expected = values(messages[:1])
            else:
                ends_inside += previous["batchIndex"] >= 0
                expected = first_held_after(messages, previous, whole_entries=whole_entries)
            assert seen[batch_id][p] == expected, (batch_id, p, previous)
    assert ends_inside > 0
    for p in (0, 1):
        assert held(streams.client, partition_of(topic, p)) == []


@pytest.mark.parametrize("where", ["behind", "ahead"])
def test_restart_reads_from_the_checkpoint_whatever_the_subscription_says(
    streams: Streams, topic_name: str, where: str
) -> None:
    """A query reads six messages and stops; six more are published; then the subscription is
    moved by hand with a seek, behind the checkpoint (to the fourth message) or ahead of it (to
    the eleventh). The restarted query reads exactly the six new messages, once, and leaves
    the subscription through the last of them."""
    first = streams.publish(topic_name, drafts(6, "first"))
    start_query(streams, topic_name, Batches())
    second = streams.publish(topic_name, drafts(6, "second", first=6))
    everything = first + second

    moved_to = 3 if where == "behind" else 10
    seek_subscription(streams.client, topic_name, everything[moved_to])
    assert held(streams.client, topic_name) == values(everything[moved_to:])

    batches = Batches()
    start_query(streams, topic_name, batches)
    assert batches.all() == second
    assert held(streams.client, topic_name) == []


def test_created_at_the_starting_position(streams: Streams, topic_name: str) -> None:
    """A new query starting at ``latest`` (the default) on a topic holding five messages
    creates the subscription after them: it holds none of them, and what comes later."""
    streams.publish(topic_name, drafts(5, "before"))
    batches = Batches()
    df = streams.stream(topic_name, subscriptionName=SUBSCRIPTION)
    drain(available_now(df, batches, streams.checkpoint))
    assert batches.all() == []
    assert held(streams.client, topic_name) == []
    later = streams.publish(topic_name, drafts(2, "later", first=5))
    assert held(streams.client, topic_name) == values(later)


def test_a_topic_added_on_restart_gets_the_subscription(streams: Streams, topic_name: str) -> None:
    """A query on one topic is restarted on its checkpoint with a second topic added: the new
    topic is read from its first message, and gets the subscription, acknowledged through
    what was read; later messages of both topics are held."""
    other = topic_name + "-added"
    streams.publish(topic_name, drafts(3, "a"))
    start_query(streams, topic_name, Batches())
    added = streams.publish(other, drafts(4, "b"))

    batches = Batches()
    df = streams.spark.readStream.format("pulsar").options(
        **{
            "service.url": streams.url,
            "topics": f"{topic_name},{other}",
            "startingOffsets": "earliest",
            "subscriptionName": SUBSCRIPTION,
        }
    )
    drain(available_now(df.load(), batches, streams.checkpoint))
    assert batches.all() == sorted(added)
    assert held(streams.client, topic_name) == []
    assert held(streams.client, other) == []
    later = streams.publish(other, drafts(2, "later", first=4))
    assert held(streams.client, other) == values(later)


def test_without_the_option_no_subscription_is_kept(
    streams: Streams, topic_name: str, broker: LocalBroker
) -> None:
    """The same query without ``subscriptionName`` leaves no durable subscription: a consumer
    subscribing under that name afterwards creates it, at the latest position, and gets
    nothing of what the query read."""
    streams.publish(topic_name, drafts(5, "m"))
    batches = Batches()
    df = streams.stream(topic_name, startingOffsets="earliest")
    drain(available_now(df, batches, streams.checkpoint))
    assert batches.sizes() == [5]
    assert held(streams.client, topic_name) == []
    later = streams.publish(topic_name, drafts(2, "later", first=5))
    assert held(streams.client, topic_name) == values(later)


def test_a_subscription_on_a_batch_read_fails_naming_the_option(
    spark: SparkSession, broker: LocalBroker
) -> None:
    """A batch read keeps no subscription. Spark asks a Python source for its schema without
    saying whether the read is a batch or a stream, so the error comes at the first action."""
    df = (
        spark.read.format("pulsar")
        .option("service.url", broker.service_url)
        .option("topic", "t")
        .option("subscriptionName", SUBSCRIPTION)
        .load()
    )
    with pytest.raises(AnalysisException) as info:
        df.count()
    message = str(info.value)
    assert "ConfigurationError" in message
    assert (
        "option 'subscriptionName' applies to streaming reads only: a batch read keeps no "
        "subscription" in message
    )


def test_both_names_of_the_option_fail_at_load(spark: SparkSession, broker: LocalBroker) -> None:
    with pytest.raises(AnalysisException) as info:
        (
            spark.readStream.format("pulsar")
            .option("service.url", broker.service_url)
            .option("topic", "t")
            .option("subscriptionName", "a")
            .option("predefinedSubscription", "b")
            .load()
        )
    message = str(info.value)
    assert "ConfigurationError" in message
    assert (
        "options 'subscriptionName' and 'predefinedSubscription' are two names for one "
        "setting; give only one" in message
    )


def test_a_failed_ack_is_logged_and_the_next_one_covers_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The driver's acknowledgements against a broker of its own, on two topics: while the
    broker is down, acknowledging the first fails after the retry time limit (2 s here), which
    is logged and raised to no one, and the second is left for the next call rather than
    waiting out a time limit of its own. Once the broker is back, the next acknowledgement
    (through later positions) creates the subscription on both and covers every message
    before."""
    local = LocalBroker.start(tmp_path / "broker")
    port, url = local.port, local.service_url
    topics = [full("held-across-outage-a"), full("held-across-outage-b")]
    client = official_client(url)
    pool = ConnectionPool()
    try:
        sent = [publish(client, t, drafts(6, "m")) for t in topics]
        keeper = SubscriptionKeeper(
            SUBSCRIPTION, lambda: Lookup(settings_for(url, timeout=2.0), pool)
        )
        local.stop()
        caplog.set_level(logging.WARNING, logger="pulsar_spark.source.subscription")
        started = time.monotonic()
        earlier = {t: MessageId(s[2].ledger, s[2].entry) for t, s in zip(topics, sent, strict=True)}
        keeper.hold(earlier, {})
        assert time.monotonic() - started < 6.0
        assert keeper.acknowledged == {}
        warnings = [
            r.getMessage() for r in caplog.records if r.name == "pulsar_spark.source.subscription"
        ]
        assert len(warnings) == 1
        assert warnings[0].startswith(
            f"subscription 'spark-etl': could not acknowledge {topics[0]} through "
            f"{sent[0][2].ledger}:{sent[0][2].entry}:-1 ("
        )
        assert warnings[0].endswith(
            "); it holds earlier messages until a later commit succeeds, and the query's "
            "checkpoint still says what was read"
        )

        local = LocalBroker.start(tmp_path / "broker", port=port)
        through = {t: MessageId(s[4].ledger, s[4].entry) for t, s in zip(topics, sent, strict=True)}
        keeper.hold(through, {})
        assert keeper.acknowledged == through
        assert [held(client, t) for t in topics] == [[s[5].value] for s in sent]
    finally:
        pool.close()
        client.close()
        local.stop()


@pytest.mark.pulsar_lite
def test_pulsar_lite_takes_a_batch_index_ack_for_the_whole_entry(
    client: pulsar.Client, lookup: Lookup, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Why only whole entries are acknowledged on pulsar-lite: a cumulative ack through index
    1 of the second batch (``ack_set``, as Apache Pulsar takes it) acknowledges that whole
    entry there, so its last three messages are no longer held. The connector's own
    acknowledgement through the same position keeps the whole entry instead."""
    name = partition_of(pooled_partitioned_topic(2), 1)
    sent = publish(client, name, drafts(15, "b"), batch_size=5)
    assert [m.id[1:] for m in sent[5:7]] == [(1, 0), (1, 1)]
    through = MessageId(sent[6].ledger, sent[6].entry, sent[6].batch, partition=1)

    connection = lookup.connect_to_owner(name)
    assert connection.server_version == "Pulsar-Lite-0.1.0"
    raw = AttachedConsumer(connection, name, "with-ack-set", 10.0)
    try:
        raw.subscribe()
        raw.ack(through)
        raw.close()
    finally:
        connection.unregister_consumer(raw.consumer_id)
    assert held(client, name, "with-ack-set") == values(sent[10:])

    assert acknowledge_through(lookup, name, "whole-entries", through, timeout=10.0) == [
        MessageId(sent[6].ledger, 0, -1)
    ]
    assert held(client, name, "whole-entries") == values(sent[5:])


def test_a_replicated_subscription_is_dispatched_through_before_its_ack(
    broker: LocalBroker | ApacheBroker,
    client: pulsar.Client,
    lookup: Lookup,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """A replicated subscription's acknowledgement first lets the broker dispatch through the
    position (what a broker needs to map it to other clusters; nothing to map on one
    cluster), here 1102 messages, more than one grant of permits, all dispatched: the acks
    sent are the same as without, and the subscription still holds every message after the
    position, those dispatched and dropped too. Apache Pulsar takes the batch index;
    pulsar-lite gets the entry before only."""
    name = partition_of(pooled_partitioned_topic(2), 1)
    sent = publish(client, name, drafts(1200, "r"), batch_size=5)
    assert DISPATCH_GRANT < 1102
    end = sent[1101]
    through = MessageId(end.ledger, end.entry, end.batch, partition=1)
    attached = AttachedConsumer(
        lookup.connect_to_owner(name), name, "dispatched", 10.0, replicated=True
    )
    try:
        attached.subscribe()
        dispatched = attached.dispatch_through(through)
        attached.close()
    finally:
        attached.connection.unregister_consumer(attached.consumer_id)
    assert dispatched is not None and dispatched >= through.entry
    acks = acknowledge_through(lookup, name, "replicated", through, timeout=10.0, replicated=True)
    before = MessageId(end.ledger, end.entry - 1, -1, partition=1)
    if isinstance(broker, ApacheBroker):
        assert acks == [before, through]
        assert held(client, name, "replicated") == values(sent[1102:])
    else:
        assert acks == [before]
        assert held(client, name, "replicated") == values(sent[1100:])


def test_ends_inside_batches_are_acknowledged_through_the_batch_index_on_apache_pulsar(
    streams: Streams, broker: LocalBroker, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Through a proxy that names the broker as Apache Pulsar does, an end inside a batched
    entry is acknowledged as Apache Pulsar expects: cumulatively through the entry before,
    then through the end itself with ``ack_set`` naming the entry's messages after it and
    the batch size the driver counted. Every ack carries the partition index."""
    proxy, answers = apache_proxy((broker.host, broker.port), named=True)
    try:
        topic = pooled_partitioned_topic(2)
        sent = streams.publish(topic, drafts(40, "a"), batch_size=5)
        batches = Batches()
        via = streams.through(proxy.url)
        df = via.stream(
            topic,
            startingOffsets="earliest",
            subscriptionName=SUBSCRIPTION,
            maxMessagesPerTrigger="3",
        )
        drain(available_now(df, batches, streams.checkpoint))
    finally:
        proxy.close()
    assert sorted(batches.all()) == sorted(sent)

    size: dict[tuple[int, int, int], int] = {}
    for m in sent:  # the last batch of a partition may hold fewer than five
        size[(m.partition, m.ledger, m.entry)] = size.get((m.partition, m.ledger, m.entry), 0) + 1
    inside: set[tuple[int, int, int, tuple[int, ...], int]] = set()
    before: set[tuple[int, int, int]] = set()
    for text in checkpoint_offsets(streams.checkpoint).values():
        for name, end in json.loads(text).items():
            partition, index = int(name.rpartition("-")[2]), end["batchIndex"]
            if index >= 0:
                ledger, entry = end["ledgerId"], end["entryId"]
                batch = size[(partition, ledger, entry)]
                words = tuple(ack_set_words(index + 1, batch))
                inside.add((partition, ledger, entry, words, batch))
                if entry > 0:
                    before.add((partition, ledger, entry - 1))
    assert inside  # micro-batches of 3 end inside batches of 5
    sent_acks = [data for ack in answers.acks for data in ack.message_id]
    assert all(ack.ack_type == pb.CommandAck.Cumulative for ack in answers.acks)
    with_set = {
        (d.partition, d.ledgerId, d.entryId, tuple(d.ack_set), d.batch_size)
        for d in sent_acks
        if d.HasField("batch_size")
    }
    assert with_set == inside
    whole = {(d.partition, d.ledgerId, d.entryId) for d in sent_acks if not d.ack_set}
    assert before <= whole
    assert {d.partition for d in sent_acks} == {0, 1}


def ledgers_of(broker: ApacheBroker, topic: str) -> list[int]:
    """The ledger ids ``topic`` keeps, oldest first, as the admin API lists them."""
    stats = broker.admin("GET", f"{admin_path(topic)}/internalStats")
    return [ledger["ledgerId"] for ledger in stats["ledgers"]]


def cursor_of(broker: ApacheBroker, topic: str) -> dict[str, Any]:
    """The subscription's cursor in the admin API's internal statistics of ``topic``."""
    cursor: dict[str, Any] = broker.admin("GET", f"{admin_path(topic)}/internalStats")["cursors"][
        SUBSCRIPTION
    ]
    return cursor


@pytest.mark.apache
def test_the_subscription_position_on_apache_pulsar(
    apache_broker: ApacheBroker, spark: SparkSession, tmp_path: Path
) -> None:
    """Four batched entries of five messages read three messages per micro-batch, on Apache
    Pulsar with batch-index acknowledgements on. While micro-batch N runs, the admin API shows
    the subscription acknowledged through the previous micro-batch's end: its cursor's
    mark-delete position is that entry, or the entry before when the end lies inside one (the
    messages up to the end are acknowledged by batch index, not listed as deleted entries),
    the backlog counts the entries left, and a consumer of the subscription gets the message
    right after the end first. After the last commit the backlog is empty."""
    client = official_client(apache_broker.service_url)
    try:
        streams = Streams(spark, apache_broker.service_url, client, tmp_path)
        topic = full(f"position-{uuid.uuid4().hex[:12]}")
        sent = streams.publish(topic, drafts(20, "p"), batch_size=5)
        entries = sorted({(m.ledger, m.entry) for m in sent})
        assert len(entries) == 4
        seen: dict[int, tuple[str, str, int, list[bytes]]] = {}

        def look(batch_id: int) -> None:
            cursor = cursor_of(apache_broker, topic)
            stats = subscription_stats(apache_broker, topic)
            assert stats is not None
            first = held(client, topic, first_only=True)
            seen[batch_id] = (
                cursor["markDeletePosition"],
                cursor["individuallyDeletedMessages"],
                stats["msgBacklog"],
                first,
            )

        batches = Batches()
        batches.hook = look
        start_query(streams, topic, batches, maxMessagesPerTrigger="3")
        assert batches.sizes() == [3, 3, 3, 3, 3, 3, 2]
        assert batches.all() == sent

        ledger = entries[0][0]
        ends = {
            i: json.loads(text)[topic] for i, text in checkpoint_offsets(streams.checkpoint).items()
        }
        expected: dict[int, tuple[str, str, int, list[bytes]]] = {
            0: (f"{ledger}:-1", "[]", 4, [sent[0].value])
        }
        for batch_id in range(1, 7):
            end = ends[batch_id - 1]
            entry = end["entryId"]
            inside = end["batchIndex"] >= 0
            through = entry - 1 if inside else entry
            expected[batch_id] = (
                f"{end['ledgerId']}:{through}",
                "[]",
                len(entries) - 1 - through,
                first_held_after(sent, end, whole_entries=False),
            )
        assert seen == expected
        assert sum(end["batchIndex"] >= 0 for end in ends.values()) == 5
        stats = subscription_stats(apache_broker, topic)
        assert stats is not None
        assert stats["msgBacklog"] == 0
        assert cursor_of(apache_broker, topic)["markDeletePosition"] == f"{ledger}:3"
        assert held(client, topic) == []
    finally:
        client.close()


@pytest.mark.apache
def test_the_subscription_keeps_unread_messages_from_retention(
    apache_broker: ApacheBroker, spark: SparkSession, tmp_path: Path
) -> None:
    """In a namespace that retains nothing (retention 0, deduplication off, whose cursor would
    hold ledgers too), two topics get ten messages, then, in a new ledger, ten more. A query
    with the subscription read the first ten of one topic. Once the ledgers are closed and
    trimmed, that topic keeps only the ledger of the ten it has not read, which the restarted
    query reads: its start lay in the removed ledger, and the subscription's mark-delete
    position, at that start, shows nothing unread went with it (no DataLossError). The other
    topic, without a subscription, keeps nothing."""
    namespace = f"public/retain-none-{uuid.uuid4().hex[:8]}"
    apache_broker.admin("PUT", f"/admin/v2/namespaces/{namespace}", {})
    apache_broker.admin(
        "POST",
        f"/admin/v2/namespaces/{namespace}/retention",
        {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0},
    )
    apache_broker.admin("POST", f"/admin/v2/namespaces/{namespace}/deduplication", False)
    read, unread = (f"persistent://{namespace}/{name}" for name in ("read", "unread"))
    client = official_client(apache_broker.service_url)

    def roll_ledgers() -> None:
        for topic in (read, unread):
            apache_broker.admin("PUT", f"{admin_path(topic)}/unload")

    try:
        streams = Streams(spark, apache_broker.service_url, client, tmp_path)
        first = {topic: streams.publish(topic, drafts(10, "a")) for topic in (read, unread)}
        batches = Batches()
        start_query(streams, read, batches)
        assert batches.all() == first[read]
        roll_ledgers()
        second = {
            topic: streams.publish(topic, drafts(10, "b", first=10)) for topic in (read, unread)
        }
        roll_ledgers()
        for topic in (read, unread):
            apache_broker.admin("POST", f"{admin_path(topic)}/trim")

        kept = ledgers_of(apache_broker, read)
        assert first[read][0].ledger not in kept
        assert second[read][0].ledger in kept
        assert [g.value for g in read_topic(client, read)] == values(second[read])
        assert second[unread][0].ledger not in ledgers_of(apache_broker, unread)
        assert read_topic(client, unread) == []
        stats = subscription_stats(apache_broker, read)
        assert stats is not None
        assert stats["msgBacklog"] == 10
        pool = ConnectionPool()
        try:
            lookup = Lookup(settings_for(apache_broker.service_url, timeout=10.0), pool)
            position = mark_delete_position(lookup, read, SUBSCRIPTION, timeout=10.0)
        finally:
            pool.close()
        last_read = first[read][-1]
        assert position == MessageId(last_read.ledger, last_read.entry)

        again = Batches()
        start_query(streams, read, again)
        assert again.all() == second[read]
        assert held(client, read) == []
    finally:
        client.close()
