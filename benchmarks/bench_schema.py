"""Typed batch read of an AVRO topic: the ``pulsar`` source against the official client's
``AvroSchema`` in ``mapInArrow``, in the same run.

One topic in 4 partitions, 1,000,000 messages (``--messages``) published with the official
producer, each an Avro record of 8 fields (``READING`` of ``tests/support/schemas.py``: string,
long, double, boolean, nullable string, timestamp-millis, array of strings, nested record).

pulsar-lite keeps no schemas, so the topic's schema is registered with the test proxy's
Apache emulation (``tests/broker_proxy.py``), which answers GetSchema. Only the service URL
goes through the proxy: its lookups name the broker itself, so the data connections of both
sides go to the broker directly.

A. ``spark.read.format("pulsar")`` with the proxy's URL: ``value`` typed from the schema
   (a struct of the 8 fields), decoded in the executors.
B. What a PySpark user can write without this package: ``bench_read``'s official-client
   reader in ``mapInArrow`` (one task per partition, ``create_reader`` + ``read_next``), each
   value decoded with ``pulsar.schema.AvroSchema(None, schema_definition=READING)``, as
   a reader created with that schema decodes ``msg.value()``, into the same ``value``
   struct, next to the columns the official client exposes.

Both sides write to Spark's ``noop`` sink, twice (warm-up, then measured), each in its own
SparkSession; row counts are checked outside the timed runs. Reports msg/s and A/B.

    python benchmarks/bench_schema.py [--messages N] [--runs R]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_read import B_SCHEMA, read_one_partition, side_b
from broker_proxy import apache_proxy
from common import (
    DEFAULT_PARTITIONS,
    Published,
    Shape,
    last_measured,
    measure,
    publish_dataset,
    report,
    spark_session,
    start_broker,
)
from support.schemas import READING

from pulsar_spark.protocol import pb

TOPIC = "bench-schema"
VALUE_DDL = (
    "struct<name: string, count: bigint, ratio: double, ok: boolean, note: string, "
    "at: timestamp, tags: array<string>, place: struct<city: string, zip: bigint>>"
)
B_TYPED_SCHEMA = B_SCHEMA.replace("value binary", f"value {VALUE_DDL}", 1)


def read_typed_with_official_client(batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInArrow`` body: ``bench_read``'s reader, values decoded with ``AvroSchema``."""
    import pyarrow as pa
    from pulsar.schema import AvroSchema

    schema = AvroSchema(None, schema_definition=READING)
    value_type = typed_value_type()
    for batch in batches:
        for row in batch.to_pylist():
            for read in read_one_partition(row):
                values = [schema.decode(v) for v in read.column("value").to_pylist()]
                index = read.schema.get_field_index("value")
                yield read.set_column(index, "value", pa.array(values, value_type))


def typed_value_type() -> Any:
    """The Arrow type of ``VALUE_DDL`` as Spark expects it."""
    import pyarrow as pa

    place = pa.struct([("city", pa.string()), ("zip", pa.int64())])
    return pa.struct(
        [
            ("name", pa.string()),
            ("count", pa.int64()),
            ("ratio", pa.float64()),
            ("ok", pa.bool_()),
            ("note", pa.string()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("tags", pa.list_(pa.field("element", pa.string()))),
            ("place", place),
        ]
    )


def side_a(spark: Any, service_url: str, published: Published) -> Any:
    df = spark.read.format("pulsar").option("service.url", service_url)
    return df.option("topic", published.topic).load()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--runs", type=int, default=2, help="the first one is the warm-up")
    args = parser.parse_args()

    broker = start_broker(TOPIC, args.partitions)
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.url = broker.service_url  # lookups name the broker: data goes there directly
    answers.server_version = "Pulsar Server4.0.1"
    runs: list[dict[str, Any]] = []
    counts: dict[str, int | None] = {}
    try:
        published = publish_dataset(broker, args, Shape(avro=True), topic=TOPIC)
        answers.schemas[published.topic] = [
            pb.Schema(
                name="public/default/" + TOPIC,
                type=pb.Schema.Type.Value("Avro"),
                schema_data=json.dumps(READING).encode(),
            )
        ]
        sides = {
            "A": ("pulsar source, typed", lambda spark: side_a(spark, proxy.url, published)),
            "B": (
                "official client + AvroSchema in mapInArrow",
                lambda spark: side_b(
                    spark,
                    broker.service_url,
                    published,
                    read_typed_with_official_client,
                    B_TYPED_SCHEMA,
                ),
            ),
        }
        for side, (label, make) in sides.items():
            print(f"{side}: {label} -> noop", flush=True)
            spark = spark_session(f"bench_schema_{side}")
            try:
                side_runs, counts[side] = measure(
                    f"{side} {label}",
                    lambda make=make, spark=spark: make(spark),
                    args.runs,
                    args.messages,
                )
            finally:
                spark.stop()
            runs += side_runs
    finally:
        proxy.close()
        broker.stop()

    best_a = last_measured([r for r in runs if r["side"].startswith("A")])
    best_b = last_measured([r for r in runs if r["side"].startswith("B")])
    a_over_b = round(best_a["msg_per_s"] / best_b["msg_per_s"], 2) if best_a and best_b else None
    print(f"\nA/B {a_over_b}x (last measured runs); row counts {counts}")
    rows = [
        [r["side"], r["run"], r.get("seconds", "failed"), r.get("msg_per_s", "-")] for r in runs
    ]
    report(
        "bench_schema",
        ["side", "run", "seconds", "msg/s"],
        rows,
        {"published": published.summary(), "runs": runs, "counts": counts, "a_over_b": a_over_b},
    )
    failed = [f"{r['side']} {r['run']}" for r in runs if "error" in r]
    wrong = {side: count for side, count in counts.items() if count != args.messages}
    if failed or wrong:
        sys.exit(f"failed runs: {failed or 'none'}; wrong row counts: {wrong or 'none'}")


if __name__ == "__main__":
    main()
