"""Publishing with the official client and reading back with our :class:`RangeReader`.

:func:`publish` sends :class:`Sent` messages with one official producer and returns the
:class:`Row` each should come back as, with the id the producer got; :func:`read` reads a
range of a topic with ours and returns what it delivered as the same rows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pulsar

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.read_stage import ReadRange
from support.decoding import properties_row, strings

KEYS = ["plain-key", "ключ-кириллица", "鍵-漢字", "🔑🚀", None]
"""Partition keys in several scripts, and none."""

FAST = ReaderSettings(queue_size=1000, poll_timeout=20.0, request_timeout=10.0)
"""Reader settings for tests: a queue of 1000, generous timeouts."""


@dataclass(frozen=True)
class Sent:
    """One message to publish."""

    value: bytes | None
    key: str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    event_time: int = 0
    sequence_id: int | None = None


@dataclass(frozen=True)
class Row:
    """One message as our reader returned it, or as it was published."""

    ledger: int
    entry: int
    batch_index: int
    partition: int
    value: bytes | None
    key: bytes | None
    properties: dict[str, str]
    event_time: int
    sequence_id: int
    producer_name: str


@dataclass
class Published:
    """What :func:`publish` sent: the rows, the producer's name, when it started and ended."""

    rows: list[Row]
    producer_name: str
    started_ms: int
    finished_ms: int


def now_ms() -> int:
    """The time now, in milliseconds since the epoch."""
    return int(time.time() * 1000)


def publish(
    client: pulsar.Client,
    topic: str,
    messages: list[Sent],
    *,
    partition: int | None = None,
    flush_each: bool = False,
    **producer_options: object,
) -> Published:
    """Send ``messages`` in order with one official producer; return the expected rows.

    ``partition``: the partition index pulsar-lite reports for the topic (the topic is then a
    ``-partition-N`` name); None takes it from the official message id. ``flush_each``: flush
    after every message, as a producer sending slowly does (with batching on, a batch of one
    message each).
    """
    started = now_ms()
    producer = client.create_producer(topic, **producer_options)
    results: list[tuple[pulsar.Result, pulsar.MessageId] | None] = [None] * len(messages)
    done = threading.Event()
    remaining = [len(messages)]
    lock = threading.Lock()

    def callback(index: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def record(result: pulsar.Result, message_id: pulsar.MessageId) -> None:
            results[index] = (result, message_id)
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        return record

    for i, message in enumerate(messages):
        producer.send_async(
            message.value,
            callback(i),
            properties=message.properties or None,
            partition_key=message.key,
            event_timestamp=message.event_time or None,
            sequence_id=message.sequence_id,
        )
        if flush_each:
            producer.flush()
    producer.flush()
    assert done.wait(30), "the official producer did not confirm every message"
    name = producer.producer_name()
    producer.close()
    finished = now_ms()
    rows = []
    for message, outcome in zip(messages, results, strict=True):
        assert outcome is not None
        result, mid = outcome
        assert result == pulsar.Result.Ok
        rows.append(
            Row(
                ledger=mid.ledger_id(),
                entry=mid.entry_id(),
                batch_index=mid.batch_index(),
                partition=mid.partition() if partition is None else partition,
                value=message.value,
                key=None if message.key is None else message.key.encode(),
                properties=dict(message.properties),
                event_time=message.event_time,
                sequence_id=-1 if message.sequence_id is None else message.sequence_id,
                producer_name=name,
            )
        )
    return Published(rows, name, started, finished)


def columns_rows(columns: MessageColumns) -> list[Row]:
    """Every message of decoded columns as a :class:`Row`."""
    out = []
    values = strings(columns.values)
    keys = [None] * columns.count if columns.key is None else strings(columns.key)
    ledgers = columns.entry_column("ledger_id")
    entries = columns.entry_column("entry_id")
    names, repeats = columns.entry_texts("producer_name")
    producers = [name for name, n in zip(names, repeats, strict=True) for _ in range(n)]
    for i in range(columns.count):
        props = () if columns.properties is None else properties_row(columns.properties, i)
        assert len(dict(props)) == len(props)
        out.append(
            Row(
                ledger=int(ledgers[i]),
                entry=int(entries[i]),
                batch_index=int(columns.batch_index[i]),
                partition=columns.entry.partition,
                value=values[i],
                key=keys[i],
                properties=dict(props),
                event_time=int(columns.event_time[i]),
                sequence_id=int(columns.sequence_id[i]),
                producer_name=str(producers[i]),
            )
        )
    return out


def last_message_id(lookup: Lookup, topic: str) -> MessageId | None:
    """The id the broker reports for the last message of ``topic``; None when it is empty."""
    with Consumer(lookup, topic, MessageId.earliest(), timeout=10) as consumer:
        return consumer.last_message_id()


def read(
    lookup: Lookup,
    topic: str,
    start: MessageId | None = None,
    end: MessageId | None = None,
    *,
    start_inclusive: bool = True,
    end_inclusive: bool = True,
    settings: ReaderSettings = FAST,
    publish_times: list[int] | None = None,
) -> list[Row]:
    """Read ``(start, end)`` of ``topic`` with our reader; ``end`` defaults to the last message.

    ``publish_times`` receives each row's entry publish time.
    """
    if end is None:
        end = last_message_id(lookup, topic)
        assert end is not None
    reader = RangeReader(
        lookup,
        ReadRange(
            topic,
            MessageId.earliest() if start is None else start,
            end,
            start_inclusive=start_inclusive,
            end_inclusive=end_inclusive,
        ),
        settings,
    )
    rows = []
    for columns in reader:
        rows.extend(columns_rows(columns))
        if publish_times is not None:
            publish_times.extend(int(t) for t in columns.entry_column("publish_time"))
    return rows


def with_sequence_ids(rows: list[Row], first: int) -> list[Row]:
    """Expected rows for a producer that numbered messages itself from ``first``."""
    return [
        r if r.sequence_id >= 0 else Row(**{**r.__dict__, "sequence_id": first + i})
        for i, r in enumerate(rows)
    ]


def ids(rows: list[Row]) -> list[tuple[int, int, int]]:
    """(ledger, entry, batch index) of each row."""
    return [(r.ledger, r.entry, r.batch_index) for r in rows]
