"""Clusters in order of preference, and when to leave the active one.

How this works
--------------
A geo-replicated topic lives on several clusters. :class:`Clusters` lists them, the primary
first, each with its client settings (the secondaries connect as the primary does: same
authentication and TLS, another service URL). A cluster is named by its service URL without
user info (:func:`~pulsar_spark.common.address.cluster_name`).

:class:`ClusterWatch` decides when to switch, as Apache Pulsar's Java ``AutoClusterFailover``
does: a cluster is reachable when a TCP connection to one of its service URL's hosts opens;
one found unreachable is probed again every ``check_interval`` seconds, and once it has been
unreachable for ``failover_delay`` seconds without a break the next cluster of the list takes
over. The last cluster of the list is never left. With ``switch_back_delay``, a stream reading
another cluster returns to the primary once the primary has answered every probe for that
long (probed once per call, without waiting: :meth:`ClusterWatch.back_to_primary`).

Writers share an :class:`ActiveCluster` per process: the producers of every task move to the
next cluster together, and a task started after the switch writes there from its start.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.common.address import cluster_name, parse_service_url
from pulsar_spark.common.retry import retrying
from pulsar_spark.errors import ConfigurationError, RetriesExhaustedError

log = logging.getLogger(__name__)

T = TypeVar("T")

FAILOVER_DELAY_OPTION = "failover.failoverDelayMs"
"""The option setting :attr:`Clusters.failover_delay`, named when retries stop at it."""


@dataclass(frozen=True, slots=True)
class Clusters:
    """The clusters a stream may read, the primary first, and when to switch between them."""

    settings: tuple[ClientSettings, ...]
    failover_delay: float  # seconds unreachable before the next cluster takes over
    check_interval: float  # seconds between probes of an unreachable cluster
    switch_back_delay: float | None = None  # seconds the primary answers before it is read again

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(cluster_name(s.service_url) for s in self.settings)

    @property
    def primary(self) -> str:
        return self.names[0]

    def settings_of(self, name: str) -> ClientSettings:
        """The client settings of the cluster ``name`` (a recorded offset's cluster)."""
        names = self.names
        if name not in names:
            raise ConfigurationError(
                f"the checkpointed offsets belong to cluster {name}, which is neither the "
                f"service.url nor one of the secondary service URLs ({', '.join(names)})"
            )
        return self.settings[names.index(name)]

    def retry_limit(self, operation_timeout: float) -> float:
        """How long an operation on a cluster is retried before the watch is asked whether to
        leave it: the operation timeout, but no longer than the failover delay."""
        return min(operation_timeout, self.failover_delay)

    def probe_timeout(self, settings: ClientSettings) -> float:
        """How long a probe of a cluster waits for its connection."""
        return min(self.check_interval, settings.connection_timeout)

    def after(self, name: str) -> str | None:
        """The cluster that takes over from ``name``, None for the last one."""
        names = self.names
        index = names.index(name) + 1
        return names[index] if index < len(names) else None


def reachable(settings: ClientSettings, timeout: float) -> bool:
    """Whether a TCP connection opens to one of the hosts of the cluster's service URL."""
    for address in parse_service_url(settings.service_url):
        try:
            with socket.create_connection((address.host, address.port), timeout=timeout):
                return True
        except OSError:
            continue
    return False


Probe = Callable[[ClientSettings, float], bool]


class ClusterWatch:
    """Which cluster to read: the active one while it is reachable, the next once it has
    been unreachable for the failover delay (see the module docstring)."""

    def __init__(
        self,
        clusters: Clusters,
        *,
        probe: Probe = reachable,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.clusters = clusters
        self._probe = probe
        self._clock = clock
        self._sleep = sleep
        self._primary_up_since: float | None = None

    def choose(self, active: str) -> str:
        """``active`` when it answers, else the cluster that takes over once ``active`` has
        been unreachable for the failover delay (probing it every check interval until then).
        Returns at once for the last cluster of the list."""
        clusters = self.clusters
        successor = clusters.after(active)
        if successor is None:
            return active
        settings = clusters.settings_of(active)
        timeout = clusters.probe_timeout(settings)
        down_since: float | None = None
        while not self._probe(settings, timeout):
            now = self._clock()
            down_since = now if down_since is None else down_since
            if now - down_since >= clusters.failover_delay:
                return successor
            self._sleep(clusters.check_interval)
        return active

    def back_to_primary(self, active: str) -> bool:
        """Whether a stream reading ``active`` (not the primary) goes back to the primary now:
        switching back is on and the primary has answered every probe of the last
        ``switch_back_delay`` seconds. Probes the primary once."""
        clusters = self.clusters
        delay = clusters.switch_back_delay
        if delay is None or active == clusters.primary:
            self._primary_up_since = None
            return False
        settings = clusters.settings[0]
        if not self._probe(settings, clusters.probe_timeout(settings)):
            self._primary_up_since = None
            return False
        now = self._clock()
        if self._primary_up_since is None:
            self._primary_up_since = now
        return now - self._primary_up_since >= delay


class ActiveCluster:
    """The cluster writers use now (see the module docstring); thread-safe."""

    def __init__(
        self,
        clusters: Clusters,
        lookup_of: Callable[[ClientSettings], Lookup],
        watch: ClusterWatch | None = None,
    ) -> None:
        self.clusters = clusters
        self._lookup_of = lookup_of
        self._watch = ClusterWatch(clusters) if watch is None else watch
        self._lock = threading.Lock()
        self.name = clusters.primary
        self.lookup = lookup_of(clusters.settings[0])

    def leave(self, failed: Lookup) -> bool:
        """After retries on ``failed``'s cluster gave up: whether to go on with
        :attr:`lookup`, because another writer moved on already or the cluster has been
        unreachable for the failover delay (probed, waiting, until then)."""
        with self._lock:
            if failed is not self.lookup:
                return True
            chosen = self._watch.choose(self.name)
            if chosen == self.name:
                return False
            log.warning(
                "cluster %s has been unreachable for %s s: writing goes on on cluster %s",
                self.name,
                self.clusters.failover_delay,
                chosen,
            )
            self._move(chosen)
            return True

    def run(self, operation: Callable[[Lookup], T], what: str) -> T:
        """``operation`` on the active cluster, retried up to the failover delay (or the
        operation timeout, if shorter); then on the next cluster once the watch says to
        leave this one."""
        while True:
            lookup = self.lookup
            limit = self.clusters.retry_limit(lookup.timeout)
            try:
                return retrying(
                    functools.partial(operation, lookup),
                    what=what,
                    timeout=limit,
                    option=FAILOVER_DELAY_OPTION,
                )
            except RetriesExhaustedError:
                if not self.leave(lookup):
                    raise

    def refresh(self) -> None:
        """Go back to the primary when switching back is due (called as a task starts)."""
        with self._lock:
            if self._watch.back_to_primary(self.name):
                log.warning(
                    "cluster %s has answered for %s s: writing goes back to it from cluster %s",
                    self.clusters.primary,
                    self.clusters.switch_back_delay,
                    self.name,
                )
                self._move(self.clusters.primary)

    def _move(self, name: str) -> None:
        self.name = name
        self.lookup = self._lookup_of(self.clusters.settings_of(name))
