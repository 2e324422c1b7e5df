"""What a failed write task leaves on a real TubeMQ 2.4.0 cluster: writes are at-least-once.

A task whose Python worker is killed part-way through its rows, and which Spark then runs
again, stores every row once more: the rows its first attempt had sent are there twice, and
no row is lost. The same for a stream's micro-batch that failed and is run again when the
query restarts from its checkpoint. Every message carries its row's id and the attempt that
sent it as attributes, so the tests know exactly which messages are the duplicates, and a
reader removes them by the id (the example of docs/tubemq.md).

Spark in local mode does not retry tasks, so the batch job runs in a Spark of its own
(``local[2,4]``) in a subprocess. The failing attempt yields 500 rows to the write, waits
until the broker has stored at least 300 of them (the others wait in Spark's buffers: 300 on
this machine), then kills its worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from support.readme import example, source
from support.streaming import QUERY_TIMEOUT
from support.tubemq_cluster import TubeMQCluster
from support.tubemq_fixtures import RETRIED_STREAM_TOPIC, RETRIED_TOPIC
from support.tubemq_reading import load

import pulsar_spark

pytestmark = [pytest.mark.integration, pytest.mark.tubemq, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
# 1 KB bodies, so that the rows handed over before the wait fill the Python workers' 64 KiB
# buffers and reach the writer (small rows would wait in them)
PAD = b"x" * 1000
WRITTEN = "value binary, attributes map<string,string>"
SCHEMA = pa.schema([("value", pa.binary()), ("attributes", pa.map_(pa.string(), pa.string()))])
# Rows the failing attempt yields before it waits, in Arrow batches of 100.
HANDED_OVER = 500
BATCH_ROWS = "100"
# Of those, the broker has stored at least this many when the attempt is killed.
STORED_BEFORE_KILL = 300


def body(row_id: int) -> bytes:
    return f"{row_id}:".encode() + PAD


def tagged(df: DataFrame, run: str, fail_from: int | None, waiting: Path, go: Path) -> DataFrame:
    """``df``'s ids as messages whose attributes are the id and ``<run>.<attempt>``. When
    ``fail_from`` is set, the first attempt of the task whose rows start at or after it yields
    :data:`HANDED_OVER` rows, creates ``waiting``, waits for ``go`` and kills its worker.
    (Only local names here: the tasks' workers cannot import this module.)"""
    pad, schema, limit = PAD, SCHEMA, HANDED_OVER

    def convert(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        assert context is not None
        by = f"{run}.{context.attemptNumber()}"
        fails = fail_from is not None and context.attemptNumber() == 0
        handed_over = 0
        for batch in batches:
            ids = batch.column("id").to_pylist()
            fails = fails and ids[0] >= fail_from
            yield pa.RecordBatch.from_pydict(
                {
                    "value": [f"{i}:".encode() + pad for i in ids],
                    "attributes": [[("id", str(i)), ("by", by)] for i in ids],
                },
                schema=schema,
            )
            handed_over += len(ids)
            if fails and handed_over == limit:
                waiting.touch()
                deadline = time.monotonic() + 300
                while not go.exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
                os.kill(os.getpid(), signal.SIGKILL)

    return df.mapInArrow(convert, WRITTEN)  # type: ignore[arg-type]


def stored(spark: SparkSession, cluster: TubeMQCluster, topic: str) -> list[tuple[int, str]]:
    """(id, run.attempt) of every message of ``topic``, sorted; each body checked."""
    got = []
    for row in load(spark, cluster, topic).select("value", "attributes").collect():
        row_id = int(row.attributes["id"])
        assert bytes(row.value) == body(row_id)
        assert set(row.attributes) == {"id", "by"}
        got.append((row_id, row.attributes["by"]))
    return sorted(got)


def resent(got: list[tuple[int, str]], by: str, first: int) -> int:
    """How many rows from ``first`` on the failed attempt ``by`` stored: they must be the
    rows it was handed first, in order, and at least those seen before it was killed."""
    ids = [row_id for row_id, tag in got if tag == by and row_id >= first]
    assert ids == list(range(first, first + len(ids)))
    assert STORED_BEFORE_KILL <= len(ids) <= HANDED_OVER
    return len(ids)


def kill_once_stored(
    spark: SparkSession, cluster: TubeMQCluster, topic: str, count: int, *, waiting: Path, go: Path
) -> None:
    """Once the failing attempt waits and the topic holds ``count`` messages, let it die."""
    deadline = time.monotonic() + 180
    while not waiting.exists() or load(spark, cluster, topic).count() < count:
        assert time.monotonic() < deadline, f"the tasks did not store {count} messages"
        time.sleep(1)
    go.touch()


# --- a batch task killed and retried -----------------------------------------------------------


def retried_job(masters: str, topic: str, waiting: str, go: str) -> None:
    """The job run in a Spark of its own: 3000 ids in two tasks, the second failing once."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.execution.arrow.maxRecordsPerBatch": BATCH_ROWS,
    }
    spark = SparkSession.builder.master("local[2,4]").config(map=settings).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pulsar_spark.register(spark)
    rows = tagged(spark.range(0, 3000, numPartitions=2), "job", 1500, Path(waiting), Path(go))
    writer = rows.write.format("tubemq").option("master.addresses", masters)
    writer.option("topic", topic).mode("append").save()
    spark.stop()


RUN_JOB = "import sys, test_tubemq_write_retries as t; t.retried_job(*sys.argv[1:])"


def test_killed_task_is_retried_and_resends_its_rows(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    tmp_path: Path,
) -> None:
    waiting, go = tmp_path / "waiting", tmp_path / "go"
    tests = ROOT / "tests"
    path = os.pathsep.join([str(ROOT), str(tests), str(tests / "integration")])
    arguments = [tubemq_cluster.master, RETRIED_TOPIC, str(waiting), str(go)]
    env = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    with subprocess.Popen(
        [sys.executable, "-c", RUN_JOB, *arguments],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": path},
        stderr=subprocess.PIPE,
        text=True,
    ) as job:
        try:
            # partition 0's task sends its 1500 rows; partition 1's first attempt (ids 1500
            # on) hands 500 over and waits until the broker has most of them, then dies
            count = 1500 + STORED_BEFORE_KILL
            kill_once_stored(spark, tubemq_cluster, RETRIED_TOPIC, count, waiting=waiting, go=go)
            _, err = job.communicate(timeout=300)
        except BaseException:
            job.kill()
            raise
    assert job.returncode == 0, err
    got = stored(spark, tubemq_cluster, RETRIED_TOPIC)
    duplicates = resent(got, "job.0", 1500)
    # partition 0 once; partition 1 all from its second attempt, and the first rows of it
    # again from the killed first attempt
    assert got == sorted(
        [(i, "job.0") for i in range(1500 + duplicates)] + [(i, "job.1") for i in range(1500, 3000)]
    )

    # The documented way to drop the duplicates: by an id the rows carry.
    names = {"spark": spark, "masters": tubemq_cluster.master, "tubemq_topic": RETRIED_TOPIC}
    exec(compile(example("tubemq-dedup"), source("tubemq-dedup"), "exec"), names)
    unique = names["unique"]
    assert isinstance(unique, DataFrame)
    assert sorted(int(r.id) for r in unique.select("id").collect()) == list(range(3000))


# --- a stream's micro-batch failed and run again -----------------------------------------------


def test_failed_micro_batch_is_run_again_and_resends_its_rows(
    spark: SparkSession,
    tubemq_cluster: TubeMQCluster,
    tubemq_topics: tuple[str, ...],
    tmp_path: Path,
) -> None:
    source_dir, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source_dir.mkdir()
    # one file per micro-batch: ids 0-999, then 1000-1999
    for name, ids in (("a", range(1000)), ("b", range(1000, 2000))):
        staged = tmp_path / f"{name}.json"
        staged.write_text("".join(f'{{"id": {i}}}\n' for i in ids))
        staged.rename(source_dir / staged.name)
    waiting, go = tmp_path / "waiting", tmp_path / "go"

    def run(name: str, fail_from: int | None) -> None:
        rows = spark.readStream.schema("id bigint").option("maxFilesPerTrigger", 1)
        query = (
            tagged(rows.json(str(source_dir)), name, fail_from, waiting, go)
            .writeStream.format("tubemq")
            .option("master.addresses", tubemq_cluster.master)
            .option("topic", RETRIED_STREAM_TOPIC)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            if fail_from is not None:
                count = 1000 + STORED_BEFORE_KILL
                kill_once_stored(
                    spark, tubemq_cluster, RETRIED_STREAM_TOPIC, count, waiting=waiting, go=go
                )
            assert query.awaitTermination(QUERY_TIMEOUT), "the AvailableNow query did not stop"
        finally:
            go.touch()
            query.stop()

    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", BATCH_ROWS)
    try:
        # micro-batch 0 is written, micro-batch 1's task dies part-way and the query fails
        with pytest.raises(StreamingQueryException, match=r"crashed|exited unexpectedly"):
            run("run1", 1000)
        # restarted from the checkpoint: micro-batch 1 runs again, whole
        run("run2", None)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    got = stored(spark, tubemq_cluster, RETRIED_STREAM_TOPIC)
    duplicates = resent(got, "run1.0", 1000)
    assert got == sorted(
        [(i, "run1.0") for i in range(1000 + duplicates)]
        + [(i, "run2.0") for i in range(1000, 2000)]
    )
