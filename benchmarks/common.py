"""Helpers shared by the end-to-end benchmarks: broker, data, Spark session, timing, memory.

- :func:`start_broker` runs a local broker with partitioned topics: pulsar-lite, or with
  ``--broker apache`` (:func:`add_broker_argument`) Apache Pulsar's standalone, which
  :func:`broker_cpu` keeps on a core of its own, as in a deployment.
- :func:`publish` fills that topic with the official Apache Pulsar producer (``pulsar-client``),
  messages of a :class:`Shape` (size, keys and properties, compression, batching) spread
  round-robin over the partitions, and returns how many messages each partition holds and the
  id of its last message.
- :func:`spark_session` builds a ``local[2]`` session whose Python workers use this interpreter,
  with the ``pulsar`` source registered.
- :class:`WorkerMemory` samples the resident memory of Spark's Python worker processes.
- :func:`report` prints a results table and writes it to ``benchmarks/results/<name>.json``.

Every wait here is bounded: publishing raises if the broker has not confirmed the last message
of every partition within ``timeout`` seconds, and a rejected send raises too.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.topic import full_topic_name

# The tests' support code: the Avro record of the avro case, the proxy (bench_read, bench_tls),
# creating Apache's partitioned topics.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.apache_fixtures import create_partitioned_topic
from support.schemas import READING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESULTS_DIR = Path(__file__).resolve().parent / "results"
WORKER_MARKERS = ("pyspark.daemon", "pyspark/worker")
DEFAULT_TOPIC = "bench"
DEFAULT_PARTITIONS = 4


# --------------------------------------------------------------------------- broker and data


BROKERS = ("pulsar-lite", "apache")
APACHE_MAIN = "org.apache.pulsar.PulsarStandaloneStarter"  # how Apache's JVM is told apart
KAFKA_MAIN = "kafka.Kafka"  # and Kafka's
TUBEMQ_BROKER_MAIN = "org.apache.inlong.tubemq.server.tools.BrokerStartup"  # and TubeMQ's

Broker = LocalBroker | ApacheBroker


def add_broker_argument(parser: argparse.ArgumentParser) -> None:
    """``--broker``: which broker :func:`start_broker` starts."""
    parser.add_argument(
        "--broker",
        choices=BROKERS,
        default="pulsar-lite",
        help="pulsar-lite (embedded), or apache: Apache Pulsar's standalone from Maven "
        "Central, alone on the last CPU as on a cluster whose brokers have machines of their own",
    )


def broker_cpu(args: argparse.Namespace) -> int | None:
    """The CPU the broker gets to itself (Apache always; pulsar-lite with ``--broker-core``),
    with Spark kept off it from now on, or ``None`` when they share every CPU."""
    if args.broker == "apache" or getattr(args, "broker_core", False):
        return spark_cores_apart()
    return None


def start_broker(
    topic: str | Sequence[str] = DEFAULT_TOPIC,
    partitions: int = DEFAULT_PARTITIONS,
    kind: str = "pulsar-lite",
    cpu: int | None = None,
) -> Broker:
    """A fresh broker (temporary data directory) where each topic named has ``partitions``,
    pinned to ``cpu`` when one is given."""
    topics = [topic] if isinstance(topic, str) else list(topic)
    broker: Broker
    if kind == "apache":
        # with the transaction coordinator, for bench_write's transactional side
        broker = ApacheBroker.start(heap_mb=1024, config={"transactionCoordinatorEnabled": "true"})
        for name in topics:
            create_partitioned_topic(broker, name, partitions)
    else:
        broker = LocalBroker.start(partitioned_topics=dict.fromkeys(topics, partitions))
    if cpu is not None:
        pin_broker(broker, cpu)
    return broker


def spark_cores_apart() -> int:
    """Keep this process, and what it starts from now on (Spark's JVM and Python workers), off
    one CPU, and return that CPU, for :func:`pin_broker`: as on a cluster, where brokers do not
    run on the executors' cores. To be called before the first SparkSession."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("the broker needs a core of its own: this process may use only one")
    os.sched_setaffinity(0, cpus[:-1])
    return cpus[-1]


def pin_broker(broker: Broker, cpu: int) -> None:
    """Pin every thread of ``broker`` to ``cpu``."""
    pid = broker.pid
    if pid is None:
        raise RuntimeError("the broker is not running")
    for thread in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(thread), {cpu})


