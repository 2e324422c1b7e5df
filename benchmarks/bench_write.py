"""Batch write, end to end: the ``pulsar`` sink against the official producer, foreachPartition.

One broker; on ``local[2]``, the same input written by each side, twice (a warm-up run, then the
measured run), every run to a 4-partition topic of its own:

- Input: ``spark.range(1000000, numPartitions=4)`` with a ``value`` column of exactly 100
  bytes (the zero-padded id, then filler), binary. It is cached and counted before any timed
  run, so both sides measure sending, not building the data.
A. ``df.write.format("pulsar").option("service.url", url).option("topic", t).mode("append")
   .save()``, with the sink's default producer settings (batches of up to 1000 messages or
   128 KiB, no compression; unkeyed rows rotate over the partitions one batch at a time).
B. What a PySpark user can write today without this package: ``df.foreachPartition(fn)``
   where ``fn`` creates a ``pulsar.Client`` and one producer on the partitioned topic (the
   client routes unkeyed messages round-robin), batching on with the same limits (1000
   messages / 128 KiB / 10 ms), at most 10,000 pending messages per partition (blocking when
   full), ``send_async`` per row with a callback that records failures, then ``flush`` and
   ``close``. The task fails if any send failed.
B0. The same with a callback that does nothing and runs no Python: a builtin (``slice``)
   that accepts the two arguments. A failed send goes unnoticed (the counts afterwards still
   check every message arrived), but the client's I/O thread no longer takes the GIL to run
   Python once per message, which the checking callback of B does. This is B at its fastest.

AT. A with ``transactional=true``: each task publishes in a transaction the driver commits
   (Apache Pulsar only, ``--broker apache --sides A,AT``); reported as AT/A.
C. Spark's ceiling for a Python sink: ``df.write.format("ceiling")`` (``ceiling.py``), which
   drops the rows as they arrive; what Spark itself costs any Python sink. Reported as A/C.

``--keyed`` gives every row a key (``user-<n>``, 10,000 distinct) and two properties,
``source`` and ``trace-id`` (a UUID per row), as ``bench_peers`` writes them.

A/B is reported against the faster of B and B0.

Each side runs in its own SparkSession (stopped in between, the input built again the same
way), so the peak memory of the Python worker processes is measured for that side alone.
Afterwards, outside the timed runs, every topic written is counted with
``spark.read.format("pulsar")`` and must hold exactly as many messages as the input has rows.
Results go to ``benchmarks/results/bench_write.json``.

    python benchmarks/bench_write.py [--messages 1000000] [--size 100] [--partitions 4]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ceiling import CeilingSource
from common import (
    add_broker_argument,
    add_dataset_arguments,
    broker_cpu,
    median_measured,
    report,
    short_error,
    spark_session,
    start_broker,
    timed_run,
)

B_BATCH_MESSAGES = 1000
B_BATCH_BYTES = 128 * 1024
B_BATCH_DELAY_MS = 10
B_MAX_PENDING = 10_000
SIDES = {
    "A": "A pulsar sink",
    "B": "B official producer, foreachPartition",
    "B0": "B0 the same, no-op builtin callback",
    "AT": "AT pulsar sink, transactional=true",
    "C": "C Spark's ceiling for a Python sink (drops the rows)",
}
# A builtin that accepts (result, message_id) and does nothing with them: no Python frame.
NO_OP_CALLBACK = slice


def input_frame(spark: Any, args: argparse.Namespace) -> Any:
    """The rows to write, cached and materialized: ``value`` is ``args.size`` bytes; with
    ``--keyed`` a key and two properties too."""
    from pyspark.sql import functions as F  # noqa: N812

    digits = min(args.size, 12)
    value = F.concat(
        F.lpad(F.col("id").cast("string"), digits, "0"), F.lit("x" * (args.size - digits))
    ).cast("binary")
    columns = [value.alias("value")]
    if args.keyed:
        source = F.element_at(
            F.array(*(F.lit(s) for s in ("web", "mobile", "batch", "partner"))),
            (F.col("id") % 4).cast("int") + 1,
        )
        columns += [
            F.concat(F.lit("user-"), (F.col("id") % 10_000).cast("string")).alias("key"),
            F.create_map(F.lit("source"), source, F.lit("trace-id"), F.expr("uuid()")).alias(
                "properties"
            ),
        ]
    df = spark.range(args.messages, numPartitions=args.input_partitions).select(*columns)
    df.cache()
    rows = df.count()
    if rows != args.messages:
        raise RuntimeError(f"the input has {rows} rows, expected {args.messages}")
    return df


def write_a(df: Any, service_url: str, topic: str, **options: str) -> None:
    writer = df.write.format("pulsar").option("service.url", service_url).option("topic", topic)
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.mode("append").save()


def write_b(df: Any, service_url: str, topic: str, *, check: bool) -> None:
    df.foreachPartition(
        lambda rows: send_with_official_producer(service_url, topic, rows, check=check)
    )


def send_with_official_producer(
    service_url: str, topic: str, rows: Iterator[Any], *, check: bool
) -> None:
    """``foreachPartition`` body: send every row's value to ``topic`` and wait for receipts.

    With ``check``, every receipt runs a Python callback that records failures, and the task
    fails if there were any; without, the callback is a builtin no-op.
    """
    import pulsar

    failures: list[str] = []

    def record_failure(result: Any, _message_id: Any) -> None:
        if result != pulsar.Result.Ok:
            failures.append(str(result))

    on_sent = record_failure if check else NO_OP_CALLBACK

    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=B_BATCH_MESSAGES,
            batching_max_allowed_size_in_bytes=B_BATCH_BYTES,
            batching_max_publish_delay_ms=B_BATCH_DELAY_MS,
            max_pending_messages=B_MAX_PENDING,
            block_if_queue_full=True,
        )
        for row in rows:
            producer.send_async(bytes(row.value), on_sent)
        producer.flush()
        producer.close()
    finally:
        client.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sends failed, the first: {failures[0]}")


def count_topic(spark: Any, service_url: str, topic: str) -> int:
    reader = spark.read.format("pulsar").option("service.url", service_url)
    return int(reader.option("topic", topic).load().count())


def measure(
    label: str,
    write: Callable[[str], None],
    topics: list[str],
    messages: int,
) -> list[dict[str, Any]]:
    """One write per topic in ``topics`` (the first is the warm-up); a failure is recorded."""
    return [
        timed_run(label, run, len(topics), messages, lambda t=topic: write(t), topic=topic)
        for run, topic in enumerate(topics)
    ]


def run_side(
    side: str, args: argparse.Namespace, service_url: str, topics: list[str]
) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """Every run of one side in a SparkSession of its own, then the topics counted (untimed)."""
    writers: dict[str, Callable[[Any, str, str], None]] = {
        "A": write_a,
        "B": lambda df, url, topic: write_b(df, url, topic, check=True),
        "B0": lambda df, url, topic: write_b(df, url, topic, check=False),
        "AT": lambda df, url, topic: write_a(df, url, topic, transactional="true"),
        "C": lambda df, url, topic: df.write.format("ceiling").mode("append").save(),
    }
    write_to = writers[side]
    spark = spark_session(f"bench_write_{side}")
    spark.dataSource.register(CeilingSource)
    try:
        df = input_frame(spark, args)
        print(f"  input: {args.messages:,} rows in {df.rdd.getNumPartitions()} partitions, cached")
        runs = measure(
            SIDES[side], lambda topic: write_to(df, service_url, topic), topics, args.messages
        )
        counts: dict[str, int | None] = {}
        for topic in topics if side != "C" else ():  # the ceiling writes nothing
            try:
                counts[topic] = count_topic(spark, service_url, topic)
            except Exception as exc:
                print(f"  {topic} count: FAILED: {short_error(exc)}", flush=True)
                counts[topic] = None
            print(f"  {topic}: {counts[topic]} messages (untimed)", flush=True)
    finally:
        spark.stop()
    return runs, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataset_arguments(parser)
    parser.add_argument("--runs", type=int, default=2, help="the first one is the warm-up")
    parser.add_argument(
        "--input-partitions", type=int, default=4, help="partitions of the input DataFrame"
    )
    parser.add_argument(
        "--sides", default="A,B,B0", help="which of A, B, B0, AT and C to run, in this order"
    )
    parser.add_argument("--keyed", action="store_true", help="rows with a key and 2 properties")
    add_broker_argument(parser)
    args = parser.parse_args()
    sides = args.sides.split(",")

    topics = {
        side: [f"bench-write-{side.lower()}-{run}" for run in range(args.runs)] for side in sides
    }
    names = [t for side_topics in topics.values() for t in side_topics]
    broker = start_broker(names, args.partitions, args.broker, broker_cpu(args))
    runs: dict[str, list[dict[str, Any]]] = {}
    counts: dict[str, int | None] = {}
    try:
        for side in sides:
            print(f"{SIDES[side]}", flush=True)
            runs[side], side_counts = run_side(side, args, broker.service_url, topics[side])
            counts.update(side_counts)
    finally:
        broker.stop()

    a = median_measured(runs.get("A", []))
    bs = [r for r in (median_measured(runs.get(s, [])) for s in ("B", "B0")) if r is not None]
    b = max(bs, key=lambda r: r["msg_per_s"], default=None)
    ratio = round(a["msg_per_s"] / b["msg_per_s"], 2) if a and b else None
    at = median_measured(runs.get("AT", []))
    ratio_at = round(at["msg_per_s"] / a["msg_per_s"], 2) if a and at else None
    c = median_measured(runs.get("C", []))
    ratio_c = round(a["msg_per_s"] / c["msg_per_s"], 2) if a and c else None
    every_run = [r for side in sides for r in runs[side]]
    rows = [
        [
            r["side"],
            r["run"],
            r.get("seconds", "failed"),
            r.get("msg_per_s", "-"),
            r.get("max_worker_rss_mb", "-"),
            r.get("max_total_rss_mb", "-"),
            counts.get(r["topic"]),
        ]
        for r in every_run
    ]
    counts_ok = all(count == args.messages for count in counts.values())
    against = b["side"] if b else None
    print(f"\nA/B (median measured runs, against {against}): {ratio}x   counts right: {counts_ok}")
    if ratio_at is not None:
        print(f"AT/A (transactional over plain, median measured runs): {ratio_at}x")
    if ratio_c is not None:
        print(f"A/C (the sink over Spark's ceiling for a Python sink): {ratio_c}x")
    report(
        "bench_write",
        ["side", "run", "seconds", "msg/s", "worker RSS max MB", "workers RSS sum MB", "count"],
        rows,
        {
            "messages": args.messages,
            "message_bytes": args.size,
            "topic_partitions": args.partitions,
            "input_partitions": args.input_partitions,
            "runs": every_run,
            "ratio_a_over_b": ratio,
            "ratio_against": against,
            "ratio_at_over_a": ratio_at,
            "ratio_a_over_c": ratio_c,
            "counts": counts,
            "counts_ok": counts_ok,
        },
    )
    failed = [f"{r['side']} ({r['topic']})" for r in every_run if "error" in r]
    if failed or not counts_ok:
        sys.exit(f"failed runs: {failed or 'none'}; topic counts {counts}")


if __name__ == "__main__":
    main()
