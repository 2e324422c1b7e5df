"""A minimal non-durable consumer: subscribe, receive entries, flow permits, unsubscribe.

The range reader and the driver's position queries (last message id, seek by time) both
stand on this. Received entries are queued by the connection's reader thread and taken by the
caller's thread, which does all decoding.
"""

from __future__ import annotations

import collections
import logging
import threading
import uuid
from typing import NamedTuple

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.errors import PulsarSparkError, UnknownServerError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb

log = logging.getLogger(__name__)
SUBSCRIPTION_PREFIX = "pulsar-spark-reader-"


class Delivery(NamedTuple):
    """One MESSAGE frame as received: its command and raw payload section (a tuple: one is
    made for every entry)."""

    message: pb.CommandMessage
    payload: memoryview | None


class Consumer:
    """A non-durable Exclusive subscription on one topic or partition."""

    def __init__(
        self,
        lookup: Lookup,
        topic: str,
        start: MessageId,
        *,
        timeout: float,
        subscription: str | None = None,
    ) -> None:
        self.topic = topic
        self.timeout = timeout
        self.subscription = subscription or new_subscription_name()
        self._queue: collections.deque[Delivery] = collections.deque()
        self._queued_bytes = 0
        self._ready = threading.Condition()
        self._error: PulsarSparkError | None = None
        self.connection: Connection = lookup.connect_to_owner(topic)
        self.consumer_id = self.connection.new_id()
        self.connection.register_consumer(self.consumer_id, self)
        try:
            self.connection.request(
                lambda rid: commands.subscribe_reader(
                    topic=topic,
                    subscription=self.subscription,
                    consumer_id=self.consumer_id,
                    request_id=rid,
                    start=start,
                ),
                what=f"subscribe to {topic}",
                timeout=timeout,
            )
        except BaseException:
            self.connection.unregister_consumer(self.consumer_id)
            raise

    # --- ConsumerHandler, called on the connection's thread ---------------------------------

    def on_message(self, message: pb.CommandMessage, payload: memoryview | None) -> None:
        with self._ready:
            self._queue.append(Delivery(message, payload))
            self._queued_bytes += len(payload or b"")
            if len(self._queue) == 1:  # the reader waits only on an empty queue
                self._ready.notify()

    def on_closed(self, error: PulsarSparkError) -> None:
        with self._ready:
            self._error = error
            self._ready.notify()

    # --- caller side -----------------------------------------------------------------------

    def flow(self, permits: int) -> None:
        self.connection.send(commands.flow(consumer_id=self.consumer_id, permits=permits))

    def receive(self, timeout: float) -> Delivery | None:
        """The next delivery, or None after ``timeout`` seconds without one."""
        with self._ready:
            if not self._queue and self._error is None:
                self._ready.wait(timeout)
            if self._queue:
                delivery = self._queue.popleft()
                self._queued_bytes -= len(delivery.payload or b"")
                return delivery
            if self._error is not None:
                raise self._error
            return None

    @property
    def queued_bytes(self) -> int:
        """Payload bytes received and not yet taken with :meth:`receive`."""
        return self._queued_bytes

    @property
    def queued_entries(self) -> int:
        """Entries received and not yet taken with :meth:`receive`."""
        return len(self._queue)

    @property
    def server_version(self) -> str:
        """What the broker this consumer is on calls itself."""
        return self.connection.server_version

    def ack_cumulative(self, message_id: MessageId) -> None:
        self.connection.send(
            commands.ack_cumulative(consumer_id=self.consumer_id, message_id=message_id)
        )

    def last_message_id(self) -> MessageId | None:
        """The topic's last entry, as a whole-entry id, or None if the topic holds none."""
        try:
            response = self.connection.request(
                lambda rid: commands.get_last_message_id(
                    consumer_id=self.consumer_id, request_id=rid
                ),
                what=f"last message id of {self.topic}",
                timeout=self.timeout,
            ).getLastMessageIdResponse
        except UnknownServerError as exc:
            # pulsar-lite answers an empty topic with an error instead of entry id -1. Its code,
            # UnknownError, is also every other unexpected failure, so only the message tells
            # the two apart; Apache Pulsar answers entry id -1, handled below.
            if "no messages" in str(exc).lower():
                return None
            raise
        return last_entry(response.last_message_id)

    def seek_publish_time(self, publish_time: int) -> None:
        """Move the cursor to the first entry published at or after ``publish_time`` (ms)."""
        self._seek(f"seek {self.topic} to publish time {publish_time}", publish_time=publish_time)

    def seek_message_id(self, message_id: MessageId) -> None:
        """Move the cursor to the entry ``message_id`` names (pulsar-lite delivers it next)."""
        self._seek(f"seek {self.topic} to {message_id}", message_id=message_id)

    def _seek(
        self, what: str, *, publish_time: int | None = None, message_id: MessageId | None = None
    ) -> None:
        """Seek, then drop what was delivered before the seek and not yet taken."""
        self.connection.request(
            lambda rid: commands.seek(
                consumer_id=self.consumer_id,
                request_id=rid,
                publish_time=publish_time,
                message_id=message_id,
            ),
            what=what,
            timeout=self.timeout,
        )
        with self._ready:
            self._queue.clear()
            self._queued_bytes = 0

    def close(self) -> None:
        """Remove the subscription (pulsar-lite keeps non-durable ones otherwise)."""
        try:
            if not self.connection.closed and self._error is None:
                self.connection.request(
                    lambda rid: commands.unsubscribe(consumer_id=self.consumer_id, request_id=rid),
                    what=f"unsubscribe {self.subscription} from {self.topic}",
                    timeout=self.timeout,
                )
        except PulsarSparkError as exc:
            # Everything was read already; a leftover non-durable subscription is harmless.
            log.warning("could not remove subscription %s: %s", self.subscription, exc)
        finally:
            self.connection.unregister_consumer(self.consumer_id)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def new_subscription_name() -> str:
    return SUBSCRIPTION_PREFIX + uuid.uuid4().hex[:10]


def last_entry(data: pb.MessageIdData) -> MessageId | None:
    """The whole-entry id (batch index -1) of a GetLastMessageId answer; None for entry -1.

    Apache Pulsar adds the entry's largest batch index (``num_messages_in_batch - 1``, 0 for
    an unbatched message), other brokers leave it out. Either way the answer means "up to the
    end of this entry", which is what a batch index of -1 says to the reader and the offsets:
    keeping the index would make an entry read to its end look like it went past the last
    message, and an unbatched last message look like it lay beyond its own end.
    """
    last = MessageId.from_wire(data.ledgerId, data.entryId, -1, data.partition)
    return None if last.entry_id < 0 else last
