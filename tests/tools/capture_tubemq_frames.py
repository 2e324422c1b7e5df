"""Record the TubeMQ frames that tests/support/tubemq_golden.py holds, from a real cluster.

Run from the repository root (needs Maven and a JDK, which ``make tubemq`` installs)::

    python tests/tools/capture_tubemq_frames.py > /tmp/frames.txt

What it does:

1. starts a cluster with :class:`~support.tubemq_cluster.TubeMQCluster` and creates the topic
   ``pyprobe`` of 3 partitions (this takes 70-110 s);
2. puts :class:`~support.tcp_recorder.RecordingProxy` in front of the master and the broker;
3. runs TubeMQProbe ``produce`` through the master proxy (the Java producer's master calls;
   its messages go to the broker directly), then this package's producer and consumer calls
   through the broker proxy, the refusals and two calls no service serves;
4. prints every frame each way as ``<connection> <direction> <serial> <method> <hex>``.

Message ids, timestamps, checksums of the broker's checks, client ids and ports change from
run to run, so the golden module is updated by hand from the output, together with the
exact values its tests assert.
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from support.tcp_recorder import RecordingProxy
from support.tubemq_cluster import HOST, JavaProbe, TubeMQCluster

from pulsar_spark.tubemq.client.connection import TubeMQConnection
from pulsar_spark.tubemq.errors import TubeMQRemoteCallError
from pulsar_spark.tubemq.wire import messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire._generated import tubemq_rpc_pb2 as rpc_pb
from pulsar_spark.tubemq.wire.framing import Frame, FrameDecoder, encode_frame
from pulsar_spark.tubemq.wire.metadata import ipv4_to_int

TOPIC = "pyprobe"
PRODUCER = "pyprobe_producer_1"
CONSUMER = "pyprobe_consumer_1"
GROUP = "pyprobe_group"


def send(broker: TubeMQConnection, data: bytes, flag: int, checksum: int, **extra: str) -> None:
    request = broker_pb.SendMessageRequestP2B(
        clientId=PRODUCER,
        topicName=extra.pop("topic", TOPIC),
        partitionId=0,
        data=data,
        flag=flag,
        checkSum=checksum,
        sentAddr=ipv4_to_int(HOST),
        **extra,
    )
    broker.call(request, broker_pb.SendMessageResponseB2P, check=False)


def own_calls(broker_port: int) -> None:
    """This package's producer and consumer calls on partition 0."""
    attributes = "$msgType$=typeA,$msgTime$=202611251450,k1=v1,k2=v2"
    with TubeMQConnection(HOST, broker_port) as broker:
        data, flag = messages.encode_payload(b"hello tubemq", attributes)
        send(broker, data, flag, messages.checksum(data), msgType="typeA", msgTime="202611251450")
        send(broker, b"plain", 0, messages.NO_CHECKSUM)
        send(broker, b"", 0, messages.NO_CHECKSUM)
        send(broker, b"x", 0, 5)
        send(broker, b"x", 0, messages.NO_CHECKSUM, topic="nosuchtopic")
    for group in (GROUP, "pyjava_group"):
        with TubeMQConnection(HOST, broker_port) as broker:
            for partition in (0, 1, 2):
                read_partition(broker, group, partition)


def read_partition(broker: TubeMQConnection, group: str, partition: int) -> None:
    where = {"clientId": CONSUMER, "topicName": TOPIC, "partitionId": partition}
    register = broker_pb.RegisterRequestC2B(opType=31, groupName=group, readStatus=0, **where)
    broker.call(register, broker_pb.RegisterResponseB2C)
    for _ in range(10):
        get = broker_pb.GetMessageRequestC2B(groupName=group, lastPackConsumed=True, **where)
        if broker.call(get, broker_pb.GetMessageResponseB2C, check=False).errCode == 404:
            break
    commit = broker_pb.CommitOffsetRequestC2B(groupName=group, lastPackConsumed=True, **where)
    broker.call(commit, broker_pb.CommitOffsetResponseB2C)
    register.opType = 32
    broker.call(register, broker_pb.RegisterResponseB2C)


def unserved_call(port: int, service: int, method: int, request: bytes, serial_no: int) -> None:
    """A call the service does not serve; prints the exception reply the server sends."""
    parts = [
        rpc_pb.RpcConnHeader(flag=0),
        rpc_pb.RequestHeader(serviceType=service, protocolVer=3),
        rpc_pb.RequestBody(method=method, timeout=1000, request=request),
    ]
    body = b"".join(bytes([p.ByteSize()]) + p.SerializeToString() for p in parts)
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(encode_frame(serial_no, body))
        received = b""
        while not FrameDecoder().feed(received):
            received += sock.recv(65536)
    print(f"unserved service={service} method={method} reply {serial_no} {received.hex()}")


def print_frames(name: str, proxy: RecordingProxy) -> None:
    for number, exchange in enumerate(proxy.exchanges):
        for direction, data in (("request", exchange.sent), ("reply", exchange.received)):
            decoder = FrameDecoder()
            pos = 0
            for end in range(1, len(data) + 1):
                for frame in decoder.feed(data[end - 1 : end]):
                    method = _method_of(direction, frame)
                    print(f"{name}#{number} {direction} {frame.serial_no} {method}", end=" ")
                    print(bytes(data[pos:end]).hex())
                    pos = end


def _method_of(direction: str, frame: Frame) -> str:
    if direction == "request":
        return rpc.decode_request(frame).call.method.name
    try:
        return rpc.decode_response(frame).call.method.name
    except TubeMQRemoteCallError as exc:
        return f"exception:{exc.exception_name}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = TubeMQCluster.start(Path(tmp) / "run")
        try:
            cluster.create_topics((TOPIC,), 3)
            probe = JavaProbe(Path(tmp))
            master = RecordingProxy(HOST, cluster.master_port)
            broker = RecordingProxy(HOST, cluster.broker_port)
            probe.run("produce", f"{HOST}:{master.port}", TOPIC)
            own_calls(broker.port)
            get = broker_pb.GetMessageRequestC2B(
                clientId="x", partitionId=0, groupName="g", topicName=TOPIC
            )
            unserved_call(cluster.master_port, 1, 17, get.SerializeToString(), 41)
            unserved_call(cluster.broker_port, 3, 14, b"", 42)
            time.sleep(0.5)
            master.close()
            broker.close()
            print_frames("master", master)
            print_frames("broker", broker)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
