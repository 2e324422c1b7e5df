"""The secured Apache Pulsar standalone of a test run, configured as a production cluster is.

Registered from ``tests/conftest.py``. ``secure_apache`` starts one broker, the first time a
test asks for it, that every secure test shares (each extra start costs about 15 s):

- **TLS** on its own ports (``brokerServicePortTls``, ``webServicePortTls``) with the test
  CA's server certificate (valid for 127.0.0.1 and localhost); the plain ports stay open, as
  on a cluster whose internal clients use them, and need credentials all the same.
- **Authentication** by four providers at once: tokens (HS256, ``tokenSecretKey``, the
  session's ``token_secret``), client certificates (the role is the certificate's CN),
  basic (an htpasswd file) and OpenID Connect (RS256 tokens of the tests' OAuth2 issuer,
  checked with the public key the broker fetches from it). Client certificates are asked
  for but not required, since token, basic and OAuth2 users connect to the same TLS port
  without one.
- **Authorization**: :data:`ADMIN_ROLE` is the superuser (the broker's own internal client
  logs in with its token too); :data:`GRANTED_ROLES` may produce and consume in
  ``public/default``; any other role is authenticated and may do nothing.
- **Refresh**: every :data:`REFRESH_CHECK_SECONDS` the broker challenges each connection
  whose credentials expired.
- **Listeners**: lookups without a listener name answer 127.0.0.1 (the ``internal``
  listener); with :data:`EXTERNAL_LISTENER`, they answer ``localhost``.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pulsar
import pytest

from pulsar_spark.local import ApacheBroker
from pulsar_spark.local.process import choose_ports

from .apache_fixtures import create_partitioned_topic, start_apache
from .certs import CLIENT_CN, TestCerts
from .fixtures import OAUTH2_CLIENT_ID
from .oauth2_server import OAuth2Server
from .tokens import sign

ADMIN_ROLE = "pulsar-admin"
"""The superuser role; the tests' official clients and admin calls log in as it."""

TOKEN_ROLE = "spark-job"
"""The role of the tests' token logins (also the OAuth2 client id, so an OAuth2 login too)."""

BASIC_USER = "spark"
BASIC_PASSWORD = "s3cret-pass"
"""The one user of the broker's htpasswd file."""

GRANTED_ROLES: tuple[str, ...] = tuple(
    dict.fromkeys((TOKEN_ROLE, CLIENT_CN, BASIC_USER, OAUTH2_CLIENT_ID))
)
"""Roles allowed to produce and consume in ``public/default``."""

OUTSIDER_ROLE = "outsider"
"""A role the broker authenticates but grants nothing."""

OAUTH2_AUDIENCE = "urn:pulsar-test"
"""The audience the broker accepts in the OAuth2 issuer's tokens."""

REFRESH_CHECK_SECONDS = 2
"""How often the broker looks for connections whose credentials expired."""

EXTERNAL_LISTENER = "external"
"""The listener name whose lookups answer ``localhost`` addresses."""

_PROVIDERS = (
    "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderTls",
    "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
    "org.apache.pulsar.broker.authentication.oidc.AuthenticationProviderOpenID",
)


@dataclass(frozen=True)
class SecureApache:
    """The secured broker and what a test needs to log in to it."""

    broker: ApacheBroker
    secret: bytes
    """The HS256 key of its token provider."""
    admin_token: str

    @property
    def tls_url(self) -> str:
        """``pulsar+ssl://127.0.0.1:PORT``."""
        url = self.broker.tls_service_url
        assert url is not None
        return url

    @property
    def address(self) -> str:
        """The TLS listener's ``127.0.0.1:PORT``."""
        return self.tls_url.removeprefix("pulsar+ssl://")

    def token(self, role: str = TOKEN_ROLE, lifetime: float | None = 600.0) -> str:
        """A token for ``role`` that expires after ``lifetime`` seconds (never for ``None``)."""
        return sign(role, self.secret, None if lifetime is None else time.time() + lifetime)

    def grant(self, role: str) -> None:
        """Let ``role`` produce and consume in ``public/default``."""
        self.broker.admin(
            "POST",
            f"/admin/v2/namespaces/public/default/permissions/{role}",
            ["produce", "consume"],
        )

    def log(self) -> str:
        """The broker's log so far."""
        return self.broker.log_path.read_text(encoding="utf-8", errors="replace")

    def refreshes(self, role: str) -> int:
        """How many refresh challenges connections of ``role`` answered so far."""
        return self.log().count(f"Refreshed authentication credentials for role {role}\n")

    def official_client(self, **options: Any) -> pulsar.Client:
        """An official client logged in as the superuser on the plain port."""
        return pulsar.Client(
            self.broker.service_url,
            authentication=pulsar.AuthenticationToken(self.admin_token),
            operation_timeout_seconds=15,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
            **options,
        )

    def new_partitioned_topic(self, partitions: int) -> str:
        """A new topic with ``partitions`` partitions (its short name)."""
        name = f"secure-p{partitions}-{uuid.uuid4().hex[:12]}"
        create_partitioned_topic(self.broker, name, partitions)
        return name


