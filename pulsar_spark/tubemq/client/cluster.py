"""Where a TubeMQ topic lives: its brokers and partitions, as the master tells a producer.

How this works
--------------
A TubeMQ master hands out cluster metadata only through client registration. A producer that
registers (``RegisterRequestP2M``) gets the broker list (``"brokerId:host:port"``), and its
first heartbeat (``HeartRequestP2M``) gets each topic's placement
(``"topic#brokerId:partitions:stores"``). :func:`lookup_partitions` does exactly that, under a
client id of its own, then closes the registration again: nothing stays behind on the master.

``master.addresses`` may name several masters (only the active one answers; a standby replies
with an exception); each is tried in turn until one answers. A TLS failure or a refused
identity ends the search at once: it is the client's set-up, which the next master would
refuse as well.

A partition is named ``brokerId:topic:partitionId``, the key TubeMQ's own clients use.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.errors import PulsarSparkError, TlsError, TopicLookupError
from pulsar_spark.tubemq.client.connection import NO_SECURITY, TubeMQConnection, TubeMQSecurity
from pulsar_spark.tubemq.errors import TubeMQCertificateError
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb
from pulsar_spark.tubemq.wire.metadata import (
    STORE_PARTITION_BASE,
    BrokerInfo,
    parse_broker_info,
    parse_topic_info,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TubePartition:
    """One partition of a topic on one broker."""

    broker: BrokerInfo
    topic: str
    partition_id: int

    @property
    def key(self) -> str:
        """``brokerId:topic:partitionId``, the partition's name in offsets and rows."""
        return f"{self.broker.broker_id}:{self.topic}:{self.partition_id}"

    @property
    def store(self) -> str:
        """The store the partition's messages share offsets with (see the protocol docs)."""
        return f"{self.broker.broker_id}:{self.topic}:{self.partition_id // STORE_PARTITION_BASE}"


def by_broker(partitions: Sequence[TubePartition]) -> list[list[int]]:
    """Indexes into ``partitions`` grouped by the broker each one is on, so that one
    connection serves each group."""
    groups: dict[int, list[int]] = {}
    for index, partition in enumerate(partitions):
        groups.setdefault(partition.broker.broker_id, []).append(index)
    return list(groups.values())


def connect(
    partition: TubePartition, timeout: float, security: TubeMQSecurity = NO_SECURITY
) -> TubeMQConnection:
    """A connection to the broker that holds ``partition``."""
    broker = partition.broker
    return TubeMQConnection(broker.host, broker.port, connect_timeout=timeout, security=security)


def client_id(purpose: str) -> str:
    """A client id as TubeMQ's clients build them: host, purpose and a random part."""
    return f"{socket.gethostname()}-{purpose}-{uuid.uuid4().hex[:12]}"


def master_call(
    masters: tuple[BrokerAddress, ...],
    call: Callable[[TubeMQConnection], T],
    timeout: float,
    security: TubeMQSecurity = NO_SECURITY,
) -> T:
    """Run ``call(connection)`` against the first master that answers (see the module)."""
    errors: list[str] = []
    for address in masters:
        try:
            with TubeMQConnection(
                address.host, address.port, connect_timeout=timeout, security=security
            ) as master:
                return call(master)
        except (TlsError, TubeMQCertificateError):
            raise
        except PulsarSparkError as exc:
            errors.append(f"{address}: {exc}")
    raise TopicLookupError("no TubeMQ master answered: " + "; ".join(errors))


def lookup_partitions(
    masters: tuple[BrokerAddress, ...],
    topic: str,
    *,
    timeout: float = 10.0,
    security: TubeMQSecurity = NO_SECURITY,
) -> list[TubePartition]:
    """Every partition of ``topic``, broker by broker, in partition-id order.

    Raises TopicLookupError when no master answers or the topic is not published on any
    broker.
    """
    producer = client_id("lookup")
    host = socket.gethostname()

    def ask(master: TubeMQConnection) -> tuple[list[str], list[str]]:
        registered = master.call(
            master_pb.RegisterRequestP2M(
                clientId=producer, topicList=[topic], brokerCheckSum=-1, hostName=host
            ),
            master_pb.RegisterResponseM2P,
            timeout=timeout,
        )
        try:
            heartbeat = master.call(
                master_pb.HeartRequestP2M(
                    clientId=producer,
                    brokerCheckSum=registered.brokerCheckSum,
                    hostName=host,
                    topicList=[topic],
                ),
                master_pb.HeartResponseM2P,
                timeout=timeout,
            )
        finally:
            master.call(
                master_pb.CloseRequestP2M(clientId=producer),
                master_pb.CloseResponseM2P,
                timeout=timeout,
                check=False,
            )
        return list(registered.brokerInfos), list(heartbeat.topicInfos)

    broker_texts, topic_texts = master_call(masters, ask, timeout, security)
    brokers = {b.broker_id: b for b in map(parse_broker_info, broker_texts)}
    partitions: list[TubePartition] = []
    for info in map(parse_topic_info, topic_texts):
        if info.topic != topic:
            continue
        for placement in info.placements:
            broker = brokers.get(placement.broker_id)
            if broker is None:
                raise TopicLookupError(
                    f"topic {topic!r} is placed on broker {placement.broker_id}, which the "
                    "master did not list"
                )
            partitions.extend(TubePartition(broker, topic, p) for p in placement.partition_ids)
    if not partitions:
        raise TopicLookupError(
            f"topic {topic!r} is not published on any broker of the TubeMQ cluster at "
            f"{','.join(map(str, masters))} (is the topic created and its broker online?)"
        )
    return sorted(partitions, key=lambda p: (p.broker.broker_id, p.partition_id))
