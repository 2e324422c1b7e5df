"""A real single-node TubeMQ 2.4.0 cluster for the tests, and the official Java client beside it.

The cluster (ZooKeeper, master, broker 1) is the build in ``$TUBEMQ_HOME`` (default
``../shared/tubemq`` beside the checkout; ``make test`` installs what it needs): its
``start.sh``, ``topic.sh`` and ``stop.sh``, run on five free loopback ports with a run
directory of their own, so the cluster never meets another one on the machine.
``stop.sh --clean`` stops exactly the processes ``start.sh`` recorded.

A new topic takes 70 to 110 s to reach the broker (it arrives on a broker heartbeat); create
topics once per session, all in one go. :class:`JavaProbe` compiles and runs
``tests/support/tubemq_java/TubeMQProbe.java`` against the cluster.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pulsar_spark.client.address import BrokerAddress
from pulsar_spark.client.tubemq.consumer import INDEX_ENTRY_SIZE

TUBEMQ_HOME = Path(
    os.environ.get("TUBEMQ_HOME", Path(__file__).resolve().parents[3] / "shared" / "tubemq")
)
PROBE_SOURCE = Path(__file__).parent / "tubemq_java" / "TubeMQProbe.java"
HOST = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago."""
    sockets = [socket.create_server((HOST, 0)) for _ in range(count)]
    try:
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class TubeMQCluster:
    run_dir: Path
    zk_port: int
    master_port: int
    master_web_port: int
    broker_port: int
    broker_web_port: int

    @classmethod
    def start(cls, run_dir: Path) -> TubeMQCluster:
        if not (TUBEMQ_HOME / "start.sh").exists():
            raise RuntimeError(f"no TubeMQ build in {TUBEMQ_HOME}: set TUBEMQ_HOME")
        cluster = cls(run_dir, *free_ports(5))
        cluster._script("start.sh", timeout=240)
        return cluster

    @property
    def master(self) -> str:
        return f"{HOST}:{self.master_port}"

    @property
    def masters(self) -> tuple[BrokerAddress, ...]:
        """The master, as the TubeMQ client takes its masters."""
        return (BrokerAddress(HOST, self.master_port),)

    def create_topics(self, names: tuple[str, ...], partitions: int) -> None:
        """Deploy ``names`` on broker 1 in one go and wait until the broker has loaded them
        (the master takes a comma-separated list, so the wait is paid once)."""
        self._script("topic.sh", "add", ",".join(names), str(partitions), timeout=300)

    def stop(self) -> None:
        self._script("stop.sh", "--clean", timeout=120)

    def flushed_messages(self, topic: str) -> int:
        """How many of ``topic``'s messages the broker has written to its index files (which
        grow as it writes them): what a SIGKILL cannot take away. New messages stay in
        memory until a flush, ``memCacheFlushIntvl`` after the last one, later on a busy
        machine."""
        stores = (self.run_dir / "broker-data").glob(f"{topic}-*/index/*.index")
        return sum(path.stat().st_size for path in stores) // INDEX_ENTRY_SIZE

    def kill_broker(self) -> BrokerCommand:
        """Kill the broker JVM with SIGKILL (nothing else stops) and wait until it is gone;
        the command line and folder it ran with, for :meth:`restart_broker`."""
        pid = int((self.run_dir / "broker.pid").read_text())
        command = BrokerCommand(
            Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1],
            Path(os.readlink(f"/proc/{pid}/cwd")),
        )
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
            if time.monotonic() > deadline:
                raise RuntimeError(f"broker {pid} still runs 30 s after SIGKILL")
            time.sleep(0.1)
        return command

    def restart_broker(self, command: BrokerCommand, *, timeout: float = 60) -> None:
        """Start the broker again as ``command`` and wait until it takes connections;
        ``stop.sh`` stops it as before (its pid goes where start.sh put the first one)."""
        log = (self.run_dir / "logs" / "broker.log").open("ab")
        process = subprocess.Popen(
            command.argv, cwd=command.cwd, stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        (self.run_dir / "broker.pid").write_text(f"{process.pid}\n")
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((HOST, self.broker_port), timeout=1).close()
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the restarted broker did not open its port") from None
                time.sleep(0.2)
            else:
                return

    def _script(self, name: str, *args: str, timeout: float) -> None:
        env = {
            **os.environ,
            "TUBEMQ_RUN_DIR": str(self.run_dir),
            "ZK_PORT": str(self.zk_port),
            "MASTER_PORT": str(self.master_port),
            "MASTER_WEB_PORT": str(self.master_web_port),
            "BROKER_PORT": str(self.broker_port),
            "BROKER_WEB_PORT": str(self.broker_web_port),
        }
        _run([str(TUBEMQ_HOME / name), *args], timeout=timeout, env=env)


@dataclass(frozen=True)
class BrokerCommand:
    """How the broker JVM was started: its arguments and working folder."""

    argv: list[str]
    cwd: Path


def _state(pid: int) -> str:
    """The process's state letter ("Z" for a zombie), or "" once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return ""


class JavaProbe:
    """The official Java client, through TubeMQProbe (see its header for the commands)."""

    def __init__(self, build_dir: Path) -> None:
        lib = TUBEMQ_HOME / "lib"
        jars = [lib / "tubemq-client.jar", lib / "tubemq-core.jar"]
        jars += [Path(p) for p in (lib / "debian-classpath.txt").read_text().split()]
        self._classes = build_dir
        self._classpath = os.pathsep.join(str(p) for p in [build_dir, *jars])
        subprocess.run(
            ["javac", "-nowarn", "-cp", self._classpath, "-d", str(build_dir), str(PROBE_SOURCE)],
            check=True,
            capture_output=True,
            timeout=180,
        )

    def run(self, *args: str, timeout: float = 150) -> list[str]:
        """Run the probe; its output lines (raises when it exits non-zero)."""
        quiet = "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn"
        command = ["java", "-Xmx1g", quiet, "-cp", self._classpath, "TubeMQProbe", *args]
        return _run(command, timeout=timeout).splitlines()


def _run(command: list[str], *, timeout: float, env: dict[str, str] | None = None) -> str:
    """Run ``command``; its standard output, or RuntimeError with both outputs' ends."""
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[-6:])} failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result.stdout
