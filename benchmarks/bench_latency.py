"""Streaming latency: from each message's publish time to its arrival in a ``foreachBatch`` sink.

One broker (Apache Pulsar by default, on a core of its own as on a cluster, where the publisher
runs too), one topic of 4 partitions. A streaming query with the default trigger (the next
micro-batch starts as soon as the previous one ends) reads it from ``startingOffsets=latest``
into a ``foreachBatch`` function that collects each micro-batch's ``value`` column and records
the wall clock when the collect returns. Once the query runs, a child process publishes
``--rates`` messages per second (100 B, spread over the partitions, the official producer with
batching of up to 10 ms), each value starting with the message's number and the instant it was
handed to the producer (``ceiling.STAMP``), paced in 10 ms steps: first for ``--warmup`` seconds
(not measured: the first micro-batch starts Spark's Python workers, about 2.5 s here, and the
next ones catch up), then, without a pause, for ``--seconds`` seconds: the measured messages. A
message's latency is its micro-batch's arrival minus that instant. The benchmark waits until
every message has arrived and a trigger more, then stops the query and fails unless every number
arrived exactly once.

In the same run and session, the same query over the ceiling source (``ceiling.py``) as a live
stream at the same rate: rows that cost no I/O and become available at their instants. Its
latency is Spark's own floor for a Python streaming source with the default trigger.

Reports, per source and rate, p50, p90, p99 and the maximum latency over every measured
message, the micro-batches' sizes and durations, and where each micro-batch's time goes:
Spark's ``durationMs`` phases (``latestOffset`` is the source's question for the partitions'
last ids; ``queryPlanning``, ``walCommit``, ``commitOffsets`` are Spark's own; ``addBatch`` runs
the micro-batch) and, inside ``addBatch``, the collect (task start-up and the source's read of
the range) timed from the sink function. Goals at 20,000 msg/s: p50 <= 0.8 s, p99 <= 1.5 s; at
1,000 msg/s: p99 <= 1.0 s. Results go to ``benchmarks/results/bench_latency.json``.

    python benchmarks/bench_latency.py [--rates 20000,1000] [--seconds 40] [--broker apache]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ceiling import STAMP, CeilingSource
from common import (
    DEFAULT_PARTITIONS,
    NO_OP_CALLBACK,
    PHASES,
    add_broker_argument,
    broker_cpu,
    partition_topic,
    quiet_pulsar_logger,
    report,
    spark_session,
    start_broker,
)

TOPIC = "latency"
STEP = 0.01  # the publisher's pacing step, seconds
GOALS = {20_000: {"p50": 0.8, "p99": 1.5}, 1_000: {"p99": 1.0}}  # seconds


def publish_paced(  # noqa: PLR0917 (a Pool.apply target takes its arguments positionally)
    url: str, partitions: int, rate: int, seconds: float, size: int, first: int
) -> int:
    """In a child process: ``rate`` msg/s for ``seconds`` s, numbered from ``first``, message
    ``n`` to partition ``n`` mod the partitions; returns how many were sent."""
    import pulsar

    client = pulsar.Client(url, operation_timeout_seconds=30, logger=quiet_pulsar_logger())
    try:
        producers = [
            client.create_producer(
                partition_topic(TOPIC, index),
                batching_enabled=True,
                batching_max_messages=1000,
                batching_max_publish_delay_ms=10,
                max_pending_messages=50_000,
                block_if_queue_full=True,
            )
            for index in range(partitions)
        ]
        padding = b"x" * max(0, size - STAMP.size)
        total = int(rate * seconds)
        per_step = rate * STEP
        start = time.monotonic()
        sent = 0
        while sent < total:
            due = min(total, int((time.monotonic() - start) / STEP * per_step) + int(per_step))
            while sent < due:
                number = first + sent
                value = STAMP.pack(number, time.time_ns() // 1000) + padding
                producers[number % partitions].send_async(value, NO_OP_CALLBACK)
                sent += 1
            time.sleep(max(0.0, start + (sent / per_step) * STEP - time.monotonic()))
        for producer in producers:
            producer.flush()
            producer.close()
        return sent
    finally:
        client.close()


class Arrivals:
    """The ``foreachBatch`` function: each micro-batch's message numbers, their instants and
    when the collect returned, and how long it took."""

    def __init__(self) -> None:
        self.batches: dict[int, tuple[Any, Any, float, float]] = {}
        self.count = 0
        self.lock = threading.Lock()

    def __call__(self, batch: Any, batch_id: int) -> None:
        import numpy as np

        began = time.time()
        table = batch.select("value").toArrow()
        arrived = time.time()
        stamps = [_stamps(chunk) for chunk in table.column("value").chunks]
        stamp = np.concatenate(stamps) if stamps else np.empty((0, 2), dtype=np.int64)
        with self.lock:
            self.batches[batch_id] = (stamp[:, 0], stamp[:, 1], arrived, arrived - began)
            self.count += len(stamp)


def _stamps(values: Any) -> Any:
    """The (number, microseconds) at the start of each value of a binary Arrow array."""
    import numpy as np

    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)
    offsets = offsets[values.offset : values.offset + len(values) + 1]
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)
    starts = offsets[:-1, None] + np.arange(STAMP.size)
    return data[starts].copy().view(np.int64)


def measure(spark: Any, source: str, url: str, rate: int, args: argparse.Namespace) -> dict:
    """One query of ``source`` (``pulsar`` or ``ceiling``) at ``rate`` msg/s."""
    checkpoint = tempfile.mkdtemp(prefix="bench-latency-checkpoint-")
    arrivals = Arrivals()
    warmup = int(rate * args.warmup)
    total = warmup + int(rate * args.seconds)
    try:
        query = (
            _stream(spark, source, url, rate=rate, total=total, args=args)
            .writeStream.foreachBatch(arrivals)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            _wait(lambda: query.lastProgress is not None, 300, "the query's first trigger")
            if source == "pulsar":
                _publish(url, rate, args, total)
            _wait(lambda: arrivals.count >= total, 300, f"all {total:,} messages to arrive")
            time.sleep(1.0)  # a trigger more, so a duplicate would show
            progress = {p["batchId"]: p for p in (json.loads(p.json) for p in query.recentProgress)}
        finally:
            query.stop()
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    return summarize(arrivals, progress, warmup, total)


def _stream(
    spark: Any, source: str, url: str, *, rate: int, total: int, args: argparse.Namespace
) -> Any:
    if source == "pulsar":
        options = {"service.url": url, "topic": TOPIC, "startingOffsets": "latest"}
    else:
        counts = [
            (total - p + args.partitions - 1) // args.partitions for p in range(args.partitions)
        ]
        options = {
            "counts": ",".join(map(str, counts)),
            "size": str(args.size),
            "rate": str(rate),
        }
    return spark.readStream.format(source).options(**options).load()


def _publish(url: str, rate: int, args: argparse.Namespace, total: int) -> None:
    """The warm-up messages and the measured ones after them without a pause, in a child
    process, as the ceiling source makes its rows."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1, initializer=_pin, initargs=(args.broker_cpu,)) as pool:
        seconds = args.warmup + args.seconds
        sent = pool.apply(publish_paced, (url, args.partitions, rate, seconds, args.size, 0))
    if sent != total:
        raise RuntimeError(f"published {sent:,} messages, not {total:,}")


