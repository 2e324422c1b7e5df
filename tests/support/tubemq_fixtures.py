"""Session fixtures for the TubeMQ tests: one real cluster, one topic, the Java client, and
a second, secure cluster (TLS and authentication) for the tests of security.

Registered from ``tests/conftest.py``; nothing starts unless a test asks for one of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .certs import TestCerts, write_key_store, write_trust_store
from .tubemq_cluster import JavaProbe, Security, TubeMQCluster

TUBEMQ_TOPIC = "pyspark_wire"
# The Spark tests' topics: read (written by the Java client), write (read by the Java client)
# and stream.
SPARK_READ_TOPIC = "pyspark_read"
SPARK_WRITE_TOPIC = "pyspark_write"
SPARK_STREAM_TOPIC = "pyspark_stream"
# Written to one partition only, so that the reads there know each message's offset.
SPARK_OFFSETS_TOPIC = "pyspark_offsets"
# The example of docs/tubemq.md (once in the README) copies one topic to another.
README_IN_TOPIC = "pyspark_readme_in"
README_OUT_TOPIC = "pyspark_readme_out"
# Streams read while a writer publishes: exactly once across restarts, across a broker
# restart, and in micro-batches of a limited size.
STREAM_ONCE_TOPIC = "pyspark_once"
STREAM_RESTART_TOPIC = "pyspark_restart"
STREAM_LIMIT_TOPIC = "pyspark_limit"
# Reads paused for longer than the broker's consumer timeout.
HEARTBEAT_TOPIC = "pyspark_heartbeat"
# Messages of several types, read with filterConds.
FILTER_TOPIC = "pyspark_filter"
# Written by a job whose task fails once and by a stream whose micro-batch is run again.
RETRIED_TOPIC = "pyspark_retried"
RETRIED_STREAM_TOPIC = "pyspark_retried_stream"
TUBEMQ_TOPICS = (
    TUBEMQ_TOPIC,
    SPARK_READ_TOPIC,
    SPARK_WRITE_TOPIC,
    SPARK_STREAM_TOPIC,
    SPARK_OFFSETS_TOPIC,
    README_IN_TOPIC,
    README_OUT_TOPIC,
    STREAM_ONCE_TOPIC,
    STREAM_RESTART_TOPIC,
    STREAM_LIMIT_TOPIC,
    HEARTBEAT_TOPIC,
    FILTER_TOPIC,
    RETRIED_TOPIC,
    RETRIED_STREAM_TOPIC,
)
TUBEMQ_PARTITIONS = 3
# Of two partitions, read with minPartitions.
SPLIT_TOPIC = "pyspark_split"
SPLIT_PARTITIONS = 2


@pytest.fixture(scope="session")
def tubemq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TubeMQCluster]:
    """ZooKeeper, master and broker on free loopback ports, stopped and deleted at the end."""
    cluster = TubeMQCluster.start(tmp_path_factory.mktemp("tubemq") / "run")
    try:
        yield cluster
    finally:
        cluster.stop()


# The secure cluster's topics: Spark writes and reads one; the other is for the client-level
# tests of refused credentials.
SECURE_SPARK_TOPIC = "pyspark_secure"
SECURE_CLIENT_TOPIC = "pyspark_secure_client"
# The password of the secure cluster's key and trust stores.
STORE_PASSWORD = "tubemq-store-pass"


@pytest.fixture(scope="session")
def tubemq_secure_cluster(
    tmp_path_factory: pytest.TempPathFactory, test_certs: TestCerts
) -> Iterator[TubeMQCluster]:
    """A cluster of its own whose master and broker require TLS (with a client certificate
    signed by ``test_certs.ca``) on their TLS ports and authentication of every producer and
    consumer, with :data:`SECURE_SPARK_TOPIC` and :data:`SECURE_CLIENT_TOPIC` loaded."""
    folder = tmp_path_factory.mktemp("tubemq-secure")
    security = Security(
        key_store=write_key_store(
            test_certs.server_cert, test_certs.server_key, folder / "server.p12", STORE_PASSWORD
        ),
        trust_store=write_trust_store(test_certs.ca, folder / "trust.jks", STORE_PASSWORD),
        store_password=STORE_PASSWORD,
    )
    cluster = TubeMQCluster.start(folder / "run", security)
    try:
        cluster.create_topics((SECURE_SPARK_TOPIC, SECURE_CLIENT_TOPIC), TUBEMQ_PARTITIONS)
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def tubemq_topics(tubemq_cluster: TubeMQCluster) -> tuple[str, ...]:
    """Every topic of :data:`TUBEMQ_TOPICS`, of ``TUBEMQ_PARTITIONS`` partitions each, and
    :data:`SPLIT_TOPIC`, loaded by the broker. A new topic takes 70-110 s to get there, so all
    are created in one go."""
    tubemq_cluster.create_topics(
        TUBEMQ_TOPICS, TUBEMQ_PARTITIONS, others={SPLIT_TOPIC: SPLIT_PARTITIONS}
    )
    return (*TUBEMQ_TOPICS, SPLIT_TOPIC)


@pytest.fixture(scope="session")
def tubemq_topic(tubemq_topics: tuple[str, ...]) -> str:
    """The wire tests' topic."""
    return TUBEMQ_TOPIC


@pytest.fixture(scope="session")
def java_probe(tmp_path_factory: pytest.TempPathFactory) -> JavaProbe:
    """TubeMQProbe, compiled once."""
    return JavaProbe(tmp_path_factory.mktemp("tubemq-probe"))
