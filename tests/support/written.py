"""Writing with ``df.write.format("pulsar")`` and reading back what was written.

:func:`read_topic` reads a topic (or one partition topic) with the official client's reader
and returns a :class:`Got` per message; :func:`expected_fields` is what it should report for a
written row. What the official Python client does not expose is read through our own reader
(:func:`read_with_spark`) or from the raw entries (:func:`raw_entry_codecs`).
"""

from __future__ import annotations

import base64
import datetime
import time
from dataclasses import dataclass
from typing import Any

import pulsar
from pyspark.sql import DataFrame, SparkSession

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.local import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.payload import parse_payload_section

from .topics import full, partition_of

READ_TIMEOUT_MS = 5_000
"""How long :func:`read_topic` waits for a message the broker says is there."""
READ_ATTEMPTS = 5
"""How many readers :func:`read_topic` starts before it gives up on a stalled topic."""
DRAIN_TIMEOUT_MS = 200
"""How long :func:`read_topic` waits for what is left once the broker says nothing is."""
UTC = datetime.timezone.utc
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Got:
    """What the official client reports for one message."""

    value: bytes
    null_value: bool
    key: str
    properties: tuple[tuple[str, str], ...]
    event_time: int
    producer_name: str
    topic: str
    partition: int
    position: tuple[int, int, int]  # ledger, entry, batch index

    def fields(self) -> tuple[Any, ...]:
        """What the writer controls: value, null value, key, properties, event time."""
        return (self.value, self.null_value, self.key, self.properties, self.event_time)


def read_topic(
    client: pulsar.Client, topic: str, crypto_key_reader: pulsar.CryptoKeyReader | None = None
) -> list[Got]:
    """Every message of one topic or one ``-partition-N``, in order, each id once, decrypted
    with ``crypto_key_reader`` when given.

    ``has_message_available`` compares with the broker's last message id, so no quiet period
    is waited for. pulsar-lite answers that request for an empty topic with UnknownError
    ("Topic has no messages"), and may dispatch an entry twice: repeats of an id already read
    are the broker's, not a second publish (which would have a new id), and are dropped. Its
    dispatch can also stall on a long backlog of small entries: reading then goes on with a
    new reader after the last message read.

    pulsar-lite's last message id has no batch index, and the official reader may then take
    the first message of the last batched entry for the last message: when it says nothing
    is left, what it already holds of that entry is drained with a short wait.
    """
    seen: set[tuple[int, int, int]] = set()
    out: list[Got] = []
    start = pulsar.MessageId.earliest
    for _ in range(READ_ATTEMPTS):
        reader = client.create_reader(full(topic), start, crypto_key_reader=crypto_key_reader)
        try:
            while True:
                try:
                    more = reader.has_message_available()
                except pulsar.UnknownError:
                    more = False
                try:
                    message = reader.read_next(READ_TIMEOUT_MS if more else DRAIN_TIMEOUT_MS)
                except pulsar.Timeout:
                    if more:
                        raise
                    return out
                got = _got(message)
                if got.position not in seen:
                    seen.add(got.position)
                    out.append(got)
                    start = message.message_id()
        except pulsar.Timeout:
            continue
        finally:
            reader.close()
    raise AssertionError(f"reading {topic} stalled {READ_ATTEMPTS} times")


def read_partitioned(client: pulsar.Client, topic: str, partitions: int) -> list[list[Got]]:
    """The messages of each partition of ``topic``, read one partition topic at a time."""
    return [read_topic(client, partition_of(topic, p)) for p in range(partitions)]


def _got(message: pulsar.Message) -> Got:
    mid = message.message_id()
    return Got(
        value=message.data(),
        null_value=message.has_null_value(),
        key=message.partition_key(),
        properties=tuple(sorted(message.properties().items())),
        event_time=message.event_timestamp(),
        producer_name=message.producer_name(),
        topic=message.topic_name(),
        partition=mid.partition(),
        position=(mid.ledger_id(), mid.entry_id(), mid.batch_index()),
    )


def expected_fields(
    value: bytes | str | None,
    key: str | bytes | None = None,
    properties: dict[str, str] | None = None,
    event_time: datetime.datetime | None = None,
) -> tuple[Any, ...]:
    """What the official client should report for a written row (see :meth:`Got.fields`)."""
    data = value.encode() if isinstance(value, str) else (value or b"")
    if isinstance(key, bytes):
        key = base64.b64encode(key).decode("ascii")  # a binary key travels base64
    millis = (event_time - EPOCH) // datetime.timedelta(milliseconds=1) if event_time else 0
    return (data, value is None, key or "", tuple(sorted((properties or {}).items())), millis)


def write(
    df: DataFrame, broker: LocalBroker, *, mode: str | None = "append", **options: str
) -> None:
    """``df.write.format("pulsar")`` with the broker's URL unless ``service.url`` is given."""
    writer = df.write.format("pulsar")
    for name, value in {"service.url": broker.service_url, **options}.items():
        if value is not None:
            writer = writer.option(name, value)
    if mode is not None:
        writer = writer.mode(mode)
    writer.save()


def read_with_spark(spark: SparkSession, broker: LocalBroker, topic: str) -> list[dict[str, Any]]:
    """Our own reader's view of a topic (for what the official client does not expose)."""
    df = (
        spark.read.format("pulsar")
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .load()
    )
    rows = df.select("key", "value", "partition", "producerName", "sequenceId").collect()
    return [r.asDict() for r in rows]


def raw_entry_codecs(lookup: Lookup, topic: str, entries: int) -> list[tuple[int, int]]:
    """``(compression, messages)`` of the first ``entries`` stored entries of ``topic``."""
    consumer = Consumer(lookup, full(topic), MessageId.earliest(), timeout=10.0)
    found: dict[tuple[int, int], tuple[int, int]] = {}
    try:
        consumer.flow(entries)
        deadline = time.monotonic() + 15
        while len(found) < entries and time.monotonic() < deadline:
            delivery = consumer.receive(1.0)
            if delivery is None or delivery.payload is None:
                continue
            metadata = parse_payload_section(delivery.payload).metadata
            ident = (delivery.message.message_id.ledgerId, delivery.message.message_id.entryId)
            count = (
                metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 0
            )
            found[ident] = (metadata.compression, count)
    finally:
        consumer.close()
    assert len(found) == entries
    return [found[ident] for ident in sorted(found)]


def ts(text: str) -> datetime.datetime:
    """An ISO date and time, in UTC."""
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)
