"""Fixtures for TLS and authentication tests: certificates, secure proxies, an OAuth2 issuer.

Registered from ``tests/conftest.py``. The proxies stand in front of the session ``broker``
(pulsar-lite has no TLS and no authentication) and answer lookups like Apache Pulsar
(:class:`ApacheAnswers`), so clients keep using the proxy. They are shared by the whole run:
tests that count what a proxy recorded must compare against the counts before they started.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from broker_proxy import AuthPolicy, BrokerProxy, apache_proxy, server_tls_context

from pulsar_spark.local import LocalBroker

from .certs import TestCerts, make_certs
from .oauth2_server import OAuth2Server

OAUTH2_CLIENT_ID = "spark-job"
"""The client id the ``oauth2_server`` knows."""

OAUTH2_CLIENT_SECRET = "spark-job-secret"
"""The secret of :data:`OAUTH2_CLIENT_ID`."""


@pytest.fixture(scope="session")
def test_certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    """A CA, server, client and broken certificates (see :func:`make_certs`)."""
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="session")
def token_secret() -> bytes:
    """The HS256 secret ``token_proxy`` verifies tokens with and ``oauth2_server`` signs with."""
    return secrets.token_bytes(32)


@pytest.fixture(scope="session")
def tls_proxy(broker: LocalBroker, test_certs: TestCerts) -> Iterator[BrokerProxy]:
    """A ``pulsar+ssl://127.0.0.1:PORT`` proxy to the session broker, no authentication.

    Its certificate is valid for 127.0.0.1 and localhost and signed by ``test_certs.ca``.
    """
    tls = server_tls_context(test_certs.server_cert, test_certs.server_key)
    proxy, _ = apache_proxy((broker.host, broker.port), tls=tls)
    yield proxy
    proxy.close()


@pytest.fixture(scope="session")
def token_proxy(
    broker: LocalBroker, test_certs: TestCerts, token_secret: bytes
) -> Iterator[BrokerProxy]:
    """Like ``tls_proxy``, and clients must log in with a token signed with ``token_secret``.

    ``token_proxy.auth`` is its :class:`AuthPolicy` (what it accepted, rejected, challenged).
    """
    tls = server_tls_context(test_certs.server_cert, test_certs.server_key)
    proxy, _ = apache_proxy(
        (broker.host, broker.port), tls=tls, auth=AuthPolicy(token_secret=token_secret)
    )
    yield proxy
    proxy.close()


@pytest.fixture(scope="session")
def mtls_proxy(broker: LocalBroker, test_certs: TestCerts) -> Iterator[BrokerProxy]:
    """Like ``tls_proxy``, and clients need a certificate signed by ``test_certs.ca``; they log
    in with the ``tls`` method as the certificate's CN (``spark-client`` for the test one)."""
    tls = server_tls_context(test_certs.server_cert, test_certs.server_key, test_certs.ca)
    proxy, _ = apache_proxy((broker.host, broker.port), tls=tls, auth=AuthPolicy(tls=True))
    yield proxy
    proxy.close()


@pytest.fixture(scope="session")
def oauth2_server(token_secret: bytes) -> Iterator[OAuth2Server]:
    """An OAuth2 issuer that knows :data:`OAUTH2_CLIENT_ID` and signs with ``token_secret``,
    so ``token_proxy`` accepts the tokens it issues (subject: the client id)."""
    server = OAuth2Server(token_secret, {OAUTH2_CLIENT_ID: OAUTH2_CLIENT_SECRET})
    yield server
    server.close()
