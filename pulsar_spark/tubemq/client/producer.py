"""Sending messages to a TubeMQ topic, each acknowledged by its broker before the next.

How this works
--------------
:meth:`TubeMQProducer.open` looks the topic's partitions up through the master (see
:mod:`.cluster`) and :meth:`TubeMQProducer.send` sends each message with SendMessage to the
next partition in turn (round-robin, starting at ``first``), over one connection per broker.
A SendMessage reply is the broker's acknowledgement: with errCode 200 the message is stored,
and anything else raises its :class:`~pulsar_spark.tubemq.errors.TubeMQServerError`, so a
:meth:`send` that returns has been stored. Each message is its own SendMessage (the protocol
has no batch), but :meth:`send_all` sends a window of them back to back and then waits for
all the acknowledgements, instead of one round trip per message; :meth:`submit_columns` leaves
the waiting to the caller, who can send the next window meanwhile. A window's frames are built
together (:mod:`~pulsar_spark.tubemq.wire.send_request`) and its acknowledgements read many
at a time (:mod:`~pulsar_spark.tubemq.wire.send_acks`).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.retry import Retrier
from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.tubemq.client.cluster import (
    TubePartition,
    client_id,
    connect,
    lookup_partitions,
)
from pulsar_spark.tubemq.client.connection import (
    NO_SECURITY,
    Submitted,
    TubeMQConnection,
    TubeMQSecurity,
)
from pulsar_spark.tubemq.errors import TubeMQServerError, tubemq_error_for
from pulsar_spark.tubemq.wire import messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.metadata import ipv4_to_int
from pulsar_spark.tubemq.wire.send_acks import Ack
from pulsar_spark.tubemq.wire.send_request import (
    SEND,
    SendBatch,
    SendColumns,
    SendTemplate,
    send_columns,
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A message to send: its value, attribute string and system items."""

    value: bytes
    attributes: str | None = None
    msg_type: str | None = None
    msg_time: str | None = None


@dataclass(frozen=True, slots=True)
class StoredAt:
    """Where a message was stored."""

    partition: TubePartition
    message_id: int
    offset: int


# The write option that sets the producer's timeout (named when resending runs out of time).
RETRY_OPTION = "requestTimeoutMs"
# The requests sent to one broker: the window indexes of their messages, and the requests.
Group = tuple[list[int], Submitted[broker_pb.SendMessageResponseB2P]]


@dataclass(frozen=True, slots=True)
class Sending:
    """A window of messages sent by :meth:`TubeMQProducer.submit_columns`, acknowledgements
    outstanding: message i went to partition ``slots[i]``."""

    producer: TubeMQProducer
    columns: SendColumns
    slots: npt.NDArray[np.int64]
    groups: list[Group]

    def wait(self) -> list[StoredAt]:
        """Where each message was stored, once every one is acknowledged (see
        :meth:`TubeMQProducer.submit_columns`)."""
        partitions = self.producer.partitions
        acks = self.producer._acknowledged(self)
        return [
            StoredAt(partitions[slot], *ack)
            for slot, ack in zip(self.slots.tolist(), acks, strict=True)
        ]

    def confirm(self) -> int:
        """:meth:`wait` without a :class:`StoredAt` per message: how many were stored (all)."""
        return len(self.producer._acknowledged(self))


