"""TLS against plain text, end to end: the same read and the same write, with and without TLS.

pulsar-lite has no TLS listener, so the TLS side goes through the test proxy
(``tests/broker_proxy.py``), which terminates TLS with Python's ssl module (OpenSSL) and answers
lookups with its own TLS address. To compare TLS alone, the plain side goes through the same
proxy without TLS; a third side reads and writes the broker directly, for reference. All
sides share the 2 cores with the broker, the proxy and Spark, so the proxy's own TLS work
counts against the TLS side: on a real cluster the broker does that work on its own machine.

Read: 1,000,000 messages of 100 bytes in 4 partitions, published with the official producer,
read by ``spark.read.format("pulsar")`` into the ``noop`` sink. Write: the same number of
100-byte rows written by ``df.write.format("pulsar")`` into a fresh topic per run. Each side
runs ``--runs`` times, the first a warm-up; ratios compare the medians of the measured runs.
Results go to ``benchmarks/results/bench_tls.json``.

    python benchmarks/bench_tls.py [--messages 1000000] [--size 100] [--partitions 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_read import measure
from bench_write import input_frame
from broker_proxy import BrokerProxy, apache_proxy, server_tls_context
from common import (
    add_dataset_arguments,
    publish_dataset,
    report,
    spark_session,
    start_broker,
    timer,
)
from support.certs import make_certs

SIDES = ("plain, direct", "plain, through the proxy", "TLS, through the proxy")


def reader(spark: Any, options: dict[str, str], topic: str) -> Callable[[], Any]:
    return lambda: spark.read.format("pulsar").options(**options).option("topic", topic).load()


def measure_write(
    label: str, df: Any, options: dict[str, str], runs: int, messages: int
) -> list[dict[str, Any]]:
    results = []
    for run in range(runs):
        kind = "warm-up" if run == 0 and runs > 1 else "measured"
        topic = f"bench-write-{abs(hash(label)) % 10_000}-{run}"
        with timer() as elapsed:
            df.write.format("pulsar").options(**options).option("topic", topic).mode(
                "append"
            ).save()
        seconds = elapsed["seconds"]
        results.append(
            {
                "side": label,
                "run": kind,
                "seconds": round(seconds, 3),
                "msg_per_s": round(messages / seconds),
            }
        )
        print(f"  {label} write run {run + 1}: {seconds:.2f} s, {messages / seconds:,.0f} msg/s")
    return results


def median_rate(runs: list[dict[str, Any]], side: str) -> float | None:
    rates = [r["msg_per_s"] for r in runs if r["side"] == side and r["run"] == "measured"]
    return statistics.median(rates) if rates else None


def ratio(runs: list[dict[str, Any]], top: str, bottom: str) -> float | None:
    """The median measured rate of side ``top`` over that of ``bottom``."""
    a, b = median_rate(runs, top), median_rate(runs, bottom)
    return round(a / b, 3) if a and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_dataset_arguments(parser)
    parser.add_argument("--runs", type=int, default=4, help="the first one is the warm-up")
    parser.add_argument("--input-partitions", type=int, default=4)
    args = parser.parse_args()

    certs = make_certs(Path(tempfile.mkdtemp(prefix="bench-tls-")))
    broker = start_broker("bench", args.partitions)
    proxies: list[BrokerProxy] = []
    try:
        published = publish_dataset(broker, args)
        target = (broker.host, broker.port)
        plain_proxy, _ = apache_proxy(target)
        tls_proxy, _ = apache_proxy(
            target, tls=server_tls_context(certs.server_cert, certs.server_key)
        )
        proxies += [plain_proxy, tls_proxy]
        options = {
            SIDES[0]: {"service.url": broker.service_url},
            SIDES[1]: {"service.url": plain_proxy.url},
            SIDES[2]: {
                "service.url": tls_proxy.url,
                "pulsar.client.tlsTrustCertsFilePath": str(certs.ca),
            },
        }
        spark = spark_session("bench_tls")
        read_runs: list[dict[str, Any]] = []
        write_runs: list[dict[str, Any]] = []
        counts: dict[str, int | None] = {}
        try:
            for side in SIDES:
                print(f"read, {side}", flush=True)
                runs, counts[side] = measure(
                    side, reader(spark, options[side], published.topic), args.runs, args.messages
                )
                read_runs += runs
            df = input_frame(spark, args)
            for side in SIDES:
                print(f"write, {side}", flush=True)
                write_runs += measure_write(side, df, options[side], args.runs, args.messages)
        finally:
            spark.stop()
    finally:
        for proxy in proxies:
            proxy.close()
        broker.stop()

    read_tls = ratio(read_runs, SIDES[2], SIDES[1])
    write_tls = ratio(write_runs, SIDES[2], SIDES[1])
    rows = [
        [what, r["side"], r["run"], r.get("seconds", "failed"), r.get("msg_per_s", "-")]
        for what, runs in (("read", read_runs), ("write", write_runs))
        for r in runs
    ]
    print(
        f"\nTLS / plain through the same proxy: read {read_tls}, write {write_tls}; "
        f"proxied plain / direct: read {ratio(read_runs, SIDES[1], SIDES[0])}, "
        f"write {ratio(write_runs, SIDES[1], SIDES[0])}"
    )
    report(
        "bench_tls",
        ["what", "side", "run", "seconds", "msg/s"],
        rows,
        {
            "published": published.summary(),
            "read_runs": read_runs,
            "write_runs": write_runs,
            "read_tls_over_plain": read_tls,
            "write_tls_over_plain": write_tls,
            "read_counts": counts,
        },
    )
    if any(count != args.messages for count in counts.values()):
        sys.exit(f"row counts {counts}, expected {args.messages:,}")


if __name__ == "__main__":
    main()
