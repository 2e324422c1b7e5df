"""Sending messages to a TubeMQ topic, each acknowledged by its broker before the next.

How this works
--------------
:meth:`TubeMQProducer.open` looks the topic's partitions up through the master (see
:mod:`.cluster`) and :meth:`TubeMQProducer.send` sends each message with SendMessage to the
next partition in turn (round-robin, starting at ``first``), over one connection per broker.
A SendMessage reply is the broker's acknowledgement: with errCode 200 the message is stored,
and anything else raises its :class:`~pulsar_spark.errors.TubeMQServerError`, so a
:meth:`send` that returns has been stored. There is no batching: the Java client sends one
message per call too.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass

from pulsar_spark.client.address import BrokerAddress
from pulsar_spark.client.tubemq.cluster import (
    TubePartition,
    client_id,
    lookup_partitions,
)
from pulsar_spark.client.tubemq.connection import TubeMQConnection
from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.protocol.tubemq import messages
from pulsar_spark.protocol.tubemq._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.protocol.tubemq.metadata import ipv4_to_int


@dataclass(frozen=True, slots=True)
class Sent:
    """Where a message was stored."""

    partition: TubePartition
    message_id: int
    offset: int


class TubeMQProducer:
    """Round-robin sends to one topic; see the module docstring."""

    def __init__(
        self, partitions: list[TubePartition], *, first: int = 0, timeout: float = 10.0
    ) -> None:
        self.partitions = partitions
        self._next = first % len(partitions)
        self._timeout = timeout
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
    ) -> TubeMQProducer:
        return cls(lookup_partitions(masters, topic, timeout=timeout), first=first, timeout=timeout)

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
    ) -> Sent:
        """Store one message; returns once the broker acknowledged it (raises otherwise)."""
        partition = self.partitions[self._next]
        self._next = (self._next + 1) % len(self.partitions)
        data, flag = messages.encode_payload(value, attributes)
        request = broker_pb.SendMessageRequestP2B(
            clientId=self._client,
            topicName=partition.topic,
            partitionId=partition.partition_id,
            data=data,
            flag=flag,
            checkSum=messages.checksum(data),
            sentAddr=self._address,
        )
        if msg_type:
            request.msgType = msg_type
        if msg_time:
            request.msgTime = msg_time
        reply = self._connection(partition).call(
            request, broker_pb.SendMessageResponseB2P, timeout=self._timeout
        )
        return Sent(partition, reply.messageId, reply.appendOffset)

    def close(self) -> None:
        self._open.close()
        self._connections.clear()

    def _connection(self, partition: TubePartition) -> TubeMQConnection:
        broker = partition.broker
        conn = self._connections.get(broker.broker_id)
        if conn is None or conn.closed:
            conn = TubeMQConnection(broker.host, broker.port, connect_timeout=self._timeout)
            self._connections[broker.broker_id] = conn
            self._open.callback(conn.close)
        return conn


def _own_address() -> int:
    """This host's IPv4 address as ``sentAddr``; 0 when it has none that resolves."""
    try:
        return ipv4_to_int(socket.gethostbyname(socket.gethostname()))
    except (OSError, ValueError, PulsarSparkError):
        return 0
