"""Against the JVM connectors: ours, StreamNative's Pulsar connector and Spark's Kafka source.

What a user who wants Spark and a log would otherwise pick, each on its own broker on this
machine, doing the same three things with the same rows:

- **read**: ``spark.read.format(...)...load()`` of the whole topic into Spark's ``noop`` sink;
- **stream**: ``spark.readStream.format(...)`` from the earliest message to the end into ``noop``,
  ``trigger(availableNow=True)`` (StreamNative: ``trigger(once=True)``, since Spark 3.1 has no
  AvailableNow), a fresh checkpoint a run;
- **write**: ``df.write.format(...)`` of ``spark.range(N, numPartitions=4)`` rows, built and
  cached before the clock starts, to a fresh topic of 4 partitions (counted afterwards, untimed).

The sides, each a SparkSession of ``local[2]`` in a process of its own (``peers/worker.py``),
driven in turn by this script:

- **ours**: ``format("pulsar")`` of this package, on ``.venv``'s PySpark (4.3.0 when written),
  against Apache Pulsar 4.0.8's standalone (``pulsar_spark.local.apache``).
- **streamnative**: ``io.streamnative.connectors:pulsar-spark-connector_2.12:3.1.1.4``, the only
  release of it Maven Central serves for a Spark that pip still installs, on PySpark 3.1.3 in a
  virtualenv of its own, Java 17 with the ``--add-opens`` Spark 3.1 needs and Scala 2.12.15's
  library (see ``peers/streamnative.pom.xml``), against the same broker and topics as ours. Its
  options: ``service.url``, ``admin.url``, ``topic``, ``startingOffsets=earliest``. Its batch
  write cannot take the ``topic`` option on Spark 3.1.3 (it builds a string ``Literal`` that
  Spark refuses), so its rows carry a ``__topic`` column instead; the topic gets a BYTES schema
  first (tasks racing to upload one fail with HTTP 409); its producers are told
  ``pulsar.producer.blockIfQueueFull=true`` (by default a write fails once 1000 sends are
  pending: "Producer send queue is full") and ``maxPendingMessages=10000`` (with 1000 pending
  and the 100 ms batching delay the connector sets, it wrote 25,000 msg/s here); and it writes
  keys but no properties.
- **kafka**: Spark's ``format("kafka")`` (``spark-sql-kafka-0-10_2.13:4.2.0``, the newest Maven
  Central serves, on ``.venv``'s PySpark 4.3.0) against a single-node Kafka 4.1.1 (KRaft) from
  ``org.apache.kafka:kafka_2.13``; its data is written by its own sink, untimed, before the reads.

Rows: 100-byte values (the zero-padded row number, then filler); **keyed** rows also have a key
(``user-<n % 10000>``) and two properties (``source``, one of four, and ``trace-id``, a UUID), as
Kafka headers on the Kafka side. Pulsar's topics are published with the official producer
(``common.publish``: batches of up to 1000 messages), Kafka's by Spark's Kafka sink (producer
defaults).

The broker runs alone on the last CPU, Spark's JVMs and Python workers on the others (one core on
this 2-vCPU machine), as on a cluster whose brokers have machines of their own. One broker at a
time: first Apache Pulsar, with ours and StreamNative taking turns (a run of each in each round,
``--rounds``, the first ``--warmups`` untimed for the ratios), then Kafka with the same rounds;
ours/kafka pairs round *i* of ours with round *i* of Kafka. Each run reports msg/s, MB/s of
values, the cores busy (``common.CpuUse``: broker, JVMs and Python workers), the largest
Python worker's RSS (``common.WorkerMemory``, the JVM sides have none) and the side's JVM's peak
RSS. Ratios are medians of the rounds' own ratios, over every case run. After the rounds, an
interop check: StreamNative writes ``--interop-messages`` rows that ours reads, and the other
way round; counts and the values' digests must match the rows written.

The run ends with one line:
``peers: ours/streamnative read=R stream=R write=R; ours/kafka read=R stream=R write=R``.

Everything comes from registries on the first run, into ``pulsar_spark.local.apache.cache_dir()``
/ ``peers``: PySpark 3.1.3 (pip) and the jars (Maven). Results go to
``benchmarks/results/bench_peers.json``.

    python benchmarks/bench_peers.py                 # 1M plain and 1M keyed
    python benchmarks/bench_peers.py --quick         # 1M plain only
    python benchmarks/bench_peers.py --messages 10000000
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

# This directory for common.py, the repository for the connector as it is here.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    CpuUse,
    Shape,
    WorkerMemory,
    publish,
    report,
    spark_cores_apart,
    start_broker,
)
from support.apache_fixtures import create_partitioned_topic
from support.java_build import maven_jars
from support.java_build import run as run_command

from pulsar_spark.local.apache import ApacheBroker, cache_dir, locked

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEERS = HERE / "peers"
SIDES = ("ours", "streamnative", "kafka")
OPS = ("read", "stream", "write")
STREAMNATIVE_PYSPARK = "3.1.3"
# Spark 3.1 on Java 17: the JDK internals its memory management and serializers reach into.
JAVA17_OPENS = " ".join(
    [
        *(
            f"--add-opens=java.base/{package}=ALL-UNNAMED"
            for package in (
                "java.lang",
                "java.lang.invoke",
                "java.lang.reflect",
                "java.io",
                "java.net",
                "java.nio",
                "java.util",
                "java.util.concurrent",
                "java.util.concurrent.atomic",
                "sun.nio.ch",
                "sun.nio.cs",
                "sun.security.action",
                "sun.util.calendar",
            )
        ),
        "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
        "-Dio.netty.tryReflectionSetAccessible=true",
    ]
)
SPARK_KAFKA_JARS = (
    "spark-sql-kafka",
    "spark-token-provider-kafka",
    "kafka-clients",
    "commons-pool",
)
START_TIMEOUT = 300.0  # a worker's SparkSession, a broker
RUN_TIMEOUT = 1200.0  # one command of a worker


# --------------------------------------------------------------------------- what comes from
#                                                                             the registries


def peers_cache() -> Path:
    path = cache_dir() / "peers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def streamnative_python() -> Path:
    """The interpreter of a virtualenv with PySpark 3.1.3, made (pip, output shown) once."""
    venv = peers_cache() / f"pyspark-{STREAMNATIVE_PYSPARK}"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    with locked(peers_cache() / ".venv.lock"):
        if stamp.exists():
            return python
        print(f"installing PySpark {STREAMNATIVE_PYSPARK} into {venv} ...", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        run_command([sys.executable, "-m", "venv", str(venv)], timeout=120, echo=True)
        pip = [str(python), "-m", "pip", "install", "--progress-bar", "off"]
        run_command([*pip, f"pyspark=={STREAMNATIVE_PYSPARK}"], timeout=1200, echo=True)
        stamp.touch()
    return python


def jars(name: str) -> list[Path]:
    """The jars ``peers/<name>.pom.xml`` lists, from Maven Central the first time."""
    lib = maven_jars(
        PEERS / f"{name}.pom.xml",
        peers_cache() / name,
        ["dependency:copy-dependencies", "-DincludeScope=runtime"],
        what=f"bench_peers ({name})",
        progress=True,
    )
    return sorted(lib.glob("*.jar"))


# --------------------------------------------------------------------------- the sides


class Peer:
    """A side: ``peers/worker.py`` under ``python`` with its SparkSession, told what to run."""

    def __init__(self, name: str, python: Path | str, args: list[str], env: dict[str, str]):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115  (kept open for the process)
            prefix=f"bench-peers-{name}-", suffix=".log", delete=False
        )
        command = [str(python), str(PEERS / "worker.py"), "--name", name, *args]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            text=True,
        )  # in this process's group: whatever stops this benchmark's group stops it too
        self.replies: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        started = self._reply(START_TIMEOUT)
        self.spark = started["spark"]
        print(f"  {name}: Spark {self.spark} up (log: {self.log.name})", flush=True)

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("PEER "):
                self.replies.put(json.loads(line[5:]))
        self.replies.put({"error": f"the {self.name} worker ended"})

    def _reply(self, timeout: float) -> dict[str, Any]:
        try:
            reply = self.replies.get(timeout=timeout)
        except queue.Empty:
            self.process.kill()  # a late answer would pass for the next command's
            raise TimeoutError(f"{self.name}: no answer within {timeout:g} s") from None
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']} (log: {self.log.name})")
        return reply

    def __call__(self, op: str, timeout: float = RUN_TIMEOUT, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **command}) + "\n")
        self.process.stdin.flush()
        return self._reply(timeout)

    def jvm_peak_rss_mb(self) -> float:
        """The peak RSS (VmHWM) of this side's JVM so far."""
        for pid in children(self.process.pid):
            with suppress(OSError):
                status = Path(f"/proc/{pid}/status").read_text()
                if Path(f"/proc/{pid}/exe").resolve().name == "java":
                    for line in status.splitlines():
                        if line.startswith("VmHWM:"):
                            return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        with suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.write('{"op": "stop"}\n')
            self.process.stdin.flush()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()  # its JVM ends when its standard input closes
            self.process.wait()
        self.log.close()