def partition_topic(topic: str, index: int) -> str:
    return f"{full_topic_name(topic)}-partition-{index}"


def add_dataset_arguments(parser: argparse.ArgumentParser) -> None:
    """``--messages``, ``--size`` and ``--partitions``: the data every benchmark publishes."""
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)


@dataclass(frozen=True)
class Shape:
    """What every published message looks like.

    ``keyed``: each message has a key (``user-<n>``, 10,000 distinct) and two properties,
    ``source`` (one of four values) and ``trace-id`` (a UUID, unique per message). Values are
    random bytes, or JSON-like text when compressed (random bytes do not compress)."""

    size: int = 100
    keyed: bool = False
    compression: str = "none"  # "none" or "lz4"
    batching: bool = True
    batch_bytes: int = 1 << 20
    avro: bool = False  # values are READING records, sent with the official AvroSchema

    def describe(self) -> str:
        if self.avro:
            return "Avro records of 8 fields (READING), batched"
        parts = [f"{self.size:,} B"]
        if self.keyed:
            parts.append("keyed + 2 properties")
        if self.compression != "none":
            parts.append(self.compression.upper())
        if not self.batching:
            parts.append("unbatched")
        elif self.batch_bytes < self.size:
            parts.append("batches of one message")
        else:
            parts.append(f"batches of {self.batch_bytes // 1024} KiB")
        return ", ".join(parts)


def publish_dataset(
    broker: Broker,
    args: argparse.Namespace,
    shape: Shape | None = None,
    topic: str = DEFAULT_TOPIC,
) -> Published:
    """Publish the data ``args`` describes (``shape`` for more than the size) to ``broker``."""
    shape = shape or Shape(size=args.size)
    print(
        f"publishing {args.messages:,} messages ({shape.describe()}) to {args.partitions} "
        "partitions with the official producer ...",
        flush=True,
    )
    published = publish(
        broker.service_url,
        topic,
        partitions=args.partitions,
        messages=args.messages,
        shape=shape,
    )
    print(f"  {published.seconds:.1f} s, {published.rate:,.0f} msg/s", flush=True)
    return published


@dataclass
class Published:
    """What :func:`publish` wrote: per partition, the message count and last message id."""

    topic: str
    partitions: int
    messages: int
    shape: Shape
    seconds: float
    counts: list[int]
    last_ids: list[tuple[int, int, int]]  # (ledger, entry, batch index) per partition

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def summary(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "message_bytes": self.shape.size,
            "shape": asdict(self.shape),
            "partitions": self.partitions,
            "seconds": round(self.seconds, 3),
            "msg_per_s": round(self.rate),
            "per_partition": self.counts,
        }


