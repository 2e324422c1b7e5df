"""TubeMQ batch read and write: the ``tubemq`` format against the official Java client's loops.

One TubeMQ 2.4.0 cluster (ZooKeeper, master, one broker; the official jars from Maven Central,
see ``tests/support/tubemq_cluster.py``) on loopback, topics of 3 partitions created in one go
(the broker loads new topics 70-110 s later). One SparkSession runs throughout; before the
first round, Spark writes and reads 20,000 rows of a topic of their own (warm-up). Then
``--rounds`` rounds, each on two fresh topics:

Write, N messages of 100 bytes:
J. The official Java client (``TubeMQProbe produce-timed``): one producer, the asynchronous
   ``sendMessage`` with a callback, timed from the first send to the last acknowledgement.
   Sends its callback reports failed (the broker's memory full) are not resent: J's rate
   counts the messages stored, and the reads read exactly those.
A. ``df.write.format("tubemq")`` of ``spark.range(N, numPartitions=2)`` with a binary
   ``value`` column of exactly 100 bytes (cached and counted before the first round), on
   ``local[2]``, to the round's other topic.
Each write starts once the broker has written what came before to its files (it flushes its
memory in the background, and no run should share the cores with that).

Read, the messages J wrote in the round:
A. ``spark.read.format("tubemq")`` into Spark's ``noop`` sink, one task per partition; in the
   first round, a first untimed read warms the broker's read path up (its JIT) for every side.
A6. The same with ``minPartitions`` 6: two tasks per partition, so that both cores read until
   the end (3 tasks on 2 cores leave the third to run alone).
J. The official Java client (``TubeMQProbe consume-timed``), a group of its own per round: a
   ``PullMessageConsumer`` from the first offset, ``getMessage``/``confirmConsume`` until it
   has them all; timed from subscribing (which includes the master's first rebalance of the
   new group) and from the first message to the last. The cores its JVM and the broker keep
   busy are measured from subscribing.

Each side's rate is the median of its rounds; a ratio (above 1: the connector is faster) is
the median of the rounds' own ratios, each of two runs made minutes apart on the same
cluster, so that the machine's drift weighs on both. Outside the timed runs, every topic A
wrote is counted with ``spark.read`` and must hold exactly N messages. Results go to
``benchmarks/results/bench_tubemq.json``.

    python benchmarks/bench_tubemq.py [--messages 1000000] [--size 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_write import input_frame
from common import CpuUse, report, spark_session, timed_run
from support.tubemq_cluster import JavaProbe, TubeMQCluster

WARMUP_TOPIC = "bench_warmup"
WARMUP_ROWS = 20_000
PARTITIONS = 3
# Tasks of the A6 read: two per partition.
SPLIT_TASKS = 6
# Seconds to wait for the broker to flush what was written before the next run.
SETTLE_TIMEOUT = 600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    n, size = args.messages, args.size

    with tempfile.TemporaryDirectory(prefix="bench-tubemq-") as tmp:
        cluster = TubeMQCluster.start(Path(tmp) / "run")
        try:
            topics = [topic for k in range(args.rounds) for topic in round_topics(k)]
            cluster.create_topics((*topics, WARMUP_TOPIC), PARTITIONS)
            probe = JavaProbe(Path(tmp) / "probe")
            rounds = run(cluster, probe, n, size, args.rounds)
        finally:
            cluster.stop()
    headers = ["case", "side", "msg/s (median)", "each round", "A/J (median of rounds)"]
    details = {"messages": n, "size": size, "rounds": rounds}
    report("bench_tubemq", headers, table(rounds), details)


def round_topics(k: int) -> tuple[str, str]:
    """The topics of round ``k``: the one J writes (and every side reads), the one A writes."""
    return f"bench_java_{k}", f"bench_spark_{k}"


def warm_up(spark: Any, master: str) -> None:
    """A small write and read first: Spark starts its Python workers and compiles its code in
    a session's first jobs, which no timed run should pay (the Java runs are timed from
    their first message)."""
    rows = spark.range(WARMUP_ROWS, numPartitions=2).selectExpr("cast(id as string) as value")
    options = {"master.addresses": master, "topic": WARMUP_TOPIC}
    rows.write.format("tubemq").options(**options).mode("append").save()
    read = spark.read.format("tubemq").options(**options).load()
    read.write.format("noop").mode("overwrite").save()


def settle(cluster: TubeMQCluster, counts: dict[str, int]) -> None:
    """Wait until the broker has written every message of ``counts`` to its files: it does so
    in the background (``memCacheFlushIntvl`` after the last write), and no run should
    share the cores with that."""
    start = time.monotonic()
    while any(cluster.flushed_messages(topic) < count for topic, count in counts.items()):
        if time.monotonic() - start > SETTLE_TIMEOUT:
            raise RuntimeError(f"the broker had not flushed the topics in {SETTLE_TIMEOUT} s")
        time.sleep(1)
    print(f"  the broker flushed what was written in {time.monotonic() - start:.0f} s", flush=True)


def run(
    cluster: TubeMQCluster, probe: JavaProbe, n: int, size: int, rounds: int
) -> list[dict[str, Any]]:
    """Every round's results (see the module docstring)."""
    spark = spark_session("bench_tubemq")
    data = input_frame(
        spark, argparse.Namespace(messages=n, size=size, input_partitions=2, keyed=False)
    )
    warm_up(spark, cluster.master)
    setup = Setup(spark, data, cluster, probe, n, size)
    results = [one_round(setup, k) for k in range(rounds)]
    for k in range(rounds):
        topic = round_topics(k)[1]
        reader = spark.read.format("tubemq").option("master.addresses", cluster.master)
        counted = int(reader.option("topic", topic).load().count())
        assert counted == n, f"the connector's write to {topic} stored {counted} of {n} rows"
    spark.stop()
    return results