def children(pid: int) -> list[int]:
    with suppress(OSError):
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def start_peers(names: list[str]) -> dict[str, Peer]:
    """The sides' workers, each with the jars and interpreter it needs."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    peers: dict[str, Peer] = {}
    for name in names:
        side_env = dict(env)
        if name == "ours":
            python: Path | str = sys.executable
            args = ["--register-pulsar-spark"]
        elif name == "streamnative":
            python = streamnative_python()
            lib = jars("streamnative")
            connector = [j for j in lib if "pulsar-spark-connector" in j.name]
            scala = [j for j in lib if j.name.startswith("scala-")]
            args = [
                "--jars",
                ",".join(map(str, connector)),
                "--class-path",
                os.pathsep.join(map(str, scala)),  # ahead of PySpark's Scala 2.12.10
                "--java-options",
                JAVA17_OPENS,
            ]
        else:
            python = sys.executable
            spark_jars = [j for j in jars("kafka") if j.name.startswith(SPARK_KAFKA_JARS)]
            args = ["--jars", ",".join(map(str, spark_jars))]
        side_env["PYSPARK_PYTHON"] = side_env["PYSPARK_DRIVER_PYTHON"] = str(python)
        peers[name] = Peer(name, python, args, side_env)
    return peers


# --------------------------------------------------------------------------- Kafka


class KafkaBroker:
    """A single-node Kafka (KRaft) on free loopback ports, its data in a temporary directory."""

    def __init__(self, cpu: int | None) -> None:
        lib = jars("kafka")
        self.classpath = os.pathsep.join(str(j) for j in lib)
        self.home = Path(tempfile.mkdtemp(prefix="bench-peers-kafka-"))
        port, controller = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{port}"
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{controller}",
            "listeners": f"PLAINTEXT://{self.bootstrap},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.home / "data"),
            "num.partitions": "4",  # topics are created by their first write
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        config = self.home / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        java = ["java", "-cp", self.classpath]
        cluster = subprocess.run(
            [*java, "kafka.tools.StorageTool", "random-uuid"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.split()[-1]
        storage = [*java, "kafka.tools.StorageTool", "format", "--standalone"]
        subprocess.run(
            [*storage, "-t", cluster, "-c", str(config)],
            capture_output=True,
            timeout=120,
            check=True,
        )
        self.log = (self.home / "kafka.log").open("wb")
        pinned = [] if cpu is None else ["taskset", "-c", str(cpu)]  # all its threads there
        self.process = subprocess.Popen(
            [*pinned, "java", "-Xmx1g", "-cp", self.classpath, "kafka.Kafka", str(config)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT
        while not port_open(port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"Kafka did not start: see {self.home / 'kafka.log'}")
            time.sleep(0.5)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.home, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


# --------------------------------------------------------------------------- what each side runs


def value_column(size: int) -> str:
    digits = min(size, 12)
    return (
        f"CAST(concat(lpad(CAST(id AS STRING), {digits}, '0'), repeat('x', {size - digits})) "
        "AS BINARY) AS value"
    )


def expected_digest(rows: int, size: int) -> str:
    """The SHA-256 the worker's ``digest`` gives for ``rows`` rows of :func:`value_column`."""
    digits = min(size, 12)
    filler = b"x" * (size - digits)
    values = sorted(str(n).zfill(digits).encode() + filler for n in range(rows))
    return hashlib.sha256(b"".join(values)).hexdigest()