def quiet_pulsar_logger() -> Any:
    """A logger for ``pulsar.Client`` that only reports errors (INFO is one line per event)."""
    import pulsar

    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def publish(
    service_url: str,
    topic: str = DEFAULT_TOPIC,
    *,
    partitions: int = DEFAULT_PARTITIONS,
    messages: int = 1_000_000,
    shape: Shape = Shape(),
    processes: int | None = None,
    timeout: float = 300.0,
) -> Published:
    """Publish ``messages`` messages of ``shape`` with the official producer.

    Message ``i`` goes to partition ``i % partitions``. Each partition topic
    (``<topic>-partition-i``) gets its own producer: batching as ``shape`` says (up to 1000
    messages, ``shape.batch_bytes`` or 10 ms), ``send_async`` + ``flush``, blocking when 50,000
    sends are pending. The partitions
    are shared out over ``processes`` child processes (default: one per CPU, at most one per
    partition), since one Python thread cannot feed the C++ producers fast enough.
    """
    workers = max(1, min(partitions, processes or os.cpu_count() or 1))
    counts = [
        messages // partitions + (1 if i < messages % partitions else 0) for i in range(partitions)
    ]
    groups = [list(range(partitions))[w::workers] for w in range(workers)]
    context = multiprocessing.get_context("spawn")  # never fork a process that may run a JVM
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        # Start the children before the clock: interpreter start-up is not publishing.
        list(pool.map(_ready, range(workers)))
        start = time.perf_counter()
        futures = [
            pool.submit(
                _publish_partitions,
                service_url,
                topic,
                {i: counts[i] for i in group},
                shape,
                timeout,
            )
            for group in groups
        ]
        last_ids: dict[int, tuple[int, int, int]] = {}
        for future in futures:
            last_ids.update(future.result(timeout=timeout + 60))
        seconds = time.perf_counter() - start
    return Published(
        topic=full_topic_name(topic),
        partitions=partitions,
        messages=messages,
        shape=shape,
        seconds=seconds,
        counts=counts,
        last_ids=[last_ids[i] for i in range(partitions)],
    )


def _ready(_: int) -> bool:
    import pulsar  # noqa: F401  (imported once, outside the timed region)

    return True


def reading_schema() -> Any:
    """READING as the connector types it: its Spark and Arrow types."""
    from pulsar_spark.arrow.values import ValueSchema
    from pulsar_spark.protocol import pb
    from pulsar_spark.protocol.schemas import SchemaInfo

    avro = pb.Schema.Type.Value("Avro")
    return ValueSchema.of("bench", SchemaInfo(avro, json.dumps(READING).encode(), "", (), None))


def reading(n: int) -> dict[str, Any]:
    """Record ``n`` of :data:`READING`."""
    return {
        "name": f"user-{n % 10_000}",
        "count": n * 7919,
        "ratio": n / 7,
        "ok": n % 2 == 0,
        "note": None if n % 3 else f"note {n}",
        "at": datetime.fromtimestamp(1_764_000_000 + n / 1000, tz=timezone.utc),
        "tags": ["red", "green", "blue"][: n % 4],
        "place": {"city": _SOURCES[n % 4], "zip": n % 100_000},
    }


def _payloads(shape: Shape) -> list[Any]:
    """1024 values of ``shape.size`` bytes (or records) to cycle through."""
    if shape.avro:
        return [reading(n) for n in range(1024)]
    if shape.compression == "none":
        return [os.urandom(shape.size) for _ in range(1024)]
    words = ["order", "user", "amount", "currency", "EUR", "status", "shipped", "items"]
    values = []
    for n in range(1024):
        text = ""
        while len(text) < shape.size:
            text += f'{{"{words[n % 8]}": {n * 7919 % 100_003}, "id": "{os.urandom(4).hex()}"}}, '
        values.append(text[: shape.size].encode())
    return values


def _message_fields(shape: Shape, n: int) -> dict[str, Any]:
    """The key and properties of message ``n`` (none unless ``shape.keyed``)."""
    if not shape.keyed:
        return {}
    return {
        "partition_key": f"user-{n % 10_000}",
        "properties": {"source": _SOURCES[n % 4], "trace-id": str(uuid.uuid4())},
    }


_SOURCES = ("web", "mobile", "batch", "partner")


