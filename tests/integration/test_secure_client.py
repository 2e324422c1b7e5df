"""The client layer on secured clusters: TLS (one-way and mutual), token, basic and OAuth2
authentication, authorization, refresh challenges, listener names, and every failure a user
can meet, each a clear error within a bounded time.

The cluster is Apache Pulsar secured as in production (``secure_apache``, see
tests/support/apache_secure.py): what our producer writes through it, the official client
reads back from the same broker as its superuser. The test proxy (tests/support/broker_proxy.py)
stays for what that broker cannot be made to do on demand: serve an expired or wrong-host
certificate, leave the TLS address out of a lookup answer, and show the TLS server name a
client sends through an SNI proxy.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from support import tokens
from support.apache_fixtures import start_apache
from support.apache_secure import (
    BASIC_PASSWORD,
    BASIC_USER,
    EXTERNAL_LISTENER,
    OAUTH2_AUDIENCE,
    OUTSIDER_ROLE,
    TOKEN_ROLE,
    SecureApache,
)
from support.broker_proxy import BrokerProxy, apache_proxy
from support.broker_proxy import server_tls_context as server_tls
from support.certs import TestCerts
from support.fixtures import OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
from support.oauth2_server import OAuth2Server
from support.waiting import wait_until

from pulsar_spark.client.auth import (
    NO_AUTH,
    Authentication,
    BasicAuthentication,
    TlsAuthentication,
    TokenAuthentication,
)
from pulsar_spark.client.lookup import Lookup, TopicOwner
from pulsar_spark.client.oauth2 import OAuth2Authentication
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.settings import ClientSettings, ConnectionSettings
from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.tls import TlsSettings
from pulsar_spark.errors import (
    AuthenticationError,
    AuthorizationError,
    BrokerUnreachableError,
    ConnectionClosedError,
    CredentialsError,
    TlsError,
    TopicLookupError,
)
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.local.process import choose_ports
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration

AUTH_FAILED = "Failed to authenticate"
"""The message of Apache's CommandError for every refused login, whatever the reason."""


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
    listener: str | None = None,
) -> Lookup:
    settings = ClientSettings(
        service_url=url,
        operation_timeout=timeout,
        listener_name=listener,
        connection=ConnectionSettings(tls=tls, auth=auth, connect_timeout=timeout),
    )
    return Lookup(settings, pool)


def write_and_read_back(
    lookup: Lookup, official: pulsar.Client, topic: str, count: int = 20
) -> None:
    """Send ``count`` messages through ``lookup``; ``official`` reads every one back."""
    values = [f"{topic}-{i}".encode() for i in range(count)]
    producer = Producer.create(lookup, full_topic_name(topic))
    try:
        for value in values:
            producer.send(OutgoingMessage(value, key=f"k{len(value)}"))
        producer.flush()
    finally:
        producer.close()
    try:
        reader = official.create_reader(topic, pulsar.MessageId.earliest)
        received = [reader.read_next(5000) for _ in values]
        assert [m.data() for m in received] == values
        assert [m.partition_key() for m in received] == [f"k{len(v)}" for v in values]
        assert not reader.has_message_available()
    finally:
        official.close()


def plain_client(broker: LocalBroker | ApacheBroker) -> pulsar.Client:
    """An official client of an unsecured broker."""
    return pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))


def elapsed_since(started: float) -> float:
    return time.monotonic() - started


def tls_of(test_certs: TestCerts) -> TlsSettings:
    return TlsSettings(trust_certs_file=str(test_certs.ca))


def secure_lookup(
    pool: ConnectionPool,
    secure: SecureApache,
    test_certs: TestCerts,
    auth: Authentication,
    listener: str | None = None,
) -> Lookup:
    """A lookup on the secured broker's TLS port, logged in with ``auth``."""
    return lookup_for(pool, secure.tls_url, tls=tls_of(test_certs), auth=auth, listener=listener)


