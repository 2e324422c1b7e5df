"""How much each micro-batch of ``spark.readStream.format("pulsar")`` reads: maxMessagesPerTrigger
counts messages exactly (ending inside batched entries), AvailableNow stops at what existed
when it started, and the offsets Spark checkpoints are canonical JSON.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable

import pulsar
import pytest
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadMaxRows
from support.broker_proxy import apache_proxy
from support.streaming import (
    Batches,
    Message,
    Streams,
    as_messages,
    checkpoint_offsets,
    drafts,
    driver,
    ends_of,
    publish,
)
from support.topics import full, partition_of

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.local import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.counting import Ahead, KeptCounters, MessageCounter, ahead_for
from pulsar_spark.source.offsets import NOTHING_CONSUMED

pytestmark = [pytest.mark.integration, pytest.mark.spark]


# --- maxMessagesPerTrigger -----------------------------------------------------------------------


def test_max_messages_per_trigger_is_exact(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """1000 messages in batches of 7 over two partitions (600 and 400), read with
    maxMessagesPerTrigger=100: the source counts messages, not entries, and ends a micro-batch
    inside a batched entry when the count says so (the next one resumes right after), so
    every micro-batch holds exactly 100 messages and never more. The budget is shared evenly
    between partitions that still have messages."""
    topic = pooled_partitioned_topic(2)
    p0 = streams.publish(partition_of(topic, 0), drafts(600, "p0"), batch_size=7)
    p1 = streams.publish(partition_of(topic, 1), drafts(400, "p1"), batch_size=7)
    batches = Batches()
    query = streams.read_available_now(
        topic, batches, startingOffsets="earliest", maxMessagesPerTrigger="100"
    )
    assert batches.sizes() == [100] * 10
    split = [
        (sum(m.partition == 0 for m in b), sum(m.partition == 1 for m in b))
        for b in (batches.by_id[i] for i in sorted(batches.by_id))
    ]
    assert split == [(50, 50)] * 8 + [(100, 0)] * 2
    assert sorted(batches.all()) == sorted(p0 + p1)
    # each batch continues each partition exactly where the previous one ended
    for partition, sent in ((0, p0), (1, p1)):
        assert [m for m in batches.all() if m.partition == partition] == sent
    # batch ends fall inside entries: 50 = 7 * 7 + 1
    first = batches.by_id[0]
    assert [m.id for m in first if m.partition == 0][-1] == p0[49].id
    assert p0[49].batch == 0
    # progress: the offsets of each batch, and the partitions' ends as the latest offset
    progress = query.recentProgress
    assert [p.numInputRows for p in progress] == [100] * 10
    latest = ends_of(p0 + p1)
    for p in progress:
        assert json.loads(p.sources[0].latestOffset) == latest
    assert json.loads(progress[-1].sources[0].endOffset) == latest
    end_0 = json.loads(progress[0].sources[0].endOffset)
    assert end_0 == {
        partition_of(topic, 0): p0[49].position(),
        partition_of(topic, 1): p1[49].position(),
    }


def test_min_partitions_splits_each_micro_batch_exactly(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """700 messages in batches of 7 on one partition of two (the other stays empty), 100 per
    micro-batch, at least 3 tasks per micro-batch: the micro-batches start and end inside
    batched entries and the tasks cut them at entry boundaries; every message still arrives
    once, in order."""
    topic = pooled_partitioned_topic(2)
    sent = streams.publish(partition_of(topic, 0), drafts(700, "m"), batch_size=7)
    batches = Batches(count_tasks=True)
    streams.read_available_now(
        topic, batches, startingOffsets="earliest", maxMessagesPerTrigger="100", minPartitions="3"
    )
    assert batches.sizes() == [100] * 7
    assert batches.all() == sent
    # 100 messages span 15 or 16 entries of 7: always enough for 3 tasks
    assert list(batches.tasks.values()) == [3] * 7


# --- AvailableNow --------------------------------------------------------------------------------


def test_available_now_reads_what_existed_at_start_and_stops(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """AvailableNow records each partition's last message when the query starts and stops
    once it has read up to there: messages published while it runs (here: from inside its
    first micro-batch) are left for the next run, which reads exactly those."""
    topic = pooled_partitioned_topic(2)
    early = streams.publish(topic, drafts(250, "early"), batch_size=10)
    late: list[Message] = []
    batches = Batches()

    def publish_late(batch_id: int) -> None:
        if batch_id == 0:
            late.extend(streams.publish(topic, drafts(40, "late"), batch_size=10))

    batches.hook = publish_late

    def run() -> StreamingQuery:
        return streams.read_available_now(
            topic, batches, startingOffsets="earliest", maxMessagesPerTrigger="100"
        )

    run()
    assert len(late) == 40
    assert batches.sizes() == [100, 100, 50]
    assert sorted(batches.all()) == sorted(early)

    batches.by_id.clear()
    run()
    assert batches.sizes() == [40]
    assert batches.all() == sorted(late)
    assert sorted(batches.by_id) == [3]


# --- the driver's limited offsets -----------------------------------------------------------------


def test_limited_latest_offsets_resume_where_the_last_ended_and_replay_the_same(
    broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """The driver keeps its message counters between micro-batches: each limited
    latestOffset counts on from the previous end, cutting inside entries of 4, and ends at
    the whole last entry. Asking again from an earlier start (a replayed micro-batch) starts
    a new count and gives the same ends."""
    sent = publish(client, topic_name, drafts(25, "r"), batch_size=4)
    name = full(topic_name)
    reader = driver(
        broker.service_url, topic_name, startingOffsets="earliest", maxMessagesPerTrigger="7"
    )
    initial = reader.initialOffset()
    assert initial == {name: NOTHING_CONSUMED.to_json()}
    ends, start = [], initial
    for _ in range(5):
        start = reader.latestOffset(start, ReadMaxRows(7))
        ends.append(start)
    assert ends == [
        {name: sent[6].position()},  # entry 1, index 2
        {name: sent[13].position()},  # entry 3, index 1
        {name: sent[20].position()},  # entry 5, index 0
        {name: sent[24].position(-1)},  # entry 6 (one message), whole
        {name: sent[24].position(-1)},  # nothing left
    ]
    assert reader.latestOffset(ends[1], ReadMaxRows(7)) == ends[2]
    assert reader.latestOffset(initial, ReadMaxRows(7)) == ends[0]
    assert reader.latestOffset(ends[0], ReadMaxRows(7)) == ends[1]
    assert len(counting_threads()) == 1  # the kept counter, counting the next 7 ahead
    reader.stop()
    assert counting_threads() == []


def test_counting_ahead_ends_each_micro_batch_where_counting_in_turn_does(
    client: pulsar.Client, lookup: Lookup, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Two partitions of 600 and 400 messages in batches of 7, counted 100 per micro-batch by
    kept counters that receive ahead on threads, and by ones that receive only when asked:
    the same ends, each the exact id of the 50th (then 100th) message of its partition's
    share, cutting inside entries (50 = 7 * 7 + 1) or naming a whole entry when the count
    ends one, and exactly 100 messages between consecutive ends. No thread outlives them."""
    topic = pooled_partitioned_topic(2)
    p0 = publish(client, partition_of(topic, 0), drafts(600, "p0"), batch_size=7)
    p1 = publish(client, partition_of(topic, 1), drafts(400, "p1"), batch_size=7)
    names = [full(partition_of(topic, i)) for i in (0, 1)]
    sent = dict(zip(names, (p0, p1), strict=True))
    lasts = {name: _end_at(messages, len(messages) - 1) for name, messages in sent.items()}

    def ends(ahead: Ahead | None) -> list[dict[str, MessageId]]:
        def open_counter(name: str, start: MessageId, last: MessageId) -> MessageCounter:
            return MessageCounter(lookup, name, start, last, 20.0, ahead=ahead)

        kept = KeptCounters(open_counter)
        starts = dict.fromkeys(names, NOTHING_CONSUMED)
        found = []
        try:
            while (end := kept.ends(starts, lasts, 100)) != starts:
                found.append(end)
                starts = end
        finally:
            kept.close()
        assert counting_threads() == []
        return found

    in_turn = ends(None)
    assert ends(ahead_for(100, 2)) == in_turn
    assert ends(Ahead(messages=1, entries=1)) == in_turn
    assert in_turn == [
        {names[0]: _end_at(p0, 50 * k + 49), names[1]: _end_at(p1, 50 * k + 49)} for k in range(8)
    ] + [{names[0]: _end_at(p0, 499), names[1]: lasts[names[1]]}, lasts]
    assert in_turn[0][names[0]] == MessageId(p0[49].ledger, p0[49].entry, 0)  # 7 * 7 + 1
    assert in_turn[6][names[0]].batch_index == -1  # message 349 ends its entry
    bounds = [dict.fromkeys(names, NOTHING_CONSUMED), *in_turn]
    sizes = [
        sum(
            1
            for name in names
            for m in sent[name]
            if _key(start[name]) < (m.ledger, m.entry, m.batch) <= end[name].last_key()
        )
        for start, end in itertools.pairwise(bounds)
    ]
    assert sizes == [100] * 10


