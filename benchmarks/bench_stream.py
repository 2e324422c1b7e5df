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

Then the same three reads of the ceiling source (``ceiling.py``: the same rows per partition,
prebuilt, no I/O): its streaming over batch ratio is what Spark itself costs a Python source's
streaming query (the streaming source's own process, offsets, checkpoints, a job per
micro-batch), and the bound reported is the connector's batch time over that time plus what
streaming adds to the ceiling's: the best ratio any source as fast as the connector could reach.

For each streaming run: msg/s over the wall time from ``start()`` to the end of the query, the
number of micro-batches, each batch's ``durationMs`` breakdown from ``query.recentProgress``
(triggerExecution, latestOffset, queryPlanning, walCommit, addBatch, commitOffsets), the query
start-up (from ``start()`` to the first trigger), msg/s inside triggers and the cores busy
(see :class:`common.CpuUse`). The goal is a streaming rate within 25% of the batch rate.
Results go to ``benchmarks/results/bench_stream.json``.

    python benchmarks/bench_stream.py [--messages 1000000] [--max-per-trigger 250000]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ceiling import CeilingSource
from common import (
    PHASES,
    CpuUse,
    WorkerMemory,
    add_broker_argument,
    add_dataset_arguments,
    broker_cpu,
    format_table,
    publish_dataset,
    report,
    spark_session,
    start_broker,
    timer,
)

QUERY_TIMEOUT = 600.0


def batch_read(spark: Any, source: Source, messages: int) -> dict[str, Any]:
    df = spark.read.format(source.format).options(**source.options).load()
    with WorkerMemory() as memory, CpuUse() as cpu, timer() as elapsed:
        df.write.format("noop").mode("overwrite").save()
    seconds = elapsed["seconds"]
    return {
        "seconds": round(seconds, 3),
        "msg_per_s": round(messages / seconds),
        **memory.peak.summary(),
        **cpu.summary(),
    }


def stream_read(
    spark: Any, source: Source, max_per_trigger: int | None, messages: int
) -> dict[str, Any]:
    checkpoint = tempfile.mkdtemp(prefix="bench-stream-checkpoint-")
    try:
        reader = spark.readStream.format(source.format).options(**source.stream_options)
        if max_per_trigger is not None:
            reader = reader.option("maxMessagesPerTrigger", str(max_per_trigger))
        df = reader.load()
        with WorkerMemory() as memory, CpuUse() as cpu, timer() as elapsed:
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
        **cpu.summary(),
    }


