"""``spark.readStream.format("pulsar")`` against pulsar-lite, with the official client publishing.

Every test publishes with ``pulsar-client`` (the Apache C++ client) and remembers each message
with the id its send callback returned; what the query delivers is then compared with that,
message by message: value, key, properties, topic, partition, message id and producer name.

Offsets name, per partition, the last message consumed (see :mod:`pulsar_spark.spark.offsets`),
so each micro-batch reads ``(start, end]`` and a restarted query resumes right after the last
committed end. Tests that restart or break a broker start their own; the session broker is
shared.
"""

from __future__ import annotations

import contextlib
import json
import logging
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pyarrow as pa
import pytest
from broker_proxy import apache_proxy
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from pulsar_spark.client.address import parse_service_url
from pulsar_spark.client.pool import default_pool
from pulsar_spark.errors import BrokerUnreachableError, DataLossError
from pulsar_spark.local_broker import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.spark.offsets import NOTHING_CONSUMED
from pulsar_spark.spark.options import ReadOptions
from pulsar_spark.spark.stream_reader import PulsarStreamReader

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NS = "persistent://public/default/"
QUERY_TIMEOUT = 180.0
"""Seconds a query may take to drain or show a result (generous: the machine is shared)."""


def full(topic: str) -> str:
    return topic if "://" in topic else NS + topic


def partition_of(topic: str, index: int) -> str:
    return f"{full(topic)}-partition-{index}"


# --- what was published --------------------------------------------------------------------------


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


@pytest.fixture(scope="module")
def client(broker: LocalBroker) -> Iterator[pulsar.Client]:
    official = official_client(broker)
    yield official
    official.close()


def official_client(broker: LocalBroker) -> pulsar.Client:
    return pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


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


# --- reading with Spark ------------------------------------------------------------------------

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
    """A ``foreachBatch`` function keeping each micro-batch's messages by batch id."""

    def __init__(self) -> None:
        self.by_id: dict[int, list[Message]] = {}
        self.hook: Callable[[int], None] | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.by_id[batch_id] = as_messages(df)
        if self.hook is not None:
            self.hook(batch_id)

    def sizes(self) -> list[int]:
        return [len(self.by_id[i]) for i in sorted(self.by_id)]

    def all(self) -> list[Message]:
        return [m for i in sorted(self.by_id) for m in self.by_id[i]]


def wait_until(check: Callable[[], bool], what: str, timeout: float = QUERY_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.2)


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


# --- exactly once across restarts ---------------------------------------------------------------


