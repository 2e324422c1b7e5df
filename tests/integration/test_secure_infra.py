"""The TLS and authentication test set-up is real: checked with the official Apache client.

pulsar-lite has neither TLS nor authentication, so :class:`BrokerProxy` terminates TLS and
enforces an :class:`AuthPolicy` in front of it. These tests drive the proxies with
``pulsar-client`` (the Apache C++ core) and, where the exact bytes matter, with a minimal
client speaking the binary protocol, so that tests of our own client against them mean
something. Observed official-client behaviour they pin down:

- a server certificate it must refuse (unknown CA, expired, wrong host) fails at once with
  ``ConnectError``;
- an authentication CommandError during CONNECT is treated like a dropped connection: the
  client reconnects with backoff until its operation timeout and raises ``Timeout``;
- so does a refused client certificate (TLS 1.3 reports it only after the client's side of
  the handshake is done);
- it answers every AuthChallenge with fresh credentials, calling a token supplier each time,
  and keeps its connection. (Over TLS it writes that answer outside its write queue: a
  challenge arriving while it is writing a large frame can interleave the two and corrupt
  its stream, so these tests only challenge it while it is idle.)
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from broker_proxy import (
    AUTH_FAILED_MESSAGE,
    AUTH_FAILED_REQUEST_ID,
    AUTH_REFRESH_DATA,
    AuthPolicy,
    BrokerProxy,
    apache_proxy,
    server_tls_context,
)
from support import tokens
from support.certs import CLIENT_CN, TestCerts
from support.fixtures import OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
from support.oauth2_server import OAuth2Server

from pulsar_spark.local import LocalBroker
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import FrameDecoder, encode_command

pytestmark = pytest.mark.integration

Type = pb.BaseCommand.Type

RECEIVE_TIMEOUT_MS = 10_000
"""Every receive waits at most this long."""

FAILING_OPERATION_TIMEOUT = 2
"""Operation timeout (seconds) for clients expected to fail: bounds their retries."""

RAW_TIMEOUT = 10.0
"""Seconds a raw-protocol read waits before the test fails."""

_LOGGER = logging.getLogger("pulsar.official")


@contextlib.contextmanager
def official_client(
    url: str, *, operation_timeout_seconds: int = 10, **options: object
) -> Iterator[pulsar.Client]:
    """An official client with bounded timeouts, closed afterwards."""
    client = pulsar.Client(
        url,
        operation_timeout_seconds=operation_timeout_seconds,
        connection_timeout_ms=5000,
        logger=_LOGGER,
        **options,
    )
    try:
        yield client
    finally:
        client.close()


Received = list[tuple[bytes, dict[str, str], str]]
"""Each message's value, properties and key, in the order received."""


def round_trip(client: pulsar.Client, topic: str, count: int = 5, tag: str = "m") -> Received:
    """Produce ``count`` messages to ``topic`` and consume them; return what came back."""
    consumer = client.subscribe(
        topic, f"sub-{tag}", initial_position=pulsar.InitialPosition.Earliest
    )
    producer = client.create_producer(topic)
    for i in range(count):
        producer.send(f"{tag}-{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}")
    received: Received = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=RECEIVE_TIMEOUT_MS)
        consumer.acknowledge(message)
        received.append((message.data(), message.properties(), message.partition_key()))
    producer.close()
    consumer.close()
    return received


def expected(count: int = 5, tag: str = "m") -> Received:
    """What :func:`round_trip` returns when every message came back intact."""
    return [(f"{tag}-{i}".encode(), {"i": str(i)}, f"k{i}") for i in range(count)]


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition`` until it holds; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(0.02)


@contextlib.contextmanager
def secure_proxy(
    broker: LocalBroker,
    certs: TestCerts,
    auth: AuthPolicy | None = None,
    *,
    cert: Path | None = None,
    key: Path | None = None,
) -> Iterator[BrokerProxy]:
    """A TLS proxy of this test's own (optionally authenticating), closed afterwards."""
    tls = server_tls_context(cert or certs.server_cert, key or certs.server_key)
    proxy, _ = apache_proxy((broker.host, broker.port), tls=tls, auth=auth)
    try:
        yield proxy
    finally:
        proxy.close()


