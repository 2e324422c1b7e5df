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
all the acknowledgements, instead of one round trip per message; :meth:`submit_all` leaves
the waiting to the caller, who can send the next window meanwhile.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.retry import Retrier
from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.tubemq.client.cluster import (
    TubePartition,
    by_broker,
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
# A message on its way: its index in the window, its partition and itself.
Planned = tuple[int, TubePartition, Outgoing]
# The requests sent to one broker: the window indexes of their messages, and the requests.
Group = tuple[list[int], Submitted[broker_pb.SendMessageResponseB2P]]


@dataclass(frozen=True, slots=True)
class Sending:
    """A window of messages sent by :meth:`TubeMQProducer.submit_all`, acknowledgements
    outstanding."""

    producer: TubeMQProducer
    planned: list[Planned]
    groups: list[Group]

    def wait(self) -> list[StoredAt]:
        """Where each message was stored, once every one is acknowledged (see
        :meth:`TubeMQProducer.submit_all`)."""
        return self.producer._acknowledged(self)


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
        self._client = client_id("producer")
        self._address = _own_address()
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
        """Send the messages, each on the next partition in turn, without waiting for their
        acknowledgements (:meth:`Sending.wait` does). The requests to a broker go out back to
        back (:meth:`TubeMQConnection.submit`), one round trip for all of them, and windows
        submitted one after another are in flight together.

        A message the broker refuses with a retriable code (419: its memory is full until it
        flushes) was not stored: the wait sends it again to the same partition, pausing as
        :class:`~pulsar_spark.common.retry.Retrier` does, for up to the producer's timeout
        without progress. Any other refusal raises."""
        planned = [(i, self._next_partition(), message) for i, message in enumerate(outgoing)]
        return Sending(self, planned, self._submit(planned))

    def _submit(self, planned: Sequence[Planned]) -> list[Group]:
        partitions = [partition for _, partition, _ in planned]
        return [
            (
                [planned[i][0] for i in indexes],
                self._connection(partitions[indexes[0]]).submit(
                    [self._request(planned[i][1], planned[i][2]) for i in indexes],
                    broker_pb.SendMessageResponseB2P,
                    timeout=self._timeout,
                ),
            )
            for indexes in by_broker(partitions)
        ]

    def _acknowledged(self, sending: Sending) -> list[StoredAt]:
        stored: dict[int, StoredAt] = {}
        groups = sending.groups
        retrier = Retrier(f"sending to {self.partitions[0].topic}", self._timeout, RETRY_OPTION)
        while True:
            before = len(stored)
            refused: dict[int, TubeMQServerError] = {}
            for indexes, submitted in groups:
                for index, reply in zip(indexes, submitted.replies(check=False), strict=True):
                    if reply.errCode == rpc.SUCCESS:
                        partition = sending.planned[index][1]
                        stored[index] = StoredAt(partition, reply.messageId, reply.appendOffset)
                    else:
                        refused[index] = tubemq_error_for(reply.errCode, reply.errMsg)
            if not refused:
                return [stored[index] for index in range(len(sending.planned))]
            if len(stored) > before:
                retrier.progressed()
            lasting = [error for error in refused.values() if not error.retriable]
            retrier.failed(lasting[0] if lasting else next(iter(refused.values())))
            groups = self._submit([sending.planned[index] for index in refused])

    def _next_partition(self) -> TubePartition:
        partition = self.partitions[self._next]
        self._next = (self._next + 1) % len(self.partitions)
        return partition

    def _request(
        self, partition: TubePartition, message: Outgoing
    ) -> broker_pb.SendMessageRequestP2B:
        data, flag = messages.encode_payload(message.value, message.attributes)
        request = broker_pb.SendMessageRequestP2B(
            clientId=self._client,
            topicName=partition.topic,
            partitionId=partition.partition_id,
            data=data,
            flag=flag,
            checkSum=messages.checksum(data),
            sentAddr=self._address,
        )
        if message.msg_type:
            request.msgType = message.msg_type
        if message.msg_time:
            request.msgTime = message.msg_time
        return request

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
