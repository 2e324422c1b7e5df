"""The TLS and authentication test set-up is real: checked with the official Apache client.

The certificates (tests/support/certs.py), the tokens (tests/support/tokens.py), the htpasswd
line and the OAuth2 issuer (tests/support/oauth2_server.py) are what the secured Apache broker
(``secure_apache``, tests/support/apache_secure.py) is configured with; these tests log in to
it with ``pulsar-client`` (the Apache C++ core) and, where the exact bytes matter, with a
minimal client speaking the binary protocol, so that the connector's tests against it mean
something. Apache's behaviour they pin down:

- a server certificate the client must refuse fails at once with ``ConnectError``;
- a refused login gets ``CommandError(request_id=2**64-1, AuthenticationError, "Failed to
  authenticate")`` and the connection is closed; the C++ client takes it for a dropped
  connection and retries until its operation timeout;
- every ``authenticationRefreshCheckSeconds`` the broker sends an AuthChallenge (auth data
  ``PulsarAuthRefresh``) to each connection whose token expired and that said it supports
  refresh; an expired or missing answer closes the connection, and so does an expired token on
  a connection that cannot refresh.

The test proxy (tests/support/broker_proxy.py) serves the expired and wrong-host certificates, which
the broker would need a start of its own for.
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
from support import tokens
from support.apache_secure import (
    BASIC_PASSWORD,
    BASIC_USER,
    OAUTH2_AUDIENCE,
    SecureApache,
    apr1_htpasswd_line,
)
from support.broker_proxy import BrokerProxy, apache_proxy, server_tls_context
from support.certs import TestCerts
from support.fixtures import OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
from support.oauth2_server import KEY_ID, OAuth2Server

from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.framing import FrameDecoder, encode_command

pytestmark = pytest.mark.integration

Type = pb.BaseCommand.Type

RECEIVE_TIMEOUT_MS = 10_000
"""Every receive waits at most this long."""

FAILING_OPERATION_TIMEOUT = 2
"""Operation timeout (seconds) for clients expected to fail: bounds their retries."""

RAW_TIMEOUT = 15.0
"""Seconds a raw-protocol read waits before the test fails."""

AUTH_FAILED_REQUEST_ID = 2**64 - 1
"""The request id of Apache's authentication CommandError: Java's ``-1`` as a uint64."""

AUTH_FAILED_MESSAGE = "Failed to authenticate"
"""The message of every authentication CommandError an Apache broker sends."""

AUTH_REFRESH_DATA = b"PulsarAuthRefresh"
"""``challenge.auth_data`` of the AuthChallenge asking a client for fresh credentials."""

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
def cert_proxy(broker: LocalBroker | ApacheBroker, cert: Path, key: Path) -> Iterator[BrokerProxy]:
    """A TLS proxy to ``broker`` serving ``cert``, closed afterwards."""
    proxy, _ = apache_proxy((broker.host, broker.port), tls=server_tls_context(cert, key))
    try:
        yield proxy
    finally:
        proxy.close()


# ----------------------------------------------------------------------------- raw client


class RawConnection:
    """A minimal TLS client speaking the binary protocol, to see the broker's exact frames."""

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
        """The next command, or ``None`` once the broker closed the connection."""
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
    assert command.error.request_id == AUTH_FAILED_REQUEST_ID
    assert command.error.error == pb.AuthenticationError
    assert command.error.message == AUTH_FAILED_MESSAGE


def receive_challenge(raw: RawConnection) -> None:
    """The next command is the broker's refresh challenge for a token."""
    challenge = raw.receive()
    assert challenge is not None and challenge.type == Type.AUTH_CHALLENGE
    assert challenge.authChallenge.challenge.auth_method_name == "token"
    assert challenge.authChallenge.challenge.auth_data == AUTH_REFRESH_DATA
    assert challenge.authChallenge.protocol_version == 21


def ping(raw: RawConnection) -> None:
    raw.send(pb.BaseCommand(type=Type.PING, ping=pb.CommandPing()))
    answer = raw.receive()
    assert answer is not None and answer.type == Type.PONG


# ----------------------------------------------------------------------------- TLS


