"""The master's broker and topic strings, parsed: captured replies and hand-built cases."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support import tubemq_golden as golden

from pulsar_spark.errors import RemoteProtocolError
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb
from pulsar_spark.tubemq.wire.framing import FrameDecoder
from pulsar_spark.tubemq.wire.metadata import (
    BrokerInfo,
    TopicInfo,
    TopicPlacement,
    ipv4_to_int,
    parse_broker_info,
    parse_topic_info,
)


def reply(captured: bytes) -> object:
    (frame,) = FrameDecoder().feed(captured)
    return rpc.decode_response(frame).message


def test_broker_and_topic_from_the_masters_replies() -> None:
    registered = reply(golden.JAVA_PRODUCER_REGISTER_REPLY)
    assert isinstance(registered, master_pb.RegisterResponseM2P)
    assert [parse_broker_info(i) for i in registered.brokerInfos] == [
        BrokerInfo(1, "127.0.0.1", 19123)
    ]
    heartbeat = reply(golden.JAVA_PRODUCER_HEARTBEAT_REPLY)
    assert isinstance(heartbeat, master_pb.HeartResponseM2P)
    (info,) = (parse_topic_info(i) for i in heartbeat.topicInfos)
    assert info == TopicInfo("pyprobe", (TopicPlacement("pyprobe", 1, 3, 1),), None)
    assert info.placements[0].partition_ids == (0, 1, 2)


def test_empty_broker_port_is_the_default() -> None:
    assert parse_broker_info("7:broker.example:") == BrokerInfo(7, "broker.example", 8123)


def test_topic_on_several_brokers_and_stores_with_a_size_limit() -> None:
    info = parse_topic_info("orders#1:2:2,5:1:1#2097152")
    assert info == TopicInfo(
        "orders",
        (TopicPlacement("orders", 1, 2, 2), TopicPlacement("orders", 5, 1, 1)),
        2097152,
    )
    assert info.placements[0].partition_ids == (0, 1, 10000, 10001)
    assert info.placements[1].partition_ids == (0,)


def test_topic_without_the_size_segment() -> None:
    assert parse_topic_info("t#2:4:1").max_message_size is None


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (parse_broker_info, "1:host", "is not brokerId:host:port"),
        (parse_broker_info, "1::8123", "is not brokerId:host:port"),
        (parse_broker_info, "x:host:8123", "'x' in 'x:host:8123' is not a number"),
        (parse_topic_info, "t", "is not topic#placements"),
        (parse_topic_info, "t#", "is not topic#placements"),
        (parse_topic_info, "t#1:3", "'1:3' is not brokerId:partitions:stores"),
        (parse_topic_info, "t#1:3:1#big", "'big' in 't#1:3:1#big' is not a number"),
    ],
)
def test_malformed_strings_are_protocol_errors(
    parse: Callable[[str], object], text: str, message: str
) -> None:
    with pytest.raises(RemoteProtocolError, match=message):
        parse(text)


def test_sent_address_is_a_signed_big_endian_int() -> None:
    assert ipv4_to_int("127.0.0.1") == 0x7F000001
    assert ipv4_to_int("192.0.2.2") == -1073741310
    assert ipv4_to_int("255.255.255.255") == -1
    # What this package sent in the captured SendMessage.
    (frame,) = FrameDecoder().feed(golden.SEND_WITH_ATTRIBUTES)
    assert rpc.decode_request(frame).message.sentAddr == ipv4_to_int("127.0.0.1")  # type: ignore[attr-defined]
