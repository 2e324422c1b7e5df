"""A durable subscription that holds a position: created if missing, moved by cumulative acks.

How this works
--------------
The subscription only keeps messages from being removed; nothing is ever read through it.
:func:`acknowledge_through` attaches a consumer to the subscription (durable, Failover, created
at the earliest position when it does not exist; no Flow is sent, so the broker dispatches
nothing), acknowledges cumulatively through the given position, waits for the broker's receipt
and detaches again. Attaching only for the moment of the ack means no consumer stays on the
subscription between commits, so a user's own consumer can attach at any other time.

An acknowledgement is cumulative: "every message up to and including this one". A position
inside a batched entry is acknowledged in two steps (:func:`cumulative_acks`): the entry
before it as a whole, then, through the batch index, the entry's messages up to the position
(``ack_set``, Apache Pulsar's batch-index acknowledgement). The first step is what a broker
without batch-index acknowledgement enabled takes (it refuses an ``ack_set``), and it is all
that is sent to pulsar-lite
(:func:`~pulsar_spark.protocol.connection.is_pulsar_lite`): it treats an ``ack_set``
as an acknowledgement of the whole entry, which would drop the messages after the position.
There the subscription stays at most one entry behind; it never moves past a message that was
not acknowledged.

Acks name the partition index in their message id (``MessageIdData.partition``): pulsar-lite
ignores an ack on a partition without it.

A *replicated* subscription (``replicated=True``: Apache Pulsar's ``replicateSubscriptionState``)
is created, or switched, to have its position copied to the other clusters of a geo-replicated
topic. A broker maps a position to the other clusters' ids only through the snapshot markers
its dispatcher has read on that subscription's behalf, so acknowledging alone would never move
the subscription elsewhere: before the ack, the consumer is given permits and lets the broker
dispatch through ``position`` (:meth:`AttachedConsumer.dispatch_through`), discarding what
comes. The broker then sends the mapped position to the other clusters with the ack.
"""

from __future__ import annotations

import logging
import threading

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.consumer import last_entry
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.errors import PulsarSparkError, server_error_for
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.connection import is_pulsar_lite
from pulsar_spark.protocol.decode import is_batch
from pulsar_spark.protocol.payload import parse_payload_section

log = logging.getLogger(__name__)


def cumulative_acks(position: MessageId, *, whole_entries_only: bool) -> list[MessageId]:
    """The cumulative acks, in order, that acknowledge everything through ``position``.

    Nothing for "nothing consumed"; the entry for a whole-entry id; for an id inside a batch,
    the entry before it (unless it is the ledger's first) and then the id itself, which
    ``whole_entries_only`` leaves out.
    """
    if position.is_earliest:
        return []
    if position.batch_index < 0:
        return [position]
    acks = []
    if position.entry_id > 0:
        acks.append(MessageId(position.ledger_id, position.entry_id - 1, -1, position.partition))
    if not whole_entries_only:
        acks.append(position)
    return acks


DISPATCH_GRANT = 1000
"""Permits a replicated subscription's consumer is given at a time while it lets the broker
dispatch through a position."""

DISPATCH_QUIET = 2.0
"""Seconds without a delivery after which dispatching through a position ends anyway."""


class _Dispatched:
    """The consumer's handler: it notes how far the broker has dispatched and how many
    messages (permits) that took, and drops what arrives. Given no permits, nothing does."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.last: tuple[int, int] | None = None  # (ledger, entry) of the latest delivery
        self.messages = 0

    def on_message(self, message: pb.CommandMessage, payload: memoryview | None) -> None:
        metadata = parse_payload_section(payload or b"").metadata
        with self.changed:
            self.last = (message.message_id.ledgerId, message.message_id.entryId)
            self.messages += metadata.num_messages_in_batch if is_batch(metadata) else 1
            self.changed.notify_all()

    def on_closed(self, error: PulsarSparkError) -> None:
        with self.changed:
            self.changed.notify_all()

    def reached(self, entry: tuple[int, int]) -> bool:
        """Whether the broker has dispatched ``entry`` or one after it."""
        return self.last is not None and self.last >= entry


def acknowledge_through(
    lookup: Lookup,
    topic: str,
    subscription: str,
    position: MessageId,
    *,
    timeout: float,
    batch_size: int | None = None,
    replicated: bool = False,
) -> list[MessageId]:
    """Make sure ``subscription`` exists on ``topic`` (one partition) and acknowledge every
    message through ``position`` (which carries the partition index, or -1); return the acks
    sent. ``batch_size``, when known, is the number of messages of the batched entry
    ``position`` lies inside (see :func:`~pulsar_spark.protocol.commands.ack_cumulative_through`).
    ``replicated``: the subscription is a replicated one (see the module docstring).
    Raises the broker's or the connection's error; retrying is the caller's choice."""
    attached = AttachedConsumer(
        lookup.connect_to_owner(topic), topic, subscription, timeout, replicated=replicated
    )
    try:
        attached.subscribe()
        if replicated and not position.is_earliest:
            attached.dispatch_through(position)
        acks = cumulative_acks(
            position, whole_entries_only=is_pulsar_lite(attached.connection.server_version)
        )
        try:
            for ack in acks:
                attached.ack(ack, batch_size if ack.batch_index >= 0 else None)
        finally:
            attached.close()
        return acks
    finally:
        attached.connection.unregister_consumer(attached.consumer_id)


