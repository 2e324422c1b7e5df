"""The main job: events into Pulsar, a checkpointed stream into Parquet, an aggregate out.

    python -m pulsar_spark.jobs.demo        # starts an embedded pulsar-lite broker
    python -m pulsar_spark.jobs.demo --service-url pulsar://host:6650 --topic my-demo-topic

The embedded broker needs the ``local`` extra (``pip install "pulsar-spark[local]"``); with
``--service-url`` the demo needs nothing beyond the package.

1. writes a stream of click events (keyed by user, JSON values, properties, event times)
   with ``df.write.format("pulsar")`` into a 4-partition topic;
2. reads them back with ``spark.readStream.format("pulsar")`` (Trigger.AvailableNow,
   checkpointed, a limit per micro-batch) and lands them as Parquet;
3. aggregates the Parquet data with a batch query and prints the results and throughput.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

import pulsar_spark

PARTITIONS = 4
DEFAULT_TOPIC = "clicks"
# Left in every output directory the demo makes: the only non-empty one it clears on a re-run.
MARKER = ".pulsar-spark-demo"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--service-url", help="a Pulsar cluster; default: start pulsar-lite")
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help="topic to write and read")
    parser.add_argument("--events", type=int, default=300_000, help="events to generate")
    parser.add_argument(
        "--output",
        help="output directory: new, empty, or one an earlier run made (default: a temporary one)",
    )
    parser.add_argument("--per-trigger", type=int, default=100_000, help="messages per batch")
    return parser.parse_args(argv)


@contextlib.contextmanager
def broker_url(args: argparse.Namespace) -> Iterator[str]:
    """The cluster given on the command line, or an embedded broker for the demo's lifetime."""
    if args.service_url:
        yield args.service_url
        return
    from pulsar_spark.local import LocalBroker

    step(f"starting embedded pulsar-lite with topic '{args.topic}' ({PARTITIONS} partitions)")
    try:
        broker = LocalBroker.start(partitioned_topics={args.topic: PARTITIONS})
    except ImportError as exc:
        raise SystemExit(f"{exc}; or run the demo on a cluster with --service-url") from exc
    with broker:
        print(f"    broker at {broker.service_url}, metrics at {broker.metrics_url}")
        yield broker.service_url


def output_directory(given: str | None) -> Path:
    """The output directory, empty and marked as the demo's. An earlier run's is cleared; any
    other that holds something is refused (SystemExit), and left as it is."""
    if given is None:
        out = Path(tempfile.mkdtemp(prefix="pulsar-spark-demo-"))
    else:
        out = Path(given)
        if out.exists() and not out.is_dir():
            raise SystemExit(f"--output {out} is a file; give a directory")
        if out.is_dir() and any(out.iterdir()):
            if not (out / MARKER).is_file():
                raise SystemExit(
                    f"--output {out} is not empty and was not made by the demo, which would "
                    "delete what it holds; give a new or empty directory"
                )
            shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by python -m pulsar_spark.jobs.demo\n", encoding="utf-8")
    return out


def step(text: str) -> None:
    print(f"\n==> {text}", flush=True)