class TubeMQProducer:
    """Round-robin sends to one topic; see the module docstring."""

    def __init__(
        self,
        partitions: list[TubePartition],
        *,
        first: int = 0,
        timeout: float = 10.0,
        security: TubeMQSecurity = NO_SECURITY,
    ) -> None:
        self.partitions = partitions
        self._next = first % len(partitions)
        self._timeout = timeout
        self._security = security
        self._template = SendTemplate.of(
            client_id("producer"),
            [(partition.topic, partition.partition_id) for partition in partitions],
            _own_address(),
        )
        self._brokers = np.array([p.broker.broker_id for p in partitions], dtype=np.int64)
        self._connections: dict[int, TubeMQConnection] = {}
        self._open = contextlib.ExitStack()

    @classmethod
    def open(
        cls,
        masters: tuple[BrokerAddress, ...],
        topic: str,
        *,
        first: int = 0,
        timeout: float = 10.0,
        security: TubeMQSecurity = NO_SECURITY,
    ) -> TubeMQProducer:
        partitions = lookup_partitions(masters, topic, timeout=timeout, security=security)
        return cls(partitions, first=first, timeout=timeout, security=security)

    def __enter__(self) -> TubeMQProducer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def send(
        self,
        value: bytes,
        attributes: str | None = None,
        *,
        msg_type: str | None = None,
        msg_time: str | None = None,
    ) -> StoredAt:
        """Store one message; returns once the broker acknowledged it (raises otherwise)."""
        return self.send_all([Outgoing(value, attributes, msg_type, msg_time)])[0]

    def send_all(self, outgoing: Sequence[Outgoing]) -> list[StoredAt]:
        """Store the messages, each on the next partition in turn; returns once every one is
        acknowledged, and raises the first refusal otherwise."""
        return self.submit_all(outgoing).wait()

    def submit_all(self, outgoing: Sequence[Outgoing]) -> Sending:
        """:meth:`submit_columns` for ``outgoing``."""
        return self.submit_columns(
            send_columns(
                [
                    (*messages.encode_payload(m.value, m.attributes), m.msg_type, m.msg_time)
                    for m in outgoing
                ]
            )
        )

    def submit_columns(self, columns: SendColumns) -> Sending:
        """Send the messages, each on the next partition in turn, without waiting for their
        acknowledgements (:meth:`Sending.wait` does). The requests to a broker go out back to
        back (:meth:`TubeMQConnection.submit_encoded`), one round trip for all of them, and
        windows submitted one after another are in flight together.

        A message the broker refuses with a retriable code (419: its memory is full until it
        flushes) was not stored: the wait sends it again to the same partition, pausing as
        :class:`~pulsar_spark.common.retry.Retrier` does, for up to the producer's timeout
        without progress. Any other refusal raises."""
        count = len(columns)
        slots = (self._next + np.arange(count, dtype=np.int64)) % len(self.partitions)
        self._next = (self._next + count) % len(self.partitions)
        sending = Sending(self, columns, slots, [])
        sending.groups.extend(self._submit(sending, np.arange(count, dtype=np.int64)))
        return sending

    def _submit(self, sending: Sending, rows: npt.NDArray[np.int64]) -> list[Group]:
        """Send messages ``rows`` of the window, one batch of requests per broker."""
        brokers = self._brokers[sending.slots[rows]]
        groups = []
        for broker_id in dict.fromkeys(brokers.tolist()):
            taken = rows[brokers == broker_id]
            slots = sending.slots[taken]
            # the whole window to one broker: its columns as they are
            whole = len(taken) == len(sending.columns)
            columns = sending.columns if whole else sending.columns.take(taken)
            batch = SendBatch(self._template, slots, columns)
            connection = self._connection(self.partitions[int(slots[0])])
            submitted = connection.submit_encoded(
                SEND,
                len(taken),
                batch.encode,
                broker_pb.SendMessageResponseB2P,
                timeout=self._timeout,
            )
            groups.append((taken.tolist(), submitted))
        return groups

    def _acknowledged(self, sending: Sending) -> list[Ack]:
        """Each message's id and offset, in window order, once all are acknowledged."""
        acks: list[Any] = [None] * len(sending.slots)
        groups = sending.groups
        retrier = Retrier(f"sending to {self.partitions[0].topic}", self._timeout, RETRY_OPTION)
        while True:
            refused: dict[int, TubeMQServerError] = {}
            for indexes, submitted in groups:
                replies: list[Any] = submitted.acknowledgements()
                # Scanned acknowledgements are (id, offset) already; the rest are responses.
                for position in [i for i, reply in enumerate(replies) if type(reply) is not tuple]:
                    reply = replies[position]
                    if reply.errCode == rpc.SUCCESS:
                        replies[position] = reply.messageId, reply.appendOffset
                    else:
                        refused[indexes[position]] = tubemq_error_for(reply.errCode, reply.errMsg)
                if len(indexes) == len(acks):  # the whole window, in order
                    acks = replies
                    continue
                for index, reply in zip(indexes, replies, strict=True):
                    acks[index] = reply
            if not refused:
                return acks
            if sum(len(indexes) for indexes, _ in groups) > len(refused):
                retrier.progressed()
            lasting = [error for error in refused.values() if not error.retriable]
            retrier.failed(lasting[0] if lasting else next(iter(refused.values())))
            groups = self._submit(sending, np.array(sorted(refused), dtype=np.int64))

    def close(self) -> None:
        self._open.close()
        self._connections.clear()

    def _connection(self, partition: TubePartition) -> TubeMQConnection:
        broker_id = partition.broker.broker_id
        conn = self._connections.get(broker_id)
        if conn is None or conn.closed:
            conn = connect(partition, self._timeout, self._security)
            self._connections[broker_id] = conn
            self._open.callback(conn.close)
        return conn


def _own_address() -> int:
    """This host's IPv4 address as ``sentAddr``; 0 when it has none that resolves."""
    try:
        return ipv4_to_int(socket.gethostbyname(socket.gethostname()))
    except (OSError, ValueError, PulsarSparkError):
        return 0