def _publish_partitions(
    service_url: str, topic: str, counts: dict[int, int], shape: Shape, timeout: float
) -> dict[int, tuple[int, int, int]]:
    """In a child process: send ``counts[i]`` messages to partition ``i``, interleaved.

    Returns each partition's last message id as (ledger, entry, batch index). Only the last
    send of a partition carries a Python callback; the others use a C-implemented no-op so
    the client's I/O thread does not contend for the GIL once per message.
    """
    import pulsar

    payloads = _payloads(shape)
    compression = {
        "none": pulsar.CompressionType.NONE,
        "lz4": pulsar.CompressionType.LZ4,
    }[shape.compression]
    results: dict[int, tuple[int, int, int]] = {}
    errors: list[str] = []
    lock = threading.Lock()
    done = threading.Event()

    def on_last(index: int) -> Any:
        def callback(result: Any, message_id: Any) -> None:
            with lock:
                if result != pulsar.Result.Ok:
                    errors.append(f"partition {index}: {result}")
                else:
                    results[index] = (
                        message_id.ledger_id(),
                        message_id.entry_id(),
                        message_id.batch_index(),
                    )
                if len(results) + len(errors) == len(counts):
                    done.set()

        return callback

    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_pulsar_logger())
    try:
        producers = {
            index: client.create_producer(
                partition_topic(topic, index),
                batching_enabled=shape.batching,
                batching_max_messages=1000,
                batching_max_allowed_size_in_bytes=shape.batch_bytes,
                compression_type=compression,
                **_schema(shape),
                batching_max_publish_delay_ms=10,
                max_pending_messages=50_000,
                block_if_queue_full=True,
                send_timeout_millis=int(timeout * 1000),
            )
            for index in counts
        }
        order = sorted(counts)
        pool = len(payloads)
        sent = 0
        # Round-robin over this process's partitions until each has its count.
        for n in range(max(counts.values())):
            for index in order:
                if n >= counts[index]:
                    continue
                last = n == counts[index] - 1
                producers[index].send_async(
                    payloads[sent % pool],
                    on_last(index) if last else NO_OP_CALLBACK,
                    **_message_fields(shape, sent),
                )
                sent += 1
        for producer in producers.values():
            producer.flush()
        if not done.wait(timeout):
            raise TimeoutError(f"no receipt for the last messages within {timeout:g}s")
        for producer in producers.values():
            producer.close()
    finally:
        client.close()
    if errors:
        raise RuntimeError(f"publishing failed: {errors}")
    return results


def _schema(shape: Shape) -> dict[str, Any]:
    """The official producer's ``schema`` argument for ``shape``'s values."""
    if not shape.avro:
        return {}
    from pulsar.schema import AvroSchema

    return {"schema": AvroSchema(None, schema_definition=READING)}


# A builtin that accepts (result, message_id) and does nothing with them: no Python frame.
NO_OP_CALLBACK = slice


# ---------------------------------------------------------------------------- Spark

# The phases of a streaming micro-batch's ``durationMs`` (``query.recentProgress``) reported.
PHASES = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
)


