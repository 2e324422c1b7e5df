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

A micro-batch planned on a cluster that goes away while its tasks read it cannot be planned
again (its offsets are in the checkpoint): a task whose cluster has been unreachable for the
failover delay reads the rest of its range from the copies on the next cluster
(:func:`read_with_failover`, through :mod:`pulsar_spark.client.replicated_copies`), keeping
the micro-batch exactly what was planned, less what had not been replicated (lost data, as
``failOnDataLoss`` says). The next micro-batch then switches clusters as above.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc

from pulsar_spark.client.durable import mark_delete_position, subscription_bounds
from pulsar_spark.client.failover import Clusters, ClusterWatch, Probe, reachable
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import ReaderSettings
from pulsar_spark.client.replicated_copies import locate_copies
from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.common.address import cluster_name
from pulsar_spark.common.data_loss import DataLossPolicy
from pulsar_spark.errors import DataLossError, RetriesExhaustedError, TopicNotFoundError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.source.offsets import NOTHING_CONSUMED
from pulsar_spark.source.planning import PartitionRead, PartitionRef, make_lookup
from pulsar_spark.source.reading import read_partition
from pulsar_spark.source.subscription import SubscriptionKeeper

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

    def holds(self, name: str, refs: Sequence[PartitionRef]) -> bool:
        """Whether this created (or found) the subscription on every one of ``refs`` of
        cluster ``name``."""
        done = self._keepers[name].acknowledged
        return all(ref.name in done for ref in refs)

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


Read = Callable[[PartitionRead], Iterator[pa.RecordBatch]]


def read_with_failover(
    work: PartitionRead,
    clusters: Clusters,
    subscription: str,
    policy: DataLossPolicy,
    read: Read,
) -> Iterator[pa.RecordBatch]:
    """``read(work)``; when its cluster stops answering (the read gives up) and stays
    unreachable for the failover delay, the rest of the range from the copies on the next
    cluster (see the module docstring)."""
    done: MessageId | None = None
    left = cluster_name(work.client.service_url)
    try:
        for batch in read(work):
            done = _last_id(batch, work.ref.partition) or done
            yield batch
    except RetriesExhaustedError:
        chosen = ClusterWatch(clusters).choose(left)
        if chosen == left:
            raise
    else:
        return
    log.warning(
        "%s: cluster %s has been unreachable for %s s: reading the rest of this range from "
        "its copies on cluster %s",
        work.ref.name,
        left,
        clusters.failover_delay,
        chosen,
    )
    rest = work if done is None else replace(work, start=done, start_inclusive=False)
    yield from read_copies(rest, clusters.settings_of(chosen), subscription, policy)


def read_copies(
    work: PartitionRead,
    settings: ClientSettings,
    subscription: str,
    policy: DataLossPolicy,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``work`` (a range of another cluster) as copied to the cluster
    ``settings`` reach, searched after ``subscription``'s position there."""
    lookup = make_lookup(settings)
    name = work.ref.name
    wanted = ReadRange(name, work.start, work.end, work.start_inclusive, work.end_inclusive)
    if wanted.is_empty:
        return
    # one answer of the broker: the subscription's position and the partition's last entry
    after, last = subscription_bounds(lookup, name, subscription, timeout=lookup.timeout)
    found = None
    if after is not None and last is not None:
        reading = ReaderSettings(poll_timeout=work.poll_timeout, request_timeout=lookup.timeout)
        found = locate_copies(lookup, wanted, after, last, reading)
    if found is None or not found.complete:
        policy.report(
            f"{name}: the messages through {work.end} were not all replicated to "
            f"{cluster_name(settings.service_url)} before their cluster went away"
        )
    if found is None:
        return
    copies = found.range
    on_copies = replace(
        work,
        client=settings,
        start=copies.start,
        start_inclusive=copies.start_inclusive,
        end=copies.end,
        end_inclusive=copies.end_inclusive,
    )
    for batch in read_partition(on_copies):
        kept = batch.filter(pc.equal(batch.column("replicatedFrom"), found.source))
        if kept.num_rows:
            yield kept


def _last_id(batch: pa.RecordBatch, partition: int) -> MessageId | None:
    """The id of the last row of ``batch`` (None when it has none)."""
    if not batch.num_rows:
        return None
    last = batch.column("messageId")[batch.num_rows - 1].as_py()
    return MessageId(last["ledgerId"], last["entryId"], last["batchIndex"], partition)
