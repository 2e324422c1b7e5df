"""The TubeMQ protocol core against a real TubeMQ 2.4.0 cluster and its official Java client.

This package's connection registers a producer with the master, learns the broker and the
topic's partitions from it, and sends messages to the broker; the Java client reads them back.
The Java client then writes messages, and this package reads them with the broker's consumer
calls (register, GetMessage, commit). The tests run in file order: the Java consumer reads
the topic from its first message and expects exactly the messages sent before it.
"""

from __future__ import annotations

import pytest
from support.decoding import strings
from support.tubemq_cluster import HOST, JavaProbe, TubeMQCluster
from support.tubemq_fixtures import TUBEMQ_PARTITIONS

from pulsar_spark.tubemq import errors as tubemq_errors
from pulsar_spark.tubemq.client.connection import TubeMQConnection
from pulsar_spark.tubemq.wire import messages
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb
from pulsar_spark.tubemq.wire.messages import TubeMessage
from pulsar_spark.tubemq.wire.metadata import (
    BrokerInfo,
    TopicPlacement,
    ipv4_to_int,
    parse_broker_info,
    parse_topic_info,
)

pytestmark = [pytest.mark.integration, pytest.mark.tubemq]

PRODUCER_ID = "pulsar_spark_wire_producer"
LOOPBACK_ADDR = ipv4_to_int(HOST)  # sentAddr: the producer's IPv4 address
# (value, attribute string, msgType, msgTime, partition) of each message this package sends
OWN_MESSAGES = [
    (b"own value 0", "$msgType$=own,$msgTime$=202611251600,a=1,b=2", "own", "202611251600", 0),
    (b"own value 1", None, None, None, 1),
    (bytes(range(256)), "only=attrs", None, None, 2),
    (b"own value 3", None, None, None, 0),
]
JAVA_MESSAGES = {
    b"java value 1": "$msgType$=jtype,$msgTime$=202611251500,color=blue,size=9",
    b"java value 2": None,
    b"\x00\x01\x02\xff": "only=attrs",
}


@pytest.fixture(scope="module")
def broker_port(tubemq_cluster: TubeMQCluster, tubemq_topic: str) -> int:
    """Register a producer with the master as the Java client does; the broker it names."""
    with TubeMQConnection(HOST, tubemq_cluster.master_port) as master:
        registered = master.call(
            master_pb.RegisterRequestP2M(
                clientId=PRODUCER_ID, topicList=[tubemq_topic], brokerCheckSum=-1, hostName=HOST
            ),
            master_pb.RegisterResponseM2P,
        )
        heartbeat = master.call(
            master_pb.HeartRequestP2M(
                clientId=PRODUCER_ID,
                brokerCheckSum=registered.brokerCheckSum,
                hostName=HOST,
                topicList=[tubemq_topic],
            ),
            master_pb.HeartResponseM2P,
        )
        master.call(master_pb.CloseRequestP2M(clientId=PRODUCER_ID), master_pb.CloseResponseM2P)
    (broker,) = (parse_broker_info(info) for info in registered.brokerInfos)
    assert broker == BrokerInfo(1, HOST, tubemq_cluster.broker_port)
    assert registered.appdConfig.maxMsgSize == 1024 * 1024
    (topic,) = (parse_topic_info(info) for info in heartbeat.topicInfos)
    # broker 1 holds all partitions in one store
    assert topic.placements == (TopicPlacement(tubemq_topic, 1, TUBEMQ_PARTITIONS, 1),)
    assert topic.placements[0].partition_ids == tuple(range(TUBEMQ_PARTITIONS))
    return broker.port


