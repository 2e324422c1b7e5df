"""Two Apache Pulsar standalones, ``c1`` and ``c2``, geo-replicating one namespace.

Registered from ``tests/conftest.py``. ``geo_clusters`` starts both the first time a test asks
for it (each as the session's Apache broker is started, by :func:`start_apache`, with its own
ports and data) and stops them when the session ends. Each cluster knows the other (admin
``/clusters``), both have the tenant :data:`TENANT` allowing the two clusters, and the
namespace :data:`NAMESPACE` is replicated to both: a topic written in it on one cluster is
copied to the other, and a subscription created with ``replicateSubscriptionState`` follows
on the other cluster through the snapshot markers the brokers write every
:data:`SNAPSHOT_MS` milliseconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pulsar
import pytest
from pyspark.sql import SparkSession

from pulsar_spark.local import ApacheBroker

from .apache_faults import admin_path
from .apache_fixtures import start_apache
from .official import official_client
from .streaming import QUERY_TIMEOUT, Message, as_messages, drafts, publish
from .waiting import wait_until

CLUSTERS: tuple[str, str] = ("c1", "c2")
"""The two clusters' names."""

TENANT = "geo"
NAMESPACE = f"{TENANT}/replicated"
"""The namespace replicated to both clusters."""

SNAPSHOT_MS = 250
"""``replicatedSubscriptionsSnapshotFrequencyMillis`` of both clusters (Apache's default: 1 s)."""

SNAPSHOT_PAUSE = 4 * SNAPSHOT_MS / 1000
"""Seconds between bursts of messages: long enough for a snapshot to land between them."""


@dataclass(frozen=True)
class GeoClusters:
    """The two running clusters; ``c1`` is where tests write."""

    c1: ApacheBroker
    c2: ApacheBroker

    def topic(self, name: str) -> str:
        """The full name of topic ``name`` in the replicated namespace."""
        return f"persistent://{NAMESPACE}/{name}"

    def stats(self, broker: ApacheBroker, topic: str) -> dict[str, object]:
        """``broker``'s statistics of ``topic`` (a full name)."""
        answer: dict[str, object] = broker.admin("GET", f"{admin_path(topic)}/stats")
        return answer

    def internal_stats(self, broker: ApacheBroker, topic: str) -> dict[str, object]:
        """``broker``'s internal statistics (ledgers, cursors) of ``topic`` (a full name)."""
        answer: dict[str, object] = broker.admin("GET", f"{admin_path(topic)}/internalStats")
        return answer


def replicate(brokers: dict[str, ApacheBroker]) -> None:
    """Make the clusters ``brokers`` (name -> broker) replicate :data:`NAMESPACE`: each learns
    where every other one is, and each gets the tenant and the replicated namespace (the
    clusters share no configuration store, so each is told all of it)."""
    names = sorted(brokers)
    for name, broker in brokers.items():
        for other, remote in brokers.items():
            if other != name:
                broker.admin(
                    "PUT",
                    f"/admin/v2/clusters/{other}",
                    {"serviceUrl": remote.web_url, "brokerServiceUrl": remote.service_url},
                )
        broker.admin("PUT", f"/admin/v2/tenants/{TENANT}", {"allowedClusters": names})
        broker.admin("PUT", f"/admin/v2/namespaces/{NAMESPACE}")
        broker.admin("POST", f"/admin/v2/namespaces/{NAMESPACE}/replication", names)


@contextmanager
def geo_pair() -> Iterator[GeoClusters]:
    """Start clusters ``c1`` and ``c2`` replicating :data:`NAMESPACE` to each other, and stop
    them on leaving (for a test that stops or kills one: the session's pair is shared)."""
    config = {"replicatedSubscriptionsSnapshotFrequencyMillis": str(SNAPSHOT_MS)}
    started: dict[str, ApacheBroker] = {}
    try:
        for name in CLUSTERS:
            started[name] = start_apache(config, cluster_name=name)
        replicate(started)
        yield GeoClusters(started["c1"], started["c2"])
    finally:
        for broker in started.values():
            broker.stop()


@pytest.fixture(scope="session")
def geo_clusters() -> Iterator[GeoClusters]:
    """Clusters ``c1`` and ``c2`` replicating :data:`NAMESPACE` to each other.

    Tests must not stop or restart them, nor change the namespace's policies.
    """
    with geo_pair() as pair:
        yield pair


def publish_in_bursts(
    broker: ApacheBroker,
    topic: str,
    bursts: int,
    size: int,
    *,
    batch_size: int = 0,
    first: int = 0,
) -> list[Message]:
    """``bursts`` bursts of ``size`` keyed messages with properties (numbered from
    ``first``), each followed by a pause of a few snapshot periods, so that markers lie
    between them."""
    client = official_client(broker.service_url)
    sent: list[Message] = []
    try:
        for burst in range(bursts):
            messages = drafts(size, f"b{burst}", first=first + burst * size)
            sent += publish(client, topic, messages, batch_size=batch_size)
            time.sleep(SNAPSHOT_PAUSE)
    finally:
        client.close()
    return sent


def with_replicated_subscription(broker: ApacheBroker, topic: str, name: str) -> None:
    """Create ``topic`` on ``broker`` with a replicated subscription ``name`` at its start:
    from then on the brokers write snapshot markers into the topic."""
    client = official_client(broker.service_url)
    try:
        client.subscribe(
            topic,
            name,
            replicate_subscription_state_enabled=True,
            initial_position=pulsar.InitialPosition.Earliest,
        ).close()
    finally:
        client.close()


def held_on(spark: SparkSession, broker: ApacheBroker, topic: str, count: int) -> list[Message]:
    """``topic`` as ``broker`` holds it (read by ``spark.read``), once it holds ``count``
    messages."""

    def read() -> list[Message]:
        df = spark.read.format("pulsar").option("service.url", broker.service_url)
        return as_messages(df.option("topic", topic).load())

    wait_until(lambda: len(read()) >= count, f"{count} messages on {broker!r}", QUERY_TIMEOUT)
    return read()
