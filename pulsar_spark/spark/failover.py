"""Where a stream starts on the cluster it switches to: its replicated subscription's position.

How this works
--------------
A stream with ``failover.secondaryServiceUrls`` keeps a replicated durable subscription
(``subscriptionName`` with ``replicateSubscriptionState=true``). Apache Pulsar copies the
subscription's position from the active cluster to the subscription of the same name on each
other cluster, through the snapshot markers, but only where that subscription exists: so when
a query starts, the subscription is created (at the earliest message) on every secondary
cluster too (:func:`create_on`).

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

from pulsar_spark.client.durable import mark_delete_position
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.errors import DataLossError, TopicNotFoundError
from pulsar_spark.message_id import MessageId
from pulsar_spark.spark.offsets import NOTHING_CONSUMED
from pulsar_spark.spark.planning import PartitionRef
from pulsar_spark.spark.subscription import SubscriptionKeeper

log = logging.getLogger(__name__)


def create_on(
    subscription: str, connect: Callable[[], Lookup], refs: Sequence[PartitionRef]
) -> None:
    """Create the replicated ``subscription`` on every partition of ``refs`` of the cluster
    ``connect`` reaches, where it does not exist (failures are logged, never raised)."""
    keeper = SubscriptionKeeper(subscription, connect, replicated=True)
    keeper.hold({ref.name: NOTHING_CONSUMED for ref in refs}, {ref.name: ref for ref in refs})


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