@pytest.fixture(scope="module")
def own_message_ids(broker_port: int, tubemq_topic: str) -> list[int]:
    """Send OWN_MESSAGES through the broker; their message ids."""
    ids = []
    with TubeMQConnection(HOST, broker_port) as broker:
        for value, attributes, msg_type, msg_time, partition in OWN_MESSAGES:
            data, flag = messages.encode_payload(value, attributes)
            request = broker_pb.SendMessageRequestP2B(
                clientId=PRODUCER_ID,
                topicName=tubemq_topic,
                partitionId=partition,
                data=data,
                flag=flag,
                checkSum=messages.checksum(data),
                sentAddr=LOOPBACK_ADDR,
            )
            if msg_type:
                request.msgType = msg_type
            if msg_time:
                request.msgTime = msg_time
            reply = broker.call(request, broker_pb.SendMessageResponseB2P)
            assert reply.success
            assert reply.errMsg == str(reply.messageId)
            ids.append(reply.messageId)
    assert len(set(ids)) == len(OWN_MESSAGES)
    return ids


def read_partition(broker: TubeMQConnection, topic: str, group: str, partition: int) -> list:
    """Every message of ``partition`` from the group's first offset, then commit."""
    client_id = f"{group}_reader_{partition}"
    register = broker_pb.RegisterRequestC2B(
        opType=31,
        clientId=client_id,
        groupName=group,
        topicName=topic,
        partitionId=partition,
        readStatus=0,
    )
    first = broker.call(register, broker_pb.RegisterResponseB2C)
    assert first.currOffset == 0
    where = {"clientId": client_id, "topicName": topic, "partitionId": partition}
    found: list[TubeMessage] = []
    for _ in range(50):
        reply = broker.call(
            broker_pb.GetMessageRequestC2B(**where, groupName=group, lastPackConsumed=True),
            broker_pb.GetMessageResponseB2C,
            check=False,
        )
        if reply.errCode == 404:  # "The request offset reached maxOffset!"
            break
        assert reply.errCode == 200, reply.errMsg
        found.extend(messages.decode_messages(reply).rows())
    else:
        pytest.fail(f"partition {partition} never reported its end")
    committed = broker.call(
        broker_pb.CommitOffsetRequestC2B(**where, groupName=group, lastPackConsumed=True),
        broker_pb.CommitOffsetResponseB2C,
    )
    assert committed.currOffset == committed.maxOffset
    register.opType = 32
    broker.call(register, broker_pb.RegisterResponseB2C)
    return found


def test_broker_refusals_raise_their_errors(broker_port: int, tubemq_topic: str) -> None:
    send = broker_pb.SendMessageRequestP2B(
        clientId=PRODUCER_ID,
        topicName=tubemq_topic,
        partitionId=0,
        data=b"x",
        flag=0,
        checkSum=5,
        sentAddr=LOOPBACK_ADDR,
    )
    with TubeMQConnection(HOST, broker_port) as broker:
        with pytest.raises(
            tubemq_errors.TubeMQForbiddenError, match="Checksum msg data failure: 5"
        ):
            broker.call(send, broker_pb.SendMessageResponseB2P)
        send.checkSum, send.data = -1, b""
        with pytest.raises(tubemq_errors.TubeMQBadRequestError, match="data length is zero!"):
            broker.call(send, broker_pb.SendMessageResponseB2P)
        send.data, send.topicName = b"x", "no_such_topic"
        with pytest.raises(tubemq_errors.TubeMQForbiddenError, match="no_such_topic not existed"):
            broker.call(send, broker_pb.SendMessageResponseB2P)


def test_java_client_reads_what_this_package_sent(
    own_message_ids: list[int],
    tubemq_cluster: TubeMQCluster,
    tubemq_topic: str,
    java_probe: JavaProbe,
) -> None:
    lines = java_probe.run(
        "consume", tubemq_cluster.master, tubemq_topic, "java_reads_own", str(len(OWN_MESSAGES))
    )
    got = sorted(line for line in lines if line.startswith("GOT "))
    expected = sorted(
        f"GOT {value.hex()} {attributes or '-'} {msg_type or '-'} {msg_time or '-'}"
        for value, attributes, msg_type, msg_time, _ in OWN_MESSAGES
    )
    assert got == expected