KEY = "concat('user-', CAST(id % 10000 AS STRING))"
SOURCE = "element_at(array('web', 'mobile', 'batch', 'partner'), CAST(id % 4 AS INT) + 1)"


def write_columns(side: str, size: int, keyed: bool, topic: str) -> list[str]:
    """The SQL expressions of the rows ``side`` writes (see the module's docstring)."""
    columns = [value_column(size)]
    if side == "streamnative":
        columns.append(f"'{topic}' AS __topic")
        if keyed:
            columns.append(f"{KEY} AS __key")
    elif keyed and side == "ours":
        columns += [
            f"{KEY} AS key",
            f"map('source', {SOURCE}, 'trace-id', uuid()) AS properties",
        ]
    elif keyed:  # kafka
        columns += [
            f"{KEY} AS key",
            f"array(named_struct('key', 'source', 'value', CAST({SOURCE} AS BINARY)), "
            "named_struct('key', 'trace-id', 'value', CAST(uuid() AS BINARY))) AS headers",
        ]
    return columns


class Target:
    """Where the sides read and write: the broker's addresses and the options each side takes."""

    def __init__(self, broker: ApacheBroker | None, kafka: KafkaBroker | None) -> None:
        self.broker = broker
        self.kafka = kafka

    def options(
        self, side: str, topic: str, *, stream: bool = False, write: bool = False
    ) -> dict[str, str]:
        if side == "kafka":
            assert self.kafka is not None
            options = {"kafka.bootstrap.servers": self.kafka.bootstrap}
            if write:
                return {**options, "topic": topic}
            options.update(subscribe=topic, includeHeaders="true")
            if stream:
                options["startingOffsets"] = "earliest"
            return options
        assert self.broker is not None
        options = {"service.url": self.broker.service_url, "topic": full(topic)}
        if side == "streamnative" and write:
            # Its batch write fails on Spark 3.1.3 with the topic option: the rows name it. Its
            # producers fail a write when 1000 sends are pending unless told to wait, and with
            # 1000 pending and batches sent every 100 ms it writes 25,000 msg/s: as many pending
            # as the official producer has in bench_write.py.
            return {
                "service.url": self.broker.service_url,
                "admin.url": self.broker.web_url,
                "pulsar.producer.blockIfQueueFull": "true",
                "pulsar.producer.maxPendingMessages": "10000",
                "pulsar.producer.maxPendingMessagesAcrossPartitions": "40000",
            }
        if write:
            return options
        if side == "streamnative":
            options["admin.url"] = self.broker.web_url
            options["startingOffsets"] = "earliest"
        elif stream:
            options["startingOffsets"] = "earliest"
        return options

    def new_topic(self, side: str, topic: str, partitions: int) -> None:
        """A topic to write to (Kafka creates its own on the first write)."""
        if side == "kafka":
            return
        assert self.broker is not None
        create_partitioned_topic(self.broker, topic, partitions)
        if side == "streamnative":
            path = full(topic).replace("persistent://", "/admin/v2/schemas/", 1) + "/schema"
            self.broker.admin("POST", path, {"type": "BYTES", "schema": "", "properties": {}})

    def drop_topic(self, side: str, topic: str) -> None:
        if side != "kafka" and self.broker is not None:
            path = full(topic).replace("persistent://", "/admin/v2/persistent/", 1)
            with suppress(Exception):
                self.broker.admin("DELETE", f"{path}/partitions?force=true")


