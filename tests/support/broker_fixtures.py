"""Fixtures shared by the broker tests: clients of the session broker, streaming queries on it,
private pools, fake and private brokers.

Registered from ``tests/conftest.py``. ``client`` and ``lookup`` are module-scoped, so each test
module gets (and closes) its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pulsar
import pytest

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.topic import full_topic_name

from .broker_proxy import ApacheAnswers, BrokerProxy, apache_proxy
from .clients import settings_for
from .fake_broker import FakeBroker, Handler
from .official import official_client
from .schemas import SchemaRegistry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .streaming import Streams


@pytest.fixture(scope="module")
def client(broker: LocalBroker) -> Iterator[pulsar.Client]:
    """An official client of the session broker (see :func:`official_client`)."""
    official = official_client(broker.service_url)
    yield official
    with contextlib.suppress(pulsar.PulsarException):  # a test may have closed it
        official.close()


@pytest.fixture
def streams(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, tmp_path: Path
) -> Streams:
    """Streaming queries on the session broker, publishing with ``client``, in ``tmp_path``."""
    from .streaming import Streams

    return Streams(spark, broker.service_url, client, tmp_path)


@pytest.fixture(scope="module")
def lookup(broker: LocalBroker) -> Iterator[Lookup]:
    """Our client's lookup on the session broker, over a pool of its own; 10 s timeouts."""
    pool = ConnectionPool()
    yield Lookup(settings_for(broker.service_url, timeout=10.0), pool)
    pool.close()


@pytest.fixture
def topic(topic_name: str) -> str:
    """``topic_name`` fully qualified."""
    return full_topic_name(topic_name)


@pytest.fixture
def pool() -> Iterator[ConnectionPool]:
    """A private connection pool, closed after the test."""
    connections = ConnectionPool()
    yield connections
    connections.close()


@pytest.fixture
def fake_broker() -> Iterator[Callable[[Handler], FakeBroker]]:
    """A function ``(handler) -> FakeBroker`` starting fake brokers, all closed after the test."""
    started: list[FakeBroker] = []

    def start(handler: Handler) -> FakeBroker:
        server = FakeBroker(handler)
        started.append(server)
        return server

    yield start
    for server in started:
        server.close()


@pytest.fixture
def own_broker() -> Iterator[Callable[..., LocalBroker]]:
    """Start brokers of this test's own (never the shared one); all stopped at the end."""
    started: list[LocalBroker] = []

    def start(**kwargs: Any) -> LocalBroker:
        local = LocalBroker.start(**kwargs)
        started.append(local)
        return local

    yield start
    for local in started:
        local.stop()


@pytest.fixture
def proxied(broker: LocalBroker) -> Iterator[tuple[BrokerProxy, ApacheAnswers, pulsar.Client]]:
    """A proxy answering like an Apache broker (schemas kept, GET_SCHEMA answered, named as
    Apache Pulsar), and an official client using it."""
    proxy, answers = apache_proxy((broker.host, broker.port), named=True)
    official = official_client(proxy.url)
    try:
        yield proxy, answers, official
    finally:
        official.close()
        proxy.close()


@pytest.fixture
def registry(broker: LocalBroker | ApacheBroker) -> Iterator[SchemaRegistry]:
    """The schema registry of the session broker: Apache Pulsar's own, or on pulsar-lite (which
    keeps no schemas) a proxy emulating Apache's; with an official client of it."""
    if isinstance(broker, ApacheBroker):
        official = official_client(broker.service_url)
        try:
            yield SchemaRegistry(broker.service_url, official, apache=broker)
        finally:
            official.close()
        return
    proxy, answers = apache_proxy((broker.host, broker.port), named=True)
    official = official_client(proxy.url)
    try:
        yield SchemaRegistry(proxy.url, official, answers=answers)
    finally:
        official.close()
        proxy.close()
