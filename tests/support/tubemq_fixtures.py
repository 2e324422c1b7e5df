"""Session fixtures for the TubeMQ tests: one real cluster, one topic, the Java client.

Registered from ``tests/conftest.py``; nothing starts unless a test asks for one of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .tubemq_cluster import JavaProbe, TubeMQCluster

TUBEMQ_TOPIC = "pyspark_wire"
TUBEMQ_PARTITIONS = 3


@pytest.fixture(scope="session")
def tubemq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TubeMQCluster]:
    """ZooKeeper, master and broker on free loopback ports, stopped and deleted at the end."""
    cluster = TubeMQCluster.start(tmp_path_factory.mktemp("tubemq") / "run")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def tubemq_topic(tubemq_cluster: TubeMQCluster) -> str:
    """A topic of ``TUBEMQ_PARTITIONS`` partitions, loaded by the broker (takes 70-110 s)."""
    tubemq_cluster.create_topic(TUBEMQ_TOPIC, TUBEMQ_PARTITIONS)
    return TUBEMQ_TOPIC


@pytest.fixture(scope="session")
def java_probe(tmp_path_factory: pytest.TempPathFactory) -> JavaProbe:
    """TubeMQProbe, compiled once."""
    return JavaProbe(tmp_path_factory.mktemp("tubemq-probe"))
