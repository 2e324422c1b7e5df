"""TubeMQ batch read and write: the ``tubemq`` format against the official Java client's loops.

One TubeMQ 2.4.0 cluster (ZooKeeper, master, one broker; the official jars from Maven Central,
see ``tests/support/tubemq_cluster.py``) on loopback, three topics of 3 partitions created in
one go (the broker loads new topics 70-110 s later), all measured in the same run. Before A's
timed runs, Spark writes and reads 20,000 rows of a third topic (warm-up).

Write, N messages of 100 bytes:
A. ``df.write.format("tubemq")`` of ``spark.range(N, numPartitions=2)`` with a binary
   ``value`` column of exactly 100 bytes (cached and counted before the timed run), on
   ``local[2]``.
J. The official Java client (``TubeMQProbe produce-timed``): one producer, the asynchronous
   ``sendMessage`` with a callback, timed from the first send to the last acknowledgement.
   Sends its callback reports failed (the broker's memory full) are not resent: J's rate
   counts the messages stored, and both reads read exactly those.

Read, the N messages J wrote, once the broker has written both topics to its files (it flushes
its memory in the background; neither read should share the cores with that):
A. ``spark.read.format("tubemq")`` into Spark's ``noop`` sink (one task per partition); a
   first, untimed read warms the broker's read path up (its JIT) for both sides.
J. The official Java client (``TubeMQProbe consume-timed``): a ``PullMessageConsumer`` from
   the first offset, ``getMessage``/``confirmConsume`` until N messages; timed from
   subscribing (which includes the master's first rebalance of the new group) and from the
   first message to the last. The cores its JVM and the broker keep busy are measured from
   subscribing (A's are in its ``cores_busy``, ``broker_cores`` and ``jvm_cores``).

The ratios are A's rate over J's (above 1: the connector is faster). Outside the timed runs
the topic A wrote is counted with ``spark.read`` and must hold exactly N messages. Results go
to ``benchmarks/results/bench_tubemq.json``.

    python benchmarks/bench_tubemq.py [--messages 1000000] [--size 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_write import input_frame
from common import CpuUse, report, spark_session, timed_run
from support.tubemq_cluster import JavaProbe, TubeMQCluster

READ_TOPIC = "bench_read"
WRITE_TOPIC = "bench_write"
WARMUP_TOPIC = "bench_warmup"
WARMUP_ROWS = 20_000
PARTITIONS = 3
# Seconds to wait for the broker to flush what was written before the reads.
SETTLE_TIMEOUT = 600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    n, size = args.messages, args.size

    with tempfile.TemporaryDirectory(prefix="bench-tubemq-") as tmp:
        cluster = TubeMQCluster.start(Path(tmp) / "run")
        try:
            cluster.create_topics((READ_TOPIC, WRITE_TOPIC, WARMUP_TOPIC), PARTITIONS)
            probe = JavaProbe(Path(tmp) / "probe")
            rows, details = run(cluster, probe, n, size)
        finally:
            cluster.stop()
    headers = ["case", "side", "seconds", "msg/s", "A/J"]
    report("bench_tubemq", headers, rows, {"messages": n, "size": size, **details})


def warm_up(spark: Any, master: str) -> None:
    """A small write and read first: Spark starts its Python workers and compiles its code in
    a session's first jobs, which neither timed run should pay (the Java runs are timed from
    their first message)."""
    rows = spark.range(WARMUP_ROWS, numPartitions=2).selectExpr("cast(id as string) as value")
    options = {"master.addresses": master, "topic": WARMUP_TOPIC}
    rows.write.format("tubemq").options(**options).mode("append").save()
    read = spark.read.format("tubemq").options(**options).load()
    read.write.format("noop").mode("overwrite").save()


def settle(cluster: TubeMQCluster, counts: dict[str, int]) -> None:
    """Wait until the broker has written every message of ``counts`` to its files: it does so
    in the background (``memCacheFlushIntvl`` after the last write), and neither read should
    share the cores with that."""
    start = time.monotonic()
    while any(cluster.flushed_messages(topic) < count for topic, count in counts.items()):
        if time.monotonic() - start > SETTLE_TIMEOUT:
            raise RuntimeError(f"the broker had not flushed the topics in {SETTLE_TIMEOUT} s")
        time.sleep(1)
    print(f"  the broker flushed what was written in {time.monotonic() - start:.0f} s", flush=True)


def run(
    cluster: TubeMQCluster, probe: JavaProbe, n: int, size: int
) -> tuple[list[list[Any]], dict[str, Any]]:
    # Java first: it writes the topic both sides read.
    print("== write", flush=True)
    _, acked, java_write_ms = probe.run(
        "produce-timed", cluster.master, READ_TOPIC, str(n), str(size), timeout=900
    )[-1].split()
    # The Java producer's callback may report a failed send (its default in-flight limit):
    # its rate counts what it stored, and both sides then read exactly that.
    stored = int(acked)
    assert stored > n * 0.99, f"the Java producer stored {stored} of {n} messages"
    java_write = stored / (int(java_write_ms) / 1000)
    print(
        f"  J: {int(java_write_ms) / 1000:.2f} s, {java_write:,.0f} msg/s "
        f"({n - stored} sends failed)",
        flush=True,
    )

    spark = spark_session("bench_tubemq")
    inputs = argparse.Namespace(messages=n, size=size, input_partitions=2, keyed=False)
    data = input_frame(spark, inputs)

    def write() -> None:
        (
            data.write.format("tubemq")
            .option("master.addresses", cluster.master)
            .option("topic", WRITE_TOPIC)
            .mode("append")
            .save()
        )

    warm_up(spark, cluster.master)
    spark_write = timed_run("A", 0, 1, n, write, case="write")
    settle(cluster, {READ_TOPIC: stored, WRITE_TOPIC: n})

    print("== read", flush=True)

    def read() -> None:
        (
            spark.read.format("tubemq")
            .option("master.addresses", cluster.master)
            .option("topic", READ_TOPIC)
            .load()
            .write.format("noop")
            .mode("overwrite")
            .save()
        )

    # A first, untimed read warms the broker's read path up (its JIT), for both sides.
    timed_run("A", 0, 2, stored, read, case="read")
    spark_read = timed_run("A", 1, 2, stored, read, case="read")
    with CpuUse() as java_cpu:
        consumed = probe.run(
            "consume-timed",
            *(cluster.master, READ_TOPIC, "bench_java_group", str(stored)),
            timeout=900,
        )
    _, got, total_ms, flowing_ms = consumed[-1].split()
    assert int(got) >= stored, f"the Java consumer read {got} of {stored} messages"
    java_read = stored / (int(total_ms) / 1000)
    java_flowing = stored / (int(flowing_ms) / 1000)
    print(
        f"  J: {int(total_ms) / 1000:.2f} s from subscribing ({java_read:,.0f} msg/s), "
        f"{int(flowing_ms) / 1000:.2f} s from the first message ({java_flowing:,.0f} msg/s); "
        f"cores busy {java_cpu.cores_busy:.2f} (broker {java_cpu.broker_cores:.2f}, "
        f"JVMs {java_cpu.jvm_cores:.2f}) from subscribing",
        flush=True,
    )

    def counted(topic: str) -> int:
        reader = spark.read.format("tubemq").option("master.addresses", cluster.master)
        return int(reader.option("topic", topic).load().count())

    assert counted(WRITE_TOPIC) == n, "the connector's write did not store every row"
    spark.stop()

    def ratio(a: dict[str, Any], j: float) -> str:
        return f"{a['msg_per_s'] / j:.2f}" if "msg_per_s" in a else "-"

    rows = [
        [
            "write",
            "A tubemq sink",
            spark_write.get("seconds"),
            spark_write.get("msg_per_s"),
            ratio(spark_write, java_write),
        ],
        ["write", "J Java producer", int(java_write_ms) / 1000, round(java_write), ""],
        [
            "read",
            "A tubemq source",
            spark_read.get("seconds"),
            spark_read.get("msg_per_s"),
            ratio(spark_read, java_flowing),
        ],
        [
            "read",
            "J Java consumer, first message on",
            int(flowing_ms) / 1000,
            round(java_flowing),
            "",
        ],
        [
            "read",
            "J Java consumer, from subscribing",
            int(total_ms) / 1000,
            round(java_read),
            ratio(spark_read, java_read),
        ],
    ]
    details = {
        "spark_write": spark_write,
        "spark_read": spark_read,
        "java_write_ms": int(java_write_ms),
        "java_write_failed": n - stored,
        "java_read_ms": int(total_ms),
        "java_read_flowing_ms": int(flowing_ms),
        "java_read_cpu": java_cpu.summary(),
    }
    return rows, details


if __name__ == "__main__":
    main()
