"""Where a transactional write's task attempts announce their transactions to the driver.

How this works
--------------
Spark hands the driver the commit messages of the task attempts it keeps, and nothing of the
others. An attempt that Spark fails after its writer returned (an error upstream of the write
after the last row, a speculative copy refused at commit) opened a transaction the driver would
never hear of, and which would hold back readers of the partitions it wrote to until the
coordinator's timeout aborted it. So every attempt announces its transaction here before it
publishes anything in it, and the driver, when it commits or aborts, reads every announcement
of its write and aborts each transaction it does not commit.

The registry is one ordinary topic (non-partitioned). An announcement is one message: the
write's name as key, the transaction id as value (``most:least``). Each write reads through
a durable subscription of its own, named like its announcements' key, created by the driver
before any task runs: the subscription keeps the announcements from being trimmed or the topic
from being deleted as inactive until the driver has read them. Several writes share the topic
and each keeps only its own key.

A batch write's subscription is created at the topic's end and deleted after the commit or
abort. A streaming query's subscription stays for the life of its checkpoint: after each
micro-batch's commit it is acknowledged through what was read, so the next commit reads only
newer announcements.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pulsar_spark.client.durable import (
    acknowledge_through,
    remove_subscription,
    subscription_bounds,
)
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.common.spans import Spans
from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.protocol.transactions import TxnId

log = logging.getLogger(__name__)

REGISTRY_TOPIC = "__pulsar_spark_transactions"
"""The registry's local name, in the namespace of the written topic unless set otherwise."""


@dataclass(frozen=True, slots=True)
class Announcements:
    """What a write's tasks announced since its last read, and where that read ended."""

    txns: tuple[TxnId, ...]
    through: MessageId | None  # None: nothing new was read


@dataclass(frozen=True, slots=True)
class TransactionRegistry:
    """One write's view of the registry ``topic``: its announcements carry the key ``name``,
    which is also its subscription's name."""

    topic: str
    name: str
    timeout: float

    def open(self, lookup: Lookup, *, from_end: bool) -> None:
        """Make sure the topic and the write's subscription exist (on the driver, before any
        task runs). ``from_end`` moves a new subscription past what the topic holds already."""
        with Producer.create(lookup, self.topic):
            pass  # a producer creates the topic when it does not exist yet
        _, last = subscription_bounds(lookup, self.topic, self.name, timeout=self.timeout)
        if from_end and last is not None:
            acknowledge_through(lookup, self.topic, self.name, last, timeout=self.timeout)

    def announce(self, lookup: Lookup, txn: TxnId) -> None:
        """Record ``txn`` as one of the write's (in a task, before anything is sent in it);
        returns once the broker stored it."""
        value = f"{txn.most_bits}:{txn.least_bits}".encode()
        with Producer.create(lookup, self.topic) as producer:
            producer.send(OutgoingMessage(value=value, key=self.name))

    def read(self, lookup: Lookup) -> Announcements:
        """Every transaction announced with this write's key after the subscription's position."""
        start, last = subscription_bounds(lookup, self.topic, self.name, timeout=self.timeout)
        if last is None or (start is not None and start.entry >= last.entry):
            return Announcements((), None)
        read_range = ReadRange(
            self.topic, start or MessageId.earliest(), last, start_inclusive=start is None
        )
        settings = ReaderSettings(poll_timeout=self.timeout, request_timeout=self.timeout)
        txns: list[TxnId] = []
        for columns in RangeReader(lookup, read_range, settings):
            txns.extend(self._own(columns))
        return Announcements(tuple(txns), last)

    def acknowledge(self, lookup: Lookup, through: MessageId) -> None:
        """Move the subscription past announcements already dealt with."""
        acknowledge_through(lookup, self.topic, self.name, through, timeout=self.timeout)

    def close(self, lookup: Lookup) -> None:
        """Delete the write's subscription (a batch write, once committed or aborted)."""
        remove_subscription(lookup, self.topic, self.name, timeout=self.timeout)

    def _own(self, columns: MessageColumns) -> list[TxnId]:
        if columns.key is None:
            return []
        own = self.name.encode()
        found = []
        for index in range(columns.count):
            if _span(columns.key, index) == own:
                found.append(_txn_id(_span(columns.values, index)))
        return found


def _span(spans: Spans, index: int) -> bytes:
    start = int(spans.starts[index])
    return bytes(spans.buffer[start : start + int(spans.lengths[index])])


def _txn_id(value: bytes) -> TxnId:
    try:
        most, least = value.decode("ascii").split(":")
        return TxnId(int(most), int(least))
    except ValueError as exc:
        raise CorruptPayloadError(
            f"transaction registry: an announcement's value is not 'most:least' ({value!r})"
        ) from exc