@dataclass(frozen=True)
class Source:
    """A source to read: ``pulsar`` (the connector) or ``ceiling`` (no I/O, see ceiling.py)."""

    label: str
    format: str
    options: dict[str, str]
    stream_options: dict[str, str]


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataset_arguments(parser)
    parser.add_argument("--max-per-trigger", type=int, default=250_000)
    add_broker_argument(parser)
    args = parser.parse_args()

    broker = start_broker("bench", args.partitions, args.broker, broker_cpu(args))
    try:
        published = publish_dataset(broker, args)
        pulsar = {"service.url": broker.service_url, "topic": published.topic}
        counts = ",".join(str(n) for n in published.counts)
        ceiling = {"counts": counts, "size": str(args.size)}
        sources = (
            Source("pulsar", "pulsar", pulsar, {**pulsar, "startingOffsets": "earliest"}),
            Source("ceiling", "ceiling", ceiling, ceiling),
        )
        spark = spark_session("bench_stream")
        spark.dataSource.register(CeilingSource)
        try:
            runs = {source.label: read_all_ways(spark, source, args) for source in sources}
        finally:
            spark.stop()
    finally:
        broker.stop()

    ratios = {label: _ratio(batch, stream) for label, (batch, stream) in runs.items()}
    stream = runs["pulsar"][1][1]
    print("\nmicro-batches of the measured streaming run (ms):")
    print(
        format_table(
            ["batchId", "rows", *PHASES],
            [[b["batchId"], b["numInputRows"], *(b[p] for p in PHASES)] for b in stream["batches"]],
        )
    )
    print(f"mean per micro-batch (ms): {stream['mean_ms_per_batch']}")
    bound = _bound(runs)
    print(
        f"\nstreaming / batch (measured runs): {ratios['pulsar']:.2f}  (goal: >= 0.75); "
        f"the ceiling source's: {ratios['ceiling']:.2f}\n"
        f"  Spark's own streaming cost (the ceiling's stream time minus its batch time) added "
        f"to the connector's batch time would leave at most {bound:.2f}"
    )
    rows = [
        [
            f"{label} batch",
            r["run"],
            r["seconds"],
            r["msg_per_s"],
            "-",
            "-",
            "-",
            r["cores_busy"],
            r["max_worker_rss_mb"],
        ]
        for label, (batch_runs, _) in runs.items()
        for r in batch_runs
    ] + [
        [
            f"{label} stream" + ("" if r["maxMessagesPerTrigger"] else ", no limit"),
            r["run"],
            r["seconds"],
            r["msg_per_s"],
            r["micro_batches"],
            r["startup_seconds"],
            r["msg_per_s_in_triggers"],
            r["cores_busy"],
            r["max_worker_rss_mb"],
        ]
        for label, (_, stream_runs) in runs.items()
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
            "cores busy",
            "worker RSS max MB",
        ],
        rows,
        {
            "published": published.summary(),
            "max_messages_per_trigger": args.max_per_trigger,
            "runs": runs,
            "stream_over_batch": round(ratios["pulsar"], 2),
            "ceiling_stream_over_batch": round(ratios["ceiling"], 2),
            "stream_over_batch_bound": round(bound, 2),
        },
    )
    bad = [
        (label, r["rows"])
        for label, (_, stream_runs) in runs.items()
        for r in stream_runs
        if r["rows"] != args.messages
    ]
    if bad:
        sys.exit(f"streaming runs read {bad} rows, expected {args.messages:,}")


Runs = tuple[list[dict[str, Any]], list[dict[str, Any]]]


def read_all_ways(spark: Any, source: Source, args: argparse.Namespace) -> Runs:
    """Batch runs (warm-up, measured), then stream runs (warm-up, measured, no limit)."""
    batch_runs = []
    for run in ("warm-up", "measured"):
        result = batch_read(spark, source, args.messages)
        print(
            f"  {source.label} batch {run}: {result['seconds']:.2f} s, "
            f"{result['msg_per_s']:,} msg/s, cores busy {result['cores_busy']}",
            flush=True,
        )
        batch_runs.append({"run": run, **result})
    stream_runs = []
    for run, limit in (
        ("warm-up", args.max_per_trigger),
        ("measured", args.max_per_trigger),
        ("no limit", None),
    ):
        result = stream_read(spark, source, limit, args.messages)
        print(
            f"  {source.label} stream {run}: {result['seconds']:.2f} s, "
            f"{result['msg_per_s']:,} msg/s, {result['micro_batches']} micro-batches, "
            f"{result['rows']:,} rows; start-up {result['startup_seconds']:.2f} s, in triggers "
            f"{result['seconds_in_triggers']:.2f} s, shutdown "
            f"{result['shutdown_seconds']:.2f} s, cores busy {result['cores_busy']}",
            flush=True,
        )
        stream_runs.append({"run": run, "maxMessagesPerTrigger": limit, **result})
    return batch_runs, stream_runs


def _ratio(batch_runs: list[dict[str, Any]], stream_runs: list[dict[str, Any]]) -> float:
    """Streaming over batch throughput, of the measured runs."""
    return float(stream_runs[1]["msg_per_s"] / batch_runs[-1]["msg_per_s"])


def _bound(runs: dict[str, Runs]) -> float:
    """The connector's stream/batch ratio if its streaming cost no more than Spark's own: its
    batch time over that time plus what streaming adds to the ceiling source's time."""
    batch = runs["pulsar"][0][-1]["seconds"]
    added = runs["ceiling"][1][1]["seconds"] - runs["ceiling"][0][-1]["seconds"]
    return float(batch / (batch + added))


if __name__ == "__main__":
    main()
