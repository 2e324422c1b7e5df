"""Start Apache Pulsar's standalone broker on loopback, from its release on Maven Central.

How this works:

- **The release, once.** :func:`ensure_distribution` asks Maven for Apache Pulsar's server
  distribution (``org.apache.pulsar:pulsar-server-distribution:VERSION:tar.gz:bin``, the same
  tarball as a download from the Pulsar site) and unpacks it into a cache directory shared by
  every start: ``$PULSAR_SPARK_CACHE``, else ``$XDG_CACHE_HOME/pulsar-spark``, else
  ``~/.cache/pulsar-spark``. A lock file keeps two processes from unpacking it at once. It
  needs ``mvn`` and Maven Central, the first time only.
- **A fresh broker each start.** :meth:`ApacheBroker.start` makes a data directory, writes
  ``standalone.conf`` there (the release's own file with this module's settings appended: a
  later key wins in a Java properties file), and runs ``PulsarStandaloneStarter``: a broker,
  one bookie in the same JVM and a RocksDB metadata store, without the functions worker or
  stream storage. The settings bind everything to loopback on free ports and size caches and
  heap for a small machine; callers add their own (authentication, TLS, deduplication...).
- **Ready** once the admin API lists the cluster and its ``public/default`` namespace, which
  the standalone creates after its web server is up.
- :meth:`ApacheBroker.restart` stops the JVM (gracefully, or with SIGKILL like a crash) and
  starts it again on the same ports and data; :meth:`ApacheBroker.stop` also deletes the data
  directory it created. ``python -m pulsar_spark.local.apache`` runs one in the foreground.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, final

from pulsar_spark.local.process import (
    BrokerProcess,
    LocalBrokerError,
    choose_ports,
    ensure_port_free,
    join_host_port,
    read_tail,
)

__all__ = ["PULSAR_VERSION", "ApacheBroker", "Distribution", "ensure_distribution"]

PULSAR_VERSION = "4.0.8"
"""The Apache Pulsar release started by default: the newest 4.0.x (LTS) on Maven Central."""

CONFIG_FILE = "standalone.conf"

_ARTIFACT = "org.apache.pulsar:pulsar-server-distribution:{version}:tar.gz:bin"
_MAIN_CLASS = "org.apache.pulsar.PulsarStandaloneStarter"
_POLL_INTERVAL = 0.25
_ADMIN_TIMEOUT = 10.0
_START_ATTEMPTS = 3

# The JVM flags of the release's bin/pulsar that the broker needs on Java 17 and later.
_JVM_FLAGS = (
    "-Djava.net.preferIPv4Stack=true",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.platform=ALL-UNNAMED",
    "--add-opens=java.management/sun.management=ALL-UNNAMED",
    "--add-opens=jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Dorg.apache.pulsar.shade.io.netty.tryReflectionSetAccessible=true",
    "-Dpulsar.allocator.exit_on_oom=true",
    "-Dlog4j2.is.webapp=false",
    "-Dpulsar.log.appender=Console",
    "-XX:+UseParallelGC",
    "-XX:ParallelGCThreads=2",
)


@dataclass(frozen=True)
class Distribution:
    """An unpacked Apache Pulsar release."""

    version: str
    home: Path
    fetched_in: float | None
    """Seconds the download and unpacking took, or ``None`` when the cache had it."""


def cache_dir() -> Path:
    """Where releases fetched from Maven Central are kept between runs."""
    if configured := os.environ.get("PULSAR_SPARK_CACHE"):
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pulsar-spark"


def ensure_distribution(version: str = PULSAR_VERSION) -> Distribution:
    """Return the unpacked release ``version``, fetching it with Maven the first time.

    Raises:
        LocalBrokerError: ``mvn`` is missing, or Maven could not fetch the artifact (the
            message names it and ends with Maven's output).
    """
    root = cache_dir()
    home = root / f"apache-pulsar-{version}"
    if (home / "lib").is_dir():
        return Distribution(version, home, None)
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / f"apache-pulsar-{version}.lock"):
        if (home / "lib").is_dir():  # another process finished it meanwhile
            return Distribution(version, home, None)
        began = time.monotonic()
        with tempfile.TemporaryDirectory(dir=root, prefix=".fetch-") as scratch:
            tarball = _fetch(_ARTIFACT.format(version=version), Path(scratch))
            _unpack(tarball, Path(scratch))
            os.replace(Path(scratch) / f"apache-pulsar-{version}", home)
        return Distribution(version, home, time.monotonic() - began)


@final
class ApacheBroker(BrokerProcess):
    """An Apache Pulsar standalone (broker and bookie in one JVM) on loopback ports.

    Create one with :meth:`start`; it keeps its ports and data across :meth:`restart`, and
    :meth:`stop` ends the JVM and deletes the data directory.
    """

    LOG_FILE = "broker.log"
    STOP_TIMEOUT = 30.0

    def __init__(
        self,
        *,
        distribution: Distribution,
        java: str,
        data_dir: Path,
        host: str,
        port: int,
        web_port: int,
        config: Mapping[str, str],
        admin_headers: Mapping[str, str],
        heap_mb: int,
        startup_timeout: float,
    ) -> None:
        """Hold the settings; use :meth:`start`, which also launches the JVM."""
        super().__init__(host=host, port=port, data_dir=data_dir, owns_data_dir=True)
        self._distribution = distribution
        self._java = java
        self._web_port = web_port
        self._config = dict(config)
        self._admin_headers = dict(admin_headers)
        self._heap_mb = heap_mb
        self._startup_timeout = startup_timeout
        self.started_in: float = 0.0
        """Seconds the last start or restart took until the broker was ready."""

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def start(
        cls,
        *,
        config: Mapping[str, str] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        web_port: int | None = None,
        cluster_name: str = "standalone",
        admin_headers: Mapping[str, str] | None = None,
        version: str = PULSAR_VERSION,
        heap_mb: int = 768,
        startup_timeout: float = 180.0,
    ) -> ApacheBroker:
        """Start a standalone in a new data directory and return once it is ready.

        Args:
            config: ``standalone.conf`` keys to set on top of this module's (which they
                override), e.g. ``{"brokerDeduplicationEnabled": "true"}``.
            host: The address every listener binds to and advertises; keep it loopback.
            port: The binary-protocol port; a free one when ``None``.
            web_port: The admin (HTTP) port; a free one when ``None``.
            cluster_name: The cluster the standalone creates and names itself after.
            admin_headers: Headers the readiness checks and :meth:`admin` send, e.g. an
                ``Authorization`` header when ``config`` turns authentication on.
            version: The Apache Pulsar release (fetched from Maven Central if not cached).
            heap_mb: The JVM's heap; direct memory gets the same again.
            startup_timeout: Seconds to wait for readiness.

        Raises:
            LocalBrokerError: Java or Maven is missing, the release cannot be fetched, a port
                is in use, or the broker exited or was not ready in time (the message ends
                with the broker log's tail).
        """
        java = _find_java()
        distribution = ensure_distribution(version)
        settings = dict(config or {})
        attempts = _START_ATTEMPTS
        while True:
            ports = choose_ports(host, port, web_port)
            broker = cls(
                distribution=distribution,
                java=java,
                data_dir=Path(tempfile.mkdtemp(prefix="apache-pulsar-")).resolve(),
                host=host,
                port=ports[0],
                web_port=ports[1],
                config={**_base_settings(cluster_name, host, *ports), **settings},
                admin_headers=admin_headers or {},
                heap_mb=heap_mb,
                startup_timeout=startup_timeout,
            )
            try:
                broker._write_config()
                broker._launch()
            except BaseException as exc:
                broker.stop()
                attempts -= 1
                # A free port chosen here can be taken by another process before the JVM
                # binds it (the bookie picks its own too): start again on new ones.
                if attempts == 0 or "Address already in use" not in str(exc):
                    raise
                continue
            return broker

    def restart(self, *, kill: bool = False) -> None:
        """Stop the broker and start it again on the same ports and data.

        Args:
            kill: End the JVM with SIGKILL, as a crash would, instead of a clean shutdown.

        Raises:
            LocalBrokerError: the broker was stopped and its data is gone, or it did not
                come back up.
        """
        self._check_restartable()
        if kill:
            self.kill()
        else:
            self._terminate()
        self._launch()

    def __repr__(self) -> str:
        """Show the release, where the broker listens and whether it runs."""
        state = "running" if self.is_running else "stopped"
        return (
            f"<ApacheBroker {self._distribution.version} {self.service_url} "
            f"web={self.web_url} {state}>"
        )

    # ----------------------------------------------------------------- properties

    @property
    def version(self) -> str:
        """The Apache Pulsar release running."""
        return self._distribution.version

    @property
    def distribution(self) -> Distribution:
        """The unpacked release the broker runs from."""
        return self._distribution

    @property
    def web_url(self) -> str:
        """The admin API's base URL, ``http://127.0.0.1:PORT``."""
        return f"http://{join_host_port(self._host, self._web_port)}"

    @property
    def tls_service_url(self) -> str | None:
        """``pulsar+ssl://127.0.0.1:PORT`` when ``config`` set ``brokerServicePortTls``."""
        port = self._config.get("brokerServicePortTls")
        return f"pulsar+ssl://{join_host_port(self._host, int(port))}" if port else None

    @property
    def web_port(self) -> int:
        """The admin API's port."""
        return self._web_port

    @property
    def config(self) -> Mapping[str, str]:
        """The settings this module wrote on top of the release's ``standalone.conf``."""
        return dict(self._config)

    # ------------------------------------------------------------------ admin API

    def admin(self, method: str, path: str, body: Any = None) -> Any:
        """Call the admin REST API and return its JSON answer (``None`` when empty).

        Args:
            method: ``GET``, ``PUT``, ``POST`` or ``DELETE``.
            path: From ``/admin/...`` on, e.g. ``/admin/v2/persistent/public/default/t/stats``.
            body: Sent as JSON when not ``None``.

        Raises:
            LocalBrokerError: the broker answered with an error status (its text included)
                or could not be reached.
        """
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web_url + path, data=data, method=method)
        for name, value in self._admin_headers.items():
            request.add_header(name, value)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=_ADMIN_TIMEOUT) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", errors="replace")
            raise LocalBrokerError(f"{method} {path}: HTTP {exc.code} {detail}") from exc
        except OSError as exc:
            raise LocalBrokerError(f"{method} {path}: {exc}") from exc
        return json.loads(text) if text.strip() else None

    # ------------------------------------------------------------------ internals

    def _write_config(self) -> None:
        stock = (self._distribution.home / "conf" / CONFIG_FILE).read_text(encoding="utf-8")
        ours = "".join(f"{key}={value}\n" for key, value in self._config.items())
        text = f"{stock.rstrip()}\n\n# Set by pulsar_spark.local.apache\n{ours}"
        (self._data_dir / CONFIG_FILE).write_text(text, encoding="utf-8")

    def _command(self) -> list[str]:
        home = self._distribution.home
        config = str(self._data_dir / CONFIG_FILE)
        scratch = self._data_dir / "tmp"  # RocksDB unpacks its native library here
        scratch.mkdir(exist_ok=True)
        return [
            self._java,
            f"-Xms{min(256, self._heap_mb)}m",
            f"-Xmx{self._heap_mb}m",
            f"-XX:MaxDirectMemorySize={self._heap_mb}m",
            *_JVM_FLAGS,
            f"-Djava.io.tmpdir={scratch}",
            f"-Dlog4j.configurationFile={home / 'conf' / 'log4j2.yaml'}",
            f"-Dpulsar.log.dir={self._data_dir}",
            f"-Dpulsar.config.file={config}",
            "-cp",
            f"{home / 'conf'}{os.pathsep}{home / 'lib' / '*'}",
            _MAIN_CLASS,
            "--config",
            config,
            "--no-functions-worker",
            "--no-stream-storage",
            "--metadata-dir",
            str(self._data_dir / "metadata"),
            "--bookkeeper-dir",
            str(self._data_dir / "bookkeeper"),
        ]

    def _launch(self) -> None:
        for port in (self._port, self._web_port):
            ensure_port_free(self._host, port, "Apache Pulsar")
        began = time.monotonic()
        process, log_offset = self._spawn(self._command(), detach=True)
        try:
            self._wait_ready(process, log_offset)
        except BaseException:
            self._terminate()
            raise
        self.started_in = time.monotonic() - began

    def _wait_ready(self, process: subprocess.Popen[bytes], log_offset: int) -> None:
        deadline = time.monotonic() + self._startup_timeout
        cluster = self._config["clusterName"]
        while not self._ready(cluster):
            if (code := process.poll()) is not None:
                self._fail(f"Apache Pulsar exited with code {code} during startup", log_offset)
            if time.monotonic() >= deadline:
                self._fail(
                    f"Apache Pulsar was not ready on {self.web_url} "
                    f"within {self._startup_timeout:g} s",
                    log_offset,
                )
            time.sleep(_POLL_INTERVAL)

    def _ready(self, cluster: str) -> bool:
        try:
            clusters = self.admin("GET", "/admin/v2/clusters")
            namespaces = self.admin("GET", "/admin/v2/namespaces/public")
        except LocalBrokerError:
            return False
        return cluster in (clusters or []) and "public/default" in (namespaces or [])