def counting_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("pulsar-count-")]


def _end_at(messages: list[Message], index: int) -> MessageId:
    """The end of a micro-batch whose last message is ``messages[index]`` (the whole entry
    when it is its entry's last)."""
    m = messages[index]
    whole = index + 1 == len(messages) or messages[index + 1].entry != m.entry
    return MessageId(m.ledger, m.entry, -1 if whole else m.batch)


def _key(position: MessageId) -> tuple[int, int, int]:
    return (-1, -1, -1) if position.is_earliest else position.last_key()


# --- checkpointed offsets and progress -----------------------------------------------------------


def test_checkpoint_offsets_are_canonical_json(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """``offsets/N`` holds, per partition name in sorted order, the last consumed message id
    with its keys sorted (batchIndex, entryId, ledgerId): the exact text Spark compares. A
    batch index names a message inside a batch; -1 a whole entry (a batch consumed to its end,
    or a single message)."""
    topic = pooled_partitioned_topic(2)
    p0 = streams.publish(partition_of(topic, 0), drafts(9, "c0"), batch_size=4)
    p1 = streams.publish(partition_of(topic, 1), drafts(3, "c1"))
    # entries 0 and 1 hold four messages each, entry 2 one
    assert [(m.entry, m.batch) for m in p0] == [
        *((e, i) for e in (0, 1) for i in range(4)),
        (2, 0),
    ]
    streams.read_available_now(
        topic, Batches(), startingOffsets="earliest", maxMessagesPerTrigger="6"
    )
    a, b = partition_of(topic, 0), partition_of(topic, 1)
    l0, l1 = p0[0].ledger, p1[0].ledger
    # batch 0: three of each partition; batch 1: the other six of partition 0
    assert checkpoint_offsets(streams.checkpoint) == {
        0: (
            f'{{"{a}": {{"batchIndex": 2, "entryId": 0, "ledgerId": {l0}}}, '
            f'"{b}": {{"batchIndex": -1, "entryId": 2, "ledgerId": {l1}}}}}'
        ),
        1: (
            f'{{"{a}": {{"batchIndex": -1, "entryId": 2, "ledgerId": {l0}}}, '
            f'"{b}": {{"batchIndex": -1, "entryId": 2, "ledgerId": {l1}}}}}'
        ),
    }


# --- a broker whose last message ids carry a batch index ----------------------------------------


def test_limited_query_where_last_ids_carry_a_batch_index(
    streams: Streams, broker: LocalBroker, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """Apache Pulsar answers GetLastMessageId with the last entry's largest batch index (0 for
    an unbatched message); pulsar-lite with none. Through a proxy that answers like Apache
    Pulsar, a limited AvailableNow query reads a batched and an unbatched partition to their
    last message, exactly once; run again with nothing new it reads nothing and reports no
    data loss; run after more messages it reads just those. A batch read sees them all."""
    topic = pooled_partitioned_topic(2)
    p0 = streams.publish(partition_of(topic, 0), drafts(17, "p0"), batch_size=5)
    p1 = streams.publish(partition_of(topic, 1), drafts(4, "p1"))
    assert [m.batch for m in p0[-2:]] == [0, 1]
    assert {m.batch for m in p1} == {-1}
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.batch_sizes = {(m.ledger, m.entry): m.batch + 1 for m in sorted(p0)}
    batches = Batches()

    def run() -> list[int]:
        seen = set(batches.by_id)
        streams.through(proxy.url).read_available_now(
            topic, batches, startingOffsets="earliest", maxMessagesPerTrigger="6"
        )
        return sorted(set(batches.by_id) - seen)

    try:
        first = run()
        assert [len(batches.by_id[i]) for i in first] == [6, 6, 6, 3]
        assert sorted(batches.all()) == sorted(p0 + p1)
        assert answers.last_ids_answered >= 2
        assert run() == []
        more = streams.publish(partition_of(topic, 1), drafts(3, "more"))
        added = run()
        assert [batches.by_id[i] for i in added] == [sorted(more)]
        everything = streams.spark.read.format("pulsar").option("service.url", proxy.url)
        assert as_messages(everything.option("topic", topic).load()) == sorted(p0 + p1 + more)
    finally:
        proxy.close()
