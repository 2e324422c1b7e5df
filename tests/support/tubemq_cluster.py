"""A real single-node TubeMQ 2.4.0 cluster for the tests, and the official Java client beside it.

The cluster (ZooKeeper, master, broker 1) runs the official Apache InLong jars from Maven
Central that ``tubemq_maven/pom.xml`` lists (it says which versions and why): Maven copies them
once into ``tubemq-2.4.0/lib`` of the cache Apache Pulsar's release goes to
(:func:`pulsar_spark.local.apache.cache_dir`), where every later run finds them. ``make test``
installs Maven and a JDK when either is missing and fetches the jars before pytest starts.

Each cluster runs on seven free loopback ports with a folder of its own (configuration, data,
logs), so it never meets another one on the machine; its clients use 127.0.0.1 only. The
official jars listen on every interface: TubeMQ 2.4.0 has no setting for the address its RPC,
web and metrics servers bind to (ZooKeeper's is set to 127.0.0.1).

A new topic takes 70 to 110 s to reach the broker (it arrives on a broker heartbeat); create
topics once per session, all in one go. :class:`JavaProbe` compiles and runs
``tests/support/tubemq_java/TubeMQProbe.java`` against the cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.local.apache import cache_dir
from pulsar_spark.tubemq.client.consumer import INDEX_ENTRY_SIZE
from support.java_build import maven_jars, run

HOST = "127.0.0.1"
POM = Path(__file__).parent / "tubemq_maven" / "pom.xml"
PROBE_SOURCE = Path(__file__).parent / "tubemq_java" / "TubeMQProbe.java"
TUBEMQ_CACHE = cache_dir() / "tubemq-2.4.0"
# The master's web API token (confModAuthToken) and the broker's id.
TOKEN = "abc"
BROKER_ID = 1

# The master and broker on Java 17: the broker unmaps its files through sun.nio.ch.DirectBuffer
# and Netty reaches into java.nio for its direct buffers.
JVM_OPTIONS = [
    "-Xms256m",
    "-Xmx512m",
    "-Djava.net.preferIPv4Stack=true",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
]
LOG4J2 = """\
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss.SSS}} [%t] %-5level %logger{{1}} - %msg%n
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
"""
ZOO_CFG = """\
tickTime=2000
dataDir={run}/zk-data
clientPort={zk_port}
clientPortAddress={host}
admin.enableServer=false
4lw.commands.whitelist=ruok,stat
"""
# TubeMQ's conf/master.ini and conf/broker.ini, with this cluster's ports and folders, the
# metadata in ZooKeeper (the release's default), and the master's first consumer-group
# rebalance after 5 s instead of 60 s. Metrics are on only so that their listeners take free
# ports: switched off, both servers still try the default 9081.
MASTER_INI = """\
[master]
hostName={host}
port={master_port}
webPort={master_web_port}
consumerBalancePeriodMs=5000
firstBalanceDelayAfterStartMs=5000
consumerHeartbeatTimeoutMs=30000
producerHeartbeatTimeoutMs=45000
brokerHeartbeatTimeoutMs=25000
confModAuthToken={token}
webResourcePath={run}/web
useWebProxy=false
{master_security}[meta_zookeeper]
zkNodeRoot=/tubemq
zkServerAddr={host}:{zk_port}
zkSessionTimeoutMs=30000
zkConnectionTimeoutMs=30000
zkSyncTimeMs=5000
zkCommitPeriodMs=5000
zkMasterCheckPeriodMs=5000
[prometheus]
promEnable=true
promHttpPort={master_metrics_port}
promClusterName=InLong
{tls}"""
# The master's web API writes its JSON answer through two Velocity templates of TubeMQ's
# distribution (resources/templates), which no Maven artifact carries: the page is the answer.
WEB_API_TEMPLATES = {"screen/webapi.vm": "$sb\n", "layout/webapi.vm": "$screen_placeholder\n"}
BROKER_INI = """\
[broker]
brokerId={broker_id}
hostName={host}
port={broker_port}
webPort={broker_web_port}
masterAddressList={host}:{master_port}
primaryPath={run}/broker-data
maxSegmentSize=1073741824
maxIndexSegmentSize=22020096
transferSize=524288
loadMessageStoresInParallel=true
consumerRegTimeoutMs=35000
[audit]
auditEnable=false
auditCacheFilePath={run}/audit
[prometheus]
promEnable=true
promHttpPort={broker_metrics_port}
promClusterName=InLong
{tls}"""
# A secure cluster's additions, as an operator sets them: the master asks producers and
# consumers to authenticate (and has the brokers do the same), and each server also listens
# for TLS on a port of its own (the plain port stays, for the broker's own calls to the
# master). TLS is mutual: with tlsTwoWayAuthEnable=false a 2.4.0 server opens the trust store
# path it then leaves empty on the first TLS connection, and exits.
MASTER_SECURITY = """\
startProduceAuthenticate=true
startProduceAuthorize=true
startConsumeAuthenticate=true
startConsumeAuthorize=true
"""
TLS_SECTION = """\
[tlsSetting]
tlsEnable=true
tlsPort={tls_port}
tlsKeyStorePath={key_store}
tlsKeyStorePassword={store_password}
tlsTwoWayAuthEnable=true
tlsTrustStorePath={trust_store}
tlsTrustStorePassword={store_password}
"""


def tubemq_jars() -> Path:
    """The folder of the cluster's and the Java client's jars, copied from Maven Central on
    the first call after ``tubemq_maven/pom.xml`` changes (the time it took goes to stderr)."""
    goals = ["dependency:copy-dependencies", "dependency:copy", "-DincludeScope=runtime"]
    return maven_jars(POM, TUBEMQ_CACHE, goals, what="TubeMQ (`make tubemq` installs Maven)")


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports that were free a moment ago."""
    sockets = [socket.create_server((HOST, 0)) for _ in range(count)]
    try:
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass(frozen=True)
class Security:
    """What makes a cluster secure: the servers' TLS key store (PKCS#12), the trust store of
    the CA that signs client certificates, and their password. Authentication and
    authorisation of producers and consumers come with it."""

    key_store: Path
    trust_store: Path
    store_password: str