def session() -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    spark = (
        SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]"))
        .appName("pulsar-spark-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pulsar_spark.register(spark)
    return spark


def events(spark: SparkSession, count: int) -> DataFrame:
    """Synthetic click events: 5,000 users, 8 pages, 4 actions, one event every 10 ms.

    Event ``id`` has user ``id % 5000``, page ``id * 7 % 8`` and, from ``id * 13 % 11``,
    action view (5 in 11), click (3 in 11), scroll (2 in 11) or purchase (1 in 11).
    """
    return (
        spark.range(count)
        .selectExpr(
            "CAST(id % 5000 AS STRING) AS user_id",
            "element_at(array('home','search','product','cart','checkout','help','blog','account'),"
            " CAST(id * 7 % 8 AS INT) + 1) AS page",
            # id % 11 is independent of the page (id % 8): every page sees every action
            "element_at(array('view','view','view','view','view','click','click','click',"
            "'scroll','scroll','purchase'), CAST(id * 13 % 11 AS INT) + 1) AS action",
            "timestamp_millis(1767225600000 + id * 10) AS ts",
            "id",
        )
        .selectExpr(
            "user_id AS key",
            "to_json(named_struct('id', id, 'user', user_id, 'page', page, 'action', action,"
            " 'ts', ts)) AS value",
            "map('source', 'pulsar-spark-demo', 'schema', 'click/v1') AS properties",
            "ts AS eventTime",
        )
    )


def write_events(spark: SparkSession, url: str, topic: str, count: int) -> float:
    step(f"writing {count:,} click events with df.write.format('pulsar')")
    started = time.perf_counter()
    (
        events(spark, count)
        .write.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .option("pulsar.producer.compressionType", "lz4")
        .mode("append")
        .save()
    )
    elapsed = time.perf_counter() - started
    print(f"    {count:,} events in {elapsed:.1f}s = {count / elapsed:,.0f} msg/s")
    return elapsed


def stream_to_parquet(
    spark: SparkSession, url: str, topic: str, out: Path, per_trigger: int
) -> int:
    step("streaming the topic into Parquet (readStream, Trigger.AvailableNow, checkpointed)")
    started = time.perf_counter()
    query = (
        spark.readStream.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(per_trigger))
        .load()
        .selectExpr(
            "partition",
            "messageId",
            "CAST(key AS STRING) AS user_id",
            "get_json_object(CAST(value AS STRING), '$.page') AS page",
            "get_json_object(CAST(value AS STRING), '$.action') AS action",
            "eventTime",
            "publishTime",
            "properties['schema'] AS schema",
        )
        .writeStream.format("parquet")
        .option("path", str(out / "events"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    seen = 0
    while query.isActive:
        seen = _print_progress(query, seen)
        time.sleep(0.5)
    query.awaitTermination()
    _print_progress(query, seen)
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    elapsed = time.perf_counter() - started
    print(f"    {rows:,} events in {elapsed:.1f}s = {rows / elapsed:,.0f} msg/s (incl. start-up)")
    return int(rows)


def _print_progress(query: StreamingQuery, seen: int) -> int:
    progress = query.recentProgress
    for p in progress[seen:]:
        if p["numInputRows"]:
            print(
                f"    micro-batch {p['batchId']}: {p['numInputRows']:,} rows "
                f"in {p['durationMs'].get('triggerExecution', 0)} ms"
            )
    return len(progress)


def aggregate(spark: SparkSession, out: Path) -> None:
    step("aggregating the Parquet data with a batch query")
    started = time.perf_counter()
    df = spark.read.parquet(str(out / "events"))
    total = df.count()
    print(f"    {total:,} events landed; per page and action:")
    table = (
        df.groupBy("page")
        .pivot("action", ["view", "click", "scroll", "purchase"])
        .count()
        .fillna(0)
        .orderBy("page")
        .collect()
    )
    print(f"    {'page':10s} {'view':>8s} {'click':>8s} {'scroll':>8s} {'purchase':>9s}")
    for row in table:
        print(
            f"    {row['page']:10s} {row['view']:>8,} {row['click']:>8,} "
            f"{row['scroll']:>8,} {row['purchase']:>9,}"
        )
    busiest = df.groupBy("user_id").count().orderBy("count", "user_id", ascending=[False, True])
    top = ", ".join(f"{r['user_id']} ({r['count']})" for r in busiest.limit(3).collect())
    per_partition = {
        row["partition"]: row["count"]
        for row in df.groupBy("partition").count().orderBy("partition").collect()
    }
    print(f"    busiest users: {top}")
    print(f"    events per partition: {per_partition}")
    print(f"    aggregation took {time.perf_counter() - started:.1f}s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out = output_directory(args.output)
    started = time.perf_counter()
    with broker_url(args) as url:
        step("starting Spark (local[2])")
        spark = session()
        write_events(spark, url, args.topic, args.events)
        streamed = stream_to_parquet(spark, url, args.topic, out, args.per_trigger)
        aggregate(spark, out)
        spark.stop()
    step(f"done in {time.perf_counter() - started:.0f}s; Parquet output in {out}")
    if streamed < args.events:
        print(f"!! expected at least {args.events:,} events, streamed {streamed:,}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