@pytest.mark.apache
def test_official_client_round_trips_over_tls(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    assert secure_apache.tls_url.startswith("pulsar+ssl://127.0.0.1:")
    # A client that never starts its handshake must not hold anybody else up.
    port = int(secure_apache.address.rsplit(":", 1)[1])
    with (
        socket.create_connection(("127.0.0.1", port)),
        official_client(
            secure_apache.tls_url,
            tls_trust_certs_file_path=str(test_certs.ca),
            tls_validate_hostname=True,
            authentication=pulsar.AuthenticationToken(secure_apache.token()),
        ) as client,
    ):
        assert round_trip(client, topic_name) == expected()


@pytest.mark.apache
def test_official_client_validates_the_localhost_name(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    url = secure_apache.tls_url.replace("127.0.0.1", "localhost")
    with official_client(
        url,
        tls_trust_certs_file_path=str(test_certs.ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(secure_apache.token()),
    ) as client:
        assert round_trip(client, topic_name, count=2) == expected(count=2)


@pytest.mark.apache
def test_official_client_refuses_an_unknown_ca(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    with (
        official_client(
            secure_apache.tls_url,
            tls_trust_certs_file_path=str(test_certs.other_ca),
            authentication=pulsar.AuthenticationToken(secure_apache.token()),
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.ConnectError),
    ):
        client.create_producer(topic_name)


@pytest.mark.parametrize("which", ["expired", "wrong_host"])
def test_official_client_refuses_a_bad_server_certificate(
    broker: LocalBroker | ApacheBroker, test_certs: TestCerts, topic_name: str, which: str
) -> None:
    cert, key = getattr(test_certs, f"{which}_cert"), getattr(test_certs, f"{which}_key")
    with (
        cert_proxy(broker, cert, key) as proxy,
        official_client(
            proxy.url,
            tls_trust_certs_file_path=str(test_certs.ca),
            tls_validate_hostname=True,
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.ConnectError),
    ):
        client.create_producer(topic_name)


def test_wrong_host_certificate_passes_without_hostname_validation(
    broker: LocalBroker | ApacheBroker, test_certs: TestCerts, topic_name: str
) -> None:
    """So hostname validation, not the chain, is what refuses it above."""
    with (
        cert_proxy(broker, test_certs.wrong_host_cert, test_certs.wrong_host_key) as proxy,
        official_client(
            proxy.url, tls_trust_certs_file_path=str(test_certs.ca), tls_validate_hostname=False
        ) as client,
    ):
        assert round_trip(client, topic_name, count=2) == expected(count=2)


def test_lookup_behind_tls_names_the_proxy_as_the_tls_url(
    broker: LocalBroker | ApacheBroker, test_certs: TestCerts, topic_name: str
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


@pytest.mark.apache
def test_official_client_logs_in_with_a_token(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    with official_client(
        secure_apache.tls_url,
        tls_trust_certs_file_path=str(test_certs.ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(secure_apache.token()),
    ) as client:
        assert round_trip(client, topic_name) == expected()


@pytest.mark.apache
@pytest.mark.parametrize("case", ["wrong_secret", "expired"])
def test_official_client_with_a_bad_token_is_refused(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str, case: str
) -> None:
    token = {
        "wrong_secret": tokens.sign("spark-job", b"not the secret" * 3, time.time() + 3600),
        "expired": secure_apache.token(lifetime=-60),
    }[case]
    refused = secure_apache.log().count("Failed to authenticate: operation=connect")
    # The C++ client takes the connect-time AuthenticationError for a dropped connection:
    # it reconnects with backoff until the operation timeout.
    with (
        official_client(
            secure_apache.tls_url,
            tls_trust_certs_file_path=str(test_certs.ca),
            authentication=pulsar.AuthenticationToken(token),
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.Timeout),
    ):
        client.create_producer(topic_name)
    assert secure_apache.log().count("Failed to authenticate: operation=connect") > refused
    assert token not in secure_apache.log()


@pytest.mark.apache
def test_failed_connect_gets_apaches_error_and_is_closed(
    secure_apache: SecureApache, test_certs: TestCerts
) -> None:
    with raw_connection(secure_apache.tls_url, test_certs.ca) as raw:
        answer = raw.connect("not-a-jwt", supports_auth_refresh=True)
        assert_apache_auth_error(answer)
        assert raw.receive() is None


@pytest.mark.apache
def test_token_supplier_is_asked_again_at_the_refresh_challenge(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    """The C++ client answers the broker's AuthChallenge, asking the supplier for a token."""
    role = "supplied"
    secure_apache.grant(role)
    lifetimes = [3.0, 3600.0]  # CONNECT; the challenge once the first expired
    issued: list[float] = []

    def supplier() -> str:
        lifetime = lifetimes[min(len(issued), len(lifetimes) - 1)]
        issued.append(lifetime)
        return secure_apache.token(role, lifetime)

    refreshed = secure_apache.refreshes(role)
    with official_client(
        secure_apache.tls_url,
        tls_trust_certs_file_path=str(test_certs.ca),
        authentication=pulsar.AuthenticationToken(supplier),
    ) as client:
        assert round_trip(client, topic_name, tag="before") == expected(tag="before")
        wait_for(lambda: secure_apache.refreshes(role) > refreshed, timeout=15)
        assert issued[:2] == [3.0, 3600.0]
        after = round_trip(client, f"{topic_name}-after", tag="after")
        assert after == expected(tag="after")
    assert "operation=authentication-refresh, principal=supplied," not in secure_apache.log()


@pytest.mark.apache
def test_challenge_carries_the_refresh_marker_and_a_bad_answer_is_refused(
    secure_apache: SecureApache, test_certs: TestCerts
) -> None:
    with raw_connection(secure_apache.tls_url, test_certs.ca) as raw:
        connected = raw.connect(secure_apache.token(lifetime=2), supports_auth_refresh=True)
        assert connected.type == Type.CONNECTED
        receive_challenge(raw)

        # A good answer keeps the connection.
        raw.send_bytes(auth_response_frame(secure_apache.token(lifetime=2)))
        ping(raw)

        receive_challenge(raw)  # that token expired too
        raw.send_bytes(auth_response_frame(tokens.sign("spark-job", b"wrong" * 8, None)))
        assert_apache_auth_error(raw.receive())
        assert raw.receive() is None


@pytest.mark.apache
def test_unanswered_challenge_closes_the_connection(
    secure_apache: SecureApache, test_certs: TestCerts
) -> None:
    """The broker's next check finds the challenge unanswered and closes the connection."""
    with raw_connection(secure_apache.tls_url, test_certs.ca) as raw:
        token = secure_apache.token(lifetime=2)
        assert raw.connect(token, supports_auth_refresh=True).type == Type.CONNECTED
        receive_challenge(raw)
        started = time.monotonic()
        assert raw.receive() is None
        assert time.monotonic() - started < 2 * 2 + 1


@pytest.mark.apache
def test_expired_token_without_refresh_support_is_disconnected(
    secure_apache: SecureApache, test_certs: TestCerts
) -> None:
    with raw_connection(secure_apache.tls_url, test_certs.ca) as raw:
        token = secure_apache.token(lifetime=1)
        assert raw.connect(token, supports_auth_refresh=False).type == Type.CONNECTED
        assert raw.receive() is None  # closed once the token expired, without a frame


# ----------------------------------------------------------------------------- mutual TLS


@pytest.mark.apache
def test_official_client_logs_in_with_a_client_certificate(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    with official_client(
        secure_apache.tls_url,
        tls_trust_certs_file_path=str(test_certs.ca),
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationTLS(
            str(test_certs.client_cert), str(test_certs.client_key)
        ),
    ) as client:
        assert round_trip(client, topic_name) == expected()


@pytest.mark.apache
def test_official_client_without_credentials_is_refused(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    with (
        official_client(
            secure_apache.tls_url,
            tls_trust_certs_file_path=str(test_certs.ca),
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.Timeout),
    ):
        client.create_producer(topic_name)


# ----------------------------------------------------------------------------- basic


def test_htpasswd_line_is_apaches_md5_crypt() -> None:
    """The value ``htpasswd -m`` (and ``openssl passwd -apr1``) gives for this salt."""
    assert apr1_htpasswd_line("user", "pass", "abcdefgh") == (
        "user:$apr1$abcdefgh$rK/lObuciIG5ziaV8BdHR/"
    )


@pytest.mark.apache
def test_official_client_logs_in_with_basic_credentials(
    secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    with official_client(
        secure_apache.tls_url,
        tls_trust_certs_file_path=str(test_certs.ca),
        authentication=pulsar.AuthenticationBasic(BASIC_USER, BASIC_PASSWORD),
    ) as client:
        assert round_trip(client, topic_name, count=2) == expected(count=2)
    with (
        official_client(
            secure_apache.tls_url,
            tls_trust_certs_file_path=str(test_certs.ca),
            authentication=pulsar.AuthenticationBasic(BASIC_USER, "guess"),
            operation_timeout_seconds=FAILING_OPERATION_TIMEOUT,
        ) as client,
        pytest.raises(pulsar.Timeout),
    ):
        client.create_producer(topic_name)


# ----------------------------------------------------------------------------- OAuth2


def _post_form(url: str, form: dict[str, str]) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def _get_json(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=10) as response:
        document: dict[str, object] = json.loads(response.read())
    return document


def test_oauth2_server_issues_client_credentials_tokens(oauth2_server: OAuth2Server) -> None:
    discovery = _get_json(oauth2_server.issuer_url + "/.well-known/openid-configuration")
    assert discovery["issuer"] == oauth2_server.issuer_url
    assert discovery["token_endpoint"] == oauth2_server.issuer_url + "/oauth2/token"
    keys = _get_json(str(discovery["jwks_uri"]))["keys"]
    assert isinstance(keys, list) and [key["kid"] for key in keys] == [KEY_ID]

    served, refused = oauth2_server.requests.served, oauth2_server.requests.refused
    form = {
        "grant_type": "client_credentials",
        "client_id": OAUTH2_CLIENT_ID,
        "client_secret": OAUTH2_CLIENT_SECRET,
        "audience": OAUTH2_AUDIENCE,
    }
    before = time.time()
    status, body = _post_form(str(discovery["token_endpoint"]), form)
    assert status == 200
    assert set(body) == {"access_token", "token_type", "expires_in"}
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    token = body["access_token"]
    assert isinstance(token, str)
    claims = tokens.verify_rs256(token, oauth2_server.key.public_key())
    assert claims is not None
    assert {key: claims[key] for key in ("iss", "sub", "aud")} == {
        "iss": oauth2_server.issuer_url,
        "sub": OAUTH2_CLIENT_ID,
        "aud": OAUTH2_AUDIENCE,
    }
    exp = tokens.expires_at(token)
    assert exp is not None and math.ceil(before + 3600) <= exp <= math.ceil(time.time() + 3600)
    assert oauth2_server.requests.served == served + 1
    assert oauth2_server.requests.last_form == form

    status, body = _post_form(str(discovery["token_endpoint"]), {**form, "client_secret": "nope"})
    assert (status, body) == (401, {"error": "invalid_client"})
    assert oauth2_server.requests.served == served + 1
    assert oauth2_server.requests.refused == refused + 1


@pytest.mark.apache
def test_official_oauth2_plugin_logs_in_with_issued_tokens(
    secure_apache: SecureApache,
    oauth2_server: OAuth2Server,
    test_certs: TestCerts,
    tmp_path: Path,
    topic_name: str,
) -> None:
    served = oauth2_server.requests.served
    key_file = oauth2_server.write_credentials_file(
        tmp_path / "credentials.json", OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
    )
    params = {
        "issuer_url": oauth2_server.issuer_url,
        "private_key": f"file://{key_file}",
        "audience": OAUTH2_AUDIENCE,
    }
    with official_client(
        secure_apache.tls_url,
        tls_trust_certs_file_path=str(test_certs.ca),
        authentication=pulsar.AuthenticationOauth2(json.dumps(params)),
    ) as client:
        assert round_trip(client, topic_name, count=2) == expected(count=2)
    assert oauth2_server.requests.served == served + 1
    assert oauth2_server.requests.last_form == {
        "grant_type": "client_credentials",
        "client_id": OAUTH2_CLIENT_ID,
        "client_secret": OAUTH2_CLIENT_SECRET,
        "audience": OAUTH2_AUDIENCE,
    }