def test_exactly_once_across_restarts_while_publishing(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """A parquet query is stopped and started again four times (processing-time and
    AvailableNow runs) while the official client publishes batches of keyed messages to three
    partitions; once, the last micro-batch is made to look as if the query died after writing
    it but before committing it, so the next run reads that batch again from its logged
    offsets. A final AvailableNow run after publishing stops drains the rest. The output holds
    every published message exactly once, and each partition's messages in publish order.

    Spark's file sink records which files each batch committed, so a batch read twice must
    produce the same messages for the output to be exact: that is what this checks of the
    source.
    """
    topic = pooled_partitioned_topic(3)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    limit = 300
    # batch id -> input rows, per run; a replayed batch appears in two runs
    runs: list[dict[int, int]] = []

    def start(**trigger: Any) -> StreamingQuery:
        df = stream(
            spark,
            broker.service_url,
            topic,
            startingOffsets="earliest",
            maxMessagesPerTrigger=str(limit),
        )
        return (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    def finish(query: StreamingQuery) -> None:
        assert query.exception() is None
        runs.append({p.batchId: p.numInputRows for p in query.recentProgress})

    def run_for_a_while() -> None:
        query = start(processingTime="200 milliseconds")
        wait_until(
            lambda: any(p.numInputRows > 0 for p in query.recentProgress),
            "a micro-batch with data",
        )
        query.stop()
        finish(query)

    def run_available_now() -> None:
        query = start(availableNow=True)
        drain(query)
        finish(query)

    with uncompacted_sink_log(spark):
        with BackgroundPublisher(client, topic) as publisher:
            run_for_a_while()
            run_available_now()
            replayed = forget_last_batch(checkpoint, out)
            run_for_a_while()
            run_for_a_while()
            sent = publisher.stop()
        run_available_now()
        got = as_messages(spark.read.parquet(str(out)))

    assert {m.partition for m in sent} == {0, 1, 2}
    assert {m.batch for m in sent} > {0, 1}  # batched
    assert got == sorted(sent)  # every message once, every field as published
    # within a partition, message-id order is publish order
    for partition, messages in by_partition(got).items():
        published = [m.value for m in sent if m.partition == partition]
        assert [m.value for m in messages] == published
    # the forgotten batch ran again, with the same messages
    assert runs[1][replayed] > 0
    assert runs[2][replayed] == runs[1][replayed]
    sizes = [n for run in runs for n in run.values()]
    assert max(sizes) <= limit
    offsets = checkpoint_offsets(checkpoint)
    assert json.loads(offsets[max(offsets)]) == ends_of(sent)


@contextlib.contextmanager
def uncompacted_sink_log(spark: SparkSession) -> Iterator[None]:
    """File sinks started (and read) inside keep one log file per batch (no ``N.compact``
    files standing for all batches up to N), so one batch's record can be removed."""
    conf = "spark.sql.streaming.fileSink.log.compactInterval"
    before = spark.conf.get(conf, None)
    spark.conf.set(conf, "1000")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(conf)
        else:
            spark.conf.set(conf, before)


def forget_last_batch(checkpoint: Path, out: Path) -> int:
    """Make the last micro-batch of a query that ended cleanly look planned but never
    written, as a query killed in between leaves it: remove its commit and the file sink's
    record of its files (the files stay, unlisted). Return its id."""
    batches = [
        {int(p.name) for p in directory.iterdir() if p.name.isdigit()}
        for directory in (checkpoint / "offsets", checkpoint / "commits", out / "_spark_metadata")
    ]
    batch = max(batches[0])
    assert batch == max(batches[1]) == max(batches[2])
    sink_log = out / "_spark_metadata"
    for directory in (checkpoint / "commits", sink_log):
        for name in (str(batch), f".{batch}.crc"):
            (directory / name).unlink(missing_ok=True)
    return batch


# --- maxMessagesPerTrigger -----------------------------------------------------------------------


def test_max_messages_per_trigger_is_exact(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """1000 messages in batches of 7 over two partitions (600 and 400), read with
    maxMessagesPerTrigger=100: the source counts messages, not entries, and ends a micro-batch
    inside a batched entry when the count says so (the next one resumes right after), so
    every micro-batch holds exactly 100 messages and never more. The budget is shared evenly
    between partitions that still have messages."""
    topic = pooled_partitioned_topic(2)
    p0 = publish(client, partition_of(topic, 0), drafts(600, "p0"), batch_size=7)
    p1 = publish(client, partition_of(topic, 1), drafts(400, "p1"), batch_size=7)
    batches = Batches()
    query = available_now(
        stream(
            spark,
            broker.service_url,
            topic,
            startingOffsets="earliest",
            maxMessagesPerTrigger="100",
        ),
        batches,
        tmp_path / "checkpoint",
    )
    drain(query)
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


# --- AvailableNow --------------------------------------------------------------------------------


def test_available_now_reads_what_existed_at_start_and_stops(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """AvailableNow records each partition's last message when the query starts and stops
    once it has read up to there: messages published while it runs (here: from inside its
    first micro-batch) are left for the next run, which reads exactly those."""
    topic = pooled_partitioned_topic(2)
    early = publish(client, topic, drafts(250, "early"), batch_size=10)
    late: list[Message] = []
    batches = Batches()

    def publish_late(batch_id: int) -> None:
        if batch_id == 0:
            late.extend(publish(client, topic, drafts(40, "late"), batch_size=10))

    batches.hook = publish_late

    def run() -> StreamingQuery:
        query = available_now(
            stream(
                spark,
                broker.service_url,
                topic,
                startingOffsets="earliest",
                maxMessagesPerTrigger="100",
            ),
            batches,
            tmp_path / "checkpoint",
        )
        drain(query)
        return query

    run()
    assert len(late) == 40
    assert batches.sizes() == [100, 100, 50]
    assert sorted(batches.all()) == sorted(early)

    batches.by_id.clear()
    run()
    assert batches.sizes() == [40]
    assert batches.all() == sorted(late)
    assert sorted(batches.by_id) == [3]


# --- an idle query ----------------------------------------------------------------------------


IDLE_SECONDS = 65.0
"""More than two keep-alive intervals (30 s, fixed) of the connector's connections."""


def test_idle_query_receives_messages_after_a_long_silence(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """A processing-time query with nothing to read for longer than two keep-alive intervals
    of the connector's connections (30 s each, not configurable; the broker pings every 30 s
    too) still reads exactly what is published afterwards.

    Such a query polls the broker every trigger from its driver process, so to also cover a
    connection that carries nothing but pings and pongs for the whole silence (as with a long
    trigger interval), the driver's side of a query is run here as well, in this process: its
    pooled connection must be the very same one after the silence, and still serve reads.
    """
    publish(client, topic_name, drafts(3, "before"))  # the topic exists, not read (latest)
    batches = Batches()
    query = (
        stream(spark, broker.service_url, topic_name)
        .writeStream.foreachBatch(batches)
        .trigger(processingTime="1 second")
        .start()
    )
    driver = PulsarStreamReader(
        ReadOptions.parse({"service.url": broker.service_url, "topic": topic_name}, streaming=True)
    )
    try:
        start = driver.initialOffset()
        connection = default_pool().get(
            parse_service_url(broker.service_url)[0], driver.options.client.connection
        )
        wait_until(lambda: query.lastProgress is not None, "the first trigger")
        first = publish(client, topic_name, drafts(5, "first"))
        wait_until(lambda: len(batches.all()) == 5, "the first messages")
        seen = dict(batches.by_id)
        time.sleep(IDLE_SECONDS)
        assert query.isActive
        assert query.exception() is None
        assert batches.by_id == seen
        assert not connection.closed
        second = publish(client, topic_name, drafts(7, "second", first=5))
        wait_until(lambda: len(batches.all()) == 12, "the messages after the silence", 60)
    finally:
        query.stop()
    assert batches.all() == first + second
    assert query.exception() is None

    end = driver.latestOffset(start, ReadAllAvailable())
    assert end == ends_of(first + second)
    (work,) = driver.partitions(start, end)
    table = pa.Table.from_batches(list(driver.read(work)))
    assert table.column("value").to_pylist() == [m.value for m in first + second]
    assert (
        default_pool().get(
            parse_service_url(broker.service_url)[0], driver.options.client.connection
        )
        is connection
    )
    assert not connection.closed


# --- partitions added while a query runs ----------------------------------------------------


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[Callable[..., LocalBroker]]:
    """Start brokers of this test's own (never the shared one); all stopped at the end."""
    started: list[LocalBroker] = []

    def start(**kwargs: Any) -> LocalBroker:
        local = LocalBroker.start(**kwargs)
        started.append(local)
        return local

    yield start
    for local in started:
        local.stop()


def test_partition_added_mid_stream_is_read_from_its_beginning(
    spark: SparkSession, own_broker: Callable[..., LocalBroker], tmp_path: Path
) -> None:
    """A topic grows from 2 to 3 partitions while a checkpointed query runs: the broker
    restarts with the new count (pulsar-lite reads partition counts only at startup), the
    query rides out the restart and finds the new partition, which is not in its offsets and
    is read from its first message. Then the query is stopped and started again. Nothing is
    read twice or missed."""
    local = own_broker(data_dir=tmp_path / "broker", partitioned_topics={"grow": 2})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(**trigger: Any) -> StreamingQuery:
        return (
            stream(spark, local.service_url, "grow", startingOffsets="earliest")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    def publish_to(partitions: list[int], tag: str) -> list[Message]:
        official = official_client(local)
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
    wait_until(lambda: read_so_far(query) == len(before), "the first messages")

    local.restart(partitioned_topics={"grow": 3})
    assert local.partitioned_topics() == {full("grow"): 3}
    after = publish_to([2, 0, 1], "b")
    wait_until(lambda: read_so_far(query) == len(before + after), "the messages after restart")
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


# --- failOnDataLoss ------------------------------------------------------------------------------


def test_start_beyond_the_end_is_data_loss(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """A start position the partition does not reach (here a user's startingOffsets; after a
    topic was deleted and re-created it would be the checkpoint) is data loss: by default the
    query fails naming failOnDataLoss; with failOnDataLoss=false it goes on from what the
    partition holds, from its first message."""
    sent = publish(client, topic_name, drafts(10, "dl"))
    ledger = sent[0].ledger
    beyond = {topic_name: {"ledgerId": ledger, "entryId": 50, "batchIndex": -1}}
    message, read = strict_then_lenient(spark, broker.service_url, topic_name, beyond, tmp_path)
    assert "DataLossError" in message
    assert f"partition {full(topic_name)} was read up to {ledger}:49:-1 but now ends at " in (
        message
    )
    assert f"{ledger}:9:-1: data the query expected is gone" in message
    assert "Set failOnDataLoss=false to continue from what exists" in message
    assert read == sent


def strict_then_lenient(
    spark: SparkSession, url: str, topic: str, start: dict[str, Any], tmp_path: Path
) -> tuple[str, list[Message]]:
    """Run an AvailableNow query from startingOffsets ``start`` by default, which must fail,
    then with failOnDataLoss=false, which must finish: the first one's error text, and what
    the second one read."""

    def run(name: str, **options: str) -> tuple[StreamingQuery, Batches]:
        batches = Batches()
        query = available_now(
            stream(spark, url, topic, startingOffsets=json.dumps(start), **options),
            batches,
            tmp_path / name,
        )
        return query, batches

    query, _ = run("strict")
    with pytest.raises(StreamingQueryException) as info:
        query.awaitTermination(QUERY_TIMEOUT)
    query, batches = run("lenient", failOnDataLoss="false")
    drain(query)
    return str(info.value), batches.all()


def test_start_in_a_ledger_retention_removed_is_data_loss(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """A start position whose ledger retention removed: Apache Pulsar then delivers from the
    first entry left, in a later ledger (a proxy makes pulsar-lite do the same; the start is a
    user's startingOffsets here, a checkpoint's after a restart). By default the task fails
    naming the partition, the start and the first message left; with failOnDataLoss=false the
    query reads what is left."""
    publish(client, topic_name + "-earlier", drafts(1, "earlier"))
    sent = publish(client, topic_name, drafts(10, "rm"))
    ledger = sent[0].ledger
    assert ledger > 0
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.first_ledgers = {full(topic_name): ledger}
    removed = {topic_name: {"ledgerId": ledger - 1, "entryId": 5, "batchIndex": -1}}
    try:
        message, read = strict_then_lenient(spark, proxy.url, topic_name, removed, tmp_path)
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

    def reader(**options: str) -> PulsarStreamReader:
        return PulsarStreamReader(
            ReadOptions.parse(
                {"service.url": broker.service_url, "topic": topic_name, **options},
                streaming=True,
            )
        )

    loss = (
        f"partition {name} was read up to {ledger}:9:-1 but now ends at {ledger}:1:-1: data "
        "the query expected is gone. Set failOnDataLoss=false to continue from what exists "
        "(the missing messages are skipped)"
    )
    with pytest.raises(DataLossError) as info:
        reader().latestOffset(start, ReadAllAvailable())
    assert str(info.value) == loss

    lenient = reader(failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="pulsar_spark.spark.stream_reader"):
        reset = lenient.latestOffset(start, ReadAllAvailable())
    assert [r.getMessage() for r in caplog.records] == [loss]
    nothing = NOTHING_CONSUMED.to_json()
    assert reset == {name: nothing}
    assert lenient.partitions(start, reset) == []
    end = lenient.latestOffset(reset, ReadAllAvailable())
    assert end == {name: sent[-1].position(-1)}
    (read,) = lenient.partitions(reset, end)
    assert (read.start, read.end) == (NOTHING_CONSUMED, MessageId(ledger, 1, -1))
    assert (read.start_inclusive, read.end_inclusive) == (False, True)
    # the same under a limit
    assert lenient.latestOffset(start, ReadMaxRows(3)) == {name: nothing}
    assert lenient.latestOffset(reset, ReadMaxRows(3)) == {name: sent[2].position()}


def test_limited_latest_offsets_resume_where_the_last_ended_and_replay_the_same(
    broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """The driver keeps its message counters between micro-batches: each limited
    latestOffset counts on from the previous end, cutting inside entries of 4, and ends at
    the whole last entry. Asking again from an earlier start (a replayed micro-batch) starts
    a new count and gives the same ends."""
    sent = publish(client, topic_name, drafts(25, "r"), batch_size=4)
    name = full(topic_name)
    reader = PulsarStreamReader(
        ReadOptions.parse(
            {
                "service.url": broker.service_url,
                "topic": topic_name,
                "startingOffsets": "earliest",
            },
            streaming=True,
        )
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
    reader.stop()


def test_initial_offset_is_resolved_once(
    broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Spark asks for the initial offset twice: once to start the first latestOffset and
    once to start the first micro-batch. For startingOffsets=latest both answers must be the
    same, or the messages published in between would be skipped."""
    publish(client, topic_name, drafts(2, "a"))
    reader = PulsarStreamReader(
        ReadOptions.parse({"service.url": broker.service_url, "topic": topic_name}, streaming=True)
    )
    first = reader.initialOffset()
    publish(client, topic_name, drafts(3, "b"))
    assert reader.initialOffset() == first


def test_available_now_start_after_its_recorded_end_is_not_data_loss(
    broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Spark calls prepareForTriggerAvailableNow (which records each partition's end) before
    initialOffset: a start resolved after messages arrived in between (startingOffsets latest)
    lies beyond the recorded end. That is no loss; the run has nothing to read there."""
    publish(client, topic_name, drafts(3, "x"))
    reader = PulsarStreamReader(
        ReadOptions.parse({"service.url": broker.service_url, "topic": topic_name}, streaming=True)
    )
    reader.prepareForTriggerAvailableNow()
    later = publish(client, topic_name, drafts(2, "y"))
    start = reader.initialOffset()
    assert start == {full(topic_name): later[-1].position(-1)}
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    assert reader.latestOffset(start, ReadMaxRows(10)) == start
    assert reader.partitions(start, start) == []


def test_latest_offset_retries_a_lost_broker_until_the_connection_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """latestOffset retries a refused or lost connection, pausing 0.1 s, 0.2 s, ... between
    attempts, for pulsar.client.connectionTimeoutMs (a broker restart takes a second or two);
    a broker that stays away fails the trigger after that."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    reader = PulsarStreamReader(
        ReadOptions.parse(
            {
                "service.url": f"pulsar://127.0.0.1:{port}",
                "topic": "t",
                "pulsar.client.connectionTimeoutMs": "1000",
            },
            streaming=True,
        )
    )
    started = time.monotonic()
    with (
        caplog.at_level(logging.WARNING, logger="pulsar_spark.spark.stream_reader"),
        pytest.raises(BrokerUnreachableError) as info,
    ):
        reader.latestOffset({full("t"): NOTHING_CONSUMED.to_json()}, ReadAllAvailable())
    elapsed = time.monotonic() - started
    assert f"cannot connect to Pulsar broker at 127.0.0.1:{port}" in str(info.value)
    assert 1.0 <= elapsed < 10, elapsed
    pauses = [r.getMessage().split(" after ")[0] for r in caplog.records]
    # attempts at about 0, 0.1, 0.3, 0.7 and 1.5 s: four pauses (three on a stalled machine)
    expected = [f"retrying in {pause:.2f}s" for pause in (0.1, 0.2, 0.4, 0.8)]
    assert len(pauses) in (3, 4)
    assert pauses == expected[: len(pauses)]


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
    official = official_client(local)
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
        return (
            stream(spark, local.service_url, "lossy", startingOffsets="earliest", **options)
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )

    drain(run())
    assert as_messages(spark.read.parquet(str(out))) == sorted(before)

    local.stop()
    shutil.rmtree(data / "db.rocksdb")
    (data / "db.metadata.json").unlink()
    local = own_broker(data_dir=data, partitioned_topics={"lossy": 2})
    official = official_client(local)
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


# --- checkpointed offsets and progress -----------------------------------------------------------


def test_checkpoint_offsets_are_canonical_json(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """``offsets/N`` holds, per partition name in sorted order, the last consumed message id
    with its keys sorted (batchIndex, entryId, ledgerId): the exact text Spark compares. A
    batch index names a message inside a batch; -1 a whole entry (a batch consumed to its end,
    or a single message)."""
    topic = pooled_partitioned_topic(2)
    p0 = publish(client, partition_of(topic, 0), drafts(9, "c0"), batch_size=4)
    p1 = publish(client, partition_of(topic, 1), drafts(3, "c1"))
    # entries 0 and 1 hold four messages each, entry 2 one
    assert [(m.entry, m.batch) for m in p0] == [
        *((e, i) for e in (0, 1) for i in range(4)),
        (2, 0),
    ]
    checkpoint = tmp_path / "checkpoint"
    query = available_now(
        stream(
            spark, broker.service_url, topic, startingOffsets="earliest", maxMessagesPerTrigger="6"
        ),
        Batches(),
        checkpoint,
    )
    drain(query)
    a, b = partition_of(topic, 0), partition_of(topic, 1)
    l0, l1 = p0[0].ledger, p1[0].ledger
    # batch 0: three of each partition; batch 1: the other six of partition 0
    assert checkpoint_offsets(checkpoint) == {
        0: (
            f'{{"{a}": {{"batchIndex": 2, "entryId": 0, "ledgerId": {l0}}}, '
            f'"{b}": {{"batchIndex": -1, "entryId": 2, "ledgerId": {l1}}}}}'
        ),
        1: (
            f'{{"{a}": {{"batchIndex": -1, "entryId": 2, "ledgerId": {l0}}}, '
            f'"{b}": {{"batchIndex": -1, "entryId": 2, "ledgerId": {l1}}}}}'
        ),
    }


# --- starting positions ---------------------------------------------------------------------------


def test_stream_starts_at_latest_by_default(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    """Without startingOffsets a stream starts after what the partitions hold when it starts
    (one of them empty then, which it reads from its first message)."""
    topic = pooled_partitioned_topic(2)
    publish(client, partition_of(topic, 0), drafts(6, "old"), batch_size=3)
    batches = Batches()
    query = (
        stream(spark, broker.service_url, topic)
        .writeStream.foreachBatch(batches)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: query.lastProgress is not None, "the first trigger")
        new = publish(client, partition_of(topic, 0), drafts(4, "new0"), batch_size=3)
        new += publish(client, partition_of(topic, 1), drafts(2, "new1"))
        wait_until(lambda: len(batches.all()) >= 6, "the new messages")
        time.sleep(1.5)  # nothing else arrives
    finally:
        query.stop()
    assert sorted(batches.all()) == sorted(new)


def test_starting_time_skips_what_was_published_before(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """startingTime (publish time, ms) starts each partition at its first message published at
    or after that time; a partition with nothing newer starts after its end."""
    topic = pooled_partitioned_topic(2)
    old = publish(client, partition_of(topic, 0), drafts(5, "old0"), batch_size=2)
    old += publish(client, partition_of(topic, 1), drafts(5, "old1"))
    time.sleep(0.05)
    since = int(time.time() * 1000)
    time.sleep(0.05)
    new = publish(client, partition_of(topic, 0), drafts(5, "new0"), batch_size=2)
    batches = Batches()
    query = available_now(
        stream(spark, broker.service_url, topic, startingTime=str(since)),
        batches,
        tmp_path / "checkpoint",
    )
    drain(query)
    assert batches.all() == new
    assert {m.partition for m in old} == {0, 1}


def test_starting_offsets_json_is_inclusive(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """A position given in startingOffsets is the first message read (here inside a batch);
    partitions not named start at the default for streams, latest."""
    topic = pooled_partitioned_topic(2)
    p0 = publish(client, partition_of(topic, 0), drafts(10, "j0"), batch_size=4)
    publish(client, partition_of(topic, 1), drafts(4, "j1"))
    assert p0[5].batch == 1
    batches = Batches()
    query = available_now(
        stream(
            spark,
            broker.service_url,
            topic,
            startingOffsets=json.dumps({partition_of(topic, 0): p0[5].position()}),
        ),
        batches,
        tmp_path / "checkpoint",
    )
    drain(query)
    assert batches.all() == p0[5:]


# --- a broker whose last message ids carry a batch index ----------------------------------------


def test_limited_query_where_last_ids_carry_a_batch_index(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    """Apache Pulsar answers GetLastMessageId with the last entry's largest batch index (0 for
    an unbatched message); pulsar-lite with none. Through a proxy that answers like Apache
    Pulsar, a limited AvailableNow query reads a batched and an unbatched partition to their
    last message, exactly once; run again with nothing new it reads nothing and reports no
    data loss; run after more messages it reads just those. A batch read sees them all."""
    topic = pooled_partitioned_topic(2)
    p0 = publish(client, partition_of(topic, 0), drafts(17, "p0"), batch_size=5)
    p1 = publish(client, partition_of(topic, 1), drafts(4, "p1"))
    assert [m.batch for m in p0[-2:]] == [0, 1]
    assert {m.batch for m in p1} == {-1}
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.batch_sizes = {(m.ledger, m.entry): m.batch + 1 for m in sorted(p0)}
    batches = Batches()

    def run() -> list[int]:
        seen = set(batches.by_id)
        drain(
            available_now(
                stream(
                    spark, proxy.url, topic, startingOffsets="earliest", maxMessagesPerTrigger="6"
                ),
                batches,
                tmp_path / "checkpoint",
            )
        )
        return sorted(set(batches.by_id) - seen)

    try:
        first = run()
        assert [len(batches.by_id[i]) for i in first] == [6, 6, 6, 3]
        assert sorted(batches.all()) == sorted(p0 + p1)
        assert answers.last_ids_answered >= 2
        assert run() == []
        more = publish(client, partition_of(topic, 1), drafts(3, "more"))
        added = run()
        assert [batches.by_id[i] for i in added] == [sorted(more)]
        everything = spark.read.format("pulsar").option("service.url", proxy.url)
        assert as_messages(everything.option("topic", topic).load()) == sorted(p0 + p1 + more)
    finally:
        proxy.close()
