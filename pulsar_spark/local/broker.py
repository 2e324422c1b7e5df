"""Start an embedded pulsar-lite broker on loopback for local runs, tests and the demo.

pulsar-lite is a single-binary broker that speaks Pulsar's binary protocol; it comes with
the ``local`` extra (``pip install "pulsar-spark[local]"``). :class:`LocalBroker` runs it as
a child process with everything pinned to safe, local values::

    with LocalBroker.start(partitioned_topics={"events": 4}) as broker:
        client = pulsar.Client(broker.service_url)
        ...

What :meth:`LocalBroker.start` does:

- picks free loopback ports for the broker and for its Prometheus ``/metrics`` listener
  (pulsar-lite would otherwise bind metrics to ``0.0.0.0:8080``);
- writes ``pulsar-lite.toml`` into the data directory, with ``default_partitions = 0`` so
  only topics named in ``partitioned_topics`` are partitioned;
- seeds ``<db_path>.metadata.json`` with those partition counts. pulsar-lite has no admin
  API: this file is the only way to create a partitioned topic, and the broker reads it
  only at startup, so adding or growing one later goes through :meth:`LocalBroker.restart`;
- sends the broker's stdout and stderr to ``pulsar-lite.log`` in the data directory and
  waits until the broker port accepts connections.

``data_dir=None`` uses a fresh temporary directory that :meth:`LocalBroker.stop` deletes.
Brokers still running when the interpreter exits are stopped by an ``atexit`` hook
(see :mod:`pulsar_spark.local.process`).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, final

from pulsar_spark.local.process import (
    BrokerProcess,
    LocalBrokerError,
    accepts_connections,
    choose_ports,
    ensure_port_free,
    join_host_port,
)
from pulsar_spark.topic import full_topic_name

__all__ = ["LocalBroker", "LocalBrokerError"]

CONFIG_FILE = "pulsar-lite.toml"
DB_NAME = "db"
LOG_LEVELS = frozenset({"error", "warn", "info", "debug", "trace"})

_METADATA_VERSION = 2
_POLL_INTERVAL = 0.05


def find_binary() -> str:
    """Return the path of the pulsar-lite executable shipped with the ``pulsar-lite`` wheel."""
    try:
        from pulsar_lite.binary_finder import (  # type: ignore[import-untyped,unused-ignore]
            find_pulsar_lite_binary,
        )
    except ImportError as exc:
        raise ImportError(
            "the embedded broker needs pulsar-lite, which is not installed; install it with "
            'the "local" extra: pip install "pulsar-spark[local]"',
            name="pulsar_lite",
        ) from exc
    try:
        return str(find_pulsar_lite_binary())
    except FileNotFoundError as exc:
        raise LocalBrokerError(
            "the pulsar-lite executable was not found; reinstall it with "
            "`pip install --force-reinstall pulsar-lite`"
        ) from exc


@final
class LocalBroker(BrokerProcess):
    """A pulsar-lite broker process bound to loopback ports, with its own data directory.

    Create one with :meth:`start`. The broker keeps its ports and data across
    :meth:`restart`; :meth:`stop` ends the process (and deletes the data directory when
    :meth:`start` created it).
    """

    LOG_FILE = "pulsar-lite.log"
    STOP_TIMEOUT = 10.0

    def __init__(
        self,
        *,
        binary: str,
        data_dir: Path,
        owns_data_dir: bool,
        host: str,
        port: int,
        metrics_port: int,
        log_level: str,
        startup_timeout: float,
    ) -> None:
        """Hold the settings; use :meth:`start`, which also launches the process."""
        super().__init__(host=host, port=port, data_dir=data_dir, owns_data_dir=owns_data_dir)
        self._binary = binary
        self._metrics_port = metrics_port
        self._log_level = log_level
        self._startup_timeout = startup_timeout

    # ------------------------------------------------------------------ lifecycle

    @classmethod
    def start(
        cls,
        data_dir: str | Path | None = None,
        *,
        partitioned_topics: Mapping[str, int] | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        metrics_port: int | None = None,
        log_level: str = "warn",
        startup_timeout: float = 15.0,
    ) -> LocalBroker:
        """Start a broker and return once its port accepts connections.

        Args:
            data_dir: Where the config, log and data live. ``None`` creates a temporary
                directory that :meth:`stop` removes; an existing directory is reused as is,
                so a broker can be started again on the data of an earlier one.
            partitioned_topics: Topic name (short or full) to partition count, for topics
                that must exist as partitioned topics. Counts can only grow.
            host: Address both listeners bind to; keep it a loopback address.
            port: Broker port; a free one is chosen when ``None``.
            metrics_port: Port of the ``/metrics`` HTTP listener; free one when ``None``.
            log_level: pulsar-lite log level (``error``, ``warn``, ``info``, ``debug``,
                ``trace``). ``info`` logs every acknowledgement.
            startup_timeout: Seconds to wait for the broker port to accept connections.

        Raises:
            ImportError: pulsar-lite is not installed (the ``local`` extra).
            LocalBrokerError: the pulsar-lite executable is missing, a port is taken, or the
                broker exited or did not become ready in time (the message ends with the
                broker log).
            ValueError: a topic name, partition count or log level is invalid.
        """
        if log_level not in LOG_LEVELS:
            raise ValueError(f"log_level must be one of {sorted(LOG_LEVELS)}, got {log_level!r}")
        binary = find_binary()
        if data_dir is None:
            directory = Path(tempfile.mkdtemp(prefix="pulsar-lite-")).resolve()
        else:
            directory = Path(data_dir).resolve()
        directory.mkdir(parents=True, exist_ok=True)
        broker_port, metrics = choose_ports(host, port, metrics_port)
        broker = cls(
            binary=binary,
            data_dir=directory,
            owns_data_dir=data_dir is None,
            host=host,
            port=broker_port,
            metrics_port=metrics,
            log_level=log_level,
            startup_timeout=startup_timeout,
        )
        try:
            broker._write_config()
            broker._merge_partitions(partitioned_topics or {})
            broker._launch()
        except BaseException:
            broker.stop()
            raise
        return broker

    def restart(self, *, partitioned_topics: Mapping[str, int] | None = None) -> None:
        """Stop the broker and start it again on the same ports and data.

        Args:
            partitioned_topics: Partition counts to create or grow before starting again;
                they are merged into the metadata file, which keeps everything else the
                broker stored there (subscriptions, other partitioned topics).

        Raises:
            LocalBrokerError: the broker was stopped and its temporary data is gone, or it
                did not come back up.
            ValueError: a count is smaller than the topic's current count.
        """
        self._check_restartable()
        topics = partitioned_topics or {}
        self._merged_metadata(topics)  # validate before the broker goes down
        self._terminate()
        self._merge_partitions(topics)
        self._launch()

    def __repr__(self) -> str:
        """Show where the broker listens and whether it runs."""
        state = "running" if self.is_running else "stopped"
        return f"<LocalBroker {self.service_url} {state} data_dir={str(self._data_dir)!r}>"

    # ----------------------------------------------------------------- properties

    @property
    def metrics_port(self) -> int:
        """The port of the Prometheus metrics listener."""
        return self._metrics_port

    @property
    def metrics_url(self) -> str:
        """The Prometheus endpoint, ``http://127.0.0.1:PORT/metrics``."""
        return f"http://{join_host_port(self._host, self._metrics_port)}/metrics"

    @property
    def config_path(self) -> Path:
        """The ``pulsar-lite.toml`` the broker is started with."""
        return self._data_dir / CONFIG_FILE

    @property
    def metadata_path(self) -> Path:
        """The broker's metadata file (partitioned topics, subscriptions)."""
        return self._data_dir / f"{DB_NAME}.metadata.json"

    def partitioned_topics(self) -> dict[str, int]:
        """Full topic name to partition count, as recorded in the metadata file."""
        topics = _read_json(self.metadata_path).get("partitioned_topics", {})
        return {name: int(entry["partitions"]) for name, entry in topics.items()}

    # ------------------------------------------------------------------ internals

    def _write_config(self) -> None:
        metrics_addr = join_host_port(self._host, self._metrics_port)
        lines = [
            f"addr = {_toml_str(join_host_port(self._host, self._port))}",
            f"db_path = {_toml_str(str(self._data_dir / DB_NAME))}",
            "default_partitions = 0",
            f"log_level = {_toml_str(self._log_level)}",
            "",
            "[metrics]",
            "enabled = true",
            f"addr = {_toml_str(metrics_addr)}",
        ]
        self.config_path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _merge_partitions(self, partitioned_topics: Mapping[str, int]) -> None:
        """Write the partition counts into the metadata file; the broker must be stopped."""
        if partitioned_topics or not self.metadata_path.exists():
            _write_json(self.metadata_path, self._merged_metadata(partitioned_topics))

    def _merged_metadata(self, partitioned_topics: Mapping[str, int]) -> dict[str, Any]:
        """The metadata document with the counts merged in; every other key is kept as is."""
        document = _read_json(self.metadata_path)
        document.setdefault("version", _METADATA_VERSION)
        topics: dict[str, Any] = document.setdefault("partitioned_topics", {})
        for name, count in partitioned_topics.items():
            _set_partitions(topics, full_topic_name(name), count)
        return document

    def _launch(self) -> None:
        for port in (self._port, self._metrics_port):
            ensure_port_free(self._host, port, "pulsar-lite")
        env = dict(os.environ)
        env.setdefault("RUST_LIB_BACKTRACE", "0")  # keep error lines at the log's tail
        process, log_offset = self._spawn(
            [self._binary, "--config", str(self.config_path)], env=env
        )
        try:
            self._wait_ready(process, log_offset)
        except BaseException:
            self._terminate()
            raise

    def _wait_ready(self, process: subprocess.Popen[bytes], log_offset: int) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while True:
            code = process.poll()
            if code is not None:
                self._fail(f"pulsar-lite exited with code {code} during startup", log_offset)
            if accepts_connections(self._host, self._port) and process.poll() is None:
                return
            if time.monotonic() >= deadline:
                self._fail(
                    f"pulsar-lite did not accept connections on {self.service_url} "
                    f"within {self._startup_timeout:g} s",
                    log_offset,
                )
            time.sleep(_POLL_INTERVAL)


# ---------------------------------------------------------------------- helpers


def _set_partitions(topics: dict[str, Any], topic: str, count: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"partition count for {topic} must be an int >= 1, got {count!r}")
    entry = topics.get(topic)
    current = int(entry.get("partitions", 0)) if isinstance(entry, dict) else 0
    if count < current:
        raise ValueError(f"{topic} has {current} partitions; partition counts can only grow")
    topics[topic] = {**(entry if isinstance(entry, dict) else {}), "partitions": count}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LocalBrokerError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise LocalBrokerError(f"{path} does not hold a JSON object")
    return document


def _write_json(path: Path, document: Mapping[str, Any]) -> None:
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(scratch, path)


def _toml_str(value: str) -> str:
    """A TOML basic string; JSON's escapes are a subset of TOML's."""
    return json.dumps(value, ensure_ascii=False)
