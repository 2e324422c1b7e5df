"""``df.writeStream.format("pulsar")`` with a checkpoint, stopped and restarted: clean stops,
a stop between a micro-batch's write and its commit, and a stop in the middle of a write.
"""

from __future__ import annotations

import collections
import contextlib
import json
import time
from pathlib import Path

import pulsar
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery
from support.topics import full
from support.written import Got, read_topic, read_with_spark

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.message_id import MessageId

pytestmark = [pytest.mark.integration, pytest.mark.spark]


class FileStream:
    """A directory of JSON files read by a file-source stream (one file per micro-batch) and
    written to a topic by ``writeStream.format("pulsar")`` with a checkpoint."""

    def __init__(self, spark: SparkSession, broker: LocalBroker, topic: str, root: Path) -> None:
        self.spark, self.broker, self.topic = spark, broker, topic
        self.source, self.staging, self.checkpoint = root / "in", root / "staging", root / "ck"
        self.source.mkdir()
        self.staging.mkdir()
        self.rows: dict[str, list[str]] = {}  # file name -> the values of its rows

    def add(self, name: str, rows: int) -> None:
        """A new input file, moved in whole so the stream never sees it half written."""
        values = [f"{name}-r{i}" for i in range(rows)]
        staged = self.staging / f"{name}.json"
        staged.write_text(
            "".join(json.dumps({"value": v, "key": key_of(v)}) + "\n" for v in values)
        )
        staged.rename(self.source / staged.name)
        self.rows[name] = values

    def start(self, **options: str) -> StreamingQuery:
        df = (
            self.spark.readStream.schema("value string, key string")
            .option("maxFilesPerTrigger", 1)
            .json(str(self.source))
        )
        writer = (
            df.writeStream.format("pulsar")
            .option("service.url", self.broker.service_url)
            .option("topic", self.topic)
            .option("checkpointLocation", str(self.checkpoint))
        )
        for name, value in options.items():
            writer = writer.option(name, value)
        return writer.start()

    def run(self) -> None:
        """Start, process every file present, stop cleanly."""
        query = self.start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    def last_committed(self) -> int:
        return max(int(p.name) for p in (self.checkpoint / "commits").iterdir() if p.name.isdigit())

    def files_of_batch(self, batch: int) -> list[str]:
        """The input files the file source log assigns to a micro-batch."""
        lines = (self.checkpoint / "sources" / "0" / str(batch)).read_text().splitlines()[1:]
        return [Path(json.loads(line)["path"]).stem for line in lines]

    def forget_commit(self, batch: int) -> None:
        """What a stop between a micro-batch's write and its commit leaves behind."""
        for name in (str(batch), f".{batch}.crc"):
            (self.checkpoint / "commits" / name).unlink(missing_ok=True)


def key_of(value: str) -> str:
    return f"key-{sum(value.encode()) % 11}"


