"""Where a stream starts on the cluster it switches to: its replicated subscription's position.

How this works
--------------
A stream with ``failover.secondaryServiceUrls`` keeps a replicated durable subscription
(``subscriptionName`` with ``replicateSubscriptionState=true``). Apache Pulsar copies the
subscription's position from the active cluster to the subscription of the same name on each
other cluster, through the snapshot markers, but only where that subscription exists: so the
driver creates it (at the earliest message) on every partition of every cluster it does not
read (:class:`Followers`), when the query starts and then at each micro-batch on partitions
where it could not yet (a topic not replicated there yet, a cluster out of reach).

When the active cluster has been unreachable for the failover delay, the stream starts on the
next cluster right after that cluster's subscription position, its mark-delete position
(:func:`replicated_positions`): never at ``earliest`` or ``latest``. That position is the
newest snapshot the subscription had passed on the cluster left, so messages acknowledged
there after that snapshot are read again: duplicates, bounded by what the stream read after
the last snapshot. Nothing is lost, except what the cluster left had not replicated yet when
it went away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial

from pulsar_spark.client.durable import mark_delete_position
from pulsar_spark.client.failover import Clusters, Probe, reachable
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.errors import DataLossError, TopicNotFoundError
from pulsar_spark.message_id import MessageId
from pulsar_spark.spark.offsets import NOTHING_CONSUMED
from pulsar_spark.spark.planning import PartitionRef
from pulsar_spark.spark.subscription import SubscriptionKeeper

log = logging.getLogger(__name__)


class Followers:
    """The replicated subscription on the clusters a stream does not read: created once on
    each partition (see the module docstring). A cluster out of reach (probed first, so it
    delays nothing) is tried again at the next call; other failures are logged."""

    def __init__(
        self,
        subscription: str,
        clusters: Clusters,
        lookup_of: Callable[[str], Lookup],
        probe: Probe = reachable,
    ) -> None:
        self.clusters = clusters
        self._probe = probe
        self._keepers = {
            name: SubscriptionKeeper(subscription, partial(lookup_of, name), replicated=True)
            for name in clusters.names
        }

    def create(self, active: str, refs: Sequence[PartitionRef]) -> None:
        """Create the subscription on ``refs`` of every cluster but ``active`` where this has
        not done it yet."""
        by_name = {ref.name: ref for ref in refs}
        for name, keeper in self._keepers.items():
            missing = [ref for ref in by_name if ref not in keeper.acknowledged]
            if name == active or not missing:
                continue
            settings = self.clusters.settings_of(name)
            if not self._probe(settings, self.clusters.probe_timeout(settings)):
                continue
            keeper.hold(dict.fromkeys(missing, NOTHING_CONSUMED), by_name)


def replicated_positions(
    lookup: Lookup, refs: Sequence[PartitionRef], subscription: str
) -> dict[str, MessageId]:
    """Per partition, the position ``subscription`` is acknowledged through on the cluster
    ``lookup`` reaches: the exclusive start of a stream switching to that cluster. A
    partition that does not exist there holds nothing to read."""
    positions = {}
    for ref in refs:
        try:
            position = mark_delete_position(lookup, ref.name, subscription, timeout=lookup.timeout)
        except TopicNotFoundError:
            log.info("%s does not exist on the cluster switched to", ref.name)
            position = NOTHING_CONSUMED
        if position is None:
            raise DataLossError(
                f"the broker does not say where subscription {subscription!r} is acknowledged "
                f"through on {ref.name}, so the stream cannot start there where it left off"
            )
        positions[ref.name] = position.with_partition(ref.partition)
    return positions
