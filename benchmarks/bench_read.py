"""Batch read, end to end: the ``pulsar`` source, the official client, and Spark's ceiling.

One broker; for each case a topic in 4 partitions, published with the official producer:

=================  ==========  ==============================================================
case               messages    each message
=================  ==========  ==============================================================
``plain``          1,000,000   100 random bytes, no key, no properties, batched
``keyed``          1,000,000   100 random bytes, a key (``user-<n>``) and two properties, one
                               of them a UUID unique per message, batched
``large``          50,000      10 KB of JSON-like text, LZ4, batches of up to 128 KiB (about
                               12)
``unbatched``      200,000     100 random bytes, batching off: one message per entry
``one_per_batch``  200,000     100 random bytes, batching on, each batch closed after one
                               message (as a producer sending slowly sends them)
=================  ==========  ==============================================================

Then, on ``local[2]``, each side reads the whole topic into Spark's ``noop`` sink six times:
three warm-up runs (in the first ones Spark's JIT compiler is still compiling, 0.3-0.5 s of a
core per run, on both sources alike), then three measured runs:

A. ``spark.read.format("pulsar")...load().write.format("noop").save()``.
B. What a PySpark user can write today without this package: a DataFrame of the 4 partition
   topics, repartitioned to 4 tasks, and ``mapInArrow`` where each task reads its partition
   with ``pulsar.Client.create_reader(partition, MessageId.earliest)`` and ``read_next`` until
   it reaches the partition's last message id (both known from publishing; the count read is
   checked against the count published), building Arrow batches of 50,000 rows with the
   columns the official client exposes (key, value, topic, partition, messageId, publishTime,
   eventTime, properties, producerName). Duplicate deliveries are dropped by message id, as a
   correct reader must on brokers that re-dispatch, and a reader that receives nothing for
   0.5 s is re-opened after the last message read (pulsar-lite sometimes stops dispatching and
   the official client never recovers by itself; the pulsar source sends one more permit after
   0.5 s of silence instead).
C. Spark's ceiling for a Python source (``ceiling.py``): prebuilt record batches of the
   connector's schema, with the case's keys, properties and value size, and no I/O or
   decoding at all, as many rows per partition as the topic holds.
D. Only when asked for (``--sides A,C,D --ceiling-work-ns N``): C, spending N ns of CPU per row
   in a loop that touches no data before each batch. Given the Python time A's workers spend
   per message beyond C's (the run reports each side's Python time per message), D is what A
   could reach if reading cost nothing more: no broker on the same cores and no memory
   traffic; A/D and D/C say how much of A's distance to C is its Python time and how much the
   rest.

Each side runs in its own SparkSession (stopped in between), so the peak memory of the Python
worker processes is measured for that side alone. With ``--interleave`` the sides share one
SparkSession instead and take turns, a run each per round, so that the machine's speed drifting
during a case (by tens of percent on a shared 2-core machine) weighs on every side alike; A/C
is then also given as the median of the rounds' own ratios. With ``--broker-core`` the broker
runs alone on the last CPU and Spark on the others (on this 2-vCPU machine: one core for
Spark's JVM and Python workers), as on a cluster whose brokers have machines of their own;
otherwise all share every core. Row counts are checked outside the timed runs. Results go to
``benchmarks/results/bench_read.json``.

    python benchmarks/bench_read.py [--cases plain,keyed,large,unbatched] [--messages N]
    python benchmarks/bench_read.py --cases plain,keyed --sides A,C --interleave
    python benchmarks/bench_read.py --cases keyed --sides A,C,D --ceiling-work-ns 600 --interleave
    python benchmarks/bench_read.py --cases plain,keyed --sides A,C --interleave --broker-core
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ceiling import CeilingSource
from common import (
    DEFAULT_PARTITIONS,
    READING,
    Published,
    Shape,
    add_broker_argument,
    broker_cpu,
    count_rows,
    measure,
    median_measured,
    partition_topic,
    publish_dataset,
    reading_schema,
    report,
    spark_session,
    start_broker,
    timed_run,
    write_noop,
)

B_ROWS_PER_BATCH = 50_000
B_READ_TIMEOUT_MS = 30_000  # give up when nothing arrives for this long
B_IDLE_MS = 500  # re-open the reader when nothing arrives for this long
B_SCHEMA = (
    "key binary, value {value}, topic string, partition int, "
    "messageId struct<ledgerId: bigint, entryId: bigint, batchIndex: int>, "
    "publishTime timestamp, eventTime timestamp, properties map<string,string>, "
    "producerName string"
)


def read_with_official_client(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: each input row names one partition topic and where it ends."""
    for batch in batches:
        for row in batch.to_pylist():
            yield from read_one_partition(row)