def test_streaming_write_stopped_and_restarted(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    lookup: Lookup,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """Every input row reaches the topic across clean stops, a stop between a batch's write
    and its commit, and a stop in the middle of a batch's write.

    A clean stop duplicates nothing. A micro-batch run again after a restart (offsets logged,
    commit not) is written again in full by producers with the same names and sequence ids
    (write id = query id + batch id): pulsar-lite does not deduplicate, so the topic holds
    what the first attempt wrote twice, while the Apache broker of the tests, which has
    deduplication on, drops every repeat (same producer name and sequence id): the topic
    then holds each row once.
    """
    stream = FileStream(spark, broker, topic_name, tmp_path)
    duplicates: dict[str, int] = {}
    deduplicates = isinstance(broker, ApacheBroker) and (
        broker.config.get("brokerDeduplicationEnabled") == "true"
    )

    def check(*, replayed: set[str]) -> dict[str, list[Got]]:
        """Every row so far is in the topic with its key; only ``replayed`` files repeat."""
        got = read_topic(client, topic_name)
        by_value: dict[str, list[Got]] = collections.defaultdict(list)
        for g in got:
            by_value[g.value.decode()].append(g)
        expected = {v for values in stream.rows.values() for v in values}
        assert set(by_value) == expected
        for value, copies in by_value.items():
            assert {(g.key, g.properties, g.null_value) for g in copies} == {
                (key_of(value), (), False)
            }
            if len(copies) > 1:
                assert value.rsplit("-r", 1)[0] in replayed, value
        return by_value

    # two clean runs: nothing is written twice
    for name in ("a0", "a1", "a2"):
        stream.add(name, 300)
    stream.run()
    assert stream.last_committed() == 2
    for name in ("b0", "b1"):
        stream.add(name, 300)
    stream.run()
    assert stream.last_committed() == 4
    check(replayed=set())

    # stopped after batch 4 was written but before it was committed: the restart writes it
    # again, and only it
    stream.forget_commit(4)
    replayed = set(stream.files_of_batch(4))
    assert len(replayed) == 1
    stream.add("c0", 300)
    stream.run()
    assert stream.last_committed() == 5
    by_value = check(replayed=replayed)
    copies = {v: gs for v, gs in by_value.items() if len(gs) > 1}
    duplicates["replayed batch"] = sum(len(gs) - 1 for gs in copies.values())
    assert duplicates["replayed batch"] == (0 if deduplicates else 300)
    assert set(copies) == (set() if deduplicates else set(stream.rows[next(iter(replayed))]))
    for gs in copies.values():
        assert len(gs) == 2
        assert gs[0].producer_name == gs[1].producer_name  # same query id, batch id, task
    ours = read_with_spark(spark, broker, topic_name)
    repeats = collections.Counter((r["producerName"], r["sequenceId"]) for r in ours)
    # the repeats are the same (name, seq)
    assert sum(n - 1 for n in repeats.values()) == (0 if deduplicates else 300)

    # stopped in the middle of a micro-batch's write (a slow sink: one message in flight).
    # stop() returns once Spark has given up on the task, but its Python worker may go on
    # sending (until done, or killed after spark.python.task.killTimeout): wait until the
    # topic is quiet, so that the restart does not run beside it. The restart writes the
    # whole batch again, so it repeats exactly what the interrupted attempt wrote.
    slow = {
        "pulsar.producer.batchingEnabled": "false",
        "pulsar.producer.maxPendingMessages": "1",
    }
    for name in ("d0", "d1"):
        stream.add(name, 3000)
    query = stream.start(**slow)
    try:
        wait_for_value(client, topic_name, "d0-r", timeout=120)
    finally:
        query.stop()
    wait_until_quiet(lookup, topic_name, quiet=2.0)
    interrupted = stream.last_committed() + 1
    assert stream.files_of_batch(interrupted) == ["d0"]
    partial = [g for g in read_topic(client, topic_name) if g.value.startswith(b"d0-")]
    assert 0 < len(partial) <= 3000
    assert len({g.value for g in partial}) == len(partial)
    stream.run()
    by_value = check(replayed={"d0"} | replayed)
    duplicates["interrupted batch"] = sum(
        len(gs) - 1 for v, gs in by_value.items() if v.startswith("d0-")
    )
    assert duplicates["interrupted batch"] == (0 if deduplicates else len(partial))
    ours = read_with_spark(spark, broker, topic_name)
    repeats = collections.Counter((r["producerName"], r["sequenceId"]) for r in ours)
    assert sum(n - 1 for n in repeats.values()) == (0 if deduplicates else 300 + len(partial))
    # a clean restart with nothing new writes nothing
    stream.run()
    assert len(read_topic(client, topic_name)) == sum(len(gs) for gs in by_value.values())


def wait_until_quiet(lookup: Lookup, topic: str, *, quiet: float, timeout: float = 60) -> None:
    """Wait until ``topic`` has had no new entry for ``quiet`` seconds."""
    consumer = Consumer(lookup, full(topic), MessageId.latest(), timeout=10.0)
    try:
        last = consumer.last_message_id()
        changed = time.monotonic()
        deadline = changed + timeout
        while time.monotonic() - changed < quiet:
            assert time.monotonic() < deadline, f"{topic} still growing after {timeout}s"
            time.sleep(0.2)
            now = consumer.last_message_id()
            if now != last:
                last, changed = now, time.monotonic()
    finally:
        consumer.close()


def wait_for_value(client: pulsar.Client, topic: str, prefix: str, *, timeout: float) -> None:
    """Return as soon as a message whose value starts with ``prefix`` is in ``topic``."""
    reader = client.create_reader(full(topic), pulsar.MessageId.earliest)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(pulsar.Timeout):
                if reader.read_next(1000).data().startswith(prefix.encode()):
                    return
    finally:
        reader.close()
    raise AssertionError(f"no message starting with {prefix!r} within {timeout}s")
