"""RangeReader against a loopback broker that answers by hand (:class:`FakeBroker`): a payload
whose checksum does not match fails the read, and a dispatch that stalls is nudged on.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest
from support.clients import settings_for
from support.fake_broker import FakeBroker, Handler, serve_one_consumer
from support.range_reading import Row, columns_rows

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.errors import ChecksumMismatchError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.framing import Frame, encode_payload_frame
from pulsar_spark.protocol.payload import encode_payload_section
from pulsar_spark.protocol.read_stage import ReadRange

pytestmark = pytest.mark.integration

Type = pb.BaseCommand.Type


def message_frame(consumer_id: int, entry: int, value: bytes, *, corrupt: bool) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name="fake-producer",
        sequence_id=entry,
        publish_time=1_700_000_000_000 + entry,
        partition_key=f"key-{entry}",
    )
    section = bytearray(encode_payload_section(metadata, value))
    if corrupt:
        section[-1] ^= 0x20
    command = pb.BaseCommand(
        type=Type.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=consumer_id,
            message_id=pb.MessageIdData(ledgerId=5, entryId=entry, partition=-1),
        ),
    )
    return encode_payload_frame(command, bytes(section))


def test_corrupted_checksum_fails_the_reader(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    sent_messages = threading.Event()

    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        command = frame.command
        if serve_one_consumer(server, sock, frame):
            return
        if command.type == Type.FLOW and not sent_messages.is_set():
            sent_messages.set()
            consumer_id = command.flow.consumer_id
            sock.sendall(
                message_frame(consumer_id, 0, b"intact", corrupt=False)
                + message_frame(consumer_id, 1, b"tampered", corrupt=True)
                + message_frame(consumer_id, 2, b"never read", corrupt=False)
            )

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=5.0), pool)
    topic = "persistent://public/default/corrupt"
    reader = RangeReader(
        lookup,
        ReadRange(topic, MessageId.earliest(), MessageId(5, 2)),
        ReaderSettings(queue_size=100, poll_timeout=5.0, request_timeout=5.0),
    )
    got: list[Row] = []
    started = time.monotonic()
    with pytest.raises(
        ChecksumMismatchError,
        match=r"^payload checksum mismatch: frame says 0x[0-9a-f]{8}, "
        r"data hashes to 0x[0-9a-f]{8}$",
    ) as info:
        for columns in reader:
            got.extend(columns_rows(columns))
    assert time.monotonic() - started < 3.0
    assert got == [
        Row(5, 0, -1, -1, b"intact", b"key-0", {}, 0, 0, "fake-producer"),
    ]
    # the two checksums in the message are the frame's and the recomputed one
    good = encode_payload_section(
        pb.MessageMetadata(
            producer_name="fake-producer",
            sequence_id=1,
            publish_time=1_700_000_000_001,
            partition_key="key-1",
        ),
        b"tampered",
    )
    assert f"frame says {struct.unpack_from('>I', good, 2)[0]:#010x}" in str(info.value)
    # the subscription was removed on the way out
    assert server.wait_for(Type.UNSUBSCRIBE, 2.0)
    kinds = server.kinds()
    assert kinds[:3] == ["CONNECT", "LOOKUP", "SUBSCRIBE"]
    assert kinds[3] == "FLOW"
    assert kinds[-1] == "UNSUBSCRIBE"
    subscribe = next(c.subscribe for c in server.received if c.type == Type.SUBSCRIBE)
    assert subscribe.topic == topic
    assert subscribe.durable is False
    assert subscribe.start_message_id.ledgerId == (1 << 64) - 1


def test_stalled_dispatch_is_nudged_with_one_permit(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    """A broker that stops dispatching although permits are left (as pulsar-lite sometimes
    does) gets one more permit after a short silence; here the first entry answers the first
    Flow (the reader's small opening grant), the grant that opens the window brings nothing,
    and every later entry is only sent in answer to a nudge."""
    values = [b"first", b"after one nudge", b"after two nudges"]
    flows: list[int] = []
    sent: list[int] = []

    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if serve_one_consumer(server, sock, frame) or frame.command.type != Type.FLOW:
            return
        flow = frame.command.flow
        flows.append(flow.messagePermits)
        if (len(flows) == 1 or flow.messagePermits == 1) and len(sent) < len(values):
            entry = len(sent)
            sent.append(entry)
            sock.sendall(message_frame(flow.consumer_id, entry, values[entry], corrupt=False))

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=5.0), pool)
    reader = RangeReader(
        lookup,
        ReadRange("persistent://public/default/stalls", MessageId.earliest(), MessageId(5, 2)),
        ReaderSettings(queue_size=100, poll_timeout=5.0, request_timeout=5.0),
    )
    started = time.monotonic()
    got = [row.value for columns in reader for row in columns_rows(columns)]
    assert got == values
    # the opening grant and two nudges: no more of the window is granted while the broker
    # still holds permits of the first (see client/flow_control.py)
    assert flows == [4, 1, 1]
    assert reader.nudges == 2
    assert time.monotonic() - started < 2.0  # nudged after 20-40 ms of silence, not seconds