def full(topic: str) -> str:
    return f"persistent://public/default/{topic}"


FORMATS = {"ours": "pulsar", "streamnative": "pulsar", "kafka": "kafka"}


def run_op(
    peer: Peer,
    op: str,
    *,
    target: Target,
    case: str,
    shape: Shape,
    args: argparse.Namespace,
    run: int,
    counter: Peer,
) -> dict[str, Any]:
    """One timed run of ``op`` by ``peer``; its result row (or its error)."""
    side = peer.name
    messages, partitions = args.messages, args.partitions
    fmt = FORMATS[side]
    command: dict[str, Any]
    written = ""
    if op == "read":
        command = {"format": fmt, "options": target.options(side, f"bench-{case}")}
    elif op == "stream":
        command = {
            "format": fmt,
            "options": target.options(side, f"bench-{case}", stream=True),
            "trigger": "once" if side == "streamnative" else "availableNow",
        }
    else:
        written = f"written-{case}-{side}-{run}"
        target.new_topic(side, written, partitions)
        command = {
            "format": fmt,
            "options": target.options(side, written, write=True),
            "rows": messages,
            "partitions": partitions,
            "columns": write_columns(side, shape.size, shape.keyed, full(written)),
            "mode": "append" if side == "ours" else None,
        }
    row: dict[str, Any] = {"case": case, "op": op, "side": side, "round": run}
    try:
        with WorkerMemory(root=peer.process.pid) as memory, CpuUse() as cpu:
            result = peer(op, **command)
    except Exception as exc:
        print(f"  {case} {op} {side} round {run + 1}: FAILED: {exc}", flush=True)
        return {**row, "error": str(exc)[:500]}
    seconds = result["seconds"]
    if op == "stream" and result["rows"] != messages:
        row["error"] = f"the query read {result['rows']:,} rows of {messages:,}"
    if written:
        count_side = "kafka" if side == "kafka" else "ours"
        options = target.options(count_side, written)
        rows = counter("count", format=FORMATS[count_side], options=options)
        if rows["rows"] != messages:
            row["error"] = f"{written} holds {rows['rows']:,} messages, {messages:,} written"
        target.drop_topic(side, written)
    row.update(
        seconds=round(seconds, 3),
        msg_per_s=round(messages / seconds),
        mb_per_s=round(messages * shape.size / seconds / 1e6, 1),
        cores_busy=round(cpu.cores_busy, 2),
        broker_cores=round(cpu.broker_cores, 2),
        machine_cores=round(cpu.machine_cores, 2),
        max_worker_rss_mb=round(memory.peak.max_worker_rss_mb, 1),
        jvm_peak_rss_mb=round(peer.jvm_peak_rss_mb(), 1),
    )
    print(
        f"  {case} {op} {side} round {run + 1}: {seconds:.2f} s, {row['msg_per_s']:,} msg/s, "
        f"{row['mb_per_s']} MB/s; cores busy {cpu.cores_busy:.2f} (broker "
        f"{cpu.broker_cores:.2f}; machine {cpu.machine_cores:.2f}); Python worker RSS max "
        f"{row['max_worker_rss_mb']:.0f} MB, JVM peak RSS {row['jvm_peak_rss_mb']:.0f} MB"
        + (f"; WRONG: {row['error']}" if "error" in row else ""),
        flush=True,
    )
    return row