def refusal(secure: SecureApache, plugin: str) -> str:
    """The connector's error when the secured broker refuses the credentials of ``plugin``."""
    return (
        f"AuthenticationError (server error 3): broker {secure.address} rejected the "
        f"credentials of auth plugin {plugin}: {AUTH_FAILED}"
    )


def token_lookup(
    pool: ConnectionPool, secure: SecureApache, test_certs: TestCerts, listener: str | None = None
) -> Lookup:
    """A lookup on the TLS port logged in with a token of the granted role."""
    return secure_lookup(
        pool, secure, test_certs, TokenAuthentication(token=secure.token()), listener
    )


# --- TLS ---------------------------------------------------------------------------------------


@pytest.mark.apache
def test_tls_round_trip_with_the_test_ca(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    lookup = token_lookup(pool, secure_apache, test_certs)
    write_and_read_back(lookup, secure_apache.official_client(), topic_name)
    assert lookup.service_connection().address == BrokerAddress(
        "127.0.0.1", int(secure_apache.address.rsplit(":", 1)[1])
    )


@pytest.mark.apache
def test_tls_with_an_unknown_ca_fails_naming_address_and_trust_file(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts
) -> None:
    lookup = lookup_for(
        pool,
        secure_apache.tls_url,
        tls=TlsSettings(trust_certs_file=str(test_certs.other_ca)),
        auth=TokenAuthentication(token=secure_apache.token()),
    )
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 2.0
    assert str(info.value) == (
        f"TLS handshake with {secure_apache.address} failed: the broker's certificate was not "
        f"accepted: unable to get local issuer certificate (trusted: {test_certs.other_ca})"
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
    pool: ConnectionPool,
    broker: LocalBroker | ApacheBroker,
    test_certs: TestCerts,
    which: str,
    reason: str,
) -> None:
    """The test proxy serves the broken certificates (a broker with each would be a start of
    its own); the client refuses them before a byte of the protocol is sent."""
    cert, key = getattr(test_certs, f"{which}_cert"), getattr(test_certs, f"{which}_key")
    proxy = BrokerProxy((broker.host, broker.port), tls=server_tls(cert, key))
    try:
        lookup = lookup_for(pool, proxy.url, tls=tls_of(test_certs))
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
    pool: ConnectionPool,
    broker: LocalBroker | ApacheBroker,
    test_certs: TestCerts,
    topic_name: str,
) -> None:
    proxy, _ = apache_proxy(
        (broker.host, broker.port),
        tls=server_tls(test_certs.wrong_host_cert, test_certs.wrong_host_key),
    )
    try:
        no_hostname = TlsSettings(trust_certs_file=str(test_certs.ca), verify_hostname=False)
        assert lookup_for(pool, proxy.url, tls=no_hostname).partitions(topic_name) == 0
        insecure = TlsSettings(trust_certs_file=str(test_certs.other_ca), allow_insecure=True)
        lookup = lookup_for(pool, proxy.url, tls=insecure)
        write_and_read_back(lookup, plain_client(broker), topic_name, 3)
    finally:
        proxy.close()


def test_plain_broker_behind_a_tls_url_fails_fast(
    pool: ConnectionPool, broker: LocalBroker | ApacheBroker, test_certs: TestCerts
) -> None:
    url = f"pulsar+ssl://{broker.host}:{broker.port}"
    lookup = lookup_for(pool, url, tls=tls_of(test_certs), timeout=2.0)
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 3.0
    message = str(info.value)
    assert message.startswith(f"{broker.host}:{broker.port} closed the connection during the TLS ")
    assert message.endswith(
        "is it a TLS port? (pulsar+ssl:// needs the broker's TLS port, usually 6651)"
    )


