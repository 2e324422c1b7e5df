"""Streaming latency: from each message's publish time to its arrival in a ``foreachBatch`` sink.

One broker, one topic of 4 partitions. A streaming query with the default trigger (the next
micro-batch starts as soon as the previous one ends) reads it from ``startingOffsets=latest``
into a ``foreachBatch`` function that collects each micro-batch's ``publishTime`` column and
records the wall clock when the collect returns: that instant minus a message's publish time is
its latency. Once the query runs, a child process publishes ``--rate`` messages per second
(100 B, spread over the partitions, the official producer with batching of up to 10 ms) for
``--warmup`` seconds (not measured: the first micro-batch starts Spark's Python workers, about
2.5 s here, and the next ones catch up), waits for them to arrive, then publishes at the same
rate for ``--seconds`` seconds, paced in 10 ms steps: the measured messages. The benchmark
waits until every message has arrived, then stops the query.

Reports p50, p90, p99 and the maximum latency over every message, and where each micro-batch's
time goes: Spark's ``durationMs`` phases (``latestOffset`` is the connector's question to the
broker for the partitions' last ids; ``queryPlanning``, ``walCommit``, ``commitOffsets`` are
Spark's own; ``addBatch`` runs the micro-batch) and, inside ``addBatch``, the collect of the
micro-batch (task start-up and the connector's read of the range) timed from the sink function.
Goal: p99 under 1.5 s. Results go to ``benchmarks/results/bench_latency.json``.

    python benchmarks/bench_latency.py [--rate 20000] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    DEFAULT_PARTITIONS,
    NO_OP_CALLBACK,
    PHASES,
    partition_topic,
    quiet_pulsar_logger,
    report,
    spark_session,
    start_broker,
)

TOPIC = "latency"
STEP = 0.01  # the publisher's pacing step, seconds


def publish_paced(url: str, partitions: int, rate: int, seconds: float, size: int) -> int:
    """In a child process: ``rate`` msg/s for ``seconds`` s, message i to partition i mod n."""
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
        value = b"x" * size
        total = int(rate * seconds)
        per_step = rate * STEP
        start = time.monotonic()
        sent = 0
        while sent < total:
            due = min(total, int((time.monotonic() - start) / STEP * per_step) + int(per_step))
            while sent < due:
                producers[sent % partitions].send_async(value, NO_OP_CALLBACK)
                sent += 1
            time.sleep(max(0.0, start + (sent / per_step) * STEP - time.monotonic()))
        for producer in producers:
            producer.flush()
            producer.close()
        return sent
    finally:
        client.close()


class Arrivals:
    """The ``foreachBatch`` function: every message's latency and each collect's duration."""

    def __init__(self) -> None:
        self.latencies: list[Any] = []
        self.collects: dict[int, float] = {}
        self.count = 0
        self.lock = threading.Lock()

    def reset(self) -> None:
        with self.lock:
            self.latencies, self.collects, self.count = [], {}, 0

    def __call__(self, batch: Any, batch_id: int) -> None:
        import pyarrow.compute as pc

        began = time.time()
        table = batch.select("publishTime").toArrow()
        arrived = time.time()
        published = pc.cast(table.column("publishTime"), "int64").to_numpy()  # microseconds
        with self.lock:
            self.latencies.append(arrived - published / 1e6)
            self.collects[batch_id] = arrived - began
            self.count += len(published)


def measure(spark: Any, url: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    checkpoint = tempfile.mkdtemp(prefix="bench-latency-checkpoint-")
    arrivals = Arrivals()
    total = int(args.rate * args.seconds)
    try:
        df = (
            spark.readStream.format("pulsar")
            .option("service.url", url)
            .option("topic", TOPIC)
            .option("startingOffsets", "latest")
            .load()
        )
        query = (
            df.writeStream.foreachBatch(arrivals).option("checkpointLocation", checkpoint).start()
        )
        try:
            _wait(lambda: query.lastProgress is not None, 120, "the query's first trigger")
            context = multiprocessing.get_context("spawn")
            with context.Pool(1) as pool:
                for seconds in (args.warmup, args.seconds):
                    arrivals.reset()
                    sent = pool.apply(
                        publish_paced, (url, args.partitions, args.rate, seconds, args.size)
                    )
                    _wait(
                        lambda sent=sent: arrivals.count >= sent,
                        120,
                        f"all {sent:,} messages to arrive",
                    )
            time.sleep(1.0)  # a trigger more, so a duplicate would show in the count
            progress = [json.loads(p.json) for p in query.recentProgress]
        finally:
            query.stop()
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)

    latencies = np.concatenate(arrivals.latencies)
    # The micro-batches that delivered measured messages: those the sink saw after the reset.
    batches = [p for p in progress if p["batchId"] in arrivals.collects]
    mean = {
        phase: round(float(np.mean([p["durationMs"].get(phase, 0) for p in batches])))
        for phase in PHASES
    }
    collects = [arrivals.collects[p["batchId"]] for p in batches]
    return {
        "published": sent,
        "arrived": arrivals.count,
        "rate": args.rate,
        "seconds": args.seconds,
        "latency_s": {
            name: round(float(np.percentile(latencies, q)), 3)
            for name, q in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))
        },
        "micro_batches_with_data": len(batches),
        "rows_per_micro_batch": round(float(np.mean([p["numInputRows"] for p in batches]))),
        "mean_ms_per_micro_batch": mean,
        "mean_collect_ms": round(1000 * float(np.mean(collects))) if collects else None,
        "batches": [
            {
                "batchId": p["batchId"],
                "rows": p["numInputRows"],
                **{phase: p["durationMs"].get(phase, 0) for phase in PHASES},
                "collect_ms": round(1000 * arrivals.collects[p["batchId"]]),
            }
            for p in batches
        ],
        "total_expected": total,
    }


def _wait(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:g}s for {what}")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=int, default=20_000, help="messages per second")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument(
        "--warmup", type=float, default=5.0, help="seconds published first, not measured"
    )
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    args = parser.parse_args()

    broker = start_broker(TOPIC, args.partitions)
    try:
        spark = spark_session(
            "bench_latency", extra={"spark.sql.streaming.numRecentProgressUpdates": "1000"}
        )
        try:
            result = measure(spark, broker.service_url, args)
        finally:
            spark.stop()
    finally:
        broker.stop()

    latency = result["latency_s"]
    print(f"\nmean per micro-batch with data (ms): {result['mean_ms_per_micro_batch']}")
    print(f"mean collect inside addBatch (ms): {result['mean_collect_ms']}")
    print(f"latency p99: {latency['p99']:.3f} s  (goal: < 1.5 s)")
    report(
        "bench_latency",
        ["rate msg/s", "seconds", "messages", "micro-batches", "p50 s", "p90 s", "p99 s", "max s"],
        [
            [
                args.rate,
                args.seconds,
                result["arrived"],
                result["micro_batches_with_data"],
                latency["p50"],
                latency["p90"],
                latency["p99"],
                latency["max"],
            ]
        ],
        result,
    )
    if result["arrived"] != result["published"]:
        sys.exit(f"{result['arrived']:,} messages arrived, {result['published']:,} published")


if __name__ == "__main__":
    main()