def rounds(
    peers: list[Peer], *, target: Target, case: str, args: argparse.Namespace, counter: Peer
) -> list[dict[str, Any]]:
    """``args.rounds`` rounds, in each a run of every op by every side in turn."""
    shape = Shape(size=args.size, keyed=CASES[case].keyed)
    rows = []
    for run in range(args.rounds):
        for op in OPS:
            for peer in peers:
                row = run_op(
                    peer, op, target=target, case=case, shape=shape, args=args, run=run,
                    counter=counter,
                )  # fmt: skip
                row["measured"] = run >= args.warmups
                rows.append(row)
    return rows


def interop(peers: dict[str, Peer], target: Target, args: argparse.Namespace) -> dict[str, Any]:
    """StreamNative writes what ours reads, and the other way round: counts and values."""
    rows, size = args.interop_messages, args.size
    expected = expected_digest(rows, size)
    checks = {}
    for writer, reader in (("streamnative", "ours"), ("ours", "streamnative")):
        topic = f"interop-from-{writer}"
        target.new_topic(writer, topic, args.partitions)
        command = {
            "format": "pulsar",
            "options": target.options(writer, topic, write=True),
            "rows": rows,
            "partitions": args.partitions,
            "columns": write_columns(writer, size, False, full(topic)),
            "mode": "append" if writer == "ours" else None,
        }
        peers[writer]("write", **command)
        read = peers[reader]("digest", format="pulsar", options=target.options(reader, topic))
        equal = read["rows"] == rows and read["sha256"] == expected
        checks[f"{writer}->{reader}"] = {"rows": read["rows"], "values_equal": equal}
        print(
            f"interop: {writer} wrote {rows:,} rows, {reader} read {read['rows']:,}: "
            + ("counts and values equal" if equal else "DIFFERENT"),
            flush=True,
        )
    return checks


