"""The cluster metadata a TubeMQ master sends as strings, parsed.

The master describes brokers and topics in text fields of its producer replies:

- ``brokerInfos`` entries, ``"brokerId:host:port"``: an empty port means 8123.
- ``topicInfos`` entries (producer heartbeat), ``"topic#brokerId:partitions:stores,..."``,
  optionally followed by ``"#maxMsgSize"``: each broker holds ``stores`` stores of
  ``partitions`` partitions each.

A partition id encodes its store: ``store * 10000 + index`` (``META_STORE_INS_BASE``), so a
topic of 3 partitions in one store has ids 0, 1, 2, and with two stores also 10000-10002.

A producer also reports its own IPv4 address as ``SendMessageRequestP2B.sentAddr``, a signed
32-bit big-endian integer (:func:`ipv4_to_int`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from pulsar_spark.errors import RemoteProtocolError

DEFAULT_BROKER_PORT = 8123
STORE_PARTITION_BASE = 10_000


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    broker_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class TopicPlacement:
    """Where one broker keeps a topic: ``stores`` stores of ``partitions`` partitions."""

    topic: str
    broker_id: int
    partitions: int
    stores: int

    @property
    def partition_ids(self) -> tuple[int, ...]:
        """Every partition id on this broker, store by store."""
        return tuple(
            store * STORE_PARTITION_BASE + index
            for store in range(self.stores)
            for index in range(self.partitions)
        )


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One ``topicInfos`` entry: the topic's placements and, when sent, its largest message."""

    topic: str
    placements: tuple[TopicPlacement, ...]
    max_message_size: int | None


def parse_broker_info(text: str) -> BrokerInfo:
    """Parse ``"brokerId:host:port"`` (RemoteProtocolError if it is not that)."""
    parts = text.strip().split(":")
    if len(parts) != 3 or not parts[1]:
        raise RemoteProtocolError(f"broker info {text!r} is not brokerId:host:port")
    broker_id, host, port = parts
    return BrokerInfo(
        _int(broker_id, text), host, _int(port, text) if port else DEFAULT_BROKER_PORT
    )


def parse_topic_info(text: str) -> TopicInfo:
    """Parse ``"topic#brokerId:partitions:stores,...[#maxMsgSize]"``."""
    segments = text.strip().split("#")
    if len(segments) not in (2, 3) or not segments[0] or not segments[1]:
        raise RemoteProtocolError(f"topic info {text!r} is not topic#placements[#maxMsgSize]")
    topic = segments[0]
    placements = []
    for item in segments[1].split(","):
        fields = item.split(":")
        if len(fields) != 3:
            raise RemoteProtocolError(
                f"topic info {text!r}: {item!r} is not brokerId:partitions:stores"
            )
        broker_id, partitions, stores = (_int(field, text) for field in fields)
        placements.append(TopicPlacement(topic, broker_id, partitions, stores))
    size = segments[2] if len(segments) == 3 else ""
    return TopicInfo(topic, tuple(placements), _int(size, text) if size else None)


def ipv4_to_int(address: str) -> int:
    """An IPv4 address as the signed 32-bit integer TubeMQ puts in ``sentAddr``."""
    value = int(ipaddress.IPv4Address(address))
    return value - (1 << 32) if value >= 1 << 31 else value


def _int(field: str, text: str) -> int:
    try:
        return int(field)
    except ValueError:
        raise RemoteProtocolError(f"{field!r} in {text!r} is not a number") from None
