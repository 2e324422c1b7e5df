"""Driver-side planning: which partitions exist and where each read starts and ends.

The driver resolves the user's topics to topic-partitions (partitioned-topic metadata, or a
namespace listing for ``topicsPattern``) and positions to concrete message ids (GetLastMessageId
for ``latest``). Each non-empty range becomes one :class:`PartitionRead`, which carries
everything an executor task needs — tasks share no state with the driver.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pulsar_spark.arrow.values import ValueSchema
from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool, default_pool
from pulsar_spark.client.reader import DEFAULT_QUEUE_SIZE, ReaderSettings
from pulsar_spark.client.settings import ClientSettings, ReaderDecryption
from pulsar_spark.client.time_seek import first_published_at
from pulsar_spark.errors import TopicNotFoundError
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.read_options import ReadOptions, TopicSelection
from pulsar_spark.topic import TopicName

_log = logging.getLogger(__name__)

MAX_CONCURRENT_QUESTIONS = 16
"""Partitions asked at the same time by :func:`last_message_ids`."""


@dataclass(frozen=True, slots=True)
class PartitionRef:
    """One readable topic-partition and the user-level topic it belongs to."""

    topic: str  # fully qualified, without -partition-N
    partition: int  # -1 for a non-partitioned topic
    name: str  # the topic to subscribe to (and the name offsets use)


@dataclass(frozen=True)
class PartitionRead:
    """One task's work: read ``ref`` from ``start`` to ``end`` (pickled to the executor that
    runs it, inside the Spark partition :mod:`pulsar_spark.spark.partitions` wraps it in)."""

    client: ClientSettings
    ref: PartitionRef
    start: MessageId
    start_inclusive: bool
    end: MessageId
    end_inclusive: bool
    poll_timeout: float
    queue_size: int = DEFAULT_QUEUE_SIZE
    min_publish_time: int | None = None  # ms, inclusive
    max_publish_time: int | None = None  # ms, exclusive
    value_schema: ValueSchema | None = None  # the schema ``value`` follows; None: bytes
    decryption: ReaderDecryption = field(default_factory=ReaderDecryption)  # encrypted messages


def partition_read(
    options: ReadOptions,
    ref: PartitionRef,
    start: MessageId,
    end: MessageId,
    *,
    start_inclusive: bool,
    min_publish_time: int | None = None,
    max_publish_time: int | None = None,
) -> PartitionRead:
    """The task reading ``ref`` from ``start`` through ``end``, as ``options`` say to read."""
    return PartitionRead(
        client=options.client,
        ref=ref,
        start=start,
        start_inclusive=start_inclusive,
        end=end,
        end_inclusive=True,
        poll_timeout=options.poll_timeout,
        queue_size=options.receiver_queue_size,
        min_publish_time=min_publish_time,
        max_publish_time=max_publish_time,
        value_schema=options.value_schema,
        decryption=options.decryption,
    )


def make_lookup(client: ClientSettings, pool: ConnectionPool | None = None) -> Lookup:
    return Lookup(client, default_pool() if pool is None else pool)


def resolve_partitions(lookup: Lookup, selection: TopicSelection) -> list[PartitionRef]:
    """Every topic-partition the selection names, in a stable order."""
    topics = (
        list(selection.names) if selection.pattern is None else match_pattern(lookup, selection)
    )
    refs: dict[str, PartitionRef] = {}
    for topic in topics:
        for ref in _partitions_of(lookup, topic):
            refs.setdefault(ref.name, ref)
    return list(refs.values())


def _partitions_of(lookup: Lookup, topic: str) -> list[PartitionRef]:
    """One named partition (``t-partition-2``) or every partition of a topic."""
    name = TopicName.parse(topic)
    index = name.partition_index
    if index >= 0 and lookup.partitions(name.base_name) > index:
        return [PartitionRef(name.base_name, index, name.full_name)]
    count = lookup.partitions(topic)
    if count == 0:
        return [PartitionRef(topic, -1, topic)]
    return [PartitionRef(topic, i, name.partition(i)) for i in range(count)]


def match_pattern(lookup: Lookup, selection: TopicSelection) -> list[str]:
    """The topics (partitioned topics by their own name) of a ``topicsPattern`` selection.

    Topics whose local name starts with ``__`` are internal (Pulsar's own, such as
    ``__change_events``, and this connector's transaction registry) and never match."""
    assert selection.pattern is not None and selection.pattern_namespace is not None
    regex = re.compile(selection.pattern)
    names = lookup.topics_of_namespace(selection.pattern_namespace)
    bases = sorted({TopicName.parse(n).base_name for n in names})
    return [b for b in bases if regex.fullmatch(b) and not _internal(b)]


def _internal(topic: str) -> bool:
    return TopicName.parse(topic).local_name.startswith("__")


def last_message_id(lookup: Lookup, ref: PartitionRef) -> MessageId | None:
    """The last message of a partition (None when it is empty).

    A topic that does not exist yet (Apache Pulsar creates a topic at its first producer)
    has no messages: it is read as empty, not created.
    """
    try:
        with Consumer(lookup, ref.name, MessageId.latest(), timeout=lookup.timeout) as consumer:
            last = consumer.last_message_id()
    except TopicNotFoundError:
        _log.info("%s does not exist yet: it has no messages to read", ref.name)
        return None
    return None if last is None else last.with_partition(ref.partition)


def last_message_ids(lookup: Lookup, refs: Sequence[PartitionRef]) -> dict[str, MessageId | None]:
    """:func:`last_message_id` of every partition in ``refs``, by name.

    Each answer takes a lookup, a subscribe, GetLastMessageId and an unsubscribe, four round
    trips to the broker: asked one partition after another, they are most of a streaming
    micro-batch's planning, so the partitions are asked at the same time (the connections
    take requests from any thread). The first failure, if any, is raised once all are done.
    """
    if len(refs) <= 1:
        return {ref.name: last_message_id(lookup, ref) for ref in refs}
    workers = min(len(refs), MAX_CONCURRENT_QUESTIONS)
    with ThreadPoolExecutor(workers, thread_name_prefix="pulsar-last-id") as pool:
        found = list(pool.map(functools.partial(last_message_id, lookup), refs))
    return {ref.name: last for ref, last in zip(refs, found, strict=True)}


def first_published(
    lookup: Lookup, ref: PartitionRef, last: MessageId, millis: int, poll_timeout: float
) -> MessageId | None:
    """The first entry of a partition whose last entry is ``last`` published at or after
    ``millis`` (a whole-entry id), or None when all of them were published before."""
    settings = ReaderSettings(poll_timeout=poll_timeout, request_timeout=lookup.timeout)
    found = first_published_at(lookup, ref.name, last, millis, settings)
    return None if found is None else found.with_partition(ref.partition)