def spark_session(app: str, *, extra: dict[str, str] | None = None) -> SparkSession:
    """A ``local[2]`` session whose Python workers run this interpreter; ``pulsar`` registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    here = Path(__file__).resolve().parent
    path = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    # The repository for the connector, this directory for the benchmarks' own data sources.
    wanted = [str(here.parent), str(here)]
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [p for p in wanted if p not in path] + [p for p in path if p]
    )

    from pyspark.sql import SparkSession

    import pulsar_spark

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    pulsar_spark.register(spark)
    return spark


# ---------------------------------------------------------------------------- measuring


@contextmanager
def timer() -> Iterator[dict[str, float]]:
    """``with timer() as t: ...`` then ``t["seconds"]``."""
    result: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield result
    finally:
        result["seconds"] = time.perf_counter() - start


@dataclass
class MemoryPeak:
    max_worker_rss_mb: float = 0.0  # the largest single executor worker process
    max_total_rss_mb: float = 0.0  # the largest sum over executor worker processes at one time
    max_all_rss_mb: float = 0.0  # the same, including the driver-side planner workers
    max_workers: int = 0
    samples: int = 0
    pids: set[int] = field(default_factory=set)

    def summary(self) -> dict[str, Any]:
        return {
            "max_worker_rss_mb": round(self.max_worker_rss_mb, 1),
            "max_total_rss_mb": round(self.max_total_rss_mb, 1),
            "max_all_python_rss_mb": round(self.max_all_rss_mb, 1),
            "max_workers": self.max_workers,
            "samples": self.samples,
        }


class WorkerMemory:
    """Samples the resident memory of Spark's Python workers every ``interval`` s in a thread.

    Workers are found through ``/proc``: processes whose command line mentions
    ``pyspark.daemon`` or ``pyspark/worker``. Executor workers are the ``pyspark.daemon
    pyspark.worker`` daemon and the processes it forks, one per running task (reused across
    tasks); the other daemons (``pyspark.daemon pyspark.sql.worker.<step>``) are the
    driver-side planner workers, counted only in ``max_all_rss_mb``. Forked workers share pages
    with their daemon, so sums over-count shared memory. Use as a context manager around the
    measured action; ``peak`` holds the result afterwards.
    """

    def __init__(self, interval: float = 0.2, *, root: int | None = None) -> None:
        self.interval = interval
        self.root = root  # only the workers under this process (default: this one)
        self.peak = MemoryPeak()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="worker-rss", daemon=True)
        self._page_kb = os.sysconf("SC_PAGE_SIZE") // 1024

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()  # one last look

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def _sample(self) -> None:
        executor: list[int] = []
        everything = 0
        for pid, rss_kb, is_executor in self._workers():
            everything += rss_kb
            if is_executor:
                executor.append(rss_kb)
                self.peak.pids.add(pid)
        peak = self.peak
        peak.samples += 1
        peak.max_all_rss_mb = max(peak.max_all_rss_mb, everything / 1024)
        if executor:
            peak.max_worker_rss_mb = max(peak.max_worker_rss_mb, max(executor) / 1024)
            peak.max_total_rss_mb = max(peak.max_total_rss_mb, sum(executor) / 1024)
            peak.max_workers = max(peak.max_workers, len(executor))

    def _workers(self) -> Iterator[tuple[int, int, bool]]:
        """(pid, resident KiB, is an executor worker) of this process's Python workers.

        Only descendants of ``root`` (default: this process, which starts the JVM, which
        starts the workers) count: other Spark applications on the same machine are left out.
        """
        for pid in _descendants(self.root):
            try:
                args = _command_line(pid)
                cmdline = " ".join(args)
                if not any(marker in cmdline for marker in WORKER_MARKERS):
                    continue
                with open(f"/proc/{pid}/statm", "rb") as f:
                    resident_pages = int(f.read().split()[1])
            except (OSError, ValueError, IndexError):
                continue
            is_executor = "pyspark.worker" in args or any("pyspark/worker" in a for a in args)
            yield pid, resident_pages * self._page_kb, is_executor


def _descendants(root: int | None = None) -> Iterator[int]:
    """The process ids of the descendants of ``root`` (default: this process), read from
    ``/proc``."""
    me = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int(_stat_fields(int(entry.name))[1])
            except (OSError, ValueError, IndexError):
                continue  # the process ended between listing and reading
    return (pid for pid in parents if _descends_from(pid, me, parents))


def _stat_fields(pid: int) -> list[bytes]:
    """The fields of ``/proc/<pid>/stat`` after the command name: state, ppid, ... (the name,
    in parentheses, may hold spaces, so the split starts after its last ``)``)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()