# ----------------------------------------------------------------------------- raw client


class RawConnection:
    """A minimal TLS client speaking the binary protocol, to see the proxy's exact frames."""

    def __init__(self, url: str, ca: Path) -> None:
        host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
        assert host is not None and port is not None
        context = ssl.create_default_context(cafile=str(ca))
        raw = socket.create_connection((host, port), timeout=RAW_TIMEOUT)
        self.sock = context.wrap_socket(raw, server_hostname=host)
        self._decoder = FrameDecoder()
        self._frames: list[pb.BaseCommand] = []

    def send(self, command: pb.BaseCommand) -> None:
        self.sock.sendall(encode_command(command))

    def send_bytes(self, frame: bytes) -> None:
        self.sock.sendall(frame)

    def connect(self, token: str, *, supports_auth_refresh: bool) -> pb.BaseCommand:
        """Send a token CONNECT; return the first command answering it."""
        flags = pb.FeatureFlags(supports_auth_refresh=supports_auth_refresh)
        connect = pb.CommandConnect(
            client_version="raw-test",
            protocol_version=21,
            auth_method_name="token",
            auth_data=token.encode(),
            feature_flags=flags,
        )
        self.send(pb.BaseCommand(type=Type.CONNECT, connect=connect))
        answer = self.receive()
        assert answer is not None
        return answer

    def receive(self) -> pb.BaseCommand | None:
        """The next command, or ``None`` once the proxy closed the connection."""
        while not self._frames:
            try:
                data = self.sock.recv(65536)
            except (ssl.SSLEOFError, ConnectionResetError):
                data = b""
            if not data:
                return None
            self._frames += [frame.command for frame in self._decoder.feed(data)]
        return self._frames.pop(0)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


@contextlib.contextmanager
def raw_connection(url: str, ca: Path) -> Iterator[RawConnection]:
    connection = RawConnection(url, ca)
    try:
        yield connection
    finally:
        connection.close()


def auth_response_frame(token: str) -> bytes:
    """An AUTH_RESPONSE frame answering a challenge with ``token``."""
    return commands.auth_response(auth_method_name="token", auth_data=token.encode())


def assert_apache_auth_error(command: pb.BaseCommand | None) -> None:
    """``command`` is the CommandError an Apache broker sends when authentication fails."""
    assert command is not None
    assert command.type == Type.ERROR
    assert command.error.request_id == AUTH_FAILED_REQUEST_ID == 2**64 - 1
    assert command.error.error == pb.AuthenticationError
    assert command.error.message == AUTH_FAILED_MESSAGE == "Failed to authenticate"


# ----------------------------------------------------------------------------- TLS


def test_official_client_round_trips_over_tls(
    tls_proxy: BrokerProxy, test_certs: TestCerts, topic_name: str
) -> None:
    assert tls_proxy.url.startswith("pulsar+ssl://127.0.0.1:")
    # A client that never starts its handshake must not hold anybody else up.
    port = int(tls_proxy.url.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port)),
        official_client(
            tls_proxy.url,
            tls_trust_certs_file_path=str(test_certs.ca),
            tls_validate_hostname=True,
        ) as client,
    ):
        assert round_trip(client, topic_name) == expected()


def test_official_client_validates_the_localhost_name(
    tls_proxy: BrokerProxy, test_certs: TestCerts, topic_name: str
) -> None:
    url = tls_proxy.url.replace("127.0.0.1", "localhost")
    with official_client(
        url, tls_trust_certs_file_path=str(test_certs.ca), tls_validate_hostname=True
    ) as client:
        assert round_trip(client, topic_name, count=2) == expected(count=2)


