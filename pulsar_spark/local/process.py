"""What the local brokers share as child processes on loopback: ports, logs and stopping.

Both :class:`~pulsar_spark.local.LocalBroker` (pulsar-lite) and
:class:`~pulsar_spark.local.ApacheBroker` (Apache Pulsar's standalone) run a broker process
bound to loopback ports picked here, send its output to a log file whose tail goes into
their errors, and stop it with SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, NoReturn, TypeVar

__all__ = [
    "BrokerProcess",
    "LocalBrokerError",
    "accepts_connections",
    "choose_ports",
    "ensure_port_free",
    "join_host_port",
    "read_tail",
    "terminate",
]

_LOG_TAIL_LINES = 25
_LOG_TAIL_BYTES = 8192


class LocalBrokerError(RuntimeError):
    """A broker on this machine could not be found, started or restarted."""


_Broker = TypeVar("_Broker", bound="BrokerProcess")

# Every broker that has a live process; the atexit hook stops whatever is left.
_RUNNING: set[BrokerProcess] = set()


class BrokerProcess:
    """A broker running as a child process on loopback: what both local brokers share.

    Subclasses start the process with :meth:`_spawn` and wait for it to be ready.
    """

    LOG_FILE: ClassVar[str]
    """The file in the data directory that the process's output is appended to."""

    STOP_TIMEOUT: ClassVar[float]
    """Seconds a stop waits after SIGTERM before SIGKILL."""

    def __init__(self, *, host: str, port: int, data_dir: Path, owns_data_dir: bool) -> None:
        """Hold where the broker listens and keeps its data (``owns_data_dir``: the data
        directory was made for it, and :meth:`stop` deletes it); nothing runs yet."""
        self._host = host
        self._port = port
        self._data_dir = data_dir
        self._owns_data_dir = owns_data_dir
        self._process: subprocess.Popen[bytes] | None = None
        self._removed = False

    def stop(self, timeout: float | None = None) -> None:
        """Stop the broker: SIGTERM, then SIGKILL after ``timeout`` seconds
        (:attr:`STOP_TIMEOUT` when ``None``). Idempotent.

        Deletes the data directory when it was made for the broker.
        """
        self._terminate(timeout)
        if self._owns_data_dir and not self._removed:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._removed = True

    def kill(self) -> None:
        """End the process with SIGKILL, as a crash would, keeping the data."""
        process, self._process = self._process, None
        _RUNNING.discard(self)
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def __enter__(self: _Broker) -> _Broker:
        """Return the running broker."""
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the broker."""
        self.stop()

    @property
    def service_url(self) -> str:
        """The URL clients connect to, ``pulsar://127.0.0.1:PORT``."""
        return f"pulsar://{join_host_port(self._host, self._port)}"

    @property
    def host(self) -> str:
        """The address the broker's listeners are bound to."""
        return self._host

    @property
    def port(self) -> int:
        """The broker's binary-protocol port."""
        return self._port

    @property
    def data_dir(self) -> Path:
        """The directory holding the configuration, the log and the broker's data."""
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The file the broker's stdout and stderr are appended to."""
        return self._data_dir / self.LOG_FILE

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def is_running(self) -> bool:
        """Whether the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    def _spawn(
        self, command: Sequence[str], *, env: dict[str, str] | None = None, detach: bool = False
    ) -> tuple[subprocess.Popen[bytes], int]:
        """Start ``command`` in the data directory, its output appended to the log.

        Returns the process and the log's size before it started (where its lines begin).
        ``detach`` starts it in a session of its own, so that a Ctrl-C reaches only its
        owner, which then stops it.
        """
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._data_dir,
                env=env,
                start_new_session=detach,
            )
        _RUNNING.add(self)
        return self._process, log_offset

    def _fail(self, reason: str, log_offset: int) -> NoReturn:
        tail = read_tail(self.log_path, log_offset)
        raise LocalBrokerError(f"{reason}; log {self.log_path}:\n{tail or '(empty)'}")

    def _check_restartable(self) -> None:
        if self._removed:
            raise LocalBrokerError("this broker was stopped and its data removed")

    def _terminate(self, timeout: float | None = None) -> None:
        process, self._process = self._process, None
        _RUNNING.discard(self)
        terminate(process, self.STOP_TIMEOUT if timeout is None else timeout)


def choose_ports(host: str, *wanted: int | None) -> tuple[int, ...]:
    """Return ``wanted`` with each ``None`` replaced by a free port of ``host``.

    The probe sockets stay open together, so the ports chosen differ from each other.

    Raises:
        ValueError: two of the ports are the same.
    """
    with contextlib.ExitStack() as stack:
        chosen: list[int] = []
        for port in wanted:
            if port is not None:
                chosen.append(port)
                continue
            probe = stack.enter_context(socket.socket(_family(host), socket.SOCK_STREAM))
            probe.bind((host, 0))
            chosen.append(int(probe.getsockname()[1]))
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"the broker's ports must differ, got {chosen}")
    return tuple(chosen)


def ensure_port_free(host: str, port: int, what: str) -> None:
    """Fail early if something else holds the port (a listener there would fool the probe).

    Raises:
        LocalBrokerError: the port is in use; the message starts with ``cannot start {what}``.
    """
    with socket.socket(_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise LocalBrokerError(f"cannot start {what}: {host}:{port} is in use") from exc


def accepts_connections(host: str, port: int) -> bool:
    """Whether a TCP connection to ``host:port`` succeeds within half a second."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def read_tail(path: os.PathLike[str] | str, offset: int) -> str:
    """The last lines of a log file written after ``offset``, or ``""`` when unreadable."""
    try:
        with open(path, "rb") as log:
            size = log.seek(0, os.SEEK_END)
            log.seek(max(offset, size - _LOG_TAIL_BYTES))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-_LOG_TAIL_LINES:])


def terminate(process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """Stop a child process: SIGTERM, then SIGKILL after ``timeout`` seconds."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def join_host_port(host: str, port: int) -> str:
    """``host:port``, with an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


@atexit.register
def _stop_all() -> None:
    for broker in list(_RUNNING):
        broker.stop()
