"""Transactional writes (``transactional=true``) on Apache Pulsar, checked with the official
client, and what reads see of transactions.

- A task that fails once and is retried: nothing is visible while the job runs, each row once
  after it commits. Spark in local mode does not retry tasks, so that job runs in a Spark of
  its own (``local[2,4]``) in a subprocess.
- A job whose task fails for good: nothing it sent is ever visible, and no transaction of it is
  left open (a plain write after it is readable at once).
- A streaming write whose micro-batch is run again after a restart: committed once.
- A transaction that timed out, and a broker without a coordinator: clear errors, in bounded
  time.
- Reads (ours and the official reader) never return what an open or aborted transaction holds,
  and end where the broker lets them: before the first open transaction.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from support.apache_fixtures import create_partitioned_topic
from support.streaming import Batches, read_available_now
from support.topics import full
from support.written import read_partitioned, read_topic, read_with_spark, write
from test_write_streaming import FileStream

from pulsar_spark.client.producer import Producer
from pulsar_spark.client.settings import ClientSettings, ProducerSettings
from pulsar_spark.client.transactions import TransactionCoordinators
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.source.planning import make_lookup

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def official(apache_broker: ApacheBroker) -> Iterator[pulsar.Client]:
    client = pulsar.Client(apache_broker.service_url, operation_timeout_seconds=10)
    yield client
    client.close()


def new_topic(apache_broker: ApacheBroker, request: pytest.FixtureRequest, partitions: int) -> str:
    name = f"txn-{request.node.name[5:30]}-{time.monotonic_ns() % 10**9}"
    create_partitioned_topic(apache_broker, name, partitions)
    return name


def published(apache_broker: ApacheBroker, topic: str) -> int:
    """Messages the broker stored for ``topic``, committed or not."""
    path = full(topic).replace("persistent://", "/admin/v2/persistent/", 1)
    stats = apache_broker.admin("GET", f"{path}/partitioned-stats")
    return int(stats["msgInCounter"])


def values_of(partitions: list[list[object]]) -> list[str]:
    return [g.value.decode() for p in partitions for g in p]  # type: ignore[attr-defined]


# --- a task retried -----------------------------------------------------------------------------

RETRIED_JOB = textwrap.dedent(
    """
    import os, sys, time
    from pyspark import TaskContext
    from pyspark.sql import SparkSession
    import pulsar_spark

    url, topic, waiting, go = sys.argv[1:5]
    spark = (
        SparkSession.builder.master("local[2,4]")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pulsar_spark.register(spark)

    def first_attempt_of_partition_1_fails(batches):
        context = TaskContext.get()
        failing = context.partitionId() == 1 and context.attemptNumber() == 0
        for index, batch in enumerate(batches):
            yield batch
            if failing and index == 4:
                open(waiting, "w").close()
                deadline = time.time() + 300
                while not os.path.exists(go) and time.time() < deadline:
                    time.sleep(0.1)
                raise RuntimeError("the first attempt of partition 1 fails")

    # 1 KB keys, so that the rows yielded before the wait fill the Python worker's 64 KiB
    # output buffer and reach the writer (small rows would wait in it)
    df = spark.range(0, 2000, numPartitions=2).selectExpr(
        "cast(id as string) as value", "repeat('k', 1000) as key"
    )
    (
        df.mapInArrow(first_attempt_of_partition_1_fails, df.schema)
        .write.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .option("transactional", "true")
        .option("transactionTimeoutMs", "600000")
        .option("pulsar.producer.batchingMaxMessages", "50")
        .mode("append")
        .save()
    )
    spark.stop()
    print("job committed")
    """
)


@pytest.mark.apache
def test_retried_task_is_committed_once_and_nothing_shows_before(
    spark: SparkSession,
    apache_broker: ApacheBroker,
    official: pulsar.Client,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    topic = new_topic(apache_broker, request, 2)
    waiting, go = tmp_path / "waiting", tmp_path / "go"
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    job = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RETRIED_JOB,
            apache_broker.service_url,
            topic,
            str(waiting),
            str(go),
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # partition 1's first attempt has handed over its first 500 rows and waits; then
        # partition 0's task has sent its 1000 rows, and partition 1's attempt most of its 500
        # (what is left in an open batch goes with the next send)
        deadline = time.monotonic() + 180
        while not waiting.exists() or (before := published(apache_broker, topic)) < 1300:
            assert job.poll() is None, job.communicate()
            assert time.monotonic() < deadline, "the job's tasks did not send their rows"
            time.sleep(0.5)
        assert values_of(read_partitioned(official, topic, 2)) == []
        assert read_with_spark(spark, apache_broker, topic) == []
        assert job.poll() is None  # the failing attempt still waits: nothing was committed
        go.touch()
        out, err = job.communicate(timeout=300)
    finally:
        go.touch()
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, err
    assert "job committed" in out
    # The failed attempt's transaction is ended at once, not at its 10 minute timeout: by its
    # guard when Spark killed the attempt's worker, or, when its writer returned before Spark
    # failed the task (Spark then drops its commit message), by the driver, which read it in
    # the write's transaction registry. Until then it would hold readers back.
    everything = [str(i) for i in range(2000)]
    got = eventually(
        lambda: sorted(values_of(read_partitioned(official, topic, 2)), key=int), 2000, 20
    )
    assert got == everything
    assert registry_subscriptions(apache_broker) == {}
    assert published(apache_broker, topic) >= 2000 + before - 1000  # the failed attempt's too
    ours = read_with_spark(spark, apache_broker, topic)
    assert sorted((r["value"].decode() for r in ours), key=int) == everything


def registry_subscriptions(apache_broker: ApacheBroker) -> dict[str, int]:
    """The subscriptions on the default transaction registry with their backlogs; a batch
    write deletes its own once it committed or aborted."""
    path = "/admin/v2/persistent/public/default/__pulsar_spark_transactions/stats"
    subscriptions = apache_broker.admin("GET", path)["subscriptions"]
    return {name: int(stats["msgBacklog"]) for name, stats in subscriptions.items()}


def eventually(read: Callable[[], list[str]], count: int, within: float) -> list[str]:
    """What ``read`` returns once it holds ``count`` values, or at ``within`` seconds."""
    deadline = time.monotonic() + within
    while len(got := read()) < count and time.monotonic() < deadline:
        time.sleep(2)
    return got


# --- a job that fails ---------------------------------------------------------------------------


def failing_in_partition_1(df: DataFrame) -> DataFrame:
    def fail(batches: Iterator[object]) -> Iterator[object]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        for index, batch in enumerate(batches):
            yield batch
            if context.partitionId() == 1 and index == 2:
                time.sleep(3)  # for the writer to send what it has
                raise RuntimeError("partition 1 fails on every attempt")

    return df.mapInArrow(fail, df.schema)  # type: ignore[arg-type]


@pytest.mark.apache
def test_failed_job_leaves_nothing_visible_and_nothing_open(
    spark: SparkSession,
    apache_broker: ApacheBroker,
    official: pulsar.Client,
    request: pytest.FixtureRequest,
) -> None:
    topic = new_topic(apache_broker, request, 2)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        # 1 KB keys: the rows before the failure fill the Python worker's output buffer
        df = spark.range(0, 2000, numPartitions=2).selectExpr(
            "cast(id as string) as value", "repeat('k', 1000) as key"
        )
        with pytest.raises(Exception, match="partition 1 fails on every attempt"):
            write(
                failing_in_partition_1(df),
                apache_broker,
                topic=topic,
                transactional="true",
                transactionTimeoutMs="600000",
                **{"pulsar.producer.batchingMaxMessages": "50"},
            )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert published(apache_broker, topic) >= 100  # sent, then aborted
    assert values_of(read_partitioned(official, topic, 2)) == []
    # A plain write after it is readable at once: the job's transactions were all aborted,
    # also that of a task whose writer returned before Spark failed it (Spark drops its commit
    # message; the driver found it in the registry), long before their 10 minute timeout.
    after = spark.createDataFrame([(f"after-{i}",) for i in range(10)], "value string")
    write(after, apache_broker, topic=topic)
    expected = [f"after-{i}" for i in range(10)]
    got = eventually(lambda: sorted(values_of(read_partitioned(official, topic, 2))), 10, 20)
    assert got == expected
    assert registry_subscriptions(apache_broker) == {}
    ours = sorted(r["value"].decode() for r in read_with_spark(spark, apache_broker, topic))
    assert ours == expected


# --- streaming ------------------------------------------------------------------------------------


@pytest.mark.apache
def test_stream_micro_batch_run_again_is_committed_once(
    spark: SparkSession, apache_broker: ApacheBroker, official: pulsar.Client, tmp_path: Path
) -> None:
    topic = f"txn-stream-{time.monotonic_ns() % 10**9}"
    stream = FileStream(spark, apache_broker, topic, tmp_path)  # type: ignore[arg-type]
    stream.add("a0", 300)
    stream.add("a1", 300)
    run_transactional(stream)
    assert stream.last_committed() == 1
    records = tmp_path / "ck" / "pulsar-transactions"
    assert sorted(p.name for p in records.iterdir()) == ["0", "1"]
    # stopped after micro-batch 1 was committed to Pulsar but before Spark logged it: the
    # restart runs it again, and its new transactions are aborted
    stream.forget_commit(1)
    stream.add("b0", 300)
    run_transactional(stream)
    assert stream.last_committed() == 2
    assert sorted(p.name for p in records.iterdir()) == ["0", "1", "2"]
    got = [g.value.decode() for g in read_topic(official, topic)]
    expected = [v for name in ("a0", "a1", "b0") for v in stream.rows[name]]
    assert sorted(got) == sorted(expected)
    assert len(got) == 900
    # the query's registry subscription stays, read through at every commit
    digest = hashlib.sha256(str(tmp_path / "ck").encode()).hexdigest()[:16]
    assert registry_subscriptions(apache_broker)[f"pulsar-spark-query-{digest}"] == 0


def run_transactional(stream: FileStream) -> None:
    """Start a transactional stream write, process every file present, stop cleanly."""
    query = stream.start(transactional="true")
    try:
        query.processAllAvailable()
    finally:
        query.stop()


# --- errors -------------------------------------------------------------------------------------


@pytest.mark.apache
def test_transaction_that_timed_out_fails_the_commit(
    spark: SparkSession,
    apache_broker: ApacheBroker,
    official: pulsar.Client,
    request: pytest.FixtureRequest,
) -> None:
    """Partition 0's task opens its transaction at once and finishes; partition 1's task
    starts sending 6 s later, so by the driver's commit partition 0's transaction has run past
    its 2 s timeout."""
    topic = new_topic(apache_broker, request, 2)

    def slow_partition_1(batches: Iterator[object]) -> Iterator[object]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        if context.partitionId() == 1:
            time.sleep(6)
        yield from batches

    df = spark.range(0, 200, numPartitions=2).selectExpr("cast(id as string) as value")
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        write(
            df.mapInArrow(slow_partition_1, df.schema),  # type: ignore[arg-type]
            apache_broker,
            topic=topic,
            transactional="true",
            transactionTimeoutMs="2000",
        )
    assert time.monotonic() - started < 120
    message = str(info.value)
    assert "TransactionTimedOutError" in message, message
    assert "could not be committed: its coordinator no longer has it open" in message
    assert "committed 0 of 2 transaction(s)" in message
    assert values_of(read_partitioned(official, topic, 2)) == []


def test_broker_without_coordinator_refuses_a_transactional_write(
    spark: SparkSession, lite_broker: LocalBroker, topic_name: str
) -> None:
    df = spark.range(10).selectExpr("cast(id as string) as value")
    started = time.monotonic()
    with pytest.raises(AnalysisException) as info:  # on the driver, before any task
        write(
            df,
            lite_broker,
            topic=topic_name,
            transactional="true",
            **{"pulsar.client.operationTimeoutMs": "3000"},
        )
    assert time.monotonic() - started < 60
    message = str(info.value)
    assert "TransactionsUnavailableError" in message, message
    assert "pulsar-lite has no transaction coordinator" in message


# --- reads ----------------------------------------------------------------------------------------


def send(producer: Producer, values: list[str]) -> None:
    for value in values:
        producer.send(OutgoingMessage(value=value.encode()))
    producer.flush()


@pytest.mark.apache
def test_reads_never_see_open_or_aborted_transactions(
    spark: SparkSession,
    apache_broker: ApacheBroker,
    official: pulsar.Client,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """c0-c4 plain, a0-a4 in transaction A, b0-b4 in B, c5-c9 plain. While A is open only
    c0-c4 can be read (the broker dispatches up to the first open transaction's first
    message); once A is aborted and B committed, the rest, without A's. The same for a batch
    read, the official reader, and a stream with a durable subscription, which adds each
    message once and never a transaction marker."""
    topic = full(topic_name)
    lookup = make_lookup(ClientSettings(apache_broker.service_url, operation_timeout=10.0))
    coordinators = TransactionCoordinators(lookup)
    unbatched = ProducerSettings(batching=False)
    a, b = coordinators.new_transaction(60_000), coordinators.new_transaction(60_000)
    coordinators.add_partitions(a, [topic])
    coordinators.add_partitions(b, [topic])
    with (
        Producer.create(lookup, topic, unbatched) as plain,
        Producer.create(lookup, topic, unbatched, txn=a) as in_a,
        Producer.create(lookup, topic, unbatched, txn=b) as in_b,
    ):
        send(plain, [f"c{i}" for i in range(5)])
        send(in_a, [f"a{i}" for i in range(5)])
        send(in_b, [f"b{i}" for i in range(5)])
        send(plain, [f"c{i}" for i in range(5, 10)])

    # one stream, with a durable subscription, run to the end of what can be read after
    # each step: what it adds each time
    batches = Batches()

    def streamed() -> list[str]:
        before = len(batches.all())
        read_available_now(
            spark,
            apache_broker.service_url,
            topic,
            batches,
            tmp_path / "checkpoint",
            startingOffsets="earliest",
            subscriptionName="txn-reads",
        )
        return [m.value.decode() for m in batches.all()[before:]]

    def views() -> tuple[list[str], list[str], list[str]]:
        started = time.monotonic()
        ours = [r["value"].decode() for r in read_with_spark(spark, apache_broker, topic)]
        theirs = [g.value.decode() for g in read_topic(official, topic)]
        stream_added = streamed()
        assert time.monotonic() - started < 90
        return ours, theirs, stream_added

    first = [f"c{i}" for i in range(5)]
    assert views() == (first, first, first)
    coordinators.abort(a)
    assert views() == (first, first, [])  # B is still open, and c5-c9 come after it
    coordinators.commit(b)
    rest = [f"b{i}" for i in range(5)] + [f"c{i}" for i in range(5, 10)]
    assert views() == (first + rest, first + rest, rest)
