"""ApacheBroker: Apache Pulsar's standalone fetched from Maven Central and run on loopback."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pulsar
import pytest
from support.official import official_client

from pulsar_spark.local import ApacheBroker, LocalBrokerError
from pulsar_spark.local.apache import PULSAR_VERSION
from pulsar_spark.local.process import ensure_port_free

pytestmark = [pytest.mark.integration, pytest.mark.apache]

ROOT = Path(__file__).resolve().parents[2]
READY_LINE = re.compile(
    r"Apache Pulsar (\S+) ready in [\d.]+ s: "
    r"service_url=pulsar://127\.0\.0\.1:(\d+) web_url=http://127\.0\.0\.1:(\d+)$"
)


def round_trip(service_url: str, topic: str, values: list[bytes]) -> list[bytes]:
    """Publish ``values`` and read them back from the start with the official client."""
    client = official_client(service_url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for value in values:
            producer.send(value)
        return read_back(client, topic, len(values))
    finally:
        client.close()


def read_back(
    client: pulsar.Client, topic: str, count: int, first_within_ms: int = 10_000
) -> list[bytes]:
    """``count`` messages from the start of ``topic``: the first within ``first_within_ms``
    (creating the reader included: it times out while the broker is still loading the topic,
    and is created again), each next one within 10 s."""
    deadline = time.monotonic() + first_within_ms / 1000
    while True:
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            break
        except pulsar.Timeout:
            if time.monotonic() >= deadline:
                raise
    try:
        left_ms = max(1, int((deadline - time.monotonic()) * 1000))
        first = reader.read_next(left_ms).data()
        return [first] + [reader.read_next(10_000).data() for _ in range(count - 1)]
    finally:
        reader.close()


def test_make_apache_prints_the_urls_serves_and_stops_clean_on_sigterm(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pulsar_spark.local.apache"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)},
    )
    try:
        assert process.stdout is not None
        lines = []
        while not (match := READY_LINE.search(lines[-1] if lines else "")):
            line = process.stdout.readline()
            assert line, f"the broker exited before it was ready: {lines}"
            lines.append(line.rstrip("\n"))
        version, port, web_port = match.group(1), int(match.group(2)), int(match.group(3))
        assert version == PULSAR_VERSION
        assert [path.name[:14] for path in tmp_path.iterdir()] == ["apache-pulsar-"]

        url = f"pulsar://127.0.0.1:{port}"
        assert round_trip(url, "make-apache", [b"one", b"two"]) == [b"one", b"two"]

        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        process.kill()
    ensure_port_free("127.0.0.1", port, "a second broker")  # raises if the port is taken
    ensure_port_free("127.0.0.1", web_port, "a second broker")
    assert list(tmp_path.iterdir()) == []  # the data directory is gone


def test_a_killed_broker_restarts_on_its_ports_and_data() -> None:
    with ApacheBroker.start() as broker:
        port, web_port, pid = broker.port, broker.web_port, broker.pid
        values = [f"m{i}".encode() for i in range(20)]
        assert round_trip(broker.service_url, "survives", values) == values

        broker.restart(kill=True)

        assert (broker.port, broker.web_port) == (port, web_port)
        assert broker.pid not in (None, pid)
        assert broker.admin("GET", "/admin/v2/clusters") == ["standalone"]
        client = official_client(broker.service_url)
        try:
            # after a kill the broker first recovers the topic's ledger, which took over 10 s
            # on a loaded machine, and longer than the client's operation timeout in CI
            assert read_back(client, "survives", len(values), first_within_ms=180_000) == values
        finally:
            client.close()
        data_dir = broker.data_dir
    assert not broker.is_running
    assert not data_dir.exists()
    with pytest.raises(LocalBrokerError, match="stopped"):
        broker.restart()


def test_a_port_in_use_is_a_clear_error_within_seconds() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        began = time.monotonic()
        with pytest.raises(LocalBrokerError, match=f"Apache Pulsar: 127.0.0.1:{port} is in use"):
            ApacheBroker.start(port=port)
    assert time.monotonic() - began < 5


def test_the_command_refuses_a_port_in_use_within_seconds() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        began = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pulsar_spark.local.apache", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=False,
        )
    assert time.monotonic() - began < 10
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == f"error: cannot start Apache Pulsar: 127.0.0.1:{port} is in use\n"


def test_missing_java_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(LocalBrokerError) as raised:
        ApacheBroker.start()
    assert str(raised.value) == (
        "Apache Pulsar needs Java 17 or later: no `java` on PATH"
        f" nor in JAVA_HOME={tmp_path}/no-jdk"
    )


def test_a_release_maven_cannot_fetch_names_the_artifact(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PULSAR_SPARK_CACHE", str(tmp_path))
    with pytest.raises(LocalBrokerError) as raised:
        ApacheBroker.start(version="0.0.0-none")
    message = str(raised.value)
    assert message.startswith(
        "could not fetch org.apache.pulsar:pulsar-server-distribution:0.0.0-none:tar.gz:bin "
        "from Maven Central (mvn exited with 1):\n"
    )
    assert [path.name for path in tmp_path.iterdir()] == ["apache-pulsar-0.0.0-none.lock"]


def test_missing_maven_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = shutil.which("java")
    assert java is not None
    monkeypatch.setenv("JAVA_HOME", str(Path(os.path.realpath(java)).parents[1]))
    monkeypatch.setenv("PATH", str(tmp_path))  # java is found through JAVA_HOME
    monkeypatch.setenv("PULSAR_SPARK_CACHE", str(tmp_path))
    with pytest.raises(LocalBrokerError) as raised:
        ApacheBroker.start()
    assert str(raised.value) == (
        f"fetching org.apache.pulsar:pulsar-server-distribution:{PULSAR_VERSION}:tar.gz:bin "
        "needs Maven: no `mvn` on PATH"
    )