# --------------------------------------------------------------------------- brokers


@contextmanager
def pulsar_broker(topics: list[str], args: argparse.Namespace) -> Iterator[ApacheBroker]:
    broker = start_broker(topics, args.partitions, "apache", args.broker_cpu)
    assert isinstance(broker, ApacheBroker)
    try:
        yield broker
    finally:
        broker.stop()


@contextmanager
def kafka_broker(args: argparse.Namespace) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(args.broker_cpu)
    try:
        yield broker
    finally:
        broker.stop()


CASES = {"plain": Shape(), "keyed": Shape(keyed=True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the plain case only")
    parser.add_argument("--cases", default="plain,keyed", help=f"of {', '.join(CASES)}")
    parser.add_argument("--sides", default=",".join(SIDES[1:]), help="of streamnative,kafka")
    parser.add_argument("--messages", type=int, default=1_000_000, help="10000000 for 10M")
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4, help="warm-ups included")
    parser.add_argument("--warmups", type=int, default=1)
    parser.add_argument("--interop-messages", type=int, default=10_000)
    args = parser.parse_args()
    cases = ["plain"] if args.quick else args.cases.split(",")
    others = args.sides.split(",")
    unknown = sorted(set(cases) - set(CASES)) + sorted(set(others) - set(SIDES[1:]))
    if unknown:
        parser.error(f"unknown {unknown}")
    if args.rounds <= args.warmups:
        parser.error("--rounds must exceed --warmups")

    # Everything from the registries first, so no download falls inside a timed run.
    if "streamnative" in others:
        streamnative_python()
        jars("streamnative")
    if "kafka" in others:
        jars("kafka")
    args.broker_cpu = spark_cores_apart()

    rows, checks = pulsar_phase(args, cases, others)
    if "kafka" in others:
        rows += kafka_phase(args, cases)

    ratios = summarize(rows, cases, others, checks)
    failed = [r for r in rows if "error" in r]
    interop_ok = checks and all(c["values_equal"] for c in checks.values())
    if "streamnative" in others and not interop_ok:
        failed.append({"interop": checks})
    if failed:
        print(f"{len(failed)} runs failed or read wrong counts (see above)", flush=True)
    print(peers_line(ratios), flush=True)  # the last line, whatever happened
    if failed:
        sys.exit(1)


def pulsar_phase(
    args: argparse.Namespace, cases: list[str], others: list[str]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Apache Pulsar: ours and StreamNative's in turn on each case; then the interop check."""
    rows: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    sides = ["ours", *[s for s in others if s == "streamnative"]]
    with pulsar_broker([f"bench-{c}" for c in cases], args) as broker:
        print(f"Apache Pulsar {broker.version} at {broker.service_url}", flush=True)
        peers = start_peers(sides)
        try:
            target = Target(broker, None)
            for case in cases:
                shape = Shape(size=args.size, keyed=CASES[case].keyed)
                print(f"publishing {args.messages:,} messages ({shape.describe()}) ...", flush=True)
                published = publish(
                    broker.service_url,
                    f"bench-{case}",
                    partitions=args.partitions,
                    messages=args.messages,
                    shape=shape,
                )
                print(f"  {published.seconds:.1f} s, {published.rate:,.0f} msg/s", flush=True)
                peer_list = list(peers.values())
                rows += rounds(
                    peer_list, target=target, case=case, args=args, counter=peers["ours"]
                )
            if "streamnative" in peers:
                checks = interop(peers, target, args)
        finally:
            for peer in peers.values():
                peer.stop()
    return rows, checks


def kafka_phase(args: argparse.Namespace, cases: list[str]) -> list[dict[str, Any]]:
    """Kafka: its topics written by Spark's Kafka sink (untimed), then the same rounds."""
    rows: list[dict[str, Any]] = []
    with kafka_broker(args) as kafka:
        print(f"Kafka at {kafka.bootstrap}", flush=True)
        peer = start_peers(["kafka"])["kafka"]
        try:
            target = Target(None, kafka)
            for case in cases:
                shape = Shape(size=args.size, keyed=CASES[case].keyed)
                print(f"writing {args.messages:,} rows to Kafka topic bench-{case} ...", flush=True)
                peer(
                    "write",
                    format="kafka",
                    options=target.options("kafka", f"bench-{case}", write=True),
                    rows=args.messages,
                    partitions=args.partitions,
                    columns=write_columns("kafka", shape.size, shape.keyed, ""),
                )
                rows += rounds([peer], target=target, case=case, args=args, counter=peer)
        finally:
            peer.stop()
    return rows


def summarize(
    rows: list[dict[str, Any]], cases: list[str], others: list[str], checks: dict[str, Any]
) -> dict[str, dict[str, float | None]]:
    """Print and record the medians per case, op and side; the ratios ours/side per op."""
    measured = [r for r in rows if r.get("measured") and "error" not in r]
    table = []
    for case in cases:
        for op in OPS:
            for side in ("ours", *others):
                runs = [r for r in measured if (r["case"], r["op"], r["side"]) == (case, op, side)]
                if not runs:
                    continue
                table.append(
                    [
                        case,
                        op,
                        side,
                        round(statistics.median(r["msg_per_s"] for r in runs)),
                        statistics.median(r["mb_per_s"] for r in runs),
                        statistics.median(r["cores_busy"] for r in runs),
                        max(r["max_worker_rss_mb"] for r in runs),
                        max(r["jvm_peak_rss_mb"] for r in runs),
                    ]
                )
    ratios: dict[str, dict[str, float | None]] = {}
    for other in others:
        ratios[other] = {}
        for op in OPS:
            own = {
                (r["case"], r["round"]): r for r in measured if (r["op"], r["side"]) == (op, "ours")
            }
            theirs = [r for r in measured if (r["op"], r["side"]) == (op, other)]
            each = [
                own[(r["case"], r["round"])]["msg_per_s"] / r["msg_per_s"]
                for r in theirs
                if (r["case"], r["round"]) in own
            ]
            ratios[other][op] = round(statistics.median(each), 2) if each else None
    report(
        "bench_peers",
        ["case", "op", "side", "msg/s", "MB/s", "cores busy", "Py worker RSS MB", "JVM RSS MB"],
        table,
        {"runs": rows, "ratios": ratios, "interop": checks},
    )
    return ratios


def peers_line(ratios: dict[str, dict[str, float | None]]) -> str:
    parts = []
    for other in ("streamnative", "kafka"):
        values = ratios.get(other, {})
        text = " ".join(
            f"{op}={values.get(op) if values.get(op) is not None else '-'}" for op in OPS
        )
        parts.append(f"ours/{other} {text}")
    return "peers: " + "; ".join(parts)


if __name__ == "__main__":
    main()
