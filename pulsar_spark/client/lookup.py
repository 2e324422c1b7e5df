"""Finding topics: partition counts, the broker that owns a topic, topics of a namespace.

Lookup follows Pulsar's rules: a Redirect answer is asked again at the returned broker,
carrying its ``authoritative`` flag, up to a bounded number of hops; a Connect answer names the
owner. With ``proxy_through_service_url`` the client keeps talking to the service URL (a proxy)
and names the owner in CONNECT's ``proxy_to_broker_url``. A client on TLS connects only to the
broker's TLS URL (``brokerServiceUrlTls``); an answer without one is an error, never a quiet
fall-back to plain text. With a listener name, lookups ask for the broker's address on that
advertised listener.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.common.address import BrokerAddress, is_tls_url, parse_service_url
from pulsar_spark.common.retry import retrying
from pulsar_spark.errors import (
    PulsarConnectionError,
    RequestTimeoutError,
    TopicLookupError,
    server_error_for,
)
from pulsar_spark.protocol import commands, pb

MAX_REDIRECTS = 20
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TopicOwner:
    """Where to open consumers and producers for a topic."""

    address: BrokerAddress
    proxy_to_broker_url: str | None = None


class Lookup:
    """Discovery requests against a service URL, over a connection pool."""

    def __init__(self, settings: ClientSettings, pool: ConnectionPool) -> None:
        self.settings = settings
        self.service_url = settings.service_url
        self._addresses = parse_service_url(settings.service_url)
        self._tls = settings.connection.tls is not None
        self.pool = pool
        self.timeout = settings.operation_timeout

    def retrying(self, operation: Callable[[], T], what: str) -> T:
        """Run ``operation`` under the retry policy, with this client's operation timeout."""
        return retrying(operation, what=what, timeout=self.timeout)

    def connect(self, address: BrokerAddress, proxy_to_broker_url: str | None = None) -> Connection:
        return self.pool.get(
            address, self.settings.connection, proxy_to_broker_url=proxy_to_broker_url
        )

    def service_connection(self) -> Connection:
        """A connection to the first reachable host of the service URL."""
        last: PulsarConnectionError | None = None
        for address in self._addresses:
            try:
                return self.connect(address)
            except PulsarConnectionError as exc:
                last = exc
        assert last is not None
        raise last

    def partitions(self, topic: str) -> int:
        """Number of partitions of ``topic`` (0: not partitioned)."""
        response = (
            self.service_connection()
            .request(
                lambda rid: commands.partitioned_metadata(topic=topic, request_id=rid),
                what=f"partitioned metadata of {topic}",
                timeout=self.timeout,
            )
            .partitionMetadataResponse
        )
        if response.HasField("error") or response.response == response.Failed:
            raise server_error_for(
                response.error, f"partitioned metadata of {topic}: {response.message}"
            )
        return response.partitions

    def owner(self, topic: str) -> TopicOwner:
        """The broker serving ``topic``, following redirects."""
        connection = self.service_connection()
        authoritative = False
        for _ in range(MAX_REDIRECTS):
            response = connection.request(
                functools.partial(_lookup_frame, topic, authoritative, self.settings.listener_name),
                what=f"lookup of {topic}",
                timeout=self.timeout,
            ).lookupTopicResponse
            if response.response == pb.CommandLookupTopicResponse.Failed or response.HasField(
                "error"
            ):
                raise server_error_for(response.error, f"lookup of {topic}: {response.message}")
            target = self._broker_address(topic, response)
            if response.response == pb.CommandLookupTopicResponse.Connect:
                if response.proxy_through_service_url:
                    return TopicOwner(connection.address, str(target))
                return TopicOwner(target)
            authoritative = response.authoritative
            connection = self.connect(target)
        raise TopicLookupError(f"lookup of {topic} redirected more than {MAX_REDIRECTS} times")

    def connect_to_owner(self, topic: str) -> Connection:
        owner = self.owner(topic)
        return self.connect(owner.address, owner.proxy_to_broker_url)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        """Every persistent and non-persistent topic (partitions included) of ``namespace``."""
        try:
            response = self.service_connection().request(
                lambda rid: commands.topics_of_namespace(namespace=namespace, request_id=rid),
                what=f"list topics of namespace {namespace}",
                timeout=self.timeout,
            )
        except RequestTimeoutError as exc:
            raise TopicLookupError(
                f"the broker did not answer GetTopicsOfNamespace for {namespace!r} within "
                f"{self.timeout:g}s; it may not support listing topics (pulsar-lite does not), "
                "so topicsPattern cannot be resolved: name topics with 'topic' or 'topics'"
            ) from exc
        return list(response.getTopicsOfNamespaceResponse.topics)

    def _broker_address(self, topic: str, response: pb.CommandLookupTopicResponse) -> BrokerAddress:
        """The broker a lookup answer names, on TLS when this client uses TLS."""
        url = response.brokerServiceUrlTls if self._tls else response.brokerServiceUrl
        if not url:
            if self._tls:
                raise TopicLookupError(
                    f"lookup of {topic}: the broker gave no TLS address (brokerServiceUrlTls) "
                    "although service.url uses pulsar+ssl://; the broker needs "
                    "brokerServicePortTls, and plain text is never used instead"
                )
            raise TopicLookupError(f"lookup of {topic}: the broker gave no address")
        if self._tls != is_tls_url(url):
            raise TopicLookupError(f"lookup of {topic} returned {url!r}, not a TLS URL")
        try:
            return parse_service_url(url)[0]
        except Exception as exc:
            raise TopicLookupError(
                f"lookup of {topic} returned an invalid broker URL {url!r}"
            ) from exc


def _lookup_frame(topic: str, authoritative: bool, listener: str | None, request_id: int) -> bytes:
    return commands.lookup(
        topic=topic, request_id=request_id, authoritative=authoritative, listener_name=listener
    )