def mark_delete_position(
    lookup: Lookup, topic: str, subscription: str, *, timeout: float
) -> MessageId | None:
    """The position ``subscription`` on ``topic`` (one partition) is acknowledged through
    without gaps (its cursor's mark-delete position, a whole entry; entry -1: before a
    ledger's first), as the broker reports it to a consumer asking for the last message id;
    None when the broker does not report it. Creates the subscription, at the earliest
    position, if it does not exist."""
    return subscription_bounds(lookup, topic, subscription, timeout=timeout)[0]


def subscription_bounds(
    lookup: Lookup, topic: str, subscription: str, *, timeout: float
) -> tuple[MessageId | None, MessageId | None]:
    """``subscription``'s mark-delete position (see :func:`mark_delete_position`) and the
    topic's last entry (None when it holds none), from one answer of the broker."""
    attached = AttachedConsumer(lookup.connect_to_owner(topic), topic, subscription, timeout)
    try:
        attached.subscribe()
        try:
            response = attached.connection.request(
                lambda rid: commands.get_last_message_id(
                    consumer_id=attached.consumer_id, request_id=rid
                ),
                what=f"mark-delete position of {subscription} on {topic}",
                timeout=timeout,
            ).getLastMessageIdResponse
        finally:
            attached.close()
    finally:
        attached.connection.unregister_consumer(attached.consumer_id)
    last = last_entry(response.last_message_id)
    if not response.HasField("consumer_mark_delete_position"):
        return None, last
    position = response.consumer_mark_delete_position
    # entry -1 (nothing of the ledger acknowledged) travels as the uint64 2^64 - 1
    return MessageId.from_wire(position.ledgerId, position.entryId, -1, position.partition), last


def remove_subscription(lookup: Lookup, topic: str, subscription: str, *, timeout: float) -> None:
    """Delete ``subscription`` from ``topic`` (attaching to it first, which creates it if it
    is gone already)."""
    attached = AttachedConsumer(lookup.connect_to_owner(topic), topic, subscription, timeout)
    try:
        attached.subscribe()
        attached.connection.request(
            lambda rid: commands.unsubscribe(consumer_id=attached.consumer_id, request_id=rid),
            what=f"delete subscription {subscription} on {topic}",
            timeout=timeout,
        )
    finally:
        attached.connection.unregister_consumer(attached.consumer_id)


class AttachedConsumer:
    """One consumer on the subscription, for the moment of an acknowledgement."""

    def __init__(
        self,
        connection: Connection,
        topic: str,
        subscription: str,
        timeout: float,
        *,
        replicated: bool = False,
    ) -> None:
        self.connection = connection
        self.topic = topic
        self.subscription = subscription
        self.timeout = timeout
        self.replicated = replicated
        self.consumer_id = connection.new_id()
        self._dispatched = _Dispatched()
        connection.register_consumer(self.consumer_id, self._dispatched)

    def subscribe(self) -> None:
        self.connection.request(
            lambda rid: commands.subscribe_durable(
                topic=self.topic,
                subscription=self.subscription,
                consumer_id=self.consumer_id,
                request_id=rid,
                consumer_name=f"{self.subscription}-pulsar-spark",
                replicated=self.replicated,
            ),
            what=f"subscribe {self.subscription} (durable) to {self.topic}",
            timeout=self.timeout,
        )

    def dispatch_through(self, position: MessageId) -> tuple[int, int] | None:
        """Let the broker dispatch the subscription's messages through ``position``'s entry
        (dropped as they come), so that it reads the snapshot markers up to there; return
        the (ledger, entry) last dispatched, if any. However long that takes, it ends only
        when the broker has dispatched that far, or has been silent for
        :data:`DISPATCH_QUIET` seconds (it had dispatched past ``position`` before, or the
        connection is gone: the acknowledgement after this says so)."""
        dispatched = self._dispatched
        granted = self._grant(DISPATCH_GRANT)
        while True:
            with dispatched.changed:
                seen = dispatched.messages
                if not dispatched.reached(position.entry):
                    dispatched.changed.wait(DISPATCH_QUIET)
                if dispatched.reached(position.entry) or dispatched.messages == seen:
                    return dispatched.last
                spent = dispatched.messages
            if granted - spent < DISPATCH_GRANT // 2:
                granted += self._grant(DISPATCH_GRANT)

    def _grant(self, permits: int) -> int:
        self.connection.send(commands.flow(consumer_id=self.consumer_id, permits=permits))
        return permits

    def ack(self, position: MessageId, batch_size: int | None = None) -> None:
        what = f"acknowledge {self.subscription} on {self.topic} through {position}"
        response = self.connection.request(
            lambda rid: commands.ack_cumulative_through(
                consumer_id=self.consumer_id,
                message_id=position,
                request_id=rid,
                batch_size=batch_size,
            ),
            what=what,
            timeout=self.timeout,
        )
        answer = response.ackResponse
        if answer.HasField("error"):
            raise server_error_for(answer.error, f"{what}: {answer.message}")

    def close(self) -> None:
        if self.connection.closed:
            return
        try:
            self.connection.request(
                lambda rid: commands.close_consumer(consumer_id=self.consumer_id, request_id=rid),
                what=f"detach from {self.subscription} on {self.topic}",
                timeout=self.timeout,
            )
        except PulsarSparkError as exc:
            # The acks were answered already; a consumer left attached goes with the
            # connection.
            log.warning(
                "could not detach from subscription %s on %s: %s",
                self.subscription,
                self.topic,
                exc,
            )