def _command_line(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().decode(errors="replace").split("\0")


class CpuUse:
    """The CPU time this process and its descendants (the broker, the JVM, the Python workers)
    spend while the block runs, in cores busy on average; the broker's and the JVM's apart.

    On a machine where the broker, the JVM and the Python workers share the cores, this says
    how much of the machine a read keeps busy, so what more tasks could gain: a read that
    keeps ``u`` of ``n`` cores busy can go at most ``n / u`` times faster with more tasks
    doing the same work per message. A process's time includes that of its children it has
    waited for, so a Python worker that ends inside the block is counted in its daemon's.
    ``machine_cores`` is every process's, others' included.
    """

    def __init__(self) -> None:
        self.cores_busy = self.broker_cores = self.jvm_cores = self.machine_cores = 0.0
        self._tick = os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> CpuUse:
        self._start = (time.perf_counter(), self._machine(), self._processes())
        return self

    def __exit__(self, *exc_info: object) -> None:
        wall = time.perf_counter() - self._start[0]
        machine, roles = self._machine(), self._processes()

        def cores(ticks: int) -> float:
            return ticks / self._tick / wall

        before = self._start[2]
        used = {role: ticks - before.get(role, 0) for role, ticks in roles.items()}
        self.cores_busy = cores(sum(used.values()))
        self.broker_cores = cores(used.get("broker", 0))
        self.jvm_cores = cores(used.get("jvm", 0))
        self.machine_cores = cores(machine - self._start[1])

    def summary(self) -> dict[str, float]:
        return {
            "cores_busy": round(self.cores_busy, 2),
            "broker_cores": round(self.broker_cores, 2),
            "jvm_cores": round(self.jvm_cores, 2),
            "machine_cores": round(self.machine_cores, 2),
        }

    @staticmethod
    def _machine() -> int:
        """Busy clock ticks of all CPUs since boot (user, nice, system, irq, softirq)."""
        with open("/proc/stat", "rb") as f:
            ticks = [int(t) for t in f.readline().split()[1:]]
        user, nice, system, _idle, _iowait, irq, softirq = ticks[:7]
        return user + nice + system + irq + softirq

    @staticmethod
    def _processes() -> dict[str, int]:
        """Clock ticks (user + system, own and of waited-for children) used so far by the
        broker, the JVM and the rest of this process's tree (itself included)."""
        used: dict[str, int] = {}
        for pid in [os.getpid(), *_descendants()]:
            try:
                args = _command_line(pid)
                program = os.path.basename(args[0])
                fields = _stat_fields(pid)
            except (OSError, IndexError):
                continue
            # pulsar-lite, Apache's JVM, Kafka's (bench_peers), TubeMQ's broker (bench_tubemq)
            is_broker = "pulsar" in program or any(
                main in args for main in (APACHE_MAIN, KAFKA_MAIN, TUBEMQ_BROKER_MAIN)
            )
            role = "broker" if is_broker else "jvm" if program == "java" else "python"
            used[role] = used.get(role, 0) + sum(int(f) for f in fields[11:15])
        return used


def _descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    for _ in range(64):  # process trees are shallow; the bound guards against pid reuse loops
        pid = parents.get(pid, 0)
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
    return False


# ---------------------------------------------------------------------------- reporting


def machine() -> dict[str, Any]:
    import pyarrow
    import pyspark

    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "platform": platform.platform(),
    }


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; numbers are right-aligned and get thousands separators."""

    def cell(value: Any) -> str:
        if isinstance(value, bool) or value is None:
            return str(value)
        if isinstance(value, int):
            return f"{value:,}"
        if isinstance(value, float):
            return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"
        return str(value)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in text]) for i, h in enumerate(headers)]
    numeric = [
        all(isinstance(row[i], (int, float)) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w)
            for v, w, num in zip(values, widths, numeric, strict=True)
        ).rstrip()

    out = [line(list(headers)), line(["-" * w for w in widths])]
    out.extend(line(r) for r in text)
    return "\n".join(out)


def measure(
    label: str, make_df: Callable[[], Any], runs: int, messages: int, *, warmups: int = 1
) -> tuple[list[dict[str, Any]], int | None]:
    """Run ``noop`` writes ``runs`` times (the first ``warmups`` of them warm-ups), then count
    rows once (untimed).

    A failed run is recorded with its error and the next one still runs.
    """
    results = [
        timed_run(
            label,
            run,
            runs,
            messages,
            lambda: write_noop(make_df()),
            warmups=warmups,
        )
        for run in range(runs)
    ]
    return results, count_rows(label, make_df)


def write_noop(df: Any) -> None:
    """What a timed run does with a DataFrame: write it to Spark's ``noop`` sink."""
    df.write.format("noop").mode("overwrite").save()


