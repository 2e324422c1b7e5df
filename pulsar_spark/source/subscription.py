"""``subscriptionName``: a durable subscription that holds what a stream has not committed.

How this works
--------------
Without the option a stream keeps nothing in the broker: retention alone decides how long
unread messages live. With it, the driver keeps one durable subscription of that name on every
partition the query reads, and the broker keeps every message the subscription has not
acknowledged, whatever the retention settings say.

- **Created at the query's start.** When a new query resolves its starting offsets, the
  subscription is created on every partition (at the earliest position, when it does not
  exist) and acknowledged through the starting position.
- **Moved on each commit.** When Spark commits a micro-batch, the subscription is acknowledged
  cumulatively through the batch's end offset on each partition
  (:func:`~pulsar_spark.client.durable.acknowledge_through`). Spark calls ``commit`` for a
  micro-batch only when it plans the next one with data, so the driver also acknowledges
  through the start it is handed when asked for the next micro-batch's end: that start is the
  end of a micro-batch Spark has committed (its commit log is written before the next
  micro-batch is planned). Both ways, the last micro-batch of an AvailableNow run and one
  followed by idle triggers are acknowledged too. New partitions and topics get the
  subscription at the first acknowledgement that covers them.
- **Never the source of truth.** Reads still use the exact ranges of the checkpointed offsets,
  through their own non-durable readers: a subscription ahead of the checkpoint, behind it,
  reset by hand or deleted never makes a query skip or repeat a message. Spark commits only
  after a micro-batch's results are written, so the subscription is never ahead of what the
  query has made durable — unless someone moves it by hand.
- **A topic that does not exist yet** gets no subscription (Apache Pulsar refuses one
  there, and the connector creates no topic): the first acknowledgement after the topic
  appears creates it at the earliest message, so everything published is held.
- **One consumer type at a time.** The subscription's consumer is Failover (cumulative acks
  need it). Apache Pulsar refuses a consumer of another type (Shared, Key_Shared, or an
  Exclusive one while another is attached) on a subscription that has consumers: while a
  user's Shared consumer is attached, the acknowledgement fails with ConsumerBusy and waits for
  the next commit, and while the driver is attached (for the moment of each
  acknowledgement) the user's Shared consumer is refused. pulsar-lite takes either.
- **A failed ack fails nothing.** Acks are retried under the client's retry policy; when they
  still fail the failure is logged and the next commit acknowledges through its own, later end,
  which covers everything before it. Until then the subscription holds *more* than it must,
  never less.

- **Replicated, if asked.** With ``replicateSubscriptionState=true`` the subscription is
  created as (or switched to) a replicated subscription: on a geo-replicated topic, Apache
  Pulsar copies its position to the other clusters' subscriptions of the same name, at the
  granularity of its snapshots (``replicatedSubscriptionsSnapshotFrequencyMillis``). Each
  acknowledgement then lets the broker dispatch the subscription's messages through the
  position first (:func:`~pulsar_spark.client.durable.acknowledge_through`): the broker
  learns which position on the other clusters matches one on this cluster only from the
  snapshot markers it reads while dispatching. The driver drops what is dispatched, so the
  messages of each micro-batch are read once more from the broker, by the driver.

The connector never deletes the subscription; ``pulsar-admin topics unsubscribe`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from pulsar_spark.client.durable import acknowledge_through, mark_delete_position
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.errors import PulsarSparkError, RetriesExhaustedError, TopicNotFoundError
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.planning import PartitionRef
from pulsar_spark.topic import TopicName

log = logging.getLogger(__name__)

BatchSize = Callable[[str, MessageId], int | None]
"""(partition name, position) -> messages in the batched entry the position lies inside, if
known."""


class SubscriptionKeeper:
    """Moves the durable subscription ``name`` on each partition; see the module docstring."""

    def __init__(
        self, name: str, connect: Callable[[], Lookup], *, replicated: bool = False
    ) -> None:
        self.name = name
        self.replicated = replicated
        self._connect = connect
        self.acknowledged: dict[str, MessageId] = {}  # partition name -> last acked through

    def hold(
        self,
        positions: Mapping[str, MessageId],
        refs: Mapping[str, PartitionRef],
        batch_size: BatchSize = lambda partition, position: None,
    ) -> None:
        """Acknowledge the subscription through ``positions`` (partition name -> last message
        consumed), creating it where it does not exist.

        ``batch_size`` says, where it is known, how many messages the batched entry a
        position lies inside holds (the driver's message counters know it for the ends they
        chose), so that the batch-index acknowledgement names exactly the rest of the batch.
        Partitions already acknowledged through the same position by this driver are
        skipped. Failures are logged, never raised (see the module docstring); after one that
        used up the retry time limit (a broker out of reach, most likely) the remaining
        partitions wait for the next call, so an outage delays a micro-batch by one time
        limit, not one per partition.
        """
        for partition, position in sorted(positions.items()):
            if self.acknowledged.get(partition) == position:
                continue
            index = _partition_index(partition, refs)
            try:
                size = batch_size(partition, position)
                self._acknowledge(partition, position.with_partition(index), size)
            except TopicNotFoundError:
                # Nothing to hold yet (Apache Pulsar refuses a subscription on a topic that
                # does not exist, and ours never creates one): the first acknowledgement
                # after the topic appears creates the subscription at its earliest message.
                log.debug("subscription %r: %s does not exist yet", self.name, partition)
                continue
            except PulsarSparkError as exc:
                log.warning(
                    "subscription %r: could not acknowledge %s through %s (%s); it holds "
                    "earlier messages until a later commit succeeds, and the query's "
                    "checkpoint still says what was read",
                    self.name,
                    partition,
                    position,
                    exc,
                )
                if isinstance(exc, RetriesExhaustedError):
                    return
                continue
            self.acknowledged[partition] = position

    def _acknowledge(self, partition: str, position: MessageId, batch_size: int | None) -> None:
        lookup = self._connect()

        def attempt() -> list[MessageId]:
            return acknowledge_through(
                lookup,
                partition,
                self.name,
                position,
                timeout=lookup.timeout,
                batch_size=batch_size,
                replicated=self.replicated,
            )

        acks = lookup.retrying(attempt, f"acknowledging {self.name!r} on {partition}")
        log.debug("subscription %r on %s acknowledged through %s", self.name, partition, acks)


def nothing_lost_after(
    lookup: Lookup, partition: str, subscription: str, start: MessageId, *, replicated: bool
) -> bool:
    """Whether a stream's exclusive ``start`` on ``partition``, after which the first entry
    delivered lies in a later ledger, lost nothing after it, by ``subscription``'s word.

    Apache Pulsar removes a ledger only once every subscription has acknowledged all of it
    (retention permitting), and the driver acknowledges the subscription through each start
    before the micro-batch reading from it runs, never further. So when its mark-delete
    position lies at or before ``start``, the ledger ``start`` lay in held nothing after it,
    nor did any ledger removed between it and the first entry left: this is a query reading on
    after retention removed a ledger it had read to its end.

    A ``replicated`` subscription is also moved by the other clusters, through what the query
    read there (a stream that failed over and came back), and its positions often lie on
    marker entries, which a broker never delivers: a ledger may end in markers after
    ``start``. Whatever the broker reports it acknowledged through, then, the query read or
    had no message to read. A failure to ask, or a broker that does not say, answers False.
    """
    try:
        position = lookup.retrying(
            lambda: mark_delete_position(lookup, partition, subscription, timeout=lookup.timeout),
            f"asking {subscription!r} on {partition} where it is acknowledged through",
        )
    except PulsarSparkError as exc:
        log.warning(
            "subscription %r: could not ask how far %s is acknowledged (%s)",
            subscription,
            partition,
            exc,
        )
        return False
    return position is not None and (replicated or position.entry <= start.entry)


def _partition_index(partition: str, refs: Mapping[str, PartitionRef]) -> int:
    ref = refs.get(partition)
    if ref is not None:
        return ref.partition
    return TopicName.parse(partition).partition_index