@pytest.mark.parametrize("which", ["unknown_ca", "expired", "wrong_host"])
def test_official_client_refuses_a_bad_server_certificate(
    broker: LocalBroker, test_certs: TestCerts, topic_name: str, which: str
) -> None:
    cert, key, trusted = {
        "unknown_ca": (test_certs.server_cert, test_certs.server_key, test_certs.other_ca),
        "expired": (test_certs.expired_cert, test_certs.expired_key, test_certs.ca),
        "wrong_host": (test_certs.wrong_host_cert, test_certs.wrong_host_key, test_certs.ca),
    }[which]
    with (
        secure_proxy(broker, test_certs, cert=cert, key=key) as proxy,
        official_client(
            proxy.url,
            tls_trust_certs_file_path=str(trusted),
            tls_validate_hostname=True,
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.ConnectError),
    ):
        client.create_producer(topic_name)


def test_wrong_host_certificate_passes_without_hostname_validation(
    broker: LocalBroker, test_certs: TestCerts, topic_name: str
) -> None:
    """So hostname validation, not the chain, is what refuses it above."""
    with (
        secure_proxy(
            broker, test_certs, cert=test_certs.wrong_host_cert, key=test_certs.wrong_host_key
        ) as proxy,
        official_client(
            proxy.url, tls_trust_certs_file_path=str(test_certs.ca), tls_validate_hostname=False
        ) as client,
    ):
        assert round_trip(client, topic_name, count=2) == expected(count=2)


def test_lookup_behind_tls_names_the_proxy_as_the_tls_url(
    broker: LocalBroker, test_certs: TestCerts, topic_name: str
) -> None:
    tls = server_tls_context(test_certs.server_cert, test_certs.server_key)
    proxy, answers = apache_proxy((broker.host, broker.port), tls=tls)
    try:
        for advertise in (True, False):
            answers.advertise_tls_url = advertise
            with raw_connection(proxy.url, test_certs.ca) as raw:
                connect = pb.CommandConnect(client_version="raw-test", protocol_version=21)
                raw.send(pb.BaseCommand(type=Type.CONNECT, connect=connect))
                connected = raw.receive()
                assert connected is not None and connected.type == Type.CONNECTED
                lookup = pb.CommandLookupTopic(
                    topic=f"persistent://public/default/{topic_name}", request_id=7
                )
                raw.send(pb.BaseCommand(type=Type.LOOKUP, lookupTopic=lookup))
                answer = raw.receive()
            assert answer is not None and answer.type == Type.LOOKUP_RESPONSE
            response = answer.lookupTopicResponse
            assert response.request_id == 7
            assert response.response == pb.CommandLookupTopicResponse.Connect
            assert response.brokerServiceUrl == broker.service_url
            assert response.HasField("brokerServiceUrlTls") is advertise
            assert response.brokerServiceUrlTls == (proxy.url if advertise else "")
    finally:
        proxy.close()


# ----------------------------------------------------------------------------- tokens


