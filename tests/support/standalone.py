"""A Spark standalone cluster on loopback ports: one master and its workers, each a JVM started
with PySpark's own ``spark-class``, as ``sbin/start-master.sh`` and ``start-worker.sh`` would
start them, but in the foreground, in a session of their own, logging to files in ``work``."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from pulsar_spark.local.process import choose_ports, read_tail
from support.packaging import spark_home

HOST = "127.0.0.1"
STOP_TIMEOUT = 15.0


class StandaloneCluster:
    """Master and workers; :meth:`start` launches them, :meth:`wait_ready` waits until every
    worker has registered, :meth:`stop` ends them with the executors they started."""

    def __init__(self, work: Path, env: dict[str, str], workers: int) -> None:
        self.work = work
        self.env = env
        self.workers = workers
        master_port, web_port, *worker_ports = choose_ports(HOST, *[None] * (2 + 2 * workers))
        self.master_url = f"spark://{HOST}:{master_port}"
        self.web_url = f"http://{HOST}:{web_port}"
        self._master_args = ["--port", str(master_port), "--webui-port", str(web_port)]
        self._worker_ports = list(zip(worker_ports[::2], worker_ports[1::2], strict=True))
        self._processes: list[tuple[subprocess.Popen[bytes], Path]] = []

    @classmethod
    def start(cls, work: Path, *, workers: int, python: Path) -> StandaloneCluster:
        """Launch the master and ``workers`` workers (one core, 1 GB each). The workers'
        ``PYSPARK_PYTHON`` is ``python``: what their Python workers run unless a job names
        another. No ``PYTHONPATH`` and no ``PYSPARK_*`` variable of this process reaches them."""
        conf = work / "conf"  # an empty configuration directory: no spark-defaults.conf
        conf.mkdir(parents=True)
        env = {
            k: v
            for k, v in os.environ.items()
            if k != "PYTHONPATH" and not k.startswith(("PYSPARK_", "SPARK_"))
        }
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(conf),
            SPARK_LOCAL_IP=HOST,
            SPARK_DAEMON_MEMORY="384m",
            PYSPARK_PYTHON=str(python),
        )
        cluster = cls(work, env, workers)
        try:
            cluster._launch("master", "org.apache.spark.deploy.master.Master", cluster._master_args)
            for i, (port, web_port) in enumerate(cluster._worker_ports):
                worker_dir = work / f"worker-{i}"
                worker_dir.mkdir()
                cluster._launch(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    [
                        *("--port", str(port), "--webui-port", str(web_port)),
                        *("--cores", "1", "--memory", "1g", "--work-dir", str(worker_dir)),
                        cluster.master_url,
                    ],
                )
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _launch(self, name: str, main_class: str, args: list[str]) -> None:
        log = self.work / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), main_class, "--host", HOST, *args],
                cwd=self.work,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: executors go with it
            )
        self._processes.append((process, log))

    def alive_workers(self) -> int:
        """How many workers the master counts as alive (0 while its web UI is not up)."""
        try:
            with urllib.request.urlopen(f"{self.web_url}/json/", timeout=2) as answer:
                state = json.load(answer)
        except OSError:
            return 0
        return sum(1 for worker in state.get("workers", []) if worker.get("state") == "ALIVE")

    def wait_ready(self, timeout: float) -> None:
        """Wait until every worker has registered with the master; fail with the log of a
        process that ended, or after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            for process, log in self._processes:
                if process.poll() is not None:
                    raise AssertionError(f"{log.stem} exited:\n{read_tail(log, 0)}")
            if time.monotonic() > deadline:
                logs = "\n".join(f"{log.stem}:\n{read_tail(log, 0)}" for _, log in self._processes)
                raise AssertionError(f"{self.workers} workers not registered in {timeout}s\n{logs}")
            time.sleep(0.25)

    def logs(self) -> str:
        """The last lines of every process's log."""
        return "\n".join(f"--- {log.stem}\n{read_tail(log, 0)}" for _, log in self._processes)

    def stop(self) -> None:
        """SIGTERM to each process group (workers first, so they end their executors), then
        SIGKILL to whatever is left after :data:`STOP_TIMEOUT` seconds."""
        for process, _ in reversed(self._processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process, _ in reversed(self._processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            _signal_group(process, signal.SIGKILL)  # executors left in the group too
            process.wait()
        self._processes.clear()


def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signum)
