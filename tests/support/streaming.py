"""Publishing with the official client and reading with ``spark.readStream.format("pulsar")``.

:func:`publish` (and :class:`BackgroundPublisher`, from a thread) remembers each message with
the id its send callback returned, as a :class:`Message`; :func:`as_messages` turns what a
query read into the same form. :class:`Batches` keeps what each micro-batch of a
``foreachBatch`` query read; :func:`available_now` and :func:`drain` run such a query to its
end, :func:`to_parquet` starts one into files. :class:`Streams` (the ``streams`` fixture) holds
what a test's queries share: Spark, the service URL, the publishing client, a folder.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from pulsar_spark.source.read_options import ReadMode, ReadOptions
from pulsar_spark.spark.stream_reader import PulsarStreamReader

from .topics import full, partition_of

QUERY_TIMEOUT = 180.0
"""Seconds a query may take to drain or show a result (generous: the machine is shared)."""


@dataclass(frozen=True, order=True)
class Message:
    """One message as published (or as read back), in a comparable form."""

    partition: int
    ledger: int
    entry: int
    batch: int
    topic: str
    key: str | None
    value: bytes
    properties: tuple[tuple[str, str], ...]
    producer: str

    @property
    def id(self) -> tuple[int, int, int]:
        return (self.ledger, self.entry, self.batch)

    def position(self, batch: int | None = None) -> dict[str, int]:
        """This message's id as an offset holds it (``batch=-1``: its whole entry)."""
        return {
            "batchIndex": self.batch if batch is None else batch,
            "entryId": self.entry,
            "ledgerId": self.ledger,
        }


Draft = tuple[str | None, bytes, dict[str, str]]
"""A message to publish: key, value, properties."""


def drafts(count: int, tag: str, *, first: int = 0) -> list[Draft]:
    """Keyed messages with properties; values carry ``tag`` and the sequence number."""
    return [
        (f"key-{i % 13}", f"{tag}-{i:06d}".encode(), {"i": str(i), "tag": tag})
        for i in range(first, first + count)
    ]


class Recorder:
    """Send callbacks: keeps each message with the id the broker gave it, in send order."""

    def __init__(self, topic: str, producer: str) -> None:
        self.topic = topic
        self.producer = producer
        self._fixed_partition = _partition_in_name(topic)
        self._lock = threading.Lock()
        self.sent: list[tuple[int, Message]] = []
        self.failures: list[Any] = []

    def callback(self, seq: int, draft: Draft) -> Callable[[Any, Any], None]:
        key, value, properties = draft

        def done(result: Any, message_id: Any) -> None:
            if result != pulsar.Result.Ok:
                with self._lock:
                    self.failures.append(result)
                return
            partition = self._fixed_partition
            if partition is None:
                partition = message_id.partition()
            message = Message(
                partition=partition,
                ledger=message_id.ledger_id(),
                entry=message_id.entry_id(),
                batch=message_id.batch_index(),
                topic=_base_topic(self.topic),
                key=key,
                value=value,
                properties=tuple(sorted(properties.items())),
                producer=self.producer,
            )
            with self._lock:
                self.sent.append((seq, message))

        return done

    def messages(self) -> list[Message]:
        """What was sent, in send order."""
        assert self.failures == []
        with self._lock:
            return [m for _, m in sorted(self.sent, key=lambda pair: pair[0])]


def _partition_in_name(topic: str) -> int | None:
    base, _, index = full(topic).rpartition("-partition-")
    return int(index) if base and index.isdigit() else None


def _base_topic(topic: str) -> str:
    name = full(topic)
    return name.rpartition("-partition-")[0] if _partition_in_name(name) is not None else name


def create_producer(client: pulsar.Client, topic: str, batch_size: int, name: str) -> Any:
    return client.create_producer(
        full(topic),
        producer_name=name,
        batching_enabled=batch_size > 0,
        batching_max_messages=batch_size or 1000,
        batching_max_publish_delay_ms=60_000 if batch_size else 10,
        block_if_queue_full=True,
    )


