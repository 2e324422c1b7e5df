"""Faults of a real Apache Pulsar broker under Spark jobs and producers.

What the proxy of tests/support/broker_proxy.py emulates in front of pulsar-lite, Apache does here
for real: a topic unload (the admin API's, as a bundle moving to another broker does it)
closes the topic's consumers and producers, which must connect again; a broker killed with
SIGKILL and started again on the same data comes back after a ledger recovery. With
deduplication on (the session broker and :func:`killable` have it), nothing is lost and
nothing is stored twice: a producer created again under its name learns the last sequence id
the broker stored, and the broker drops what it sends again.

Spark runs in local mode, where a failed task fails its job (``spark.task.maxFailures`` is
1); the tests also ask Spark's status tracker, so that "no failed task" is said outright.
What was written is read back with the official client.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.apache_faults import unload
from support.apache_fixtures import create_partitioned_topic, start_apache
from support.broker_proxy import ApacheAnswers, BrokerProxy
from support.clients import settings_for
from support.official import official_client, publish_keyed
from support.written import read_partitioned, read_topic

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.settings import ProducerSettings
from pulsar_spark.local import ApacheBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.topic import full_topic_name

pytestmark = [pytest.mark.integration, pytest.mark.apache]

Type = pb.BaseCommand.Type

PARTITIONS = 4
READ_ROWS = 100_000
WRITE_ROWS = 60_000
OPERATION_TIMEOUT_MS = "60000"
"""Long enough for an Apache broker to come back from SIGKILL (its start takes 15 s or more
on a busy machine)."""


@pytest.fixture(scope="module")
def killable() -> Iterator[ApacheBroker]:
    """An Apache broker of this module's own, which its tests kill and start again."""
    broker = start_apache()
    yield broker
    broker.stop()


def new_topic(broker: ApacheBroker, stem: str, partitions: int = PARTITIONS) -> str:
    """A new partitioned topic of ``broker``, by its full name."""
    topic = full_topic_name(f"{stem}-{uuid.uuid4().hex[:12]}")
    create_partitioned_topic(broker, topic, partitions)
    return topic


def stored_values(url: str, topic: str, partitions: int = PARTITIONS) -> list[bytes]:
    """Every value stored in ``topic``, read by the official client (each entry once)."""
    client = official_client(url)
    try:
        if partitions:
            return [
                got.value for part in read_partitioned(client, topic, partitions) for got in part
            ]
        return [got.value for got in read_topic(client, topic)]
    finally:
        client.close()


def duplicates_and_lost(stored: list[bytes], written: list[bytes]) -> tuple[int, int]:
    """How many values ``stored`` holds more than once (counting repeats), and how many of
    ``written`` it lacks."""
    counts = collections.Counter(stored)
    extra = sum(n - 1 for n in counts.values()) + sum(1 for v in counts if v not in written)
    return extra, len(set(written) - set(counts))