# ---------------------------------------------------------------------- helpers


def _base_settings(cluster_name: str, host: str, port: int, web_port: int) -> dict[str, str]:
    """What every start sets: loopback, its ports, and a footprint for a small machine."""
    return {
        "clusterName": cluster_name,
        "bindAddress": host,
        "advertisedAddress": host,
        "brokerServicePort": str(port),
        "webServicePort": str(web_port),
        "defaultNumberOfNamespaceBundles": "1",
        "managedLedgerCacheSizeMB": "64",
        "dbStorage_writeCacheMaxSizeMb": "32",
        "dbStorage_readAheadCacheMaxSizeMb": "32",
        "dbStorage_rocksDB_blockCacheSize": str(16 * 1024 * 1024),
        "brokerDeleteInactiveTopicsEnabled": "false",
    }


def _find_java() -> str:
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not Path(java).exists():
        raise LocalBrokerError(
            "Apache Pulsar needs Java 17 or later: no `java` on PATH"
            + (f" nor in JAVA_HOME={home}" if home else "")
        )
    return java


def _fetch(artifact: str, into: Path) -> Path:
    """Copy one artifact from Maven Central into ``into`` and return its path."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise LocalBrokerError(f"fetching {artifact} needs Maven: no `mvn` on PATH")
    command = [
        mvn,
        "-B",
        "-q",
        "dependency:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={into}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=into)
    files = [path for path in into.iterdir() if path.is_file()]
    if done.returncode != 0 or len(files) != 1:
        output = (done.stdout + done.stderr).strip().splitlines()[-15:]
        raise LocalBrokerError(
            f"could not fetch {artifact} from Maven Central (mvn exited with "
            f"{done.returncode}):\n" + "\n".join(output)
        )
    return files[0]


def _unpack(tarball: Path, into: Path) -> None:
    with tarfile.open(tarball) as archive:
        if hasattr(tarfile, "tar_filter"):  # Python 3.12, and 3.10.12 / 3.11.4 onwards
            archive.extractall(into, filter="tar")
        else:
            archive.extractall(into)  # Apache's own release, fetched by Maven


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (made if missing) while the block runs: one process
    at a time fills a cache entry."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main(argv: Sequence[str] | None = None) -> None:
    """Run a standalone in the foreground until SIGTERM or Ctrl-C, then delete its data."""
    parser = argparse.ArgumentParser(
        prog="python -m pulsar_spark.local.apache",
        description="Run Apache Pulsar's standalone on loopback until Ctrl-C or SIGTERM.",
    )
    parser.add_argument("--port", type=int, help="binary-protocol port (default: a free one)")
    parser.add_argument("--web-port", type=int, help="admin API port (default: a free one)")
    parser.add_argument("--version", default=PULSAR_VERSION, help="the Apache Pulsar release")
    parser.add_argument("--heap-mb", type=int, default=768, help="the JVM's heap")
    args = parser.parse_args(argv)
    stopped = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopped.set())
    try:
        broker = ApacheBroker.start(
            port=args.port, web_port=args.web_port, version=args.version, heap_mb=args.heap_mb
        )
    except LocalBrokerError as exc:
        sys.exit(f"error: {exc}")
    with broker:
        fetched = broker.distribution.fetched_in
        if fetched is not None:
            print(f"fetched Apache Pulsar {broker.version} in {fetched:.0f} s", flush=True)
        print(
            f"Apache Pulsar {broker.version} ready in {broker.started_in:.1f} s: "
            f"service_url={broker.service_url} web_url={broker.web_url}",
            flush=True,
        )
        while not stopped.wait(1.0):
            if not broker.is_running:
                tail = read_tail(broker.log_path, 0)
                sys.exit(f"error: the broker exited; the end of its log:\n{tail}")


if __name__ == "__main__":
    main()
