"""One side of ``bench_peers.py``: a SparkSession that runs what it is told, one job at a time.

Started by ``bench_peers.py`` with the interpreter of the side's PySpark (3.1 for StreamNative's
connector, ``.venv``'s for ours and Spark's Kafka source), so it needs nothing but that PySpark
and the standard library, and uses only the DataFrame API (no Python UDFs). It reads one JSON
command a line from standard input and answers each with one line ``PEER <json>`` on standard
output: ``{"ok": true, ...}`` with the results, or ``{"error": "..."}``. The first answer,
``{"ok": true, "spark": "<version>"}``, says the session is up.

Commands (``op``), each with ``format`` and ``options`` of the data source or sink:

- ``read``: ``spark.read...load()`` into the ``noop`` sink, timed (``seconds``).
- ``stream``: ``spark.readStream...load()`` into the ``noop`` sink with ``trigger`` ``availableNow``
  or ``once``, timed from ``start()`` to the query's end; ``rows`` read.
- ``write``: ``rows`` rows made of ``spark.range(rows, numPartitions=partitions)`` and the SQL
  expressions ``columns`` (built and cached before the clock starts), written, timed.
- ``count``: the rows a read finds.
- ``digest``: the rows a read finds and a SHA-256 of their ``value`` column, sorted.
- ``stop``: stop the session and exit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
import traceback
from typing import Any

QUERY_TIMEOUT = 900.0  # seconds a streaming query may take


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--jars", default="", help="comma-separated jars for spark.jars")
    parser.add_argument("--class-path", default="", help="spark.driver.extraClassPath")
    parser.add_argument("--java-options", default="", help="spark.driver.extraJavaOptions")
    parser.add_argument("--memory", default="2g", help="spark.driver.memory")
    parser.add_argument(
        "--register-pulsar-spark",
        action="store_true",
        help="register this project's `pulsar` source (pulsar_spark.register)",
    )
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(f"bench-peers-{args.name}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", args.memory)
        .config("spark.sql.shuffle.partitions", "4")
    )
    settings = {
        "spark.jars": args.jars,
        "spark.driver.extraClassPath": args.class_path,
        "spark.driver.extraJavaOptions": args.java_options,
    }
    for key, value in settings.items():
        if value:
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if args.register_pulsar_spark:
        import pulsar_spark

        pulsar_spark.register(spark)
    answer({"ok": True, "spark": spark.version})

    worker = Worker(spark)
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        if command["op"] == "stop":
            break
        try:
            answer({"ok": True, **worker.run(command)})
        except Exception as exc:  # reported to bench_peers.py, which records the failed run
            traceback.print_exc(file=sys.stderr)
            answer({"error": first_line(exc)})
    spark.stop()


def answer(reply: dict[str, Any]) -> None:
    print("PEER " + json.dumps(reply), flush=True)


def first_line(exc: BaseException) -> str:
    """What went wrong, in a line: the JVM's cause when there is one."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Exception:" in line or "Error:" in line:
            return line[:400]
    return (lines[0] if lines else type(exc).__name__)[:400]


class Worker:
    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.inputs: dict[str, Any] = {}

    def run(self, command: dict[str, Any]) -> dict[str, Any]:
        op = command["op"]
        if op == "read":
            start = time.perf_counter()
            self.read(command).write.format("noop").mode("overwrite").save()
            return {"seconds": time.perf_counter() - start}
        if op == "stream":
            return self.stream(command)
        if op == "write":
            return self.write(command)
        if op == "count":
            return {"rows": self.read(command).count()}
        if op == "digest":
            values = sorted(bytes(row[0]) for row in self.read(command).select("value").collect())
            digest = hashlib.sha256(b"".join(values)).hexdigest()
            return {"rows": len(values), "sha256": digest}
        raise ValueError(f"unknown op {op!r}")

    def read(self, command: dict[str, Any]) -> Any:
        return self.spark.read.format(command["format"]).options(**command["options"]).load()

    def stream(self, command: dict[str, Any]) -> dict[str, Any]:
        checkpoint = tempfile.mkdtemp(prefix="bench-peers-checkpoint-")
        try:
            reader = self.spark.readStream.format(command["format"])
            df = reader.options(**command["options"]).load()
            writer = df.writeStream.format("noop").option("checkpointLocation", checkpoint)
            if command["trigger"] == "once":
                writer = writer.trigger(once=True)
            else:
                writer = writer.trigger(availableNow=True)
            start = time.perf_counter()
            query = writer.start()
            finished = query.awaitTermination(QUERY_TIMEOUT)
            seconds = time.perf_counter() - start
            if not finished:
                query.stop()
                raise TimeoutError(f"the streaming query did not end within {QUERY_TIMEOUT:g} s")
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            # PySpark 3.1 gives the progress as dicts, later ones as objects with their JSON.
            progress = [
                p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress
            ]
            rows = sum(p["numInputRows"] for p in progress)
            return {"seconds": seconds, "rows": rows}
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)

    def write(self, command: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps([command["rows"], command["partitions"], command["columns"]])
        if key not in self.inputs:
            df = self.spark.range(command["rows"], numPartitions=command["partitions"])
            df = df.selectExpr(*command["columns"]).cache()
            if df.count() != command["rows"]:
                raise RuntimeError("the input has not as many rows as asked for")
            for old in self.inputs.values():
                old.unpersist()
            self.inputs = {key: df}  # one input cached at a time
        writer = self.inputs[key].write.format(command["format"]).options(**command["options"])
        if command.get("mode"):
            writer = writer.mode(command["mode"])
        start = time.perf_counter()
        writer.save()
        return {"seconds": time.perf_counter() - start}


if __name__ == "__main__":
    main()