def publish(
    client: pulsar.Client, topic: str, messages: list[Draft], *, batch_size: int = 0
) -> list[Message]:
    """Publish to a topic (partitioned: routed by key) or one ``...-partition-i`` with a new
    producer; batches hold exactly ``batch_size`` messages (the final flush closes the last)."""
    name = f"p-{uuid.uuid4().hex[:10]}"
    producer = create_producer(client, topic, batch_size, name)
    recorder = Recorder(topic, name)
    for seq, draft in enumerate(messages):
        key, value, properties = draft
        producer.send_async(
            value, recorder.callback(seq, draft), partition_key=key, properties=properties
        )
    producer.flush()
    producer.close()
    sent = recorder.messages()
    assert len(sent) == len(messages)
    return sent


class BackgroundPublisher:
    """Publishes keyed, batched messages from a thread until stopped: ``burst`` messages, a
    pause, again. Keeps every message with the id its send callback returned."""

    def __init__(
        self, client: pulsar.Client, topic: str, *, burst: int = 10, pause: float = 0.15
    ) -> None:
        self.name = f"bg-{uuid.uuid4().hex[:10]}"
        self._producer = create_producer(client, topic, 16, self.name)
        self._recorder = Recorder(topic, self.name)
        self._burst, self._pause = burst, pause
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self.count = 0

    def __enter__(self) -> BackgroundPublisher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for _ in range(self._burst):
                    draft = drafts(1, "bg", first=self.count)[0]
                    key, value, properties = draft
                    self._producer.send_async(
                        value,
                        self._recorder.callback(self.count, draft),
                        partition_key=key,
                        properties=properties,
                    )
                    self.count += 1
                self._producer.flush()
                time.sleep(self._pause)
        except BaseException as exc:  # surfaced by stop()
            self._error = exc

    def stop(self) -> list[Message]:
        """Stop publishing (once); return everything sent, in send order."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(60)
            assert not self._thread.is_alive()
            if self._error is not None:
                raise self._error
            self._producer.flush()
            self._producer.close()
        sent = self._recorder.messages()
        assert len(sent) == self.count
        return sent


FLAT = [
    "partition",
    "messageId.ledgerId AS ledgerId",
    "messageId.entryId AS entryId",
    "messageId.batchIndex AS batchIndex",
    "topic",
    "key",
    "value",
    "properties",
    "producerName",
]


def stream(spark: SparkSession, url: str, topic: str, **options: str) -> DataFrame:
    """``spark.readStream.format("pulsar")`` on ``topic``."""
    reader = spark.readStream.format("pulsar").option("service.url", url).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def as_messages(df: DataFrame) -> list[Message]:
    """Every row of a (batch) DataFrame of the source's schema, in message-id order."""
    return sorted(
        Message(
            partition=r["partition"],
            ledger=r["ledgerId"],
            entry=r["entryId"],
            batch=r["batchIndex"],
            topic=r["topic"],
            key=None if r["key"] is None else bytes(r["key"]).decode(),
            value=bytes(r["value"]),
            properties=tuple(sorted(r["properties"].items())),
            producer=r["producerName"],
        )
        for r in df.selectExpr(*FLAT).collect()
    )


class Batches:
    """A ``foreachBatch`` function keeping each micro-batch's messages by batch id, and with
    ``count_tasks`` the number of Spark partitions (tasks) of each."""

    def __init__(self, *, count_tasks: bool = False) -> None:
        self.by_id: dict[int, list[Message]] = {}
        self.tasks: dict[int, int] = {}
        self.count_tasks = count_tasks
        self.hook: Callable[[int], None] | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.by_id[batch_id] = as_messages(df)
        if self.count_tasks:
            self.tasks[batch_id] = df.rdd.getNumPartitions()
        if self.hook is not None:
            self.hook(batch_id)

    def sizes(self) -> list[int]:
        return [len(self.by_id[i]) for i in sorted(self.by_id)]

    def all(self) -> list[Message]:
        return [m for i in sorted(self.by_id) for m in self.by_id[i]]