def test_this_package_reads_what_the_java_client_sent(
    own_message_ids: list[int],
    broker_port: int,
    tubemq_cluster: TubeMQCluster,
    tubemq_topic: str,
    java_probe: JavaProbe,
) -> None:
    sent = [line.split() for line in java_probe.run("produce", tubemq_cluster.master, tubemq_topic)]
    assert [word for word, *_ in sent] == ["SENT"] * 3
    java_ids = {int(message_id): int(partition) for _, partition, message_id in sent}

    with TubeMQConnection(HOST, broker_port) as broker:
        by_partition = {
            p: read_partition(broker, tubemq_topic, "py_reads_all", p)
            for p in range(TUBEMQ_PARTITIONS)
        }

    own = [
        TubeMessage(message_id, value, attributes, 1 if attributes else 0)
        for message_id, (value, attributes, *_) in zip(own_message_ids, OWN_MESSAGES, strict=True)
    ]
    for partition, found in by_partition.items():
        own_here = [m for m, spec in zip(own, OWN_MESSAGES, strict=True) if spec[4] == partition]
        assert [m for m in found if m.message_id not in java_ids] == own_here
        java_here = [m for m in found if m.message_id in java_ids]
        assert all(java_ids[m.message_id] == partition for m in java_here)
    java_found = {
        m.value: m for found in by_partition.values() for m in found if m.message_id in java_ids
    }
    assert {value: m.attributes for value, m in java_found.items()} == JAVA_MESSAGES
    assert {m.message_id for m in java_found.values()} == set(java_ids)
    assert messages.parse_attributes(java_found[b"java value 1"].attributes) == {
        "$msgType$": "jtype",
        "$msgTime$": "202611251500",
        "color": "blue",
        "size": "9",
    }


def test_offsets_are_store_positions_shared_by_the_partitions(
    broker_port: int, tubemq_topic: str
) -> None:
    # Runs last: it appends to the topic that the tests above read whole.
    with TubeMQConnection(HOST, broker_port) as broker:
        offsets = []
        for partition in range(TUBEMQ_PARTITIONS):
            reply = broker.call(
                broker_pb.SendMessageRequestP2B(
                    clientId=PRODUCER_ID,
                    topicName=tubemq_topic,
                    partitionId=partition,
                    data=f"offset probe {partition}".encode(),
                    flag=0,
                    checkSum=messages.NO_CHECKSUM,
                    sentAddr=LOOPBACK_ADDR,
                ),
                broker_pb.SendMessageResponseB2P,
            )
            offsets.append(reply.appendOffset)
        # one 28-byte index entry per message, whatever its partition
        assert offsets == [offsets[0] + 28 * i for i in range(TUBEMQ_PARTITIONS)]

        where = {"clientId": "offset_reader", "topicName": tubemq_topic, "partitionId": 1}
        register = broker_pb.RegisterRequestC2B(
            opType=31, groupName="offsets", readStatus=0, currOffset=offsets[1], **where
        )
        assert broker.call(register, broker_pb.RegisterResponseB2C).currOffset == offsets[1]
        get = broker_pb.GetMessageRequestC2B(groupName="offsets", lastPackConsumed=True, **where)
        replies = []
        for _ in range(10):
            reply = broker.call(get, broker_pb.GetMessageResponseB2C, check=False)
            if reply.errCode == 404:
                break
            replies.append(reply)
        assert replies[0].currOffset == offsets[1]  # where the read started
        found = [value for r in replies for value in strings(messages.decode_messages(r).values)]
        assert found == [b"offset probe 1"]
        commit = broker_pb.CommitOffsetRequestC2B(groupName="offsets", **where)
        committed = broker.call(commit, broker_pb.CommitOffsetResponseB2C)
        # the read went past partition 2's message: the whole store was scanned
        assert committed.currOffset == committed.maxOffset == offsets[2] + 28