def read_one_partition(row: dict[str, Any]) -> Iterator[Any]:
    """Read one partition topic from the earliest message up to ``row``'s last message id."""
    import pulsar

    client = pulsar.Client(
        row["service_url"],
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    topic = row["partition_topic"]
    schema = _reader_schema(row)
    try:
        reader = reopen(client, None, topic, None, schema)
        last = (row["last_ledger"], row["last_entry"], row["last_batch"])
        seen = (-1, -1, -1)
        resume_after = None
        read = idle_ms = 0
        cols: list[list[Any]] = [[] for _ in range(9)]
        key, value, ledger, entry, batch, publish, event, props, producer = cols
        while seen < last:
            try:
                msg = reader.read_next(B_IDLE_MS)
            except pulsar.Timeout:
                # The broker stopped dispatching (pulsar-lite does, now and then, and the
                # official client never asks again): open a new reader after the last message.
                idle_ms += B_IDLE_MS
                if idle_ms >= B_READ_TIMEOUT_MS:
                    raise TimeoutError(
                        f"{topic}: nothing for {B_READ_TIMEOUT_MS} ms after {read} messages; "
                        f"last id read {seen}, expected up to {last}"
                    ) from None
                reader = reopen(client, reader, topic, resume_after, schema)
                continue
            idle_ms = 0
            mid = msg.message_id()
            current = (mid.ledger_id(), mid.entry_id(), mid.batch_index())
            if current <= seen:
                continue  # a re-delivered message
            seen, resume_after = current, mid
            read += 1
            partition_key = msg.partition_key()
            key.append(partition_key.encode() if partition_key else None)
            value.append(msg.value() if schema else msg.data())
            ledger.append(current[0])
            entry.append(current[1])
            batch.append(current[2])
            publish.append(msg.publish_timestamp())
            event.append(msg.event_timestamp())
            props.append(list(msg.properties().items()))
            producer.append(msg.producer_name())
            if len(value) >= B_ROWS_PER_BATCH:
                yield to_arrow(cols, row["topic"], row["partition"], schema)
                for column in cols:
                    column.clear()
        if value:
            yield to_arrow(cols, row["topic"], row["partition"], schema)
        if read != row["expected"]:
            raise RuntimeError(f"{topic}: read {read} messages, published {row['expected']}")
        reader.close()
    finally:
        client.close()


def _reader_schema(row: dict[str, Any]) -> dict[str, Any]:
    """The official reader's ``schema`` argument: the row's Avro schema (JSON), if any."""
    if not row.get("value_schema"):
        return {}
    from pulsar.schema import AvroSchema

    return {"schema": AvroSchema(None, schema_definition=json.loads(row["value_schema"]))}


def reopen(client: Any, reader: Any, topic: str, after: Any, schema: dict[str, Any]) -> Any:
    """Close ``reader`` (if any) and open a new one that starts after message ``after`` (or at
    the earliest), decoding values with ``schema`` (the official client's own decoding)."""
    import pulsar

    if reader is not None:
        reader.close()
    return client.create_reader(
        topic, after or pulsar.MessageId.earliest, receiver_queue_size=10_000, **schema
    )


def to_arrow(cols: list[list[Any]], topic: str, partition: int, schema: dict[str, Any]) -> Any:
    """One record batch of ``B_SCHEMA`` from the column lists (copied, so they can be reused);
    with a ``schema``, values are records: an Arrow struct of their fields."""
    import pyarrow as pa

    key, value, ledger, entry, batch, publish, event, props, producer = cols
    rows = len(value)
    timestamp = pa.timestamp("us", tz="UTC")
    return pa.RecordBatch.from_arrays(
        [
            pa.array(key, pa.binary()),
            pa.array(value, _value_type(schema)),
            pa.array([topic] * rows, pa.string()),
            pa.array([partition] * rows, pa.int32()),
            pa.StructArray.from_arrays(
                [
                    pa.array(ledger, pa.int64()),
                    pa.array(entry, pa.int64()),
                    pa.array(batch, pa.int32()),
                ],
                names=["ledgerId", "entryId", "batchIndex"],
            ),
            pa.array([t * 1000 for t in publish], timestamp),
            pa.array([t * 1000 if t else None for t in event], timestamp),
            pa.array(props, pa.map_(pa.string(), pa.string())),
            pa.array(producer, pa.string()),
        ],
        names=[
            "key",
            "value",
            "topic",
            "partition",
            "messageId",
            "publishTime",
            "eventTime",
            "properties",
            "producerName",
        ],
    )


def _value_type(schema: dict[str, Any]) -> Any:
    """The Arrow type of the value column: binary, or READING's struct (as side A types it)."""
    import pyarrow as pa

    return reading_schema().arrow_type() if schema else pa.binary()


@dataclass(frozen=True)
class Case:
    messages: int
    shape: Shape


CASES = {
    "plain": Case(1_000_000, Shape()),
    "keyed": Case(1_000_000, Shape(keyed=True)),
    "large": Case(50_000, Shape(size=10_240, compression="lz4", batch_bytes=128 * 1024)),
    "unbatched": Case(200_000, Shape(batching=False)),
    "one_per_batch": Case(200_000, Shape(batch_bytes=1)),
    "avro": Case(1_000_000, Shape(avro=True)),
}


def side_a(spark: Any, service_url: str, published: Published) -> Any:
    return (
        spark.read.format("pulsar")
        .option("service.url", service_url)
        .option("topic", published.topic)
        .load()
    )


def side_b(spark: Any, service_url: str, published: Published) -> Any:
    value_schema = json.dumps(READING) if published.shape.avro else None
    rows = [
        (
            service_url,
            published.topic,
            partition_topic(published.topic, i),
            i,
            published.counts[i],
            *published.last_ids[i],
            value_schema,
        )
        for i in range(published.partitions)
    ]
    partitions = spark.createDataFrame(
        rows,
        "service_url string, topic string, partition_topic string, partition int, "
        "expected bigint, last_ledger bigint, last_entry bigint, last_batch int, "
        "value_schema string",
    ).repartition(published.partitions)
    value = reading_schema().spark_type() if value_schema else "binary"
    return partitions.mapInArrow(read_with_official_client, B_SCHEMA.format(value=value))


def side_c(spark: Any, service_url: str, published: Published) -> Any:
    return _ceiling(spark, published)


def side_d(spark: Any, service_url: str, published: Published, *, work_ns: int = 0) -> Any:
    return _ceiling(spark, published, work_ns=str(work_ns))


def _ceiling(spark: Any, published: Published, **options: str) -> Any:
    """The ceiling source (``ceiling.py``) yielding what ``published`` holds."""
    return (
        spark.read.format("ceiling")
        .option("counts", ",".join(map(str, published.counts)))
        .option("size", str(published.shape.size))
        .option("keyed", str(published.shape.keyed).lower())
        .options(**options)
        .load()
    )


Side = tuple[str, Callable[[Any, str, Published], Any]]
"""A side: its label, and what makes its DataFrame (from the session, the service URL and what
was published)."""

SIDES: dict[str, Side] = {
    "A": ("pulsar source", side_a),
    "B": ("official client in mapInArrow", side_b),
    "C": ("ceiling: prebuilt Arrow batches", side_c),
    "D": ("ceiling spending CPU per row", side_d),  # run_case passes --ceiling-work-ns
}
DEFAULT_SIDES = "A,B,C"


def run_case(name: str, case: Case, args: argparse.Namespace) -> dict[str, Any]:
    """Publish the case's topic, then measure each side on it; the case's results."""
    broker = start_broker(f"bench-{name}", args.partitions, args.broker, args.broker_cpu)
    service: Any = broker
    if case.shape.avro and args.broker == "pulsar-lite":
        # pulsar-lite keeps no schemas: the test proxy keeps them as Apache Pulsar does (and
        # stamps versions on messages); every side publishes and reads through it.
        service = SchemaRegistry(broker)
    try:
        data = argparse.Namespace(messages=case.messages, partitions=args.partitions)
        published = publish_dataset(service, data, case.shape, topic=f"bench-{name}")
        # The ceiling source (C, D) yields binary values, so it has no avro case.
        sides = {
            side: SIDES[side]
            for side in args.sides.split(",")
            if not (case.shape.avro and side in ("C", "D"))
        }
        if "D" in sides:
            sides["D"] = (sides["D"][0], partial(side_d, work_ns=args.ceiling_work_ns))
        target = Target(name, case, service.service_url, published)
        runs, counts = (interleaved if args.interleave else one_by_one)(target, sides, args)
    finally:
        service.stop()
        if service is not broker:
            broker.stop()
    best = {
        side: median_measured([r for r in runs if r["side"].startswith(side)]) for side in SIDES
    }
    return {
        "case": name,
        "published": published.summary(),
        "runs": runs,
        "counts": counts,
        "counts_ok": all(c == case.messages for c in counts.values()),
        "a_over_b": ratio(best["A"], best["B"]),
        "a_over_ceiling": ratio(best["A"], best["C"]),
        "a_over_ceiling_in_turn": paired(runs, "A", "C") if args.interleave else None,
        "python_ns_per_message": {
            side: python_ns(run, case.messages) for side, run in best.items() if run
        },
        "broker": args.broker,
        "broker_core": args.broker_cpu is not None,
        "ceiling_work_ns": args.ceiling_work_ns if "D" in sides else None,
        "a_over_d": ratio(best["A"], best["D"]),
        "d_over_ceiling": ratio(best["D"], best["C"]),
        "a_over_d_in_turn": paired(runs, "A", "D") if args.interleave else None,
        "d_over_ceiling_in_turn": paired(runs, "D", "C") if args.interleave else None,
    }


class Target(NamedTuple):
    """What a case's sides read: the case, and the topic published for it and where."""

    name: str
    case: Case
    url: str
    published: Published


def one_by_one(
    target: Target, sides: dict[str, Side], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """Every run of each side in a SparkSession of its own, one side after the other."""
    name, case, url, published = target
    runs: list[dict[str, Any]] = []
    counts: dict[str, int | None] = {}
    for side, (label, make) in sides.items():
        print(f"{name} / {side}: {label} -> noop", flush=True)
        spark = spark_session(f"bench_read_{name}_{side}")
        try:
            spark.dataSource.register(CeilingSource)
            side_runs, counts[side] = measure(
                f"{side} {label}",
                lambda make=make, spark=spark: make(spark, url, published),
                args.runs,
                case.messages,
                warmups=args.warmups,
            )
        finally:
            spark.stop()
        runs += [{"case": name, **r} for r in side_runs]
    return runs, counts


def interleaved(
    target: Target, sides: dict[str, Side], args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, int | None]]:
    """Every side in one SparkSession, one run of each in turn: the machine's speed drifting
    during the case weighs on all sides alike. The Python workers serve every side, so their
    memory is no one side's."""
    name, case, url, published = target
    print(f"{name} / {', '.join(sides)} in turn -> noop", flush=True)
    spark = spark_session(f"bench_read_{name}_in_turn")
    runs: list[dict[str, Any]] = []
    try:
        spark.dataSource.register(CeilingSource)
        for run in range(args.runs):
            for side, (label, make) in sides.items():
                result = timed_run(
                    f"{side} {label}",
                    run,
                    args.runs,
                    case.messages,
                    lambda make=make: write_noop(make(spark, url, published)),
                    warmups=args.warmups,
                )
                runs.append({"case": name, **result})
        counts = {
            side: count_rows(f"{side} {label}", lambda make=make: make(spark, url, published))
            for side, (label, make) in sides.items()
        }
    finally:
        spark.stop()
    return runs, counts


def paired(runs: list[dict[str, Any]], top: str, bottom: str) -> float | None:
    """The median over measured runs in turn of side ``top``'s speed over ``bottom``'s in the
    same round (None unless both ran every round)."""
    tops, bottoms = (
        [r for r in runs if r["side"].startswith(side) and r["run"] == "measured"]
        for side in (top, bottom)
    )
    if not tops or len(tops) != len(bottoms) or any("error" in r for r in tops + bottoms):
        return None
    ratios = sorted(t["msg_per_s"] / b["msg_per_s"] for t, b in zip(tops, bottoms, strict=True))
    return round(ratios[(len(ratios) - 1) // 2], 2)


class SchemaRegistry:
    """The test proxy in front of ``broker``, answering as Apache Pulsar (schemas kept)."""

    def __init__(self, broker: Any) -> None:
        from broker_proxy import apache_proxy

        self.proxy, _ = apache_proxy((broker.host, broker.port), named=True)
        self.service_url = self.proxy.url

    def stop(self) -> None:
        self.proxy.close()


def python_ns(run: dict[str, Any], messages: int) -> int:
    """The CPU time a run's Python processes (all but the JVM and the broker) spent per
    message: for side A less side C's, what ``--ceiling-work-ns`` gives side D."""
    cores = run["cores_busy"] - run["jvm_cores"] - run["broker_cores"]
    return round(cores * run["seconds"] / messages * 1e9)


def _work_summary(result: dict[str, Any]) -> str:
    """Side D's ratios, when it ran."""
    if result["ceiling_work_ns"] is None:
        return ""
    text = f"; with {result['ceiling_work_ns']} ns a row, A/D {result['a_over_d']}, "
    text += f"D/ceiling {result['d_over_ceiling']}"
    if result["d_over_ceiling_in_turn"] is not None:
        text += f" ({result['a_over_d_in_turn']}, {result['d_over_ceiling_in_turn']} in turn)"
    return text


def ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    return round(a["msg_per_s"] / b["msg_per_s"], 2) if a and b else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated")
    parser.add_argument("--messages", type=int, help="for every case (default: the case's own)")
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--sides", default=DEFAULT_SIDES, help="comma-separated, of A,B,C,D")
    parser.add_argument(
        "--ceiling-work-ns",
        type=int,
        default=0,
        help="side D's CPU time per row: the Python time A's workers spend per message",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=6,
        help="runs per side, warm-ups included; ratios use the median of the measured ones",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="run the sides in one SparkSession, one run of each in turn, and report A/C also "
        "as the median of each round's ratio (worker memory is then shared by the sides)",
    )
    parser.add_argument(
        "--warmups",
        type=int,
        default=3,
        help="the first runs, untimed for ratios: Spark's JIT compiler is still at work in them",
    )
    parser.add_argument(
        "--broker-core",
        action="store_true",
        help="run the broker alone on the last CPU and Spark (JVM, Python workers) on the "
        "others, as on a cluster where brokers have machines of their own",
    )
    add_broker_argument(parser)
    args = parser.parse_args()
    args.broker_cpu = broker_cpu(args)
    names = args.cases.split(",")
    unknown = sorted(set(names) - set(CASES)) + sorted(set(args.sides.split(",")) - set(SIDES))
    if unknown:
        parser.error(f"unknown {unknown}; cases: {', '.join(CASES)}; sides: {', '.join(SIDES)}")

    results = []
    for name in names:
        case = CASES[name]
        if args.messages:
            case = Case(args.messages, case.shape)
        results.append(run_case(name, case, args))

    rows = [
        [
            r["case"],
            r["side"],
            r["run"],
            r.get("seconds", "failed"),
            r.get("msg_per_s", "-"),
            r.get("max_worker_rss_mb", "-"),
            r.get("max_total_rss_mb", "-"),
        ]
        for result in results
        for r in result["runs"]
    ]
    print()
    for result in results:
        in_turn, a_over_b = result["a_over_ceiling_in_turn"], result["a_over_b"]
        print(
            f"{result['case']}: "
            + ("" if a_over_b is None else f"A/B {a_over_b}x, ")
            + f"A/ceiling {result['a_over_ceiling']} (median measured runs)"
            + ("" if in_turn is None else f", {in_turn} (median of the rounds' ratios)")
            + f"; Python ns a message {result['python_ns_per_message']}"
            + _work_summary(result)
            + f"; row counts {result['counts']}"
        )
    report(
        "bench_read",
        ["case", "side", "run", "seconds", "msg/s", "worker RSS max MB", "workers RSS sum MB"],
        rows,
        {"cases": results},
    )
    failed = [
        f"{r['case']} {r['side']} run {r['run']}"
        for result in results
        for r in result["runs"]
        if "error" in r
    ]
    wrong = {r["case"]: r["counts"] for r in results if not r["counts_ok"]}
    if failed or wrong:
        sys.exit(f"failed runs: {failed or 'none'}; wrong row counts: {wrong or 'none'}")


if __name__ == "__main__":
    main()