@pytest.mark.apache
def test_plain_url_to_a_tls_port_fails_fast(
    pool: ConnectionPool, secure_apache: SecureApache
) -> None:
    """Apache closes a connection whose first bytes are not a TLS handshake."""
    lookup = lookup_for(pool, f"pulsar://{secure_apache.address}", timeout=2.0)
    started = time.monotonic()
    with pytest.raises(BrokerUnreachableError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 3.0
    assert str(info.value) == (
        f"broker at {secure_apache.address} closed the connection on CONNECT (if that port "
        "expects TLS, use pulsar+ssl://)"
    )


def test_lookup_without_a_tls_url_is_an_error_not_plain_text(
    pool: ConnectionPool, broker: LocalBroker | ApacheBroker, test_certs: TestCerts
) -> None:
    """A broker with a TLS port always advertises it; the test proxy leaves it out."""
    proxy, answers = apache_proxy(
        (broker.host, broker.port), tls=server_tls(test_certs.server_cert, test_certs.server_key)
    )
    answers.advertise_tls_url = False
    try:
        lookup = lookup_for(pool, proxy.url, tls=tls_of(test_certs))
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


def mtls(test_certs: TestCerts) -> tuple[TlsSettings, TlsAuthentication]:
    tls = TlsSettings(
        trust_certs_file=str(test_certs.ca),
        cert_file=str(test_certs.client_cert),
        key_file=str(test_certs.client_key),
    )
    return tls, TlsAuthentication(
        cert_file=str(test_certs.client_cert), key_file=str(test_certs.client_key)
    )


@pytest.mark.apache
def test_mutual_tls_authenticates_as_the_certificate(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    """The certificate is the only credential: its CN (``spark-client``) is the role the
    broker authorizes to produce."""
    tls, auth = mtls(test_certs)
    lookup = lookup_for(pool, secure_apache.tls_url, tls=tls, auth=auth)
    write_and_read_back(lookup, secure_apache.official_client(), topic_name)


@pytest.mark.apache
def test_no_credentials_on_a_secured_broker_is_refused(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts
) -> None:
    """No client certificate and no other credentials: Apache refuses the CONNECT."""
    lookup = lookup_for(pool, secure_apache.tls_url, tls=tls_of(test_certs), timeout=3.0)
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 2.0
    assert str(info.value) == (
        f"AuthenticationError (server error 3): broker {secure_apache.address} requires "
        "authentication and none is configured (set pulsar.client.authPluginClassName and "
        f"pulsar.client.authParams): {AUTH_FAILED}"
    )


@pytest.fixture(scope="module")
def certificate_only_apache(test_certs: TestCerts) -> Iterator[ApacheBroker]:
    """A broker whose TLS port takes only clients with a certificate the test CA signed
    (``tlsRequireTrustedClientCertOnConnect``): its own start, as that would refuse the token,
    basic and OAuth2 users of ``secure_apache``."""
    tls_port, web_tls_port = choose_ports("127.0.0.1", None, None)
    broker = start_apache(
        config={
            "brokerServicePortTls": str(tls_port),
            "webServicePortTls": str(web_tls_port),
            "tlsCertificateFilePath": str(test_certs.server_cert),
            "tlsKeyFilePath": str(test_certs.server_key),
            "tlsTrustCertsFilePath": str(test_certs.ca),
            "tlsRequireTrustedClientCertOnConnect": "true",
        }
    )
    yield broker
    broker.stop()


@pytest.mark.apache
def test_a_broker_requiring_client_certificates_refuses_a_client_without_one(
    pool: ConnectionPool,
    certificate_only_apache: ApacheBroker,
    test_certs: TestCerts,
    topic_name: str,
) -> None:
    url = certificate_only_apache.tls_service_url
    assert url is not None
    tls, _ = mtls(test_certs)
    write_and_read_back(
        lookup_for(pool, url, tls=tls), plain_client(certificate_only_apache), topic_name, 3
    )

    lookup = lookup_for(pool, url, tls=tls_of(test_certs), timeout=3.0)
    started = time.monotonic()
    with pytest.raises(TlsError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 3.5
    address = url.removeprefix("pulsar+ssl://")
    assert str(info.value).startswith(f"TLS with {address} failed during CONNECT: ")
    assert "CERTIFICATE_REQUIRED" in str(info.value)


# --- token -------------------------------------------------------------------------------------


@pytest.mark.apache
def test_token_from_a_file(
    pool: ConnectionPool,
    secure_apache: SecureApache,
    test_certs: TestCerts,
    topic_name: str,
    tmp_path: Path,
) -> None:
    path = tmp_path / "token"
    path.write_text(secure_apache.token())
    auth = TokenAuthentication(path=str(path))
    lookup = secure_lookup(pool, secure_apache, test_certs, auth)
    write_and_read_back(lookup, secure_apache.official_client(), topic_name)


@pytest.mark.apache
@pytest.mark.parametrize("case", ["wrong_secret", "expired"])
def test_bad_token_fails_at_once_naming_broker_and_plugin(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts, case: str
) -> None:
    bad = {
        "wrong_secret": tokens.sign(TOKEN_ROLE, b"not-the-secret-" * 3, time.time() + 600),
        "expired": secure_apache.token(lifetime=-60),
    }[case]
    auth = TokenAuthentication(token=bad)
    lookup = secure_lookup(pool, secure_apache, test_certs, auth)
    started = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        lookup.partitions("persistent://public/default/any")
    assert elapsed_since(started) < 2.0
    assert str(info.value) == refusal(secure_apache, "AuthenticationToken (method 'token')")
    assert not info.value.retriable
    assert bad not in str(info.value)
    assert bad not in secure_apache.log()


@pytest.mark.apache
def test_refresh_challenge_is_answered_with_the_token_file_read_again(
    pool: ConnectionPool,
    secure_apache: SecureApache,
    test_certs: TestCerts,
    tmp_path: Path,
) -> None:
    """The first token expires after 3 s; the file then holds a fresh one, which the
    connection sends when the broker's refresh check challenges it: the connection stays."""
    role = "refresher"
    secure_apache.grant(role)
    path = tmp_path / "token"
    path.write_text(secure_apache.token(role, lifetime=3))
    lookup = secure_lookup(
        pool,
        secure_apache,
        test_certs,
        TokenAuthentication(path=str(path)),
    )
    connection = lookup.service_connection()
    assert lookup.partitions("persistent://public/default/any") == 0
    refreshed = secure_apache.refreshes(role)
    path.write_text(secure_apache.token(role))
    wait_until(lambda: secure_apache.refreshes(role) > refreshed, "the refresh answer", timeout=15)
    assert lookup.partitions("persistent://public/default/any") == 0
    assert lookup.service_connection() is connection
    assert not connection.closed


@pytest.mark.apache
@pytest.mark.parametrize("case", ["expired", "unreadable"])
def test_token_file_that_cannot_answer_a_challenge_fails_the_connection(
    pool: ConnectionPool,
    secure_apache: SecureApache,
    test_certs: TestCerts,
    tmp_path: Path,
    case: str,
) -> None:
    """The file still holds the expired token (Apache refuses the answer and closes the
    connection) or is gone (the client cannot answer): the connection says why."""
    path = tmp_path / "token"
    path.write_text(secure_apache.token(lifetime=2))
    lookup = secure_lookup(pool, secure_apache, test_certs, TokenAuthentication(path=str(path)))
    connection = lookup.service_connection()
    if case == "unreadable":
        path.unlink()
    wait_until(lambda: connection.closed, "the connection to fail", timeout=15)
    with pytest.raises(ConnectionClosedError) as info:
        connection.request(lambda rid: b"", what="anything", timeout=1.0)
    cause = info.value.__cause__
    if case == "expired":
        assert isinstance(cause, AuthenticationError)
        assert str(cause) == refusal(secure_apache, "AuthenticationToken (method 'token')")
    else:
        assert isinstance(cause, CredentialsError)
        assert str(cause) == f"cannot read the token file {path}: No such file or directory"


# --- authorization -----------------------------------------------------------------------------


@pytest.mark.apache
def test_role_without_permission_gets_an_authorization_error(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    auth = TokenAuthentication(token=secure_apache.token(OUTSIDER_ROLE))
    lookup = secure_lookup(pool, secure_apache, test_certs, auth)
    topic = full_topic_name(topic_name)
    with pytest.raises(AuthorizationError) as info:
        lookup.partitions(topic)
    assert str(info.value) == (
        f"AuthorizationError (server error 4): partitioned metadata of {topic}: Client is not "
        "authorized to Get Partition Metadata"
    )
    with pytest.raises(AuthorizationError) as info:
        Producer.create(lookup, topic)
    assert str(info.value) == (
        f"AuthorizationError (server error 4): lookup of {topic}: Client is not authorized to "
        "Lookup"
    )
    assert not info.value.retriable


# --- basic -------------------------------------------------------------------------------------


@pytest.mark.apache
def test_basic_authentication(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    auth = BasicAuthentication(user_id=BASIC_USER, password=BASIC_PASSWORD)
    lookup = secure_lookup(pool, secure_apache, test_certs, auth)
    write_and_read_back(lookup, secure_apache.official_client(), topic_name)


@pytest.mark.apache
def test_wrong_password_is_refused_without_showing_it(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts
) -> None:
    auth = BasicAuthentication(user_id=BASIC_USER, password="wrong-pass-123")
    lookup = secure_lookup(pool, secure_apache, test_certs, auth)
    with pytest.raises(AuthenticationError) as info:
        lookup.partitions("x")
    assert str(info.value) == refusal(secure_apache, "AuthenticationBasic (method 'basic')")
    assert "wrong-pass-123" not in secure_apache.log()


# --- OAuth2 ------------------------------------------------------------------------------------


def oauth2_auth(
    server: OAuth2Server, tmp_path: Path, secret: str, audience: str = OAUTH2_AUDIENCE
) -> OAuth2Authentication:
    key = server.write_credentials_file(tmp_path / "credentials.json", OAUTH2_CLIENT_ID, secret)
    return OAuth2Authentication(
        issuer_url=server.issuer_url, private_key=f"file://{key}", audience=audience
    )


@pytest.mark.apache
def test_oauth2_token_is_fetched_cached_and_renewed(  # noqa: PLR0917
    pool: ConnectionPool,
    secure_apache: SecureApache,
    oauth2_server: OAuth2Server,
    test_certs: TestCerts,
    topic_name: str,
    tmp_path: Path,
) -> None:
    """The issuer's tokens live 3 s: the broker's refresh check challenges the connection,
    which answers with a token fetched anew; it stays open."""
    lifetime, oauth2_server.lifetime = oauth2_server.lifetime, 3
    try:
        auth = oauth2_auth(oauth2_server, tmp_path, OAUTH2_CLIENT_SECRET)
        served_before = oauth2_server.requests.served
        lookup = secure_lookup(pool, secure_apache, test_certs, auth)
        write_and_read_back(lookup, secure_apache.official_client(), topic_name, 5)
        assert oauth2_server.requests.served == served_before + 1  # one token for both connections
        form = oauth2_server.requests.last_form
        assert form["grant_type"] == "client_credentials"
        assert form["client_id"] == OAUTH2_CLIENT_ID
        assert form["audience"] == OAUTH2_AUDIENCE
        connection = lookup.service_connection()
        refreshed = secure_apache.refreshes(OAUTH2_CLIENT_ID)
        wait_until(
            lambda: secure_apache.refreshes(OAUTH2_CLIENT_ID) > refreshed,
            "the expired token's renewal",
            timeout=15,
        )
        assert oauth2_server.requests.served >= served_before + 2
        assert lookup.partitions(secure_apache.new_partitioned_topic(2)) == 2
        assert lookup.service_connection() is connection
    finally:
        oauth2_server.lifetime = lifetime


@pytest.mark.apache
@pytest.mark.parametrize("case", ["wrong_secret", "other_audience"])
def test_oauth2_refusals(  # noqa: PLR0917
    pool: ConnectionPool,
    secure_apache: SecureApache,
    oauth2_server: OAuth2Server,
    test_certs: TestCerts,
    tmp_path: Path,
    case: str,
) -> None:
    """The issuer refuses a wrong secret; a token it signed for another audience, the broker."""
    if case == "wrong_secret":
        auth = oauth2_auth(oauth2_server, tmp_path, "not-the-secret")
    else:
        auth = oauth2_auth(oauth2_server, tmp_path, OAUTH2_CLIENT_SECRET, "urn:elsewhere")
    lookup = secure_lookup(pool, secure_apache, test_certs, auth)
    with pytest.raises((CredentialsError, AuthenticationError)) as info:
        lookup.partitions("persistent://public/default/any")
    assert (
        str(info.value)
        == {
            "wrong_secret": (
                f"the token endpoint {oauth2_server.token_endpoint} (client id "
                f"'{OAUTH2_CLIENT_ID}') refused: HTTP 401 (invalid_client)"
            ),
            "other_audience": refusal(secure_apache, "AuthenticationOAuth2 (method 'token')"),
        }[case]
    )
    assert type(info.value) is {"wrong_secret": CredentialsError}.get(case, AuthenticationError)


# --- SNI routing and listener names -------------------------------------------------------------


def test_sni_proxy_carries_every_connection_and_names_the_broker(
    pool: ConnectionPool, lite_broker: LocalBroker, test_certs: TestCerts, topic_name: str
) -> None:
    """``proxyServiceUrl`` + ``proxyProtocol=SNI``: TCP goes to the proxy, the TLS server name
    is the broker the connection is for (the service URL's host, then the lookup's).

    Only the test proxy, which ends TLS, can show the server names a client sends, and it runs
    in front of pulsar-lite alone: Apache Pulsar's standalone answers every lookup with
    ``proxyThroughServiceUrl`` (it expects clients to keep using the service URL), so behind
    it no connection would be for the lookup's broker, as it is on a production cluster.
    """
    names: list[str | None] = []
    context = server_tls(test_certs.server_cert, test_certs.server_key)
    context.sni_callback = lambda _sock, name, _context: names.append(name)  # type: ignore[assignment,misc,return-value]
    proxy, _ = apache_proxy((lite_broker.host, lite_broker.port), tls=context)
    try:
        closed = BrokerProxy((lite_broker.host, lite_broker.port))  # a port nothing answers on
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
        write_and_read_back(Lookup(settings, pool), plain_client(lite_broker), topic_name, 5)
        assert names[0] == "localhost"  # the service URL's host
        assert set(names[1:]) == {None}  # 127.0.0.1, the lookup's answer: no SNI for an IP
    finally:
        proxy.close()


@pytest.mark.apache
def test_listener_name_goes_into_every_lookup(
    pool: ConnectionPool, secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    """The broker advertises two listeners on the same ports: ``internal`` as 127.0.0.1 and
    ``external`` as localhost. A lookup names the one the client asked for; the standalone
    has the client keep its service URL and name that broker in CONNECT.

    Apache Pulsar shares one lookup in flight per namespace bundle, whatever the listener,
    and forgets it just after it answers: a lookup right behind one for another listener can
    get that one's answer. The second lookup is asked again until it differs from the first
    (at most 5 s), then must be exactly the external listener's."""
    topic = full_topic_name(topic_name)
    tls_port = secure_apache.address.rsplit(":", 1)[1]
    service = BrokerAddress("127.0.0.1", int(tls_port))
    internal_owner = TopicOwner(service, f"127.0.0.1:{tls_port}")
    internal = token_lookup(pool, secure_apache, test_certs)
    assert internal.owner(topic) == internal_owner
    external = token_lookup(pool, secure_apache, test_certs, listener=EXTERNAL_LISTENER)
    owner = external.owner(topic)
    deadline = time.monotonic() + 5.0
    while owner == internal_owner and time.monotonic() < deadline:
        time.sleep(0.05)
        owner = external.owner(topic)
    assert owner == TopicOwner(service, f"localhost:{tls_port}")
    write_and_read_back(external, secure_apache.official_client(), topic_name, 3)
