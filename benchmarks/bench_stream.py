"""Streaming read, end to end: ``readStream.format("pulsar")`` with ``trigger(availableNow=True)``.

One broker, one topic of 1,000,000 messages of 100 bytes in 4 partitions, published with the
official producer (batching on). On ``local[2]``, in one SparkSession:

1. the batch read of the same data into ``noop`` (a warm-up run, then a measured run), as the
   reference;
2. a streaming query over the whole topic from ``startingOffsets=earliest`` with
   ``maxMessagesPerTrigger=250000`` and ``trigger(availableNow=True)``, written to the ``noop``
   sink (Spark's noop sink supports streaming), with a fresh checkpoint directory; run twice,
   each time on a new checkpoint (the first run is the warm-up);
3. for reference, the same query without ``maxMessagesPerTrigger`` (one micro-batch), which
   separates the cost of the limit from the fixed per-query and per-batch costs.

For each streaming run: msg/s over the wall time from ``start()`` to the end of the query, the
number of micro-batches, each batch's ``durationMs`` breakdown from ``query.recentProgress``
(triggerExecution, latestOffset, queryPlanning, walCommit, addBatch, commitOffsets), the query
start-up (from ``start()`` to the first trigger) and msg/s inside triggers. The goal is a
streaming rate within 25% of the batch rate. Results go to
``benchmarks/results/bench_stream.json``.

    python benchmarks/bench_stream.py [--messages 1000000] [--max-per-trigger 250000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    PHASES,
    WorkerMemory,
    add_dataset_arguments,
    format_table,
    publish_dataset,
    report,
    spark_session,
    start_broker,
    timer,
)

QUERY_TIMEOUT = 600.0


def batch_read(spark: Any, url: str, topic: str, messages: int) -> dict[str, Any]:
    df = spark.read.format("pulsar").option("service.url", url).option("topic", topic).load()
    with WorkerMemory() as memory, timer() as elapsed:
        df.write.format("noop").mode("overwrite").save()
    seconds = elapsed["seconds"]
    return {
        "seconds": round(seconds, 3),
        "msg_per_s": round(messages / seconds),
        **memory.peak.summary(),
    }


def stream_read(
    spark: Any, url: str, topic: str, max_per_trigger: int | None, messages: int
) -> dict[str, Any]:
    checkpoint = tempfile.mkdtemp(prefix="bench-stream-checkpoint-")
    try:
        reader = (
            spark.readStream.format("pulsar")
            .option("service.url", url)
            .option("topic", topic)
            .option("startingOffsets", "earliest")
        )
        if max_per_trigger is not None:
            reader = reader.option("maxMessagesPerTrigger", str(max_per_trigger))
        df = reader.load()
        with WorkerMemory() as memory, timer() as elapsed:
            started = time.time()
            query = (
                df.writeStream.format("noop")
                .trigger(availableNow=True)
                .option("checkpointLocation", checkpoint)
                .start()
            )
            finished = query.awaitTermination(QUERY_TIMEOUT)
            ended = time.time()
        if not finished:
            query.stop()
            raise TimeoutError(f"the availableNow query did not finish within {QUERY_TIMEOUT}s")
        error = query.exception()
        if error is not None:
            raise RuntimeError(f"the streaming query failed: {error}")
        progress = [json.loads(p.json) for p in query.recentProgress]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)

    batches = [p for p in progress if p.get("numInputRows", 0) > 0]
    rows = sum(p["numInputRows"] for p in progress)
    seconds = elapsed["seconds"]
    per_batch = [
        {
            "batchId": p["batchId"],
            "numInputRows": p["numInputRows"],
            **{phase: p.get("durationMs", {}).get(phase, 0) for phase in PHASES},
        }
        for p in progress
    ]
    in_triggers = sum(b["triggerExecution"] for b in per_batch) / 1000
    # Progress timestamps mark each trigger's start: what lies before the first one is query
    # start-up (source process, initial offsets), what follows the last one is shutdown.
    first = _epoch(progress[0]["timestamp"]) if progress else ended
    last = (
        _epoch(progress[-1]["timestamp"]) + per_batch[-1]["triggerExecution"] / 1000
        if progress
        else ended
    )
    overhead = {
        phase: round(sum(b[phase] for b in per_batch) / max(len(per_batch), 1)) for phase in PHASES
    }
    return {
        "seconds": round(seconds, 3),
        "msg_per_s": round(messages / seconds),
        "rows": rows,
        "micro_batches": len(batches),
        "progress_events": len(progress),
        "seconds_in_triggers": round(in_triggers, 3),
        "msg_per_s_in_triggers": round(rows / in_triggers) if in_triggers else None,
        "startup_seconds": round(first - started, 3),
        "shutdown_seconds": round(ended - last, 3),
        "mean_ms_per_batch": overhead,
        "batches": per_batch,
        **memory.peak.summary(),
    }


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataset_arguments(parser)
    parser.add_argument("--max-per-trigger", type=int, default=250_000)
    args = parser.parse_args()

    broker = start_broker("bench", args.partitions)
    try:
        published = publish_dataset(broker, args)
        url, topic = broker.service_url, published.topic

        spark = spark_session("bench_stream")
        try:
            batch_runs = []
            for run in ("warm-up", "measured"):
                result = batch_read(spark, url, topic, args.messages)
                print(f"  batch {run}: {result['seconds']:.2f} s, {result['msg_per_s']:,} msg/s")
                batch_runs.append({"run": run, **result})
            stream_runs = []
            for run, limit in (
                ("warm-up", args.max_per_trigger),
                ("measured", args.max_per_trigger),
                ("no limit", None),
            ):
                result = stream_read(spark, url, topic, limit, args.messages)
                print(
                    f"  stream {run}: {result['seconds']:.2f} s, {result['msg_per_s']:,} msg/s, "
                    f"{result['micro_batches']} micro-batches, {result['rows']:,} rows; "
                    f"start-up {result['startup_seconds']:.2f} s, in triggers "
                    f"{result['seconds_in_triggers']:.2f} s, shutdown "
                    f"{result['shutdown_seconds']:.2f} s",
                    flush=True,
                )
                stream_runs.append({"run": run, "maxMessagesPerTrigger": limit, **result})
        finally:
            spark.stop()
    finally:
        broker.stop()

    batch, stream = batch_runs[-1], stream_runs[1]
    ratio = stream["msg_per_s"] / batch["msg_per_s"]
    print("\nmicro-batches of the measured streaming run (ms):")
    print(
        format_table(
            ["batchId", "rows", *PHASES],
            [[b["batchId"], b["numInputRows"], *(b[p] for p in PHASES)] for b in stream["batches"]],
        )
    )
    print(f"mean per micro-batch (ms): {stream['mean_ms_per_batch']}")
    print(f"\nstreaming / batch (measured runs): {ratio:.2f}  (goal: >= 0.75)")
    rows = [
        ["batch", r["run"], r["seconds"], r["msg_per_s"], "-", "-", "-", r["max_worker_rss_mb"]]
        for r in batch_runs
    ] + [
        [
            "stream" if r["maxMessagesPerTrigger"] else "stream, no maxMessagesPerTrigger",
            r["run"],
            r["seconds"],
            r["msg_per_s"],
            r["micro_batches"],
            r["startup_seconds"],
            r["msg_per_s_in_triggers"],
            r["max_worker_rss_mb"],
        ]
        for r in stream_runs
    ]
    report(
        "bench_stream",
        [
            "read",
            "run",
            "seconds",
            "msg/s",
            "micro-batches",
            "start-up s",
            "msg/s in triggers",
            "worker RSS max MB",
        ],
        rows,
        {
            "published": published.summary(),
            "max_messages_per_trigger": args.max_per_trigger,
            "batch_runs": batch_runs,
            "stream_runs": stream_runs,
            "stream_over_batch": round(ratio, 2),
            "rows_ok": all(r["rows"] == args.messages for r in stream_runs),
        },
    )
    bad = [r["rows"] for r in stream_runs if r["rows"] != args.messages]
    if bad:
        sys.exit(f"streaming runs read {bad} rows, expected {args.messages:,}")


if __name__ == "__main__":
    main()
