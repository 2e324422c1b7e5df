"""``spark.readStream.format("pulsar")``: micro-batches over checkpointed message ids.

Offsets are described in :mod:`pulsar_spark.source.offsets`: per partition, the last message
read; each micro-batch reads ``(start, end]``. The driver object lives for the whole query in
one process and keeps its connections; it only ever *computes* positions. ``read`` runs on
executors on a fresh copy of this object and uses nothing but its InputPartition, so results
depend on checkpointed offsets alone — never on ``commit`` (which Spark calls late) or ``stop``
(which Spark may never call).

The pieces are their own modules in :mod:`pulsar_spark.source` (named here without the
package): where the query starts (``start_offsets``), where each micro-batch starts and ends
(``stream_ranges``), what happens on lost data (:mod:`pulsar_spark.common.data_loss`: a
vanished partition, one that no longer reaches the checkpointed position, or a task whose
start retention removed), and counting messages for ``maxMessagesPerTrigger`` and their
payload bytes for ``maxBytesPerTrigger`` (``counting``), waiting for ``minMessagesPerTrigger``
(``trigger_wait``), the durable subscription ``subscriptionName`` keeps (``subscription``:
created at the start, acknowledged through each committed micro-batch's end; it holds data in
the broker and never decides what is read), the lag logged per micro-batch (``lag``), and
the switch to another cluster with ``failover.secondaryServiceUrls`` (``failover``).
This class wires them to Spark.

The switch: each ``latestOffset`` first asks the cluster watch
(:class:`~pulsar_spark.client.failover.ClusterWatch`) whether the cluster of its start offset
is still there. Once it has been unreachable for the failover delay, the next micro-batch is
one that reads nothing and ends at the replicated subscription's positions on the next
cluster, recorded with that cluster's name (see :mod:`pulsar_spark.source.offsets`): the switch
shows as the change of cluster between the micro-batch's start and end offsets in the
query's progress. Every later micro-batch, and a restarted query, reads the cluster its start
offset names.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pulsar_spark.client.failover import FAILOVER_DELAY_OPTION, ClusterWatch
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.common.data_loss import DataLossPolicy
from pulsar_spark.common.retry import retrying
from pulsar_spark.errors import ConfigurationError, PulsarSparkError, RetriesExhaustedError
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.counting import WHILE_COUNTING, KeptCounters, MessageCounter, ahead_for
from pulsar_spark.source.failover import Followers, read_with_failover, replicated_positions
from pulsar_spark.source.lag import offset_lag
from pulsar_spark.source.offsets import PulsarOffset, has_messages_after
from pulsar_spark.source.planning import (
    PartitionRef,
    last_message_id,
    last_message_ids,
    make_lookup,
    partition_read,
    resolve_partitions,
)
from pulsar_spark.source.read_options import ReadOptions
from pulsar_spark.source.reading import read_partition
from pulsar_spark.source.splitting import split_reads
from pulsar_spark.source.start_offsets import BrokerPositions, initial_offset
from pulsar_spark.source.stream_ranges import EndOf, next_ranges
from pulsar_spark.source.subscription import SubscriptionKeeper, nothing_lost_after
from pulsar_spark.source.trigger_wait import TriggerWait
from pulsar_spark.spark.partitions import as_partitions, planned_read

log = logging.getLogger(__name__)

T = TypeVar("T")


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._policy = DataLossPolicy(options.fail_on_data_loss)
        # The cluster read (None: the primary, service.url) and a lookup per cluster.
        self._active: str | None = None
        self._lookups: dict[str | None, Lookup] = {}
        self._watch = None if options.failover is None else ClusterWatch(options.failover)
        self._followers = (
            None
            if options.failover is None or options.subscription is None
            else Followers(options.subscription, options.failover, self._lookup_of)
        )
        self._refs: dict[str, PartitionRef] = {}
        self._available_now: dict[str, MessageId | None] | None = None
        self._latest: dict[str, Any] | None = None
        self._initial: dict[str, Any] | None = None
        self._counters = KeptCounters(self._open_counter)
        self._wait = (
            None
            if options.min_messages_per_trigger is None or options.max_trigger_delay is None
            else TriggerWait(
                options.min_messages_per_trigger, options.max_trigger_delay, self._open_count
            )
        )
        self._keeper = self._new_keeper()

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only: read() is stateless by design.
        return {"options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # --- driver ----------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """Where the query starts, resolved once: Spark asks twice (the first answer starts
        the range of the first ``latestOffset``, the second that of its micro-batch), and a
        ``latest`` that moved in between would skip the messages published meanwhile."""
        if self._initial is None:
            self._initial = self._retrying(self._resolve_initial, "finding the start offsets")
            self._hold(self._initial)
        return self._initial

    def _resolve_initial(self) -> dict[str, Any]:
        lookup = self._connect()
        positions = BrokerPositions(lookup, self.options.poll_timeout)
        return initial_offset(self.options.starting, self._discover(lookup), positions).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        """One of the limits the options set (Spark takes one only); :meth:`_limits` adds
        the others when Spark hands it back. Spark hands ``ReadAllAvailable`` instead to a
        query that reads everything at once (``Trigger.Once``)."""
        options = self.options
        if options.max_bytes_per_trigger is not None:
            return ReadMaxBytes(options.max_bytes_per_trigger)
        if options.max_messages_per_trigger is not None:
            return ReadMaxRows(options.max_messages_per_trigger)
        if options.min_messages_per_trigger is not None:
            return ReadMinRows(options.min_messages_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        def last_ids() -> dict[str, MessageId | None]:
            lookup = self._connect()
            return last_message_ids(lookup, self._discover(lookup))

        self._available_now = self._retrying(last_ids, "finding where AvailableNow stops")

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch. A lost broker connection (a broker restarting,
        say) is retried, with growing pauses, for up to ``pulsar.client.operationTimeoutMs``
        without progress, so a restart between micro-batches fails no batch.

        ``start`` is where the previous micro-batch ended, and Spark plans the next one only
        after committing that one: with ``subscriptionName`` the subscription is acknowledged
        through it here too, because Spark calls ``commit`` for a micro-batch only once it
        plans a later one with data — never for the last micro-batch of an AvailableNow run
        or one followed by idle triggers.

        With ``failover.secondaryServiceUrls``, a cluster that goes away while this runs is
        asked about again when the retries give up: past the failover delay, the stream
        switches clusters instead of failing."""
        switched = self._follow(start)
        if switched is not None:
            return switched
        self._hold(start)

        def attempt() -> dict[str, Any]:
            try:
                return self._latest_offset(start, limit)
            except PulsarSparkError:
                self._counters.close()
                raise

        try:
            return self._retrying(
                attempt, "finding the end of the next micro-batch", failing_over=True
            )
        except RetriesExhaustedError:
            switched = self._follow(start)
            if switched is None:
                raise
            return switched

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = PulsarOffset.from_json(start), PulsarOffset.from_json(end)
        if begin.cluster != finish.cluster:
            return []  # the micro-batch that switches clusters reads nothing
        options = self._options_on(finish.cluster)
        reads = []
        for name in sorted(finish.positions):
            first, last = begin.get(name), finish.positions[name]
            if not has_messages_after(first, last):
                continue
            ref = self._refs.get(name) or _ref_from_name(name)
            reads.append(partition_read(options, ref, first, last, start_inclusive=False))
        return as_partitions(split_reads(reads, options.min_partitions))

    def commit(self, end: dict[str, Any]) -> None:
        """With ``subscriptionName``, acknowledge the subscription through ``end`` (Spark
        calls this once the micro-batch ending there is committed); otherwise nothing to do:
        progress lives in Spark's checkpoint, not in the broker."""
        self._hold(end)

    def stop(self) -> None:
        """Close the driver's counters (connections belong to the process-wide pool). Spark
        may never call this; nothing depends on it."""
        self._counters.close()

    # --- executors -------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        work = planned_read(partition)
        assert work is not None

        def start_gone(first: MessageId) -> None:
            name, start = work.ref.name, work.start
            subscription = self.options.subscription
            if subscription is not None and nothing_lost_after(
                make_lookup(work.client),
                name,
                subscription,
                start,
                replicated=self.options.replicate_subscription_state,
            ):
                log.info(
                    "partition %s: what lay after %s is gone or was only markers, and "
                    "subscription %r had it acknowledged; nothing unread is lost, reading on "
                    "from %s",
                    name,
                    start,
                    subscription,
                    first,
                )
                return
            self._policy.start_gone(name, start, first)

        clusters, subscription = self.options.failover, self.options.subscription
        if clusters is None or subscription is None:
            return read_partition(work, start_gone)
        return read_with_failover(
            work,
            clusters,
            subscription,
            self._policy,
            functools.partial(read_partition, on_start_gone=start_gone),
        )

    # --- helpers ---------------------------------------------------------------------------

    def _retrying(self, operation: Callable[[], T], what: str, *, failing_over: bool = False) -> T:
        """``operation`` retried for ``pulsar.client.operationTimeoutMs``; ``failing_over``:
        for no longer than the failover delay, when there is another cluster to switch to."""
        lookup = self._connect()
        clusters = self.options.failover
        if not failing_over or clusters is None:
            return lookup.retrying(operation, what)
        limit = clusters.retry_limit(lookup.timeout)
        return retrying(operation, what=what, timeout=limit, option=FAILOVER_DELAY_OPTION)

    def _connect(self) -> Lookup:
        """The lookup of the cluster read now."""
        return self._lookup_of(self._active)

    def _lookup_of(self, cluster: str | None) -> Lookup:
        """The lookup of ``cluster`` (None or the primary's name: the primary)."""
        cluster = self._secondary(cluster)
        lookup = self._lookups.get(cluster)
        if lookup is None:
            lookup = self._lookups[cluster] = make_lookup(self._options_on(cluster).client)
        return lookup

    def _secondary(self, cluster: str | None) -> str | None:
        """``cluster``, or None when it is the primary (as offsets and lookups name it)."""
        clusters = self.options.failover
        return None if clusters is not None and cluster == clusters.primary else cluster

    def _options_on(self, cluster: str | None) -> ReadOptions:
        """The options, reading ``cluster`` (None: the primary)."""
        clusters = self.options.failover
        if cluster is None:
            return self.options
        if clusters is None:
            raise ConfigurationError(
                f"the checkpointed offsets belong to cluster {cluster}, but option "
                "'failover.secondaryServiceUrls' is not given to name it"
            )
        return replace(self.options, client=clusters.settings_of(cluster))

    def _new_keeper(self) -> SubscriptionKeeper | None:
        options = self.options
        if options.subscription is None:
            return None
        return SubscriptionKeeper(
            options.subscription, self._connect, replicated=options.replicate_subscription_state
        )

    def _follow(self, start: dict[str, Any]) -> dict[str, Any] | None:
        """Read the cluster ``start`` belongs to; when the watch says to leave it (or to go
        back to the primary), switch and return the end of the micro-batch that records the
        switch (None: no switch)."""
        recorded = PulsarOffset.from_json(start).cluster
        self._activate(recorded)
        clusters = self.options.failover
        if self._watch is None or clusters is None:
            return None
        left = recorded or clusters.primary
        chosen = self._watch.choose(left)
        if chosen != left:
            log.warning(
                "cluster %s has been unreachable for %s s: the stream switches to cluster %s",
                left,
                clusters.failover_delay,
                chosen,
            )
        elif self._watch.back_to_primary(left):
            chosen = clusters.primary
            log.warning(
                "cluster %s has answered for %s s: the stream switches back to it from cluster %s",
                chosen,
                clusters.switch_back_delay,
                left,
            )
        else:
            return None
        self._activate(chosen)
        self._latest = self._retrying(
            functools.partial(self._switched_offset, chosen),
            f"finding where to start on cluster {chosen}",
        )
        return self._latest

    def _switched_offset(self, chosen: str) -> dict[str, Any]:
        """Where the stream starts on cluster ``chosen``: after the replicated subscription's
        position there, per partition (see :mod:`pulsar_spark.source.failover`)."""
        subscription = self.options.subscription
        assert subscription is not None  # failover needs a replicated subscription
        lookup = self._connect()
        refs = self._discover(lookup)
        if self._followers is not None and not self._followers.holds(chosen, refs):
            log.warning(
                "subscription %r was not known to exist on every partition of cluster %s "
                "before the switch: the stream starts where the broker has it, which is the "
                "earliest message where it did not exist (messages may be read again; none "
                "is skipped)",
                subscription,
                chosen,
            )
        found = replicated_positions(lookup, refs, subscription)
        log.info("on cluster %s, the stream reads on after %s", chosen, found)
        return PulsarOffset(found, self._active).to_json()

    def _activate(self, cluster: str | None) -> None:
        """Read ``cluster`` (None: the primary) from now on."""
        cluster = self._secondary(cluster)
        if cluster == self._active:
            return
        self._active = cluster
        self._counters.close()
        self._keeper = self._new_keeper()
        if self._available_now is not None:
            self.prepareForTriggerAvailableNow()

    def _discover(self, lookup: Lookup) -> list[PartitionRef]:
        refs = resolve_partitions(lookup, self.options.topics)
        self._refs = {ref.name: ref for ref in refs}
        return refs

    def _latest_offset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        lookup = self._connect()
        begin = PulsarOffset.from_json(start).positions
        refs = self._discover(lookup)
        ranges = next_ranges(begin, refs, self._policy, *self._ends(lookup, refs))
        self._latest = PulsarOffset(ranges.ends, self._active).to_json()
        end = self._latest
        messages, size, waits = self._limits(limit)
        if waits and self._wait is not None and self._wait.waits(ranges.starts, ranges.ends):
            log.debug("fewer than minMessagesPerTrigger messages: the micro-batch waits")
            return start
        if messages is not None or size is not None:
            ends = self._counters.ends(ranges.starts, ranges.ends, messages, size)
            end = PulsarOffset(ends, self._active).to_json()
        _log_lag(end, self._latest)
        return end

    def _limits(self, limit: ReadLimit) -> tuple[int | None, int | None, bool]:
        """The most messages and payload bytes the next micro-batch may read (None: no
        limit), and whether it may wait for ``minMessagesPerTrigger``: the limit Spark hands
        over, and those of the options it could not carry (see :meth:`getDefaultReadLimit`).
        ``ReadAllAvailable`` lifts them all, and a stream under Trigger.AvailableNow does not
        wait: nothing will arrive for it."""
        if isinstance(limit, ReadAllAvailable):
            return None, None, False
        options = self.options
        messages = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        size = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        return (
            options.max_messages_per_trigger if messages is None else messages,
            options.max_bytes_per_trigger if size is None else size,
            self._available_now is None,
        )

    def _hold(self, offset: dict[str, Any]) -> None:
        """Acknowledge the subscription through ``offset``, on the cluster read now (an offset
        of another cluster holds nothing there)."""
        parsed = PulsarOffset.from_json(offset)
        if self._keeper is not None and parsed.cluster == self._active:
            self._keeper.hold(parsed.positions, self._refs, self._counters.batch_size)
        clusters = self.options.failover
        if self._followers is not None and clusters is not None:
            self._followers.create(self._active or clusters.primary, list(self._refs.values()))

    def _ends(self, lookup: Lookup, refs: Sequence[PartitionRef]) -> tuple[EndOf, EndOf | None]:
        """Where micro-batches end, and under Trigger.AvailableNow where partitions end now
        (asked only of a partition whose start lies past its recorded end)."""
        recorded = self._available_now
        if recorded is None:
            now = last_message_ids(lookup, refs)
            return (lambda ref: now[ref.name]), None
        return (lambda ref: recorded.get(ref.name)), functools.partial(last_message_id, lookup)

    def _open_counter(self, name: str, start: MessageId, last: MessageId) -> MessageCounter:
        sized = self.options.max_bytes_per_trigger is not None
        # counting bytes, each partition may receive ahead as many messages as while counting
        budget = self.options.max_messages_per_trigger or WHILE_COUNTING * len(self._refs)
        ahead = ahead_for(budget, len(self._refs))
        lookup = self._connect()
        return MessageCounter(
            lookup, name, start, last, self.options.poll_timeout, ahead=ahead, sized=sized
        )

    def _open_count(self, name: str, start: MessageId, last: MessageId) -> MessageCounter:
        """A counter of the messages available, read on the calling thread."""
        return MessageCounter(self._connect(), name, start, last, self.options.poll_timeout)


def _log_lag(end: dict[str, Any], latest: dict[str, Any]) -> None:
    """One line per micro-batch: the entries it leaves unread (:mod:`pulsar_spark.source.lag`)."""
    if not log.isEnabledFor(logging.INFO):
        return
    behind = offset_lag(end, latest)
    known = [n for n in behind.values() if n is not None]
    log.info(
        "next micro-batch leaves %d entries unread in %d partition(s)%s",
        sum(known),
        sum(1 for n in known if n),
        "" if len(known) == len(behind) else f" ({len(behind) - len(known)} not countable)",
    )


def _ref_from_name(name: str) -> PartitionRef:
    from pulsar_spark.topic import TopicName

    topic = TopicName.parse(name)
    return PartitionRef(topic.base_name, topic.partition_index, name)