def _pin(cpu: int | None) -> None:
    """Keep the publisher off Spark's cores: with the broker, it is the world outside Spark."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


def summarize(
    arrivals: Arrivals, progress: dict[int, dict[str, Any]], warmup: int, total: int
) -> dict[str, Any]:
    """Latencies of the measured messages (numbers from ``warmup``), the micro-batches that
    delivered them, and whether every number below ``total`` arrived exactly once."""
    import numpy as np

    numbers = np.concatenate([b[0] for b in arrivals.batches.values()])
    seen = np.bincount(numbers, minlength=total)
    latencies, measured = [], []
    for batch_id, (batch_numbers, micros, arrived, collect) in sorted(arrivals.batches.items()):
        chosen = batch_numbers >= warmup
        if chosen.any():
            latencies.append(arrived - micros[chosen] / 1e6)
            measured.append((batch_id, len(batch_numbers), collect))
    latency = np.concatenate(latencies)
    batches = [
        {
            "batchId": batch_id,
            "rows": rows,
            **{phase: progress[batch_id]["durationMs"].get(phase, 0) for phase in PHASES},
            "collect_ms": round(1000 * collect),
        }
        for batch_id, rows, collect in measured
        if batch_id in progress
    ]
    rows = np.array([b["rows"] for b in batches])
    return {
        "messages": total - warmup,
        "lost": int(np.count_nonzero(seen[:total] == 0)),
        "repeated": int(np.count_nonzero(seen > 1)),
        "unexpected": int(len(seen) - total),
        "latency_s": {
            name: round(float(np.percentile(latency, q)), 3)
            for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))
        },
        "micro_batches": len(measured),
        "rows_per_micro_batch": {
            "mean": round(float(rows.mean())),
            "min": int(rows.min()),
            "max": int(rows.max()),
        },
        "mean_ms_per_micro_batch": {
            phase: round(float(np.mean([b[phase] for b in batches])))
            for phase in (*PHASES, "collect_ms")
        },
        "p90_ms_per_micro_batch": {
            phase: round(float(np.percentile([b[phase] for b in batches], 90)))
            for phase in (*PHASES, "collect_ms")
        },
        "batches": batches,
    }


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g}s for {what}")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rates", default="20000,1000", help="messages per second, comma-separated"
    )
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="seconds published first, not measured"
    )
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--sources", default="pulsar,ceiling", help="pulsar, ceiling or both")
    add_broker_argument(parser)
    parser.set_defaults(broker="apache")
    args = parser.parse_args()
    if args.size < STAMP.size:
        parser.error(f"--size must be at least {STAMP.size}")
    rates = [int(r) for r in args.rates.split(",")]
    sources = args.sources.split(",")

    args.broker_cpu = broker_cpu(args)
    broker = start_broker(TOPIC, args.partitions, args.broker, args.broker_cpu)
    results: dict[str, dict[str, Any]] = {}
    try:
        spark = spark_session(
            "bench_latency", extra={"spark.sql.streaming.numRecentProgressUpdates": "1000"}
        )
        spark.dataSource.register(CeilingSource)
        try:
            for rate in rates:
                for source in sources:
                    print(f"== {source} at {rate:,} msg/s", flush=True)
                    result = measure(spark, source, broker.service_url, rate, args)
                    results[f"{source}@{rate}"] = result
                    print(
                        f"   latency {result['latency_s']}, micro-batches "
                        f"{result['micro_batches']}, rows {result['rows_per_micro_batch']}\n"
                        f"   mean ms {result['mean_ms_per_micro_batch']}",
                        flush=True,
                    )
        finally:
            spark.stop()
    finally:
        broker.stop()

    rows = []
    for key, result in results.items():
        source, rate = key.split("@")
        latency = result["latency_s"]
        rows.append(
            [
                source,
                int(rate),
                result["messages"],
                result["micro_batches"],
                result["rows_per_micro_batch"]["mean"],
                result["mean_ms_per_micro_batch"]["triggerExecution"],
                latency["p50"],
                latency["p90"],
                latency["p99"],
                latency["max"],
                result["lost"] + result["repeated"] + result["unexpected"],
            ]
        )
    report(
        "bench_latency",
        [
            "source",
            "rate msg/s",
            "messages",
            "micro-batches",
            "rows/batch",
            "ms/batch",
            "p50 s",
            "p90 s",
            "p99 s",
            "max s",
            "lost+repeated",
        ],
        rows,
        {"broker": args.broker, "seconds": args.seconds, "goals_s": GOALS, "runs": results},
    )
    wrong = [k for k, r in results.items() if r["lost"] or r["repeated"] or r["unexpected"]]
    if wrong:
        sys.exit(f"messages lost, repeated or unexpected in {', '.join(wrong)}")


if __name__ == "__main__":
    main()