@dataclass(frozen=True)
class Setup:
    """What every round uses: the session, the cached rows A writes, the cluster, the Java
    client and the size of the runs."""

    spark: Any
    data: Any
    cluster: TubeMQCluster
    probe: JavaProbe
    n: int
    size: int


def one_round(setup: Setup, k: int) -> dict[str, Any]:
    """Round ``k``: J's write, A's write, then A's, A6's and J's reads of what J wrote."""
    cluster, n = setup.cluster, setup.n
    java_topic, spark_topic = round_topics(k)
    print(f"== round {k + 1}: write", flush=True)
    _, acked, java_write_ms = setup.probe.run(
        "produce-timed", cluster.master, java_topic, str(n), str(setup.size), timeout=1800
    )[-1].split()
    # The Java producer's callback may report a failed send (its default in-flight limit):
    # its rate counts what it stored, and every read then reads exactly that.
    stored = int(acked)
    assert stored > n * 0.99, f"the Java producer stored {stored} of {n} messages"
    java_write = rate(stored, int(java_write_ms))
    print(
        f"  J: {java_write['seconds']:.2f} s, {java_write['msg_per_s']:,} msg/s "
        f"({n - stored} sends failed)",
        flush=True,
    )
    settle(cluster, {java_topic: stored})

    def write() -> None:
        options = {"master.addresses": cluster.master, "topic": spark_topic}
        setup.data.write.format("tubemq").options(**options).mode("append").save()

    spark_write = timed_run("A", 0, 1, n, write, case="write")
    settle(cluster, {spark_topic: n})

    print(f"== round {k + 1}: read", flush=True)

    def read(**options: str) -> Callable[[], None]:
        def action() -> None:
            reader = setup.spark.read.format("tubemq").option("master.addresses", cluster.master)
            frame = reader.option("topic", java_topic).options(**options).load()
            frame.write.format("noop").mode("overwrite").save()

        return action

    if k == 0:  # warms the broker's read path up (its JIT), for every side
        timed_run("A", 0, 2, stored, read(), case="read")
    spark_read = timed_run("A", 0, 1, stored, read(), case="read")
    split_read = timed_run("A6", 0, 1, stored, read(minPartitions=str(SPLIT_TASKS)), case="read")
    with CpuUse() as java_cpu:
        consumed = setup.probe.run(
            "consume-timed",
            *(cluster.master, java_topic, f"bench_java_group_{k}", str(stored)),
            timeout=1800,
        )
    _, got, total_ms, flowing_ms = consumed[-1].split()
    assert int(got) >= stored, f"the Java consumer read {got} of {stored} messages"
    subscribed, flowing = rate(stored, int(total_ms)), rate(stored, int(flowing_ms))
    print(
        f"  J: {subscribed['seconds']:.2f} s from subscribing ({subscribed['msg_per_s']:,} "
        f"msg/s), {flowing['seconds']:.2f} s from the first message ({flowing['msg_per_s']:,} "
        f"msg/s); cores busy "
        f"{java_cpu.cores_busy:.2f} (broker {java_cpu.broker_cores:.2f}, JVMs "
        f"{java_cpu.jvm_cores:.2f}) from subscribing",
        flush=True,
    )
    return {
        "stored": stored,
        "spark_write": spark_write,
        "java_write": java_write,
        "spark_read": spark_read,
        "spark_read_split": split_read,
        "java_read_flowing": flowing,
        "java_read": subscribed | java_cpu.summary(),
    }


def rate(messages: int, milliseconds: int) -> dict[str, Any]:
    """A Java run's result: its seconds and messages per second."""
    return {"seconds": milliseconds / 1000, "msg_per_s": round(messages / (milliseconds / 1000))}


# The table's rows: case, side, the round result shown, and the ratio's two results (A's rate
# over J's; None: no ratio).
SIDES: tuple[tuple[str, str, str, tuple[str, str] | None], ...] = (
    ("write", "A df.write.format('tubemq'), 2 tasks", "spark_write", ("spark_write", "java_write")),
    ("write", "J Java producer, asynchronous sends", "java_write", None),
    (
        "read",
        "A spark.read.format('tubemq'), 3 tasks",
        "spark_read",
        ("spark_read", "java_read_flowing"),
    ),
    (
        "read",
        "A6 the same, minPartitions 6",
        "spark_read_split",
        ("spark_read_split", "java_read_flowing"),
    ),
    ("read", "J Java pull consumer, first message on", "java_read_flowing", None),
    ("read", "J Java pull consumer, from subscribing", "java_read", ("spark_read", "java_read")),
)


def table(rounds: list[dict[str, Any]]) -> list[list[Any]]:
    """One row per side: the median of its rounds, each round's rate, the median ratio."""
    rows = []
    for case, side, key, ratio in SIDES:
        rates = [r[key].get("msg_per_s") for r in rounds]
        measured = [x for x in rates if x is not None]
        ratios = []
        if ratio is not None:
            a, j = ratio
            ratios = [r[a]["msg_per_s"] / r[j]["msg_per_s"] for r in rounds if "msg_per_s" in r[a]]
        rows.append(
            [
                case,
                side,
                round(statistics.median(measured)) if measured else "-",
                " ".join(f"{x:,}" if x is not None else "failed" for x in rates),
                f"{statistics.median(ratios):.2f}" if ratios else "",
            ]
        )
    return rows


if __name__ == "__main__":
    main()
