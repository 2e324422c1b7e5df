"""Connection failures: a broker that is not there, a request never answered, and, against
loopback servers that answer by hand (:class:`FakeBroker`), a handshake that never completes,
a peer that stops answering keep-alive pings, broker pings and oversize frames.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import pytest
from support.broker_proxy import BrokerProxy
from support.clients import settings_for
from support.fake_broker import (
    FakeBroker,
    Handler,
    closed_port,
    connected_frame,
    handshake_only,
    ping_frame,
)

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.settings import ConnectionSettings
from pulsar_spark.errors import (
    BrokerUnreachableError,
    ConnectionClosedError,
    FrameTooLargeError,
    TopicLookupError,
)
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import Frame

pytestmark = pytest.mark.integration

Type = pb.BaseCommand.Type


# --- failures against the test brokers ---------------------------------------------------------


def test_unreachable_broker_fails_fast() -> None:
    port = closed_port()
    pool = ConnectionPool()
    lookup = Lookup(settings_for(f"pulsar://127.0.0.1:{port}", timeout=3, connect_timeout=3), pool)
    started = time.monotonic()
    with pytest.raises(
        BrokerUnreachableError,
        match=rf"^cannot connect to Pulsar broker at 127\.0\.0\.1:{port} within 3s: ",
    ):
        lookup.partitions("persistent://public/default/x")
    assert time.monotonic() - started < 3.5
    pool.close()


LOST_REQUEST_ID = 2**63
"""A request id the client never uses: the broker's answer to it is dropped as unknown."""


def lose_topic_listings(command: pb.BaseCommand) -> bool:
    """A proxy rewrite giving each GetTopicsOfNamespace a request id the client never used,
    so that its answer (Apache sends one, pulsar-lite none) never reaches the request."""
    if command.type != Type.GET_TOPICS_OF_NAMESPACE:
        return False
    command.getTopicsOfNamespace.request_id = LOST_REQUEST_ID
    return True


def test_unanswered_request_times_out_and_the_connection_survives(
    broker: LocalBroker | ApacheBroker,
) -> None:
    pool = ConnectionPool()
    proxy = BrokerProxy((broker.host, broker.port), lose_topic_listings)
    lookup = Lookup(settings_for(proxy.url, timeout=1.0), pool)
    try:
        connection = lookup.service_connection()
        started = time.monotonic()
        with pytest.raises(TopicLookupError) as info:
            lookup.topics_of_namespace("public/default")
        elapsed = time.monotonic() - started
        assert 0.9 <= elapsed < 2.5
        assert str(info.value) == (
            "the broker did not answer GetTopicsOfNamespace for 'public/default' within 1s; "
            "it may not support listing topics (pulsar-lite does not), so topicsPattern "
            "cannot be resolved: name topics with 'topic' or 'topics'"
        )
        assert "no response from broker" in str(info.value.__cause__)
        # same connection, still usable
        assert not connection.closed
        assert lookup.service_connection() is connection
        assert lookup.partitions("persistent://public/default/part3") == 3
        assert lookup.partitions("persistent://public/default/part4") == 4
    finally:
        pool.close()
        proxy.close()


# --- failures against loopback servers written here --------------------------------------------


