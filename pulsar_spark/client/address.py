"""Service URLs: ``pulsar://host:port`` into a (host, port) address."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from pulsar_spark.errors import ConfigurationError

DEFAULT_PORT = 6650


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"pulsar://{self.host}:{self.port}"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_service_url(url: str) -> list[BrokerAddress]:
    """Parse ``pulsar://host[:port][,host2[:port]]``; TLS (pulsar+ssl) is not supported yet."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("pulsar", "pulsar+ssl"):
        raise ConfigurationError(
            f"service.url {url!r} must look like pulsar://host:6650 (scheme pulsar://)"
        )
    if scheme == "pulsar+ssl":
        raise ConfigurationError(
            f"service.url {url!r}: TLS (pulsar+ssl://) is not supported yet; use pulsar://"
        )
    hosts = rest.rstrip("/").split(",")
    return [_parse_host(url, host) for host in hosts]


def _parse_host(url: str, hostport: str) -> BrokerAddress:
    try:
        parts = urlsplit(f"//{hostport}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigurationError(f"service.url {url!r}: invalid host or port {hostport!r}") from exc
    if not host:
        raise ConfigurationError(f"service.url {url!r}: missing host")
    return BrokerAddress(host, port or DEFAULT_PORT)