class SparkJob:
    """Runs one Spark action in a job group of its own, and reads its tasks' fate from
    Spark's status tracker."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.context = spark.sparkContext
        self.group = f"fault-{uuid.uuid4().hex[:8]}"

    def run(self, action: Callable[[], Any]) -> Any:
        # A df.write looks the "pulsar" format up in the JVM thread's active session, which
        # this thread's may lack when no earlier call of the run made the session active.
        jvm_session = self.spark._jvm.org.apache.spark.sql.SparkSession  # type: ignore[union-attr]
        jvm_session.setActiveSession(self.spark._jsparkSession)
        self.context.setJobGroup(self.group, "a job under a broker fault")
        try:
            return action()
        finally:
            self.context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]

    def _stages(self) -> list[Any]:
        tracker = self.context.statusTracker()
        stages = []
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            if job is not None:
                stages += [tracker.getStageInfo(s) for s in job.stageIds]
        return [stage for stage in stages if stage is not None]

    def running_tasks(self) -> int:
        return sum(stage.numActiveTasks for stage in self._stages())

    def tasks(self) -> tuple[int, int]:
        """Tasks completed and tasks failed, over every stage of the job group."""
        stages = self._stages()
        assert stages, f"no stage of job group {self.group} is known"
        return (
            sum(stage.numCompletedTasks for stage in stages),
            sum(stage.numFailedTasks for stage in stages),
        )


class FaultsWhileRunning:
    """In a thread: once ``job`` has tasks running, ``fault()`` every ``every`` seconds while
    it still has (at most ``times`` times); :attr:`during` counts the faults after which its
    tasks were still running, so that each of those struck a job in progress."""

    def __init__(
        self, job: SparkJob, fault: Callable[[], None], *, times: int, every: float
    ) -> None:
        self.job = job
        self.fault = fault
        self.times = times
        self.every = every
        self.done = 0
        self.during = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FaultsWhileRunning:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set() and self.job.running_tasks() == 0:
            time.sleep(0.05)
        # The first fault at once: a job may finish within ``every`` of its tasks' start.
        while self.done < self.times and self.job.running_tasks() > 0:
            self.fault()
            self.done += 1
            if self.job.running_tasks() > 0:
                self.during += 1
            if self._stop.wait(self.every):
                return


def write_rows(job: SparkJob, url: str, topic: str, tag: str, **options: str) -> list[bytes]:
    """Write :data:`WRITE_ROWS` keyed rows ``<tag>-NNNNNNN`` to ``topic`` from 4 tasks as
    ``job``; the values written."""
    df = job.spark.range(WRITE_ROWS, numPartitions=4).selectExpr(
        "cast(id % 97 as string) as key", f"format_string('{tag}-%07d', id) as value"
    )
    writer = (
        df.write.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .option("pulsar.producer.maxPendingMessages", "2000")
        .options(**options)
        .mode("append")
    )
    job.run(writer.save)
    return [f"{tag}-{i:07d}".encode() for i in range(WRITE_ROWS)]


# --- topic unloads ---------------------------------------------------------------------------


def test_batch_read_through_unloads(spark: SparkSession, apache_broker: ApacheBroker) -> None:
    """Every partition unloaded three times under a batch read: each value read once."""
    url = apache_broker.service_url
    topic = new_topic(apache_broker, "unloaded-under-read")
    published = publish_keyed(url, topic, [b"u-%07d" % i for i in range(READ_ROWS)])
    df = (
        spark.read.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .option("minPartitions", "8")
        .load()
    )
    tasks = df.rdd.getNumPartitions()
    assert tasks >= 8
    job = SparkJob(spark)
    with FaultsWhileRunning(job, lambda: unload(apache_broker, topic), times=3, every=0.5) as f:
        got = job.run(lambda: [bytes(r["value"]) for r in df.select("value").collect()])
    assert f.during >= 1, f"no unload struck the read ({f.done} in all)"
    assert job.tasks() == (tasks, 0)
    assert sorted(got) == published  # every value once


def test_batch_write_through_unloads(spark: SparkSession, apache_broker: ApacheBroker) -> None:
    """Every partition unloaded three times under a df.write: each row stored once."""
    url = apache_broker.service_url
    topic = new_topic(apache_broker, "unloaded-under-write")
    job = SparkJob(spark)
    with FaultsWhileRunning(job, lambda: unload(apache_broker, topic), times=3, every=0.5) as f:
        written = write_rows(job, url, topic, "w")
    assert f.during >= 1, f"no unload struck the write ({f.done} in all)"
    assert job.tasks() == (4, 0)
    assert duplicates_and_lost(stored_values(url, topic), written) == (0, 0)


# --- a broker killed and started again -------------------------------------------------------


def test_batch_write_through_a_broker_kill(spark: SparkSession, killable: ApacheBroker) -> None:
    """SIGKILL and a restart under a df.write: nothing lost, nothing stored twice."""
    url = killable.service_url
    topic = new_topic(killable, "killed-under-write")
    job = SparkJob(spark)
    with FaultsWhileRunning(job, lambda: killable.restart(kill=True), times=1, every=0.5) as f:
        written = write_rows(
            job, url, topic, "k", **{"pulsar.client.operationTimeoutMs": OPERATION_TIMEOUT_MS}
        )
    assert (f.done, f.during) == (1, 1)
    assert job.tasks() == (4, 0)
    assert duplicates_and_lost(stored_values(url, topic), written) == (0, 0)


def test_producer_through_a_broker_kill(killable: ApacheBroker, pool: ConnectionPool) -> None:
    """SIGKILL and a restart while 1,000 messages may wait for their receipts: the producer
    is created again under its name and nothing is lost or stored twice, in order."""
    topic = full_topic_name(f"killed-under-producer-{uuid.uuid4().hex[:12]}")
    lookup = Lookup(settings_for(killable.service_url, timeout=60.0), pool)
    settings = ProducerSettings(batch_max_messages=100, max_pending_messages=1_000)
    values = [b"p-%06d" % i for i in range(30_000)]
    with Producer.create(lookup, topic, settings, name="survivor") as producer:
        for i, value in enumerate(values):
            producer.send(OutgoingMessage(value))
            if i == 15_000:
                killable.restart(kill=True)
        producer.flush()
        assert producer.reconnects == 1
    stored = stored_values(killable.service_url, topic, partitions=0)
    assert duplicates_and_lost(stored, values) == (0, 0)
    assert stored == values


# --- what only a real broker shows -----------------------------------------------------------


def test_last_message_id_of_a_batch(
    spark: SparkSession, apache_broker: ApacheBroker, pool: ConnectionPool
) -> None:
    """GetLastMessageId of a topic whose last entry is a batch of 10: Apache names the
    batch's last message (index 9, pulsar-lite no index); the connector takes the whole entry
    (index -1, "to its end"), and a batch read ends there, with all ten."""
    url = apache_broker.service_url
    topic = full_topic_name(f"last-batch-{uuid.uuid4().hex[:12]}")
    lookup = Lookup(settings_for(url), pool)
    settings = ProducerSettings(batch_max_messages=10, batch_max_delay_ms=60_000)
    values = [b"b-%02d" % i for i in range(23)]  # entries of 10, 10 and 3, then a batch of 10
    with Producer.create(lookup, topic, settings, name="batcher") as producer:
        for value in values:
            producer.send(OutgoingMessage(value))
        producer.flush()
        for value in values[:10]:
            producer.send(OutgoingMessage(b"last-" + value))
        producer.flush()
    with Consumer(lookup, topic, MessageId.latest(), timeout=lookup.timeout) as consumer:
        answer = consumer.connection.request(
            lambda rid: commands.get_last_message_id(
                consumer_id=consumer.consumer_id, request_id=rid
            ),
            what="last message id",
            timeout=lookup.timeout,
        ).getLastMessageIdResponse.last_message_id
        last = consumer.last_message_id()
    assert (answer.entryId, answer.batch_index) == (3, 9)
    assert last == MessageId(answer.ledgerId, 3, -1)
    df = spark.read.format("pulsar").option("service.url", url).option("topic", topic).load()
    got = [bytes(r["value"]) for r in df.select("value").collect()]
    assert got == values + [b"last-" + v for v in values[:10]]


def test_ten_megabyte_messages_both_ways(
    spark: SparkSession, apache_broker: ApacheBroker, pool: ConnectionPool
) -> None:
    """10 MB values are chunked (Apache's limit is 5 MB): ours read by the official client,
    the official client's read by a batch read, each whole and once."""
    url = apache_broker.service_url
    ours = full_topic_name(f"chunked-ours-{uuid.uuid4().hex[:12]}")
    theirs = full_topic_name(f"chunked-theirs-{uuid.uuid4().hex[:12]}")
    big = [os.urandom(10 * 1000 * 1000) for _ in range(2)]
    lookup = Lookup(settings_for(url), pool)
    with Producer.create(lookup, ours, ProducerSettings(), name="big-writer") as producer:
        for value in [b"small", *big]:
            producer.send(OutgoingMessage(value))
        producer.flush()
    assert stored_values(url, ours, partitions=0) == [b"small", *big]

    client = official_client(url)
    try:
        producer = client.create_producer(theirs, batching_enabled=False, chunking_enabled=True)
        for value in [*big, b"small"]:
            producer.send(value)
        producer.close()
    finally:
        client.close()
    df = spark.read.format("pulsar").option("service.url", url).option("topic", theirs).load()
    got = [bytes(r["value"]) for r in df.select("value").collect()]
    assert got == [*big, b"small"]


# --- a producer through a fault between two sends --------------------------------------------


def send_around(
    proxy: BrokerProxy, pool: ConnectionPool, topic: str, name: str, fault: Callable[[], None]
) -> tuple[list[bytes], float, tuple[int, int]]:
    """Through ``proxy``, 100 messages sent and flushed, ``fault()``, then 200 more, in
    batches of 10 by one producer that reconnects once: the values, how long the 200 took,
    and the producer's id before and after."""
    values = [b"%s-%04d" % (name.encode(), i) for i in range(300)]
    lookup = Lookup(settings_for(proxy.url, timeout=20.0), pool)
    settings = ProducerSettings(batch_max_messages=10)
    with Producer.create(lookup, topic, settings, name=name) as producer:
        before = producer.producer_id
        for value in values[:100]:
            producer.send(OutgoingMessage(value))
        producer.flush()
        fault()
        started = time.monotonic()
        for value in values[100:]:
            producer.send(OutgoingMessage(value))
        producer.flush()
        assert producer.reconnects == 1
    return values, time.monotonic() - started, (before, producer.producer_id)


# --- a producer the broker still holds on a connection it takes for alive -------------------


class ProducerBusyCount:
    """A proxy rewrite pointing lookups at the proxy (:class:`ApacheAnswers`) and counting
    the broker's ProducerBusy refusals."""

    def __init__(self) -> None:
        self.answers = ApacheAnswers()
        self.refusals = 0

    def __call__(self, command: pb.BaseCommand) -> bool:
        if command.type == Type.ERROR and command.error.error == pb.ProducerBusy:
            self.refusals += 1
        return self.answers(command)


@pytest.mark.parametrize("alive", [False, True], ids=["silent", "answering-pings"])
def test_producer_rides_through_its_old_connection(
    apache_broker: ApacheBroker, pool: ConnectionPool, alive: bool
) -> None:
    """The producer's connection is cut on its side only; the broker keeps it, with the
    producer on it. Created again under the same name, the producer waits while Apache checks
    the old connection with a ping: unanswered ("silent"), the broker closes it and accepts the
    new one (after connectionLivenessCheckTimeoutMillis, 5 s); answered, it refuses with
    ProducerBusy, which the producer retries (as Java's does) until the old connection goes
    (here after 3 s). Nothing lost or stored twice."""
    topic = full_topic_name(f"held-producer-{uuid.uuid4().hex[:12]}")
    rewrite = ProducerBusyCount()
    proxy = BrokerProxy((apache_broker.host, apache_broker.port), rewrite)
    rewrite.answers.url = proxy.url

    def cut() -> None:
        proxy.orphan(answer_pings=alive)
        if alive:
            threading.Timer(3.0, proxy.close_orphans).start()

    try:
        values, took, _ = send_around(proxy, pool, topic, "held", cut)
    finally:
        proxy.close()
    assert (rewrite.refusals > 0) == alive
    assert took >= 3.0  # the old connection's liveness check (5 s), or its close after 3 s
    assert stored_values(apache_broker.service_url, topic, partitions=0) == values


# --- a broker refusing the messages in flight -------------------------------------------------


class FencedSends:
    """A proxy rewrite pointing lookups at the proxy (:class:`ApacheAnswers`) and, once
    ``armed``, answering every SEND of the next producer to send itself, as an Apache broker
    fencing the topic (an unload under way) refuses what is in flight: SEND_ERROR
    PersistenceError "fenced", one per frame, for the frame's highest sequence id. The broker
    never sees those frames."""

    def __init__(self) -> None:
        self.answers = ApacheAnswers()
        self.armed = False
        self.fenced: int | None = None
        self.refused: list[int] = []

    def arm(self) -> None:
        self.armed = True

    def __call__(self, command: pb.BaseCommand) -> bool:
        return self.answers(command)

    def answer(self, command: pb.BaseCommand) -> pb.BaseCommand | None:
        if command.type != Type.SEND:
            return self.answers.answer(command)
        send = command.send
        if self.armed and self.fenced is None:
            self.fenced = send.producer_id
        if send.producer_id != self.fenced:
            return None
        sequence_id = max(send.sequence_id, send.highest_sequence_id)
        self.refused.append(sequence_id)
        error = pb.CommandSendError(
            producer_id=send.producer_id,
            sequence_id=sequence_id,
            error=pb.PersistenceError,
            message="fenced",
        )
        return pb.BaseCommand(type=Type.SEND_ERROR, send_error=error)


def test_producer_rides_through_a_fenced_topic(
    apache_broker: ApacheBroker, pool: ConnectionPool
) -> None:
    """SEND_ERROR PersistenceError "fenced" for every frame in flight: the producer closes
    itself on the broker (which would otherwise refuse its name with ProducerBusy), is created
    again under its name and sends them again, as Java's producer reconnects on any refusal
    but a few. Nothing lost or stored twice, in order."""
    topic = full_topic_name(f"fenced-producer-{uuid.uuid4().hex[:12]}")
    fenced = FencedSends()
    proxy = BrokerProxy((apache_broker.host, apache_broker.port), fenced, answer=fenced.answer)
    fenced.answers.url = proxy.url
    try:
        values, _, ids = send_around(proxy, pool, topic, "fenced", fenced.arm)
    finally:
        proxy.close()
    assert fenced.fenced == ids[0] != ids[1]
    refused = fenced.refused
    assert refused == list(range(109, 109 + 10 * len(refused), 10))
    assert stored_values(apache_broker.service_url, topic, partitions=0) == values
