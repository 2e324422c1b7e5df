"""LocalBroker against the real pulsar-lite binary, checked with the official Pulsar client."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from pulsar_spark.local import LocalBroker, LocalBrokerError
from pulsar_spark.topic import full_topic_name

pytestmark = [pytest.mark.integration, pytest.mark.pulsar_lite]

RECEIVE_TIMEOUT_MS = 5000


@pytest.fixture
def make_client() -> Iterator[Callable[[LocalBroker], pulsar.Client]]:
    """Open official clients against a broker; all are closed at teardown."""
    clients: list[pulsar.Client] = []

    def make(broker: LocalBroker) -> pulsar.Client:
        logger = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=logger)
        clients.append(client)
        return client

    yield make
    for client in clients:
        # A client whose broker has stopped may find nothing to close its consumers on.
        with contextlib.suppress(pulsar.AlreadyClosed, pulsar.NotConnected):
            client.close()


def partition_names(topic: str, partitions: int) -> list[str]:
    return [f"{full_topic_name(topic)}-partition-{i}" for i in range(partitions)]


def publish(client: pulsar.Client, topic: str, values: list[bytes]) -> None:
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for value in values:
        producer.send(value)
    producer.close()


def read_all(client: pulsar.Client, topic: str, count: int) -> dict[bytes, str]:
    """Read ``count`` messages from the start of ``topic``: value -> topic it came from."""
    consumer = client.subscribe(
        topic,
        f"check-{time.monotonic_ns()}",
        initial_position=pulsar.InitialPosition.Earliest,
    )
    seen: dict[bytes, str] = {}
    while len(seen) < count:
        message = consumer.receive(RECEIVE_TIMEOUT_MS)
        seen[message.data()] = message.topic_name()
    consumer.close()
    return seen


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_session_broker_has_seeded_topics(broker: LocalBroker, make_client) -> None:
    client = make_client(broker)
    for topic, partitions in {"part2": 2, "part3": 3, "part4": 4}.items():
        assert client.get_topic_partitions(topic) == partition_names(topic, partitions)
    assert broker.partitioned_topics()["persistent://public/default/part3"] == 3


def test_publish_and_read_back_on_partitioned_topic(
    broker: LocalBroker, make_client, pooled_partitioned_topic
) -> None:
    topic = pooled_partitioned_topic(3)
    client = make_client(broker)
    assert client.get_topic_partitions(topic) == partition_names(topic, 3)

    values = [f"v{i}".encode() for i in range(9)]
    publish(client, topic, values)
    seen = read_all(client, topic, len(values))

    assert sorted(seen) == sorted(values)
    assert set(seen.values()) == set(partition_names(topic, 3))


def test_non_partitioned_topic_round_trip(broker: LocalBroker, make_client, topic_name) -> None:
    client = make_client(broker)
    assert client.get_topic_partitions(topic_name) == [full_topic_name(topic_name)]
    publish(client, topic_name, [b"a", b"b"])
    assert read_all(client, topic_name, 2) == {
        b"a": full_topic_name(topic_name),
        b"b": full_topic_name(topic_name),
    }


def test_metrics_endpoint_on_loopback(broker: LocalBroker) -> None:
    assert broker.service_url == f"pulsar://127.0.0.1:{broker.port}"
    assert broker.metrics_url == f"http://127.0.0.1:{broker.metrics_port}/metrics"
    assert broker.metrics_port != broker.port
    assert f'addr = "127.0.0.1:{broker.metrics_port}"' in broker.config_path.read_text()

    with urllib.request.urlopen(broker.metrics_url, timeout=5) as response:
        assert response.status == 200
        body = response.read().decode()
    assert "pulsar_" in body


def test_restart_keeps_data_and_grows_partitions(make_client, tmp_path: Path) -> None:
    with LocalBroker.start(tmp_path, partitioned_topics={"grow": 2}) as broker:
        port, metrics_port = broker.port, broker.metrics_port
        client = make_client(broker)
        publish(client, "grow", [b"g0", b"g1", b"g2", b"g3"])
        publish(client, "plain", [b"p0", b"p1"])
        durable = client.subscribe(
            "plain", "durable", initial_position=pulsar.InitialPosition.Earliest
        )
        durable.acknowledge(durable.receive(RECEIVE_TIMEOUT_MS))  # p0
        durable.close()
        client.close()

        broker.restart(partitioned_topics={"grow": 3})

        assert (broker.port, broker.metrics_port) == (port, metrics_port)
        document = json.loads(broker.metadata_path.read_text())
        assert document["partitioned_topics"]["persistent://public/default/grow"] == {
            "partitions": 3
        }
        assert "durable" in json.dumps(document)  # the broker's own records survived the merge

        client = make_client(broker)
        assert client.get_topic_partitions("grow") == partition_names("grow", 3)
        old = read_all(client, "grow", 4)
        assert set(old.values()) == set(partition_names("grow", 2))

        new_partition = partition_names("grow", 3)[2]
        publish(client, new_partition, [b"g-new"])
        assert read_all(client, new_partition, 1) == {b"g-new": new_partition}

        # The durable cursor came back too: only the unacknowledged message is redelivered.
        durable = client.subscribe("plain", "durable")
        assert durable.receive(RECEIVE_TIMEOUT_MS).data() == b"p1"
        client.close()  # while its broker still runs


def test_restart_refuses_to_shrink_and_keeps_running(tmp_path: Path) -> None:
    with LocalBroker.start(tmp_path, partitioned_topics={"fixed": 3}) as broker:
        with pytest.raises(ValueError, match="can only grow"):
            broker.restart(partitioned_topics={"fixed": 2})
        assert broker.is_running
        assert broker.partitioned_topics() == {"persistent://public/default/fixed": 3}


def test_stop_is_idempotent_and_frees_ports() -> None:
    broker = LocalBroker.start()
    data_dir, pid = broker.data_dir, broker.pid
    assert pid is not None
    assert broker.is_running
    assert not port_is_free(broker.port)

    broker.stop()
    broker.stop()

    assert not broker.is_running
    assert broker.pid is None
    assert not data_dir.exists()  # a temporary data dir goes away with the broker
    assert port_is_free(broker.port)
    assert port_is_free(broker.metrics_port)
    with pytest.raises(LocalBrokerError, match="stopped"):
        broker.restart()


def test_stop_keeps_a_given_data_dir(tmp_path: Path) -> None:
    with LocalBroker.start(tmp_path / "data") as broker:
        assert broker.log_path.parent == tmp_path / "data"
    assert (tmp_path / "data" / "pulsar-lite.toml").exists()
    assert broker.log_path.exists()


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(LocalBrokerError, match=f"127.0.0.1:{port} is in use"):
            LocalBroker.start(tmp_path, port=port)


def test_early_exit_reports_the_broker_log(tmp_path: Path) -> None:
    (tmp_path / "db.rocksdb").write_text("not a directory")  # RocksDB cannot open its store
    with pytest.raises(LocalBrokerError, match="exited with code") as caught:
        LocalBroker.start(tmp_path)
    assert "RocksDB" in str(caught.value)
    assert str(tmp_path / "pulsar-lite.log") in str(caught.value)


def test_missing_pulsar_lite_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pulsar_lite.binary_finder", None)
    with pytest.raises(ImportError, match=r'pip install "pulsar-spark\[local\]"$') as raised:
        LocalBroker.start(tmp_path)
    assert raised.value.name == "pulsar_lite"
    assert not list(tmp_path.iterdir())  # nothing was written before the check


def test_invalid_arguments_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="log_level"):
        LocalBroker.start(tmp_path, log_level="verbose")
    with pytest.raises(ValueError, match=">= 1"):
        LocalBroker.start(tmp_path, partitioned_topics={"zero": 0})
    with pytest.raises(ValueError, match="not a valid name"):
        LocalBroker.start(tmp_path, partitioned_topics={"a/b": 2})


def test_interpreter_exit_stops_forgotten_brokers(tmp_path: Path) -> None:
    script = (
        "from pulsar_spark.local import LocalBroker\n"
        f"broker = LocalBroker.start({str(tmp_path)!r})\n"
        "print(broker.pid, flush=True)\n"
    )
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    pid = int(result.stdout.strip())
    assert not Path(f"/proc/{pid}").exists()