def test_official_client_logs_in_with_a_token(
    token_proxy: BrokerProxy, test_certs: TestCerts, token_secret: bytes, topic_name: str
) -> None:
    assert token_proxy.auth is not None
    accepted, rejected = len(token_proxy.auth.accepted), len(token_proxy.auth.rejected)
    token = tokens.sign("spark-user", token_secret, time.time() + 3600)
    with official_client(
        token_proxy.url,
        tls_trust_certs_file_path=str(test_certs.ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(token),
    ) as client:
        assert round_trip(client, topic_name) == expected()
    assert token_proxy.auth.accepted[accepted:] == [("token", "spark-user")]
    assert token_proxy.auth.rejected[rejected:] == []


@pytest.mark.parametrize("case", ["wrong_secret", "expired"])
def test_official_client_with_a_bad_token_is_refused(
    token_proxy: BrokerProxy, test_certs: TestCerts, token_secret: bytes, topic_name: str, case: str
) -> None:
    reason = {"wrong_secret": "invalid token", "expired": "expired token"}[case]
    assert token_proxy.auth is not None
    accepted, rejected = len(token_proxy.auth.accepted), len(token_proxy.auth.rejected)
    token = {
        "wrong_secret": tokens.sign("spark-user", b"not the secret", time.time() + 3600),
        "expired": tokens.sign("spark-user", token_secret, time.time() - 60),
    }[case]
    # The C++ client takes the connect-time AuthenticationError for a dropped connection:
    # it reconnects with backoff until the operation timeout.
    with (
        official_client(
            token_proxy.url,
            tls_trust_certs_file_path=str(test_certs.ca),
            authentication=pulsar.AuthenticationToken(token),
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.Timeout),
    ):
        client.create_producer(topic_name)
    attempts = token_proxy.auth.rejected[rejected:]
    assert len(attempts) >= 1
    assert set(attempts) == {("token", reason)}
    assert token_proxy.auth.accepted[accepted:] == []


def test_failed_connect_gets_apaches_error_and_is_closed(
    token_proxy: BrokerProxy, test_certs: TestCerts
) -> None:
    with raw_connection(token_proxy.url, test_certs.ca) as raw:
        answer = raw.connect("not-a-jwt", supports_auth_refresh=True)
        assert_apache_auth_error(answer)
        assert raw.receive() is None


def test_token_supplier_survives_forced_and_expiry_challenges(
    broker: LocalBroker, test_certs: TestCerts, token_secret: bytes, topic_name: str
) -> None:
    """The C++ client answers every AuthChallenge, asking the supplier for a new token."""
    lifetimes = [3600.0, 1.5, 3600.0]  # CONNECT; forced challenge; challenge on expiry
    issued: list[float] = []

    def supplier() -> str:
        lifetime = lifetimes[min(len(issued), len(lifetimes) - 1)]
        issued.append(lifetime)
        return tokens.sign("refresher", token_secret, time.time() + lifetime)

    auth = AuthPolicy(token_secret=token_secret, refresh_check_seconds=0.2)
    with (
        secure_proxy(broker, test_certs, auth) as proxy,
        official_client(
            proxy.url,
            tls_trust_certs_file_path=str(test_certs.ca),
            authentication=pulsar.AuthenticationToken(supplier),
        ) as client,
    ):
        assert round_trip(client, topic_name, tag="before") == expected(tag="before")
        assert issued == [3600.0]

        assert proxy.challenge_all() == 1
        wait_for(lambda: auth.responses_accepted == 1)
        assert issued == [3600.0, 1.5]

        # The 1.5 s token expires; the next check challenges on its own.
        wait_for(lambda: auth.responses_accepted == 2)
        assert issued == [3600.0, 1.5, 3600.0]
        time.sleep(3 * auth.refresh_check_seconds)  # nothing more is due

        after = round_trip(client, f"{topic_name}-after", tag="after")
        assert after == expected(tag="after")
        assert auth.challenges_sent == 2
        assert auth.responses_accepted == 2
        assert auth.responses_rejected == 0
        assert auth.disconnects == []
        assert auth.accepted == [("token", "refresher")]  # one connection throughout
        assert auth.rejected == []


def test_challenge_carries_the_refresh_marker_and_a_bad_answer_is_refused(
    broker: LocalBroker, test_certs: TestCerts, token_secret: bytes
) -> None:
    auth = AuthPolicy(token_secret=token_secret)
    with (
        secure_proxy(broker, test_certs, auth) as proxy,
        raw_connection(proxy.url, test_certs.ca) as raw,
    ):
        token = tokens.sign("raw-user", token_secret, time.time() + 3600)
        connected = raw.connect(token, supports_auth_refresh=True)
        assert connected.type == Type.CONNECTED
        assert proxy.challenge_all() == 1
        challenge = raw.receive()
        assert challenge is not None and challenge.type == Type.AUTH_CHALLENGE
        assert challenge.authChallenge.challenge.auth_method_name == "token"
        assert challenge.authChallenge.challenge.auth_data == AUTH_REFRESH_DATA
        assert challenge.authChallenge.protocol_version == 21

        # A good answer keeps the connection (and never reaches pulsar-lite).
        raw.send_bytes(auth_response_frame(tokens.sign("raw-user", token_secret, None)))
        wait_for(lambda: auth.responses_accepted == 1)
        ping = pb.BaseCommand(type=Type.PING, ping=pb.CommandPing())
        raw.send(ping)
        pong = raw.receive()
        assert pong is not None and pong.type == Type.PONG

        assert proxy.challenge_all() == 1
        challenge = raw.receive()
        assert challenge is not None and challenge.type == Type.AUTH_CHALLENGE
        raw.send_bytes(auth_response_frame(tokens.sign("raw-user", b"wrong", None)))
        assert_apache_auth_error(raw.receive())
        assert raw.receive() is None
    assert auth.responses_accepted == 1
    assert auth.responses_rejected == 1
    assert auth.disconnects == [("raw-user", "invalid credentials in the refresh answer")]


def test_unanswered_challenge_closes_the_connection(
    broker: LocalBroker, test_certs: TestCerts, token_secret: bytes
) -> None:
    auth = AuthPolicy(token_secret=token_secret, refresh_grace_seconds=0.5)
    with (
        secure_proxy(broker, test_certs, auth) as proxy,
        raw_connection(proxy.url, test_certs.ca) as raw,
    ):
        token = tokens.sign("silent", token_secret, time.time() + 3600)
        assert raw.connect(token, supports_auth_refresh=True).type == Type.CONNECTED
        started = time.monotonic()
        assert proxy.challenge_all() == 1
        challenge = raw.receive()
        assert challenge is not None and challenge.type == Type.AUTH_CHALLENGE
        assert raw.receive() is None
        assert time.monotonic() - started >= 0.5
    assert auth.disconnects == [("silent", "no valid answer to the refresh challenge in time")]


def test_expired_token_without_refresh_support_is_disconnected(
    broker: LocalBroker, test_certs: TestCerts, token_secret: bytes
) -> None:
    auth = AuthPolicy(token_secret=token_secret)
    with (
        secure_proxy(broker, test_certs, auth) as proxy,
        raw_connection(proxy.url, test_certs.ca) as raw,
    ):
        token = tokens.sign("old-client", token_secret, time.time() + 1)
        assert raw.connect(token, supports_auth_refresh=False).type == Type.CONNECTED
        assert proxy.challenge_all() == 0  # Apache never challenges such a client
        assert raw.receive() is None  # closed once the token expired, without a frame
    assert auth.challenges_sent == 0
    assert auth.disconnects == [("old-client", "credentials expired; client cannot refresh")]


# ----------------------------------------------------------------------------- mutual TLS


def test_official_client_logs_in_with_a_client_certificate(
    mtls_proxy: BrokerProxy, test_certs: TestCerts, topic_name: str
) -> None:
    assert mtls_proxy.auth is not None
    accepted = len(mtls_proxy.auth.accepted)
    with official_client(
        mtls_proxy.url,
        tls_trust_certs_file_path=str(test_certs.ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationTLS(
            str(test_certs.client_cert), str(test_certs.client_key)
        ),
    ) as client:
        assert round_trip(client, topic_name) == expected()
    assert mtls_proxy.auth.accepted[accepted:] == [("tls", CLIENT_CN)]


def test_official_client_without_a_client_certificate_is_refused(
    mtls_proxy: BrokerProxy, test_certs: TestCerts, topic_name: str
) -> None:
    assert mtls_proxy.auth is not None
    accepted, rejected = len(mtls_proxy.auth.accepted), len(mtls_proxy.auth.rejected)
    # The handshake fails on the proxy's side; the client retries until its timeout.
    with (
        official_client(
            mtls_proxy.url,
            tls_trust_certs_file_path=str(test_certs.ca),
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.Timeout),
    ):
        client.create_producer(topic_name)
    assert mtls_proxy.auth.accepted[accepted:] == []
    assert mtls_proxy.auth.rejected[rejected:] == []  # no CONNECT ever got through


# ----------------------------------------------------------------------------- basic


def test_official_client_logs_in_with_basic_credentials(
    broker: LocalBroker, test_certs: TestCerts, topic_name: str
) -> None:
    auth = AuthPolicy(basic_users={"alice": "wonderland"})
    with secure_proxy(broker, test_certs, auth) as proxy:
        with official_client(
            proxy.url,
            tls_trust_certs_file_path=str(test_certs.ca),
            authentication=pulsar.AuthenticationBasic("alice", "wonderland"),
        ) as client:
            assert round_trip(client, topic_name, count=2) == expected(count=2)
        with (
            official_client(
                proxy.url,
                tls_trust_certs_file_path=str(test_certs.ca),
                authentication=pulsar.AuthenticationBasic("alice", "guess"),
                operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
            ) as client,
            pytest.raises(pulsar.Timeout),
        ):
            client.create_producer(topic_name)
    assert auth.accepted == [("basic", "alice")]
    assert len(auth.rejected) >= 1
    assert set(auth.rejected) == {("basic", "wrong user or password")}


# ----------------------------------------------------------------------------- OAuth2


def _post_form(url: str, form: dict[str, str]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def test_oauth2_server_issues_client_credentials_tokens(
    oauth2_server: OAuth2Server, token_secret: bytes
) -> None:
    discovery_url = oauth2_server.issuer_url + "/.well-known/openid-configuration"
    with urllib.request.urlopen(discovery_url, timeout=10) as response:
        discovery = json.loads(response.read())
    assert discovery["issuer"] == oauth2_server.issuer_url
    assert discovery["token_endpoint"] == oauth2_server.issuer_url + "/oauth2/token"

    served, refused = oauth2_server.requests.served, oauth2_server.requests.refused
    form = {
        "grant_type": "client_credentials",
        "client_id": OAUTH2_CLIENT_ID,
        "client_secret": OAUTH2_CLIENT_SECRET,
        "audience": "urn:pulsar:test",
    }
    before = time.time()
    status, body = _post_form(discovery["token_endpoint"], form)
    assert status == 200
    assert set(body) == {"access_token", "token_type", "expires_in"}
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    token = body["access_token"]
    assert isinstance(token, str)
    assert tokens.verify(token, token_secret, time.time()) == OAUTH2_CLIENT_ID
    exp = tokens.expires_at(token)
    assert exp is not None and math.ceil(before + 3600) <= exp <= math.ceil(time.time() + 3600)
    assert oauth2_server.requests.served == served + 1
    assert oauth2_server.requests.last_form == form

    status, body = _post_form(discovery["token_endpoint"], {**form, "client_secret": "nope"})
    assert (status, body) == (401, {"error": "invalid_client"})
    assert oauth2_server.requests.served == served + 1
    assert oauth2_server.requests.refused == refused + 1


def test_official_oauth2_plugin_logs_in_with_issued_tokens(
    token_proxy: BrokerProxy,
    oauth2_server: OAuth2Server,
    test_certs: TestCerts,
    tmp_path: Path,
    topic_name: str,
) -> None:
    assert token_proxy.auth is not None
    accepted = len(token_proxy.auth.accepted)
    served = oauth2_server.requests.served
    key_file = oauth2_server.write_credentials_file(
        tmp_path / "credentials.json", OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
    )
    params = {
        "issuer_url": oauth2_server.issuer_url,
        "private_key": f"file://{key_file}",
        "audience": "urn:pulsar:test",
    }
    with official_client(
        token_proxy.url,
        tls_trust_certs_file_path=str(test_certs.ca),
        authentication=pulsar.AuthenticationOauth2(json.dumps(params)),
    ) as client:
        assert round_trip(client, topic_name, count=2) == expected(count=2)
    assert token_proxy.auth.accepted[accepted:] == [("token", OAUTH2_CLIENT_ID)]
    assert oauth2_server.requests.served == served + 1
    assert oauth2_server.requests.last_form == {
        "grant_type": "client_credentials",
        "client_id": OAUTH2_CLIENT_ID,
        "client_secret": OAUTH2_CLIENT_SECRET,
        "audience": "urn:pulsar:test",
    }
