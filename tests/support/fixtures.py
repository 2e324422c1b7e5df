"""Fixtures for TLS and authentication tests: certificates, a token secret, an OAuth2 issuer.

Registered from ``tests/conftest.py``; the secured Apache broker that uses them is in
``support/apache_secure.py``.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

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
    """The HS256 key (256 bits) the secured Apache broker verifies the tests' tokens with."""
    return secrets.token_bytes(32)


@pytest.fixture(scope="session")
def oauth2_server() -> Iterator[OAuth2Server]:
    """An OAuth2 issuer that knows :data:`OAUTH2_CLIENT_ID`; the secured Apache broker accepts
    the RS256 tokens it issues (subject: the client id)."""
    server = OAuth2Server({OAUTH2_CLIENT_ID: OAUTH2_CLIENT_SECRET})
    yield server
    server.close()
