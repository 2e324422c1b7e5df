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

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from pulsar_spark.local import ApacheBroker

from .apache_faults import admin_path
from .apache_fixtures import start_apache

CLUSTERS: tuple[str, str] = ("c1", "c2")
"""The two clusters' names."""

TENANT = "geo"
NAMESPACE = f"{TENANT}/replicated"
"""The namespace replicated to both clusters."""

SNAPSHOT_MS = 250
"""``replicatedSubscriptionsSnapshotFrequencyMillis`` of both clusters (Apache's default: 1 s)."""


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


@pytest.fixture(scope="session")
def geo_clusters() -> Iterator[GeoClusters]:
    """Clusters ``c1`` and ``c2`` replicating :data:`NAMESPACE` to each other.

    Tests must not stop or restart them, nor change the namespace's policies.
    """
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