@dataclass(frozen=True)
class BrokerCommand:
    """How the broker JVM was started: its arguments and working folder."""

    argv: list[str]
    cwd: Path


@dataclass(frozen=True)
class TubeMQCluster:
    run_dir: Path
    zk_port: int
    master_port: int
    master_web_port: int
    broker_port: int
    broker_web_port: int
    master_metrics_port: int
    broker_metrics_port: int
    master_tls_port: int
    broker_tls_port: int
    security: Security | None = None
    _processes: dict[str, subprocess.Popen[bytes]] = field(
        default_factory=dict, compare=False, repr=False, kw_only=True
    )
    _commands: dict[str, list[str]] = field(
        default_factory=dict, compare=False, repr=False, kw_only=True
    )

    @classmethod
    def start(cls, run_dir: Path, security: Security | None = None) -> TubeMQCluster:
        """ZooKeeper, the master, broker 1 registered in the master, then the broker; each
        step waits until its ports take connections. With ``security`` the master and the
        broker also listen for TLS and require authentication (see :data:`MASTER_SECURITY`)."""
        lib = tubemq_jars()
        cluster = cls(run_dir, *free_ports(9), security=security)
        try:
            cluster._start(lib)
        except BaseException:
            cluster.stop(clean=False)
            raise
        return cluster

    @property
    def master(self) -> str:
        return f"{HOST}:{self.master_port}"

    @property
    def masters(self) -> tuple[BrokerAddress, ...]:
        """The master, as the TubeMQ client takes its masters."""
        return (BrokerAddress(HOST, self.master_port),)

    @property
    def tls_master(self) -> str:
        """The master's TLS port, as ``master.addresses`` takes it."""
        return f"{HOST}:{self.master_tls_port}"

    @property
    def tls_masters(self) -> tuple[BrokerAddress, ...]:
        """The master's TLS port, as the TubeMQ client takes its masters."""
        return (BrokerAddress(HOST, self.master_tls_port),)

    def logs(self) -> str:
        """Everything ZooKeeper, the master and the broker logged so far."""
        return "".join(
            path.read_text(errors="replace")
            for path in sorted((self.run_dir / "logs").glob("*.log"))
        )

    def create_topics(
        self, names: tuple[str, ...], partitions: int, *, others: dict[str, int] | None = None
    ) -> None:
        """Deploy ``names`` of ``partitions`` partitions each, and ``others`` with the number
        of partitions each maps to, on broker 1 in one go and wait until the broker has loaded
        them (the master takes a comma-separated list, so the wait is paid once)."""
        counts = dict.fromkeys(names, partitions) | (others or {})
        for count in sorted(set(counts.values())):
            self._modify(
                "admin_add_new_topic_record",
                topicName=",".join(name for name, n in counts.items() if n == count),
                brokerId=str(BROKER_ID),
                numPartitions=str(count),
                createUser="tubemq_admin",
            )
        self._modify(
            "admin_reload_broker_configure", brokerId=str(BROKER_ID), modifyUser="tubemq_admin"
        )
        deadline = time.monotonic() + 300
        while not self._broker_loaded():
            if time.monotonic() > deadline:
                raise RuntimeError("broker 1 did not load the new topics in 300 s")
            time.sleep(2)

    def stop(self, *, clean: bool = True) -> None:
        """Stop the broker, the master and ZooKeeper (SIGTERM, then SIGKILL after 20 s) and,
        with ``clean``, delete the run folder."""
        for name in ("broker", "master", "zookeeper"):
            process = self._processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=20)
        if clean:
            shutil.rmtree(self.run_dir, ignore_errors=True)

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
        process = self._processes.pop("broker")
        command = BrokerCommand(self._commands["broker"], self.run_dir)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        return command

    def restart_broker(self, command: BrokerCommand, *, timeout: float = 60) -> None:
        """Start the broker again as ``command`` and wait until it takes connections;
        :meth:`stop` stops it as it did the first one."""
        process = self._launch("broker", command.argv)
        self._wait_port(self.broker_port, "the restarted broker", process, timeout)

    def _start(self, lib: Path) -> None:
        run = self.run_dir
        for folder in ("zk-data", "broker-data", "logs", "conf"):
            (run / folder).mkdir(parents=True, exist_ok=True)
        for template, text in WEB_API_TEMPLATES.items():
            (run / "web" / "templates" / template).parent.mkdir(parents=True, exist_ok=True)
            (run / "web" / "templates" / template).write_text(text)
        values = {**vars(self), "run": run, "host": HOST, "token": TOKEN, "broker_id": BROKER_ID}
        (run / "conf" / "zoo.cfg").write_text(ZOO_CFG.format(**values))
        (run / "conf" / "master.ini").write_text(
            MASTER_INI.format(
                **values,
                master_security=MASTER_SECURITY if self.security else "",
                tls=self._tls_section(self.master_tls_port),
            )
        )
        (run / "conf" / "broker.ini").write_text(
            BROKER_INI.format(**values, tls=self._tls_section(self.broker_tls_port))
        )
        (run / "conf" / "log4j2.properties").write_text(LOG4J2.format(level="info"))

        def java(name: str, options: list[str], main: str, *args: str) -> subprocess.Popen[bytes]:
            logging = f"-Dlog4j2.configurationFile={run / 'conf' / 'log4j2.properties'}"
            classpath = f"{run / 'conf'}{os.pathsep}{lib / '*'}"
            return self._launch(name, ["java", *options, logging, "-cp", classpath, main, *args])

        process = java(
            "zookeeper",
            ["-Xmx256m", "-Dzookeeper.jmx.log4j.disable=true"],
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(run / "conf" / "zoo.cfg"),
        )
        self._wait_port(self.zk_port, "ZooKeeper", process, 60)
        server = [*JVM_OPTIONS, f"-Dtubemq.home={run}"]
        process = java(
            "master",
            server,
            "org.apache.inlong.tubemq.server.tools.MasterStartup",
            *("-f", str(run / "conf" / "master.ini")),
        )
        self._wait_port(self.master_web_port, "the master's web API", process, 90)
        self._wait_port(self.master_port, "the master", process, 90)
        if self.security:
            self._wait_port(self.master_tls_port, "the master's TLS port", process, 90)
        # The master takes a broker only once it is configured and online there (a TLS port
        # the broker does not report is refused at its registration).
        tls_port = {"brokerTLSPort": str(self.broker_tls_port)} if self.security else {}
        self._modify(
            "admin_add_broker_configure",
            brokerId=str(BROKER_ID),
            brokerIp=HOST,
            brokerPort=str(self.broker_port),
            brokerWebPort=str(self.broker_web_port),
            numPartitions="3",
            createUser="tubemq_start",
            **tls_port,
        )
        self._modify(
            "admin_online_broker_configure", brokerId=str(BROKER_ID), modifyUser="tubemq_start"
        )

        process = java(
            "broker",
            [*server, "-Dtube.fast_boot=false"],
            "org.apache.inlong.tubemq.server.tools.BrokerStartup",
            *("-f", str(run / "conf" / "broker.ini")),
        )
        self._wait_port(self.broker_web_port, "the broker's web port", process, 90)
        self._wait_port(self.broker_port, "the broker", process, 90)
        if self.security:
            self._wait_port(self.broker_tls_port, "the broker's TLS port", process, 90)

    def _tls_section(self, port: int) -> str:
        if self.security is None:
            return ""
        return TLS_SECTION.format(
            tls_port=port,
            key_store=self.security.key_store,
            trust_store=self.security.trust_store,
            store_password=self.security.store_password,
        )

    def _launch(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start ``argv`` in the run folder, its output appended to ``logs/<name>.log``."""
        with (self.run_dir / "logs" / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(argv, cwd=self.run_dir, stdout=log, stderr=subprocess.STDOUT)
        self._processes[name] = process
        self._commands[name] = argv
        return process

    def _wait_port(
        self, port: int, what: str, process: subprocess.Popen[bytes], timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                socket.create_connection((HOST, port), timeout=1).close()
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    logs = self.run_dir / "logs"
                    raise RuntimeError(f"{what} did not open {HOST}:{port}; see {logs}") from None
                time.sleep(0.2)
            else:
                return

    def _api(self, **fields: str) -> dict[str, Any]:
        """One call of the master's web API; its JSON answer."""
        url = f"http://{HOST}:{self.master_web_port}/webapi.htm"
        body = urllib.parse.urlencode(fields).encode()
        with urllib.request.urlopen(url, data=body, timeout=60) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return answer

    def _modify(self, method: str, **fields: str) -> None:
        """A change through the web API (``fields`` name the user making it); raises
        RuntimeError unless the master and every item of the answer report success."""
        answer = self._api(type="op_modify", method=method, confModAuthToken=TOKEN, **fields)
        failed = [item for item in answer.get("data", []) if not item.get("success", True)]
        if not answer.get("result") or failed:
            raise RuntimeError(f"{method} failed: {answer}")

    def _broker_loaded(self) -> bool:
        """Whether broker 1 runs with the master's latest configuration loaded."""
        answer = self._api(
            type="op_query", method="admin_query_broker_run_status", brokerId=str(BROKER_ID)
        )
        status = (answer.get("data") or [{}])[0]
        wanted = {"runStatus": "running", "isConfChanged": "false", "isConfLoaded": "true"}
        return all(status.get(key) == value for key, value in wanted.items())


class JavaProbe:
    """The official Java client, through TubeMQProbe (see its header for the commands)."""

    def __init__(self, build_dir: Path) -> None:
        build_dir.mkdir(parents=True, exist_ok=True)
        config = build_dir / "log4j2.properties"
        config.write_text(LOG4J2.format(level="warn"))
        self._classpath = f"{build_dir}{os.pathsep}{tubemq_jars() / '*'}"
        self._logging = f"-Dlog4j2.configurationFile={config}"
        subprocess.run(
            ["javac", "-nowarn", "-cp", self._classpath, "-d", str(build_dir), str(PROBE_SOURCE)],
            check=True,
            capture_output=True,
            timeout=180,
        )

    def run(self, *args: str, timeout: float = 150) -> list[str]:
        """Run the probe; its output lines (raises when it exits non-zero)."""
        command = ["java", "-Xmx1g", self._logging, "-cp", self._classpath, "TubeMQProbe", *args]
        return run(command, timeout=timeout).splitlines()


if __name__ == "__main__":
    # `make tubemq`: fetch the jars before the tests need them.
    print(tubemq_jars())