def test_silent_handshake_is_unreachable(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    server = fake_broker(lambda *_: None)
    started = time.monotonic()
    with pytest.raises(
        BrokerUnreachableError,
        match=rf"^broker at 127\.0\.0\.1:{server.port} accepted TCP but did not complete the "
        r"Pulsar handshake within 1s$",
    ):
        pool.get(server.address, ConnectionSettings(connect_timeout=1.0))
    assert 0.9 <= time.monotonic() - started < 2.5
    assert server.kinds() == ["CONNECT"]


def test_keepalive_detects_a_peer_that_went_silent(
    fake_broker: Callable[[Handler], FakeBroker],
) -> None:
    server = fake_broker(handshake_only)
    connection = Connection.open(
        server.address, ConnectionSettings(connect_timeout=2.0, keepalive_interval=0.5)
    )
    assert connection.server_version == "fake-broker"
    assert connection.protocol_version == 19
    started = time.monotonic()
    with pytest.raises(
        ConnectionClosedError,
        match=rf"^broker 127\.0\.0\.1:{server.port} did not answer keep-alive pings for 1s$",
    ):
        connection.request(
            lambda rid: commands.partitioned_metadata(topic="t", request_id=rid),
            what="partitioned metadata of t",
            timeout=10.0,
        )
    elapsed = time.monotonic() - started
    assert 0.8 <= elapsed < 2.5
    assert connection.closed
    assert server.wait_for(Type.PING, 1.0)
    assert server.kinds() == ["CONNECT", "PARTITIONED_METADATA", "PING"]
    with pytest.raises(ConnectionClosedError, match=r"did not answer keep-alive pings"):
        connection.send(commands.ping())


def test_connection_answers_broker_pings(fake_broker: Callable[[Handler], FakeBroker]) -> None:
    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(connected_frame())
            time.sleep(0.2)
            sock.sendall(ping_frame())

    server = fake_broker(handler)
    connection = Connection.open(server.address, ConnectionSettings(connect_timeout=2.0))
    try:
        assert server.wait_for(Type.PONG, 2.0)
        assert server.kinds() == ["CONNECT", "PONG"]
        assert not connection.closed
    finally:
        connection.close()


def test_ping_sent_right_behind_connected_is_answered(
    fake_broker: Callable[[Handler], FakeBroker],
) -> None:
    """A broker may write its next frame right behind CONNECTED; TCP can deliver both in one
    segment. That frame belongs to the connection and must not be dropped with the
    handshake's buffer."""

    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(connected_frame() + ping_frame())

    server = fake_broker(handler)
    connection = Connection.open(server.address, ConnectionSettings(connect_timeout=2.0))
    try:
        assert server.wait_for(Type.PONG, 2.0), f"no PONG; broker received {server.kinds()}"
        assert server.kinds() == ["CONNECT", "PONG"]
    finally:
        connection.close()


def test_huge_frame_during_handshake(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(struct.pack(">I", 0x7FFFFFF0) + b"\x00" * 64)

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=2.0), pool)
    started = time.monotonic()
    with pytest.raises(
        FrameTooLargeError,
        match=r"^frame of 2147483632 bytes exceeds the maximum frame size of 5253120 bytes$",
    ):
        lookup.partitions("persistent://public/default/t")
    assert time.monotonic() - started < 1.0


def test_huge_frame_after_handshake_fails_the_pending_request(
    fake_broker: Callable[[Handler], FakeBroker], pool: ConnectionPool
) -> None:
    def handler(server: FakeBroker, sock: socket.socket, frame: Frame) -> None:
        if frame.command.type == Type.CONNECT:
            sock.sendall(connected_frame())
        elif frame.command.type == Type.PARTITIONED_METADATA:
            sock.sendall(struct.pack(">I", 6 * 1024 * 1024) + b"\x00" * 64)

    server = fake_broker(handler)
    lookup = Lookup(settings_for(server.url, timeout=5.0), pool)
    first = lookup.service_connection()
    started = time.monotonic()
    with pytest.raises(ConnectionClosedError) as info:
        lookup.partitions("persistent://public/default/t")
    assert time.monotonic() - started < 1.0
    assert str(info.value) == (
        "partitioned metadata of persistent://public/default/t: frame of 6291456 bytes exceeds "
        "the maximum frame size of 5253120 bytes"
    )
    assert first.closed
    second = lookup.service_connection()  # the pool replaces the failed connection
    assert second is not first
    assert not second.closed
    assert server.kinds() == ["CONNECT", "PARTITIONED_METADATA", "CONNECT"]