def count_rows(label: str, make_df: Callable[[], Any]) -> int | None:
    """The rows of ``make_df()``, counted untimed (None, with the error printed, if that
    fails)."""
    try:
        with timer() as elapsed:
            count: int = make_df().count()
    except Exception as exc:
        print(f"  {label} count: FAILED: {short_error(exc)}", flush=True)
        return None
    print(f"  {label} count: {count:,} ({elapsed['seconds']:.1f} s, untimed)", flush=True)
    return count


def timed_run(
    label: str,
    run: int,
    runs: int,
    messages: int,
    action: Callable[[], object],
    *,
    warmups: int = 1,
    **fields: object,
) -> dict[str, Any]:
    """Run ``action`` as run ``run`` of ``runs`` (of more runs than ``warmups``, the first
    ``warmups`` are warm-ups), timed, with the Python workers' memory sampled; its result row
    (``fields`` added), or its error."""
    kind = "warm-up" if run < warmups < runs else "measured"
    try:
        with WorkerMemory() as memory, CpuUse() as cpu, timer() as elapsed:
            action()
    except Exception as exc:
        error = short_error(exc)
        print(f"  {label} run {run + 1}: FAILED: {error}", flush=True)
        return {"side": label, "run": kind, **fields, "error": error}
    seconds = elapsed["seconds"]
    print(
        f"  {label} run {run + 1}: {seconds:.2f} s, {messages / seconds:,.0f} msg/s, "
        f"worker RSS max {memory.peak.max_worker_rss_mb:.0f} MB "
        f"(sum {memory.peak.max_total_rss_mb:.0f} MB over {memory.peak.max_workers} "
        f"processes); cores busy {cpu.cores_busy:.2f} (broker {cpu.broker_cores:.2f}, "
        f"JVM {cpu.jvm_cores:.2f})",
        flush=True,
    )
    return {
        "side": label,
        "run": kind,
        **fields,
        "seconds": round(seconds, 3),
        "msg_per_s": round(messages / seconds),
        **memory.peak.summary(),
        **cpu.summary(),
    }


def short_error(exc: BaseException) -> str:
    """The line of a (possibly long, JVM-wrapped) error that says what went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if line.startswith(("TimeoutError:", "RuntimeError:", "pulsar_spark.errors.", "_pulsar.")):
            return line[:300]
    return (lines[0] if lines else type(exc).__name__)[:300]


def median_measured(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The measured run of median speed (of an even number, the slower middle one); None if
    no run was measured. Runs vary by tens of percent on a 2-core machine: a ratio of two
    single runs says less than one of medians."""
    done = sorted(
        (r for r in runs if "error" not in r and r["run"] == "measured"),
        key=lambda r: r["msg_per_s"],
    )
    return done[(len(done) - 1) // 2] if done else None


def report(
    name: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    details: dict[str, Any],
) -> Path:
    """Print the table and write ``{"rows": ..., **details}`` to ``results/<name>.json``."""
    print()
    print(format_table(headers, rows))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    document = {
        "benchmark": name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine(),
        "columns": list(headers),
        "rows": [list(r) for r in rows],
        **details,
    }
    path.write_text(json.dumps(document, indent=2, default=_jsonable) + "\n", encoding="utf-8")
    print(f"\nwritten to {path}")
    return path


def _jsonable(value: Any) -> Any:
    if isinstance(value, set):
        return sorted(value)
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