def available_now(df: DataFrame, batches: Batches, checkpoint: Path) -> StreamingQuery:
    """Start ``df`` with Trigger.AvailableNow, each micro-batch into ``batches``."""
    return (
        df.writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def drain(query: StreamingQuery) -> None:
    """Wait for an AvailableNow query to finish; fail on its error."""
    assert query.awaitTermination(QUERY_TIMEOUT), "the AvailableNow query did not stop"
    assert query.exception() is None


def read_available_now(
    spark: SparkSession, url: str, topic: str, batches: Batches, checkpoint: Path, **options: str
) -> StreamingQuery:
    """Read ``topic`` with an AvailableNow query (``options`` as for :func:`stream`), each
    micro-batch into ``batches``, until it stops; fail on its error. Return the query."""
    query = available_now(stream(spark, url, topic, **options), batches, checkpoint)
    drain(query)
    return query


def to_parquet(df: DataFrame, out: Path, checkpoint: Path, **trigger: str | bool) -> StreamingQuery:
    """Start ``df`` into parquet files in ``out``, checkpointed in ``checkpoint``, with the
    trigger given as to ``DataStreamWriter.trigger`` (``availableNow=True``, say)."""
    return (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**trigger)
        .start()
    )


def driver(url: str, topic: str, **options: str) -> PulsarStreamReader:
    """The driver's side of a stream on ``topic``, to call directly, without Spark."""
    parsed = ReadOptions.parse(
        {"service.url": url, "topic": topic, **options}, mode=ReadMode.STREAM
    )
    return PulsarStreamReader(parsed)


@dataclass(frozen=True)
class Streams:
    """What the streaming queries of one test share: the session's Spark, the service URL
    they read (:meth:`through` another, a proxy's say), the official client publishing to the
    session broker, and the test's own folder for checkpoints and output."""

    spark: SparkSession
    url: str
    client: pulsar.Client
    folder: Path

    @property
    def checkpoint(self) -> Path:
        return self.folder / "checkpoint"

    def through(self, url: str) -> Streams:
        """The same, reading from ``url``."""
        return dataclasses.replace(self, url=url)

    def publish(self, topic: str, messages: list[Draft], *, batch_size: int = 0) -> list[Message]:
        """:func:`publish` with :attr:`client`."""
        return publish(self.client, topic, messages, batch_size=batch_size)

    def stream(self, topic: str, **options: str) -> DataFrame:
        return stream(self.spark, self.url, topic, **options)

    def read_available_now(self, topic: str, batches: Batches, **options: str) -> StreamingQuery:
        """:func:`read_available_now`, checkpointed in :attr:`checkpoint`."""
        return read_available_now(self.spark, self.url, topic, batches, self.checkpoint, **options)

    def driver(self, topic: str, **options: str) -> PulsarStreamReader:
        return driver(self.url, topic, **options)


def processing_time(df: DataFrame, batches: Batches, interval: str) -> StreamingQuery:
    """Start ``df`` with a processing-time trigger every ``interval`` (``"1 second"``), each
    micro-batch into ``batches``."""
    return df.writeStream.foreachBatch(batches).trigger(processingTime=interval).start()


def checkpoint_offsets(checkpoint: Path) -> dict[int, str]:
    """The source offset text of every batch in ``<checkpoint>/offsets`` (the third line)."""
    found = {}
    for path in (checkpoint / "offsets").iterdir():
        if path.name.isdigit():
            lines = path.read_text(encoding="utf-8").splitlines()
            assert lines[0] == "v1"
            found[int(path.name)] = lines[2]
    return dict(sorted(found.items()))


def ends_of(messages: list[Message]) -> dict[str, dict[str, int]]:
    """The offset a query holds after consuming ``messages`` entirely: per partition, the
    last message's entry as a whole."""
    last: dict[str, Message] = {}
    for m in sorted(messages):
        last[m.topic if m.partition < 0 else partition_of(m.topic, m.partition)] = m
    return {name: m.position(-1) for name, m in sorted(last.items())}


def by_partition(messages: list[Message]) -> dict[int, list[Message]]:
    out: dict[int, list[Message]] = {}
    for m in messages:
        out.setdefault(m.partition, []).append(m)
    return out
