"""Copy a Pulsar topic into Parquet files — a job for ``spark-submit``.

    spark-submit pulsar_spark/jobs/topic_to_parquet.py \\
        --service-url pulsar://broker:6650 --topic persistent://public/default/events \\
        --output /data/events [--streaming --checkpoint /data/events-checkpoint] \\
        [--option pulsar.client.tlsTrustCertsFilePath=/etc/pulsar/ca.pem ...]

Batch mode reads what the topic holds now (earliest to latest). Streaming mode runs an
AvailableNow query with a checkpoint, so each run copies exactly what arrived since the last
one. The ``pulsar-spark`` package must be installed in the Python of the driver and of every
executor (``pip install pulsar-spark``); no jar is involved.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

import pulsar_spark


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Copy a Pulsar topic to Parquet.")
    parser.add_argument("--service-url", required=True, help="pulsar://host:6650")
    parser.add_argument("--topic", required=True, help="topic (or comma-separated topics)")
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--streaming", action="store_true", help="incremental, checkpointed")
    parser.add_argument("--checkpoint", help="checkpoint directory (with --streaming)")
    parser.add_argument("--max-messages-per-trigger", type=int, default=500_000)
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="any other read option (TLS, authentication, ...); repeatable",
    )
    args = parser.parse_args(argv)
    for option in args.option:
        name, sep, _ = option.partition("=")
        if not sep or not name.strip():
            parser.error(f"--option takes NAME=VALUE, got {name!r}")
    if args.streaming and not args.checkpoint:
        parser.error("--streaming needs --checkpoint")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = SparkSession.builder.appName("pulsar-topic-to-parquet").getOrCreate()
    pulsar_spark.register(spark)
    topic_option = "topics" if "," in args.topic else "topic"
    options = dict(option.split("=", 1) for option in args.option)
    if args.streaming:
        query = (
            spark.readStream.format("pulsar")
            .options(**options)
            .option("service.url", args.service_url)
            .option(topic_option, args.topic)
            .option("startingOffsets", "earliest")
            .option("maxMessagesPerTrigger", str(args.max_messages_per_trigger))
            .load()
            .writeStream.format("parquet")
            .option("path", args.output)
            .option("checkpointLocation", args.checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        rows = spark.read.parquet(args.output).count()
    else:
        df = (
            spark.read.format("pulsar")
            .options(**options)
            .option("service.url", args.service_url)
            .option(topic_option, args.topic)
            .load()
        )
        df.write.mode("append").parquet(args.output)
        rows = spark.read.parquet(args.output).count()
    print(f"copied {args.topic} to {args.output}, which now holds {rows} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
