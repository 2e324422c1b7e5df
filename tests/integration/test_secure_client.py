"""The client layer on secured clusters: TLS (one-way and mutual), token, basic and OAuth2
authentication, refresh challenges, and every failure a user can meet, each a clear error
within a bounded time.

The broker is pulsar-lite behind the test proxy (tests/broker_proxy.py), which terminates TLS
with Python's ssl module (OpenSSL) and checks credentials the way an Apache broker does. What
our producer writes through it, the official client reads back from the broker directly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from broker_proxy import AUTH_FAILED_MESSAGE, ApacheAnswers, AuthPolicy, BrokerProxy, apache_proxy
from broker_proxy import server_tls_context as server_tls
from support import tokens
from support.certs import TestCerts
from support.fixtures import OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
from support.oauth2_server import OAuth2Server
from support.waiting import wait_until

from pulsar_spark.client.address import BrokerAddress
from pulsar_spark.client.auth import (
    NO_AUTH,
    Authentication,
    BasicAuthentication,
    TlsAuthentication,
    TokenAuthentication,
)
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.oauth2 import OAuth2Authentication
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.settings import ClientSettings, ConnectionSettings, TlsSettings
from pulsar_spark.errors import (
    AuthenticationError,
    BrokerUnreachableError,
    ConnectionClosedError,
    CredentialsError,
    TlsError,
    TopicLookupError,
)
from pulsar_spark.local import LocalBroker
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration


@pytest.fixture
def pool() -> Iterator[ConnectionPool]:
    connections = ConnectionPool()
    yield connections
    connections.close()


def lookup_for(
    pool: ConnectionPool,
    url: str,
    *,
    tls: TlsSettings | None = None,
    auth: Authentication = NO_AUTH,
    timeout: float = 5.0,
) -> Lookup:
    settings = ClientSettings(
        service_url=url,
        operation_timeout=timeout,
        connection=ConnectionSettings(tls=tls, auth=auth, connect_timeout=timeout),
    )
    return Lookup(settings, pool)


def write_and_read_back(lookup: Lookup, broker: LocalBroker, topic: str, count: int = 20) -> None:
    """Send ``count`` messages through ``lookup``; the official client reads every one back."""
    values = [f"{topic}-{i}".encode() for i in range(count)]
    producer = Producer.create(lookup, full_topic_name(topic))
    try:
        for value in values:
            producer.send(OutgoingMessage(value, key=f"k{len(value)}"))
        producer.flush()
    finally:
        producer.close()
    official = pulsar.Client(
        broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        received = [reader.read_next(5000) for _ in values]
        assert [m.data() for m in received] == values
        assert [m.partition_key() for m in received] == [f"k{len(v)}" for v in values]
        assert not reader.has_message_available()
    finally:
        official.close()


def elapsed_since(started: float) -> float:
    return time.monotonic() - started


# --- TLS ---------------------------------------------------------------------------------------


def test_tls_round_trip_with_the_test_ca(
    pool: ConnectionPool,
    tls_proxy: BrokerProxy,
    test_certs: TestCerts,
    broker: LocalBroker,
    topic_name: str,
) -> None:
    lookup = lookup_for(pool, tls_proxy.url, tls=TlsSettings(trust_certs_file=str(test_certs.ca)))
    write_and_read_back(lookup, broker, topic_name)
    connection = lookup.service_connection()
    assert connection.address.port == int(tls_proxy.url.rsplit(":", 1)[1])


def test_tls_with_an_unknown_ca_fails_naming_address_and_trust_file(
    pool: ConnectionPool, tls_proxy: BrokerProxy, test_certs: TestCerts
) -> None:
    lookup = lookup_for(
        pool, tls_proxy.url, tls=TlsSettings(trust_certs_file=str(test_certs.other_ca))
    )
    address = tls_proxy.url.removeprefix("pulsar+ssl://")
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 2.0
    assert str(info.value) == (
        f"TLS handshake with {address} failed: the broker's certificate was not accepted: "
        f"unable to get local issuer certificate (trusted: {test_certs.other_ca})"
    )
    assert not info.value.retriable


@pytest.mark.parametrize(
    ("which", "reason"),
    [
        ("expired", "certificate has expired"),
        ("wrong_host", "IP address mismatch, certificate is not valid for '127.0.0.1'."),
    ],
)
def test_tls_refuses_bad_server_certificates(
    pool: ConnectionPool, broker: LocalBroker, test_certs: TestCerts, which: str, reason: str
) -> None:
    cert, key = getattr(test_certs, f"{which}_cert"), getattr(test_certs, f"{which}_key")
    proxy = BrokerProxy((broker.host, broker.port), tls=server_tls(cert, key))
    try:
        lookup = lookup_for(pool, proxy.url, tls=TlsSettings(trust_certs_file=str(test_certs.ca)))
        with pytest.raises(TlsError) as info:
            lookup.partitions("persistent://public/default/any")
        address = proxy.url.removeprefix("pulsar+ssl://")
        assert str(info.value) == (
            f"TLS handshake with {address} failed: the broker's certificate was not accepted: "
            f"{reason} (trusted: {test_certs.ca})"
        )
    finally:
        proxy.close()


def test_hostname_verification_can_be_turned_off_and_insecure_accepts_anything(
    pool: ConnectionPool, broker: LocalBroker, test_certs: TestCerts, topic_name: str
) -> None:
    proxy, _ = apache_proxy(
        (broker.host, broker.port),
        tls=server_tls(test_certs.wrong_host_cert, test_certs.wrong_host_key),
    )
    try:
        no_hostname = TlsSettings(trust_certs_file=str(test_certs.ca), verify_hostname=False)
        assert lookup_for(pool, proxy.url, tls=no_hostname).partitions(topic_name) == 0
        insecure = TlsSettings(trust_certs_file=str(test_certs.other_ca), allow_insecure=True)
        write_and_read_back(lookup_for(pool, proxy.url, tls=insecure), broker, topic_name, 3)
    finally:
        proxy.close()


def test_plain_broker_behind_a_tls_url_fails_fast(
    pool: ConnectionPool, broker: LocalBroker, test_certs: TestCerts
) -> None:
    url = f"pulsar+ssl://{broker.host}:{broker.port}"
    lookup = lookup_for(
        pool, url, tls=TlsSettings(trust_certs_file=str(test_certs.ca)), timeout=2.0
    )
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 3.0
    message = str(info.value)
    assert message.startswith(f"{broker.host}:{broker.port} closed the connection during the TLS ")
    assert message.endswith(
        "is it a TLS port? (pulsar+ssl:// needs the broker's TLS port, usually 6651)"
    )


def test_plain_url_to_a_tls_port_fails_fast(pool: ConnectionPool, tls_proxy: BrokerProxy) -> None:
    address = tls_proxy.url.removeprefix("pulsar+ssl://")
    lookup = lookup_for(pool, f"pulsar://{address}", timeout=2.0)
    started = time.monotonic()
    with pytest.raises((TlsError, BrokerUnreachableError)) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 3.0
    assert str(info.value) in (
        f"{address} answered CONNECT with TLS: it is a TLS port, use pulsar+ssl://",
        f"broker at {address} closed the connection on CONNECT (if that port expects TLS, use "
        "pulsar+ssl://)",
    )


def test_lookup_without_a_tls_url_is_an_error_not_plain_text(
    pool: ConnectionPool, broker: LocalBroker, test_certs: TestCerts
) -> None:
    proxy, answers = apache_proxy(
        (broker.host, broker.port), tls=server_tls(test_certs.server_cert, test_certs.server_key)
    )
    answers.advertise_tls_url = False
    try:
        lookup = lookup_for(pool, proxy.url, tls=TlsSettings(trust_certs_file=str(test_certs.ca)))
        with pytest.raises(TopicLookupError) as info:
            lookup.owner("persistent://public/default/x")
        assert str(info.value) == (
            "lookup of persistent://public/default/x: the broker gave no TLS address "
            "(brokerServiceUrlTls) although service.url uses pulsar+ssl://; the broker needs "
            "brokerServicePortTls, and plain text is never used instead"
        )
    finally:
        proxy.close()


# --- mutual TLS ---------------------------------------------------------------------------------


def test_mutual_tls_authenticates_as_the_certificate(
    pool: ConnectionPool,
    mtls_proxy: BrokerProxy,
    test_certs: TestCerts,
    broker: LocalBroker,
    topic_name: str,
) -> None:
    assert mtls_proxy.auth is not None
    accepted_before = len(mtls_proxy.auth.accepted)
    tls = TlsSettings(
        trust_certs_file=str(test_certs.ca),
        cert_file=str(test_certs.client_cert),
        key_file=str(test_certs.client_key),
    )
    auth = TlsAuthentication(cert_file=tls.cert_file or "", key_file=tls.key_file or "")
    write_and_read_back(lookup_for(pool, mtls_proxy.url, tls=tls, auth=auth), broker, topic_name)
    assert set(mtls_proxy.auth.accepted[accepted_before:]) == {("tls", "spark-client")}


def test_mutual_tls_without_a_client_certificate_is_refused(
    pool: ConnectionPool, mtls_proxy: BrokerProxy, test_certs: TestCerts
) -> None:
    lookup = lookup_for(
        pool, mtls_proxy.url, tls=TlsSettings(trust_certs_file=str(test_certs.ca)), timeout=3.0
    )
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 3.5
    address = mtls_proxy.url.removeprefix("pulsar+ssl://")
    assert str(info.value).startswith(f"TLS with {address} failed during CONNECT: ")
    assert "CERTIFICATE_REQUIRED" in str(info.value)


# --- token -------------------------------------------------------------------------------------


def tls_of(test_certs: TestCerts) -> TlsSettings:
    return TlsSettings(trust_certs_file=str(test_certs.ca))


def test_token_from_a_file(  # noqa: PLR0917
    pool: ConnectionPool,
    token_proxy: BrokerProxy,
    test_certs: TestCerts,
    token_secret: bytes,
    broker: LocalBroker,
    topic_name: str,
    tmp_path: Path,
) -> None:
    path = tmp_path / "token"
    path.write_text(tokens.sign("reader-1", token_secret, time.time() + 600))
    auth = TokenAuthentication(path=str(path))
    lookup = lookup_for(pool, token_proxy.url, tls=tls_of(test_certs), auth=auth)
    write_and_read_back(lookup, broker, topic_name)
    assert token_proxy.auth is not None
    assert ("token", "reader-1") in token_proxy.auth.accepted


def test_wrong_token_fails_at_once_naming_broker_and_plugin(
    pool: ConnectionPool, token_proxy: BrokerProxy, test_certs: TestCerts
) -> None:
    forged = tokens.sign("intruder", b"not-the-secret", time.time() + 600)
    lookup = lookup_for(
        pool, token_proxy.url, tls=tls_of(test_certs), auth=TokenAuthentication(token=forged)
    )
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 2.0
    address = token_proxy.url.removeprefix("pulsar+ssl://")
    assert str(info.value) == (
        f"AuthenticationError (server error 3): broker {address} rejected the credentials of "
        f"auth plugin AuthenticationToken (method 'token'): {AUTH_FAILED_MESSAGE}"
    )
    assert forged not in str(info.value)
    assert not info.value.retriable


def test_refresh_challenge_is_answered_with_the_token_file_read_again(
    pool: ConnectionPool,
    token_proxy: BrokerProxy,
    test_certs: TestCerts,
    token_secret: bytes,
    tmp_path: Path,
) -> None:
    """The first token expires after 1.5 s; the file then holds a fresh one, which the
    connection sends when the proxy (as Apache's refresh check) challenges it."""
    assert token_proxy.auth is not None
    policy = token_proxy.auth
    path = tmp_path / "token"
    path.write_text(tokens.sign("refresher", token_secret, time.time() + 1.5))
    lookup = lookup_for(
        pool, token_proxy.url, tls=tls_of(test_certs), auth=TokenAuthentication(path=str(path))
    )
    connection = lookup.service_connection()
    assert lookup.partitions("persistent://public/default/part3") == 3
    accepted_before = policy.responses_accepted
    path.write_text(tokens.sign("refresher", token_secret, time.time() + 600))
    wait_until(lambda: policy.responses_accepted > accepted_before, "the refresh answer")
    time.sleep(0.5)  # past the grace period of a challenge that had no valid answer
    assert lookup.partitions("persistent://public/default/part3") == 3
    assert lookup.service_connection() is connection
    assert not connection.closed


def test_unreadable_token_file_at_a_challenge_fails_the_connection(
    pool: ConnectionPool,
    token_proxy: BrokerProxy,
    test_certs: TestCerts,
    token_secret: bytes,
    tmp_path: Path,
) -> None:
    assert token_proxy.auth is not None
    path = tmp_path / "token"
    path.write_text(tokens.sign("vanishing", token_secret, time.time() + 600))
    lookup = lookup_for(
        pool, token_proxy.url, tls=tls_of(test_certs), auth=TokenAuthentication(path=str(path))
    )
    connection = lookup.service_connection()
    path.unlink()
    token_proxy.auth.challenge_all()
    wait_until(lambda: connection.closed, "the connection to fail")
    with pytest.raises(ConnectionClosedError) as info:
        connection.request(lambda rid: b"", what="anything", timeout=1.0)
    assert isinstance(info.value.__cause__, CredentialsError)
    assert str(info.value.__cause__) == (
        f"cannot read the token file {path}: No such file or directory"
    )


# --- basic -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def basic_proxy(broker: LocalBroker, test_certs: TestCerts) -> Iterator[BrokerProxy]:
    proxy, _ = apache_proxy(
        (broker.host, broker.port),
        tls=server_tls(test_certs.server_cert, test_certs.server_key),
        auth=AuthPolicy(basic_users={"spark": "s3cret-pass"}),
    )
    yield proxy
    proxy.close()


def test_basic_authentication(
    pool: ConnectionPool,
    basic_proxy: BrokerProxy,
    test_certs: TestCerts,
    broker: LocalBroker,
    topic_name: str,
) -> None:
    auth = BasicAuthentication(user_id="spark", password="s3cret-pass")
    write_and_read_back(
        lookup_for(pool, basic_proxy.url, tls=tls_of(test_certs), auth=auth), broker, topic_name
    )
    assert basic_proxy.auth is not None
    assert ("basic", "spark") in basic_proxy.auth.accepted


def test_wrong_password_is_refused_without_showing_it(
    pool: ConnectionPool, basic_proxy: BrokerProxy, test_certs: TestCerts
) -> None:
    auth = BasicAuthentication(user_id="spark", password="wrong-pass-123")
    with pytest.raises(AuthenticationError) as info:
        lookup_for(pool, basic_proxy.url, tls=tls_of(test_certs), auth=auth).partitions("x")
    assert "wrong-pass-123" not in str(info.value)
    assert "auth plugin AuthenticationBasic (method 'basic')" in str(info.value)


# --- OAuth2 ------------------------------------------------------------------------------------


def oauth2_auth(server: OAuth2Server, tmp_path: Path, secret: str) -> OAuth2Authentication:
    key = server.write_credentials_file(tmp_path / "credentials.json", OAUTH2_CLIENT_ID, secret)
    return OAuth2Authentication(
        issuer_url=server.issuer_url, private_key=f"file://{key}", audience="urn:pulsar-test"
    )


def test_oauth2_token_is_fetched_cached_and_renewed(  # noqa: PLR0917
    pool: ConnectionPool,
    token_proxy: BrokerProxy,
    oauth2_server: OAuth2Server,
    test_certs: TestCerts,
    broker: LocalBroker,
    topic_name: str,
    tmp_path: Path,
) -> None:
    assert token_proxy.auth is not None
    policy = token_proxy.auth
    lifetime, oauth2_server.lifetime = oauth2_server.lifetime, 2
    try:
        auth = oauth2_auth(oauth2_server, tmp_path, OAUTH2_CLIENT_SECRET)
        served_before = oauth2_server.requests.served
        lookup = lookup_for(pool, token_proxy.url, tls=tls_of(test_certs), auth=auth)
        write_and_read_back(lookup, broker, topic_name, 5)
        assert oauth2_server.requests.served == served_before + 1  # one token for both connections
        form = oauth2_server.requests.last_form
        assert form["grant_type"] == "client_credentials"
        assert form["client_id"] == OAUTH2_CLIENT_ID
        assert form["audience"] == "urn:pulsar-test"
        answered = policy.responses_accepted
        wait_until(lambda: policy.responses_accepted > answered, "the expired token's renewal")
        assert oauth2_server.requests.served >= served_before + 2
        assert lookup.partitions("persistent://public/default/part2") == 2
    finally:
        oauth2_server.lifetime = lifetime


def test_oauth2_with_a_wrong_secret_is_a_credentials_error(
    pool: ConnectionPool,
    token_proxy: BrokerProxy,
    oauth2_server: OAuth2Server,
    test_certs: TestCerts,
    tmp_path: Path,
) -> None:
    auth = oauth2_auth(oauth2_server, tmp_path, "not-the-secret")
    lookup = lookup_for(pool, token_proxy.url, tls=tls_of(test_certs), auth=auth)
    with pytest.raises(CredentialsError) as info:
        lookup.partitions("persistent://public/default/any")
    endpoint = oauth2_server.token_endpoint
    assert str(info.value) == (
        f"the token endpoint {endpoint} (client id '{OAUTH2_CLIENT_ID}') refused: HTTP 401 "
        "(invalid_client)"
    )
    assert "not-the-secret" not in str(info.value)


# --- SNI routing --------------------------------------------------------------------------------


def test_sni_proxy_carries_every_connection_and_names_the_broker(
    pool: ConnectionPool, broker: LocalBroker, test_certs: TestCerts, topic_name: str
) -> None:
    """``proxyServiceUrl`` + ``proxyProtocol=SNI``: TCP goes to the proxy, the TLS server name
    is the broker the connection is for (the service URL's host, then the lookup's)."""
    names: list[str | None] = []
    context = server_tls(test_certs.server_cert, test_certs.server_key)
    context.sni_callback = lambda _sock, name, _context: names.append(name)  # type: ignore[assignment,misc,return-value]
    proxy, _ = apache_proxy((broker.host, broker.port), tls=context)
    try:
        closed = BrokerProxy((broker.host, broker.port))  # a port nothing will answer on
        unused_port = int(closed.url.rsplit(":", 1)[1])
        closed.close()
        address = proxy.url.removeprefix("pulsar+ssl://")
        host, port = address.rsplit(":", 1)
        settings = ClientSettings(
            service_url=f"pulsar+ssl://localhost:{unused_port}",
            operation_timeout=5.0,
            connection=ConnectionSettings(
                tls=tls_of(test_certs),
                connect_timeout=5.0,
                sni_proxy=BrokerAddress(host, int(port)),
            ),
        )
        write_and_read_back(Lookup(settings, pool), broker, topic_name, 5)
        assert names[0] == "localhost"  # the service URL's host
        assert set(names[1:]) == {None}  # 127.0.0.1, the lookup's answer: no SNI for an IP
    finally:
        proxy.close()


def test_listener_name_goes_into_every_lookup(
    pool: ConnectionPool, broker: LocalBroker, topic_name: str
) -> None:
    answers = ApacheAnswers()
    asked: list[str] = []

    def rewrite(command: pb.BaseCommand) -> bool:
        if command.type == pb.BaseCommand.Type.LOOKUP:
            asked.append(command.lookupTopic.advertised_listener_name)
        return answers(command)

    proxy = BrokerProxy((broker.host, broker.port), rewrite)
    answers.url = proxy.url
    try:
        settings = ClientSettings(
            service_url=proxy.url, operation_timeout=5.0, listener_name="external"
        )
        write_and_read_back(Lookup(settings, pool), broker, topic_name, 3)
        assert asked == ["external"]
    finally:
        proxy.close()
