"""Scale: more tasks than partitions, and time positions found without a scan, in one run.

One broker, one topic with a single partition of 4,000,000 messages of 100 bytes, published
with the official producer in two parts: the first 99%, then (after a pause, whose start is
``cut``) the last 1%. On ``local[2]``, into Spark's ``noop`` sink, twice each (warm-up, then
measured):

- ``full``: ``spark.read.format("pulsar")`` of the partition, one task.
- ``minPartitions=2``: the same read cut into two tasks (one per core).
- ``startingTime=cut``: only the last 1%, located by a search over the partition's entry ids
  (:mod:`pulsar_spark.client.time_seek`, a few single-entry reads).
- ``startingTime`` an hour ahead: nothing to read; what any query costs (Spark's job, the
  planning and one read of the last entry), the floor under the ``startingTime`` read.
- ``ceiling``: the same number of rows as the ``startingTime`` read from the source that does
  no I/O (``ceiling.py``): what Spark itself takes for such a query, whatever the source.

Reports msg/s and the cores kept busy (in all, the broker's, the JVM's) of each; the speed-up
of two tasks over one (goal: at least 1.7x) against the most the one-task read's CPU use leaves
room for (cores / cores busy); and the time of the ``startingTime`` read and of the ceiling's
as shares of the full read (goal: at most 5%). Row counts are checked outside the timed runs.
Results go to ``benchmarks/results/bench_scale.json``.

    python benchmarks/bench_scale.py [--messages 4000000] [--tail 0.01]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ceiling import CeilingSource
from common import measure, median_measured, publish, report, spark_session, start_broker

TOPIC = "scale"
CORES = os.cpu_count() or 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4_000_000)
    parser.add_argument("--tail", type=float, default=0.01, help="share read by startingTime")
    parser.add_argument("--runs", type=int, default=2, help="the first one is the warm-up")
    args = parser.parse_args()
    tail = int(args.messages * args.tail)
    head = args.messages - tail

    broker = start_broker(TOPIC, 1)
    try:
        url = broker.service_url
        print(f"publishing {head:,} + {tail:,} messages of 100 B to 1 partition ...", flush=True)
        first = publish(url, TOPIC, partitions=1, messages=head)
        time.sleep(1.0)
        cut = int(time.time() * 1000)
        time.sleep(0.1)
        publish(url, TOPIC, partitions=1, messages=tail)
        print(f"  {first.seconds:.1f} s for the first part; cut at {cut}", flush=True)

        future = int(time.time() * 1000) + 3_600_000
        spark = spark_session("bench_scale")
        try:
            spark.dataSource.register(CeilingSource)
            pulsar = {"service.url": url, "topic": TOPIC}
            cases: dict[str, tuple[str, dict[str, str], int]] = {
                "full, 1 task": ("pulsar", pulsar, args.messages),
                "minPartitions=2": ("pulsar", {**pulsar, "minPartitions": "2"}, args.messages),
                f"startingTime (last {args.tail:.0%})": (
                    "pulsar",
                    {**pulsar, "startingTime": str(cut)},
                    tail,
                ),
                "startingTime, nothing after it": (
                    "pulsar",
                    {**pulsar, "startingTime": str(future)},
                    0,
                ),
                f"ceiling, {tail:,} rows": ("ceiling", {"counts": str(tail), "size": "100"}, tail),
            }
            runs: list[dict[str, Any]] = []
            counts: dict[str, int | None] = {}
            for label, (source, options, expected) in cases.items():
                print(f"{label} -> noop", flush=True)

                def make(source: str = source, options: dict[str, str] = options) -> Any:
                    return spark.read.format(source).options(**options).load()

                case_runs, counts[label] = measure(label, make, args.runs, expected)
                runs += case_runs
        finally:
            spark.stop()
    finally:
        broker.stop()

    full, split, timed, _, floor = (
        median_measured([r for r in runs if r["side"] == c]) for c in cases
    )
    speedup = round(full["seconds"] / split["seconds"], 2) if full and split else None
    share = round(timed["seconds"] / full["seconds"], 4) if full and timed else None
    expected_counts = {label: expected for label, (_, _, expected) in cases.items()}
    bound = round(CORES / full["cores_busy"], 2) if full and full["cores_busy"] else None
    print(f"\nminPartitions=2 over 1 task: {speedup}x (goal >= 1.7)")
    if full and bound:
        print(
            f"  the one-task read keeps {full['cores_busy']} of {CORES} cores busy (broker "
            f"{full['broker_cores']}, JVM {full['jvm_cores']}): at the same CPU per message, "
            f"more tasks can go at most {bound}x faster here"
        )
    floor_share = round(floor["seconds"] / full["seconds"], 4) if full and floor else None
    print(f"startingTime read / full read: {share:.1%} (goal <= 5%)" if share else "")
    if floor_share:
        print(
            f"  Spark's own floor: a source with no I/O yielding the same {tail:,} rows takes "
            f"{floor_share:.1%} of the full read"
        )
    report(
        "bench_scale",
        ["read", "run", "seconds", "msg/s", "cores busy", "broker", "JVM", "worker RSS max MB"],
        [
            [
                r["side"],
                r["run"],
                r.get("seconds", "failed"),
                r.get("msg_per_s", "-"),
                r.get("cores_busy", "-"),
                r.get("broker_cores", "-"),
                r.get("jvm_cores", "-"),
                r.get("max_worker_rss_mb", "-"),
            ]
            for r in runs
        ],
        {
            "messages": args.messages,
            "tail": tail,
            "runs": runs,
            "speedup_two_tasks": speedup,
            "speedup_bound_from_cpu": bound,
            "starting_time_share_of_full": share,
            "ceiling_tail_share_of_full": floor_share,
            "counts": counts,
        },
    )
    if counts != expected_counts or any("error" in r for r in runs):
        sys.exit(f"failed runs or wrong row counts: {counts} (expected {expected_counts})")


if __name__ == "__main__":
    main()
