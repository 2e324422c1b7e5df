"""Where a publish time falls in a partition, found by a search over entry ids or the broker's
seek, not a scan.

How this works: the answer is the first entry whose publish time is at or after ``millis``.

1. The partition's last entry is read (one entry). If it was published before ``millis``, no
   entry qualifies and nothing else is asked: seeking past the end is where brokers differ
   (Apache Pulsar parks the cursor at the end, pulsar-lite drops the connection).
2. Entry ids are dense inside a ledger (0, 1, ... up to the last), so when the first entry of
   the last entry's ledger was published before ``millis`` the answer lies in that ledger and
   is found by :func:`~pulsar_spark.protocol.time_search.first_at_or_after`, reading one entry
   per guess: it guesses by interpolating publish times between the entries known to lie on
   either side, and needs at most one read more than bisection would (on 4,279 entries written
   by one producer: 9 reads on average, where bisection needs 14). On pulsar-lite one consumer
   makes every read, moved from entry to entry by ``Seek(message_id)`` (see
   :class:`_EntryReads`). pulsar-lite keeps a topic in one ledger and its own seek by time
   reads every entry from the start, so there this is the usual path.
3. Otherwise (the answer may lie in an earlier ledger, whose entry counts the binary protocol
   does not tell) a non-durable subscription that has not been given any permits is moved with
   ``Seek(message_publish_time)``; then one permit is sent and the first entry delivered is
   the answer. Apache Pulsar closes the consumer when it resets a cursor (the subscription
   stays): the consumer subscribes again under the same name and asks again. A broker that
   stays silent gets one more permit now and then (pulsar-lite sometimes needs it), until the
   request timeout.

Both assume publish times grow along the topic (Apache Pulsar bisects over the entries too).
Readers still filter each entry on its own publish time, so a topic whose producers' clocks
disagree loses nothing inside the range that is read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pulsar_spark.client.consumer import Consumer, Delivery, new_subscription_name
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.common.retry import Retrier
from pulsar_spark.errors import (
    PulsarConnectionError,
    RequestTimeoutError,
    ResourceClosedError,
    SeekError,
    ServerError,
)
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.connection import is_pulsar_lite
from pulsar_spark.protocol.payload import parse_payload_section
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.protocol.time_search import first_at_or_after

log = logging.getLogger(__name__)


def first_published_at(
    lookup: Lookup, topic: str, last: MessageId, millis: int, settings: ReaderSettings
) -> MessageId | None:
    """The whole-entry id of the first entry of ``topic`` published at or after ``millis`` (ms),
    or None when every entry up to ``last`` (the partition's last entry) was published before."""

    with _EntryReads(lookup, topic, last, settings) as reads:
        found = first_at_or_after(reads.publish_time, 0, last.entry_id, millis)
    if found is None:
        return None
    if found > 0:
        return _entry(last, found)
    return _seek(lookup, topic, last, millis, settings)


def _entry(last: MessageId, entry_id: int) -> MessageId:
    """The whole entry ``entry_id`` of ``last``'s ledger."""
    return MessageId(last.ledger_id, entry_id, -1, last.partition)


class _EntryReads:
    """The publish times of single entries of ``last``'s ledger, read one at a time.

    On pulsar-lite one consumer serves every read: it subscribes at the first entry asked for
    and is moved to each entry asked for next with ``Seek(message_id)``, then given one permit
    (a read takes about a third of the time of subscribing a consumer for it). If that
    consumer fails (a lost connection, the topic moving), the read is made again by a range
    reader, which rides through both, and the next read subscribes anew. Apache Pulsar closes
    a consumer whose cursor it resets, so on other brokers each read has a range reader of its
    own.
    """

    def __init__(
        self, lookup: Lookup, topic: str, last: MessageId, settings: ReaderSettings
    ) -> None:
        self.lookup = lookup
        self.topic = topic
        self.last = last
        self.settings = settings
        self.by_seek = is_pulsar_lite(lookup.connect_to_owner(topic).server_version)
        self._consumer: Consumer | None = None

    def publish_time(self, entry_id: int) -> int:
        """The publish time (ms) of entry ``entry_id``."""
        entry = _entry(self.last, entry_id)
        if not self.by_seek:
            return _publish_time(self.lookup, self.topic, entry, self.settings)
        try:
            return self._by_seek(entry)
        except (PulsarConnectionError, ResourceClosedError, ServerError) as exc:
            log.info(
                "%s: reading entry %s again with a reader of its own: %s", self.topic, entry, exc
            )
            self._close()
            return _publish_time(self.lookup, self.topic, entry, self.settings)

    def _by_seek(self, entry: MessageId) -> int:
        if self._consumer is None:
            timeout = self.settings.request_timeout
            self._consumer = Consumer(self.lookup, self.topic, entry, timeout=timeout)
        else:
            self._consumer.seek_message_id(entry)
        wanted = (entry.ledger_id, entry.entry_id)

        def is_wanted(delivery: Delivery) -> bool:
            found = delivery.message.message_id
            return (found.ledgerId, found.entryId) == wanted

        return _published(_first_delivery(self._consumer, self.settings, is_wanted))

    def __enter__(self) -> _EntryReads:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._close()

    def _close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


def _seek(
    lookup: Lookup, topic: str, last: MessageId, millis: int, settings: ReaderSettings
) -> MessageId:
    """The answer by the broker's seek by publish time (``last`` is at or after ``millis``)."""
    subscription = new_subscription_name()
    retrier = Retrier(f"seeking {topic} to publish time {millis}", settings.request_timeout)
    seek = True
    for _ in range(MAX_SEEKS):
        with Consumer(
            lookup,
            topic,
            MessageId.earliest(),
            timeout=settings.request_timeout,
            subscription=subscription,
        ) as consumer:
            try:
                if seek:
                    consumer.seek_publish_time(millis)
                delivery = _first_delivery(consumer, settings)
            except ResourceClosedError as exc:
                # Apache Pulsar closes the consumer of a subscription whose cursor it reset;
                # the subscription keeps the new position: subscribe to it again.
                retrier.failed(exc)
                seek = False
                continue
        found = delivery.message.message_id
        # A subscription that did not keep the position (the topic moved to another broker
        # meanwhile) starts over at the earliest entry: seek again unless that is the answer.
        if seek or _published(delivery) >= millis:
            return MessageId(found.ledgerId, found.entryId, -1, last.partition)
        seek = True
    raise SeekError(f"{topic}: the subscription did not keep the position of a seek to {millis}")


MAX_SEEKS = 4


def _publish_time(lookup: Lookup, topic: str, entry: MessageId, settings: ReaderSettings) -> int:
    """The publish time (ms) of the entry ``entry`` names."""
    reader = RangeReader(lookup, ReadRange(topic, entry, entry), settings)
    entries = reader.entries()
    try:
        for raw in entries:
            return int(raw.section.metadata.publish_time)
    finally:
        entries.close()
    raise RequestTimeoutError(f"{topic}: the broker did not deliver its last entry {entry}")


def _published(delivery: Delivery) -> int:
    return int(parse_payload_section(delivery.payload or b"").metadata.publish_time)


def _first_delivery(
    consumer: Consumer,
    settings: ReaderSettings,
    wanted: Callable[[Delivery], bool] = lambda _: True,
) -> Delivery:
    """The first delivery ``wanted`` accepts after a seek, one permit at a time (others are
    entries sent before the seek: each gets its permit back)."""
    deadline = time.monotonic() + settings.request_timeout
    wait = settings.nudge_interval
    consumer.flow(1)
    while True:
        delivery = consumer.receive(wait)
        if delivery is not None and wanted(delivery):
            return delivery
        if time.monotonic() >= deadline:
            raise RequestTimeoutError(
                f"{consumer.topic}: the entry sought was not delivered within "
                f"{settings.request_timeout:g}s after a seek"
            )
        consumer.flow(1)
        wait = min(wait * 2, settings.max_nudge_interval)