def apr1_htpasswd_line(user: str, password: str, salt: str | None = None) -> str:
    """``user:$apr1$...``, the line ``htpasswd -m`` writes (Apache's MD5-based crypt)."""
    salt = salt or secrets.token_hex(4)
    return f"{user}:{_apr1(password.encode(), salt.encode())}"


def _apr1(password: bytes, salt: bytes) -> str:
    magic = b"$apr1$"
    alternate = hashlib.md5(password + salt + password).digest()
    context = password + magic + salt
    for done in range(0, len(password), 16):
        context += alternate[: min(16, len(password) - done)]
    length = len(password)
    while length:
        context += b"\0" if length & 1 else password[:1]
        length >>= 1
    digest = hashlib.md5(context).digest()
    for i in range(1000):
        block = password if i & 1 else digest
        if i % 3:
            block += salt
        if i % 7:
            block += password
        block += digest if i & 1 else password
        digest = hashlib.md5(block).digest()
    groups = ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5))
    encoded = "".join(
        _crypt64((digest[a] << 16) | (digest[b] << 8) | digest[c], 4) for a, b, c in groups
    )
    return f"$apr1${salt.decode()}${encoded}{_crypt64(digest[11], 2)}"


_CRYPT64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _crypt64(value: int, count: int) -> str:
    out = ""
    for _ in range(count):
        out += _CRYPT64[value & 0x3F]
        value >>= 6
    return out


def _data_url(data: bytes) -> str:
    return "data:;base64," + base64.b64encode(data).decode("ascii")


def secure_settings(
    certs: TestCerts, secret: bytes, admin_token: str, issuer: OAuth2Server, ports: tuple[int, int]
) -> dict[str, str]:
    """The ``standalone.conf`` keys of the secured broker, TLS on ``ports`` (binary, web)."""
    return {
        "brokerServicePortTls": str(ports[0]),
        "webServicePortTls": str(ports[1]),
        "tlsCertificateFilePath": str(certs.server_cert),
        "tlsKeyFilePath": str(certs.server_key),
        "tlsTrustCertsFilePath": str(certs.ca),
        "tlsRequireTrustedClientCertOnConnect": "false",
        "authenticationEnabled": "true",
        "authenticationProviders": ",".join(_PROVIDERS),
        "tokenSecretKey": _data_url(secret),
        "basicAuthConf": _data_url(apr1_htpasswd_line(BASIC_USER, BASIC_PASSWORD).encode()),
        "openIDAllowedTokenIssuers": issuer.issuer_url,
        "openIDAllowedAudiences": OAUTH2_AUDIENCE,
        "openIDRequireIssuersUseHttps": "false",
        "authenticationRefreshCheckSeconds": str(REFRESH_CHECK_SECONDS),
        "authorizationEnabled": "true",
        "superUserRoles": ADMIN_ROLE,
        "brokerClientAuthenticationPlugin": (
            "org.apache.pulsar.client.impl.auth.AuthenticationToken"
        ),
        "brokerClientAuthenticationParameters": f"token:{admin_token}",
    }


def listener_settings(host: str, port: int, tls_port: int) -> dict[str, str]:
    """Two listeners on the same ports: ``internal`` as ``host``, external as ``localhost``."""
    urls = [
        f"{name}:{scheme}://{address}:{number}"
        for name, address in (("internal", host), (EXTERNAL_LISTENER, "localhost"))
        for scheme, number in (("pulsar", port), ("pulsar+ssl", tls_port))
    ]
    return {"advertisedListeners": ",".join(urls), "internalListenerName": "internal"}


@pytest.fixture(scope="session")
def secure_apache(
    test_certs: TestCerts, token_secret: bytes, oauth2_server: OAuth2Server
) -> Iterator[SecureApache]:
    """The secured Apache broker (see this module), shared by every secure test."""
    admin_token = sign(ADMIN_ROLE, token_secret, None)
    host = "127.0.0.1"
    port, web_port, tls_port, web_tls_port = choose_ports(host, None, None, None, None)
    config: Mapping[str, str] = {
        **secure_settings(
            test_certs, token_secret, admin_token, oauth2_server, (tls_port, web_tls_port)
        ),
        **listener_settings(host, port, tls_port),
    }
    broker = start_apache(
        config=config,
        host=host,
        port=port,
        web_port=web_port,
        admin_headers={"Authorization": f"Bearer {admin_token}"},
    )
    try:
        secure = SecureApache(broker, token_secret, admin_token)
        for role in GRANTED_ROLES:
            secure.grant(role)
        yield secure
    finally:
        broker.stop()
