"""Copy a Pulsar topic into Parquet files — a job for ``spark-submit``.

    spark-submit pulsar_spark/jobs/topic_to_parquet.py \\
        --service-url pulsar://broker:6650 --topic persistent://public/default/events \\
        --output /data/events [--streaming --checkpoint /data/events-checkpoint] \\
        [--option pulsar.client.tlsTrustCertsFilePath=/etc/pulsar/ca.pem ...]

Batch mode reads what the topic holds now (earliest to latest) and replaces what the output
holds with it, so running it again leaves no duplicate rows. Streaming mode runs an
AvailableNow query with a checkpoint, so each run adds exactly what arrived since the last
one. ``--option`` overrides the job's own read options (``startingOffsets`` earliest, and
``maxMessagesPerTrigger`` from ``--max-messages-per-trigger``; a ``maxBytesPerTrigger`` given
goes with it, the tighter ending each micro-batch). The ``pulsar-spark`` package must be
installed in the Python of the driver and of every executor (``pip install pulsar-spark``); no
jar is involved.
"""

from __future__ import annotations

import argparse
import sys

from pyspark.sql import SparkSession

import pulsar_spark

# Read options the job's own arguments set, which --option may not give again.
_SET_BY_ARGUMENTS = {"service.url": "--service-url", "topic": "--topic", "topics": "--topic"}


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
        argument = _SET_BY_ARGUMENTS.get(name.strip().lower())
        if argument is not None:
            parser.error(f"--option {name.strip()}: give it with {argument}")
    if args.streaming and not args.checkpoint:
        parser.error("--streaming needs --checkpoint")
    if args.checkpoint and not args.streaming:
        parser.error(
            "--checkpoint goes with --streaming: a batch run reads the whole topic and keeps "
            "no checkpoint"
        )
    return args


def read_options(args: argparse.Namespace) -> dict[str, str]:
    """The read options: the job's defaults, overridden by every ``--option`` (names compared
    without case, as Spark does), then the broker and topic from their arguments."""
    given = {name.strip(): value for name, _, value in (o.partition("=") for o in args.option)}
    lowered = {name.lower() for name in given}
    defaults = {}
    if args.streaming:
        defaults["startingOffsets"] = "earliest"
        defaults["maxMessagesPerTrigger"] = str(args.max_messages_per_trigger)
    options = {name: value for name, value in defaults.items() if name.lower() not in lowered}
    options.update(given)
    options["service.url"] = args.service_url
    options["topics" if "," in args.topic else "topic"] = args.topic
    return options


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    spark = SparkSession.builder.appName("pulsar-topic-to-parquet").getOrCreate()
    pulsar_spark.register(spark)
    options = read_options(args)
    if args.streaming:
        query = (
            spark.readStream.format("pulsar")
            .options(**options)
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
        df = spark.read.format("pulsar").options(**options).load()
        # the whole topic: what an earlier run wrote is replaced, not added to
        df.write.mode("overwrite").parquet(args.output)
        rows = spark.read.parquet(args.output).count()
    print(f"copied {args.topic} to {args.output}, which now holds {rows} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
