"""Service URLs: ``pulsar://host:port`` and ``pulsar+ssl://host:port`` into addresses."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from pulsar_spark.errors import ConfigurationError

DEFAULT_PORT = 6650
DEFAULT_TLS_PORT = 6651
TLS_SCHEME = "pulsar+ssl"


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_service_url(url: str) -> list[BrokerAddress]:
    """Parse ``pulsar://host[:port][,host2[:port]]`` (or ``pulsar+ssl://``)."""
    text = url.strip()
    scheme, sep, rest = text.partition("://")
    if "@" in rest.split("/", 1)[0]:
        raise ConfigurationError(
            f"service.url {shown_url(url)!r} carries user information before '@': a service "
            "URL takes no credentials; give them in authPluginClassName and authParams"
        )
    if not sep or scheme not in ("pulsar", TLS_SCHEME):
        raise ConfigurationError(
            f"service.url {shown_url(url)!r} must look like pulsar://host:6650 or "
            "pulsar+ssl://host:6651"
        )
    port = DEFAULT_TLS_PORT if scheme == TLS_SCHEME else DEFAULT_PORT
    hosts = rest.rstrip("/").split(",")
    return [_parse_host(url, host, port) for host in hosts]


def shown_url(url: str) -> str:
    """``url`` as errors and logs show it: whatever comes before an ``@`` in its host part
    (user information, perhaps a password) replaced by ``***``."""
    scheme, sep, rest = url.strip().partition("://")
    authority, slash, path = rest.partition("/")
    if "@" not in authority:
        return url.strip()
    return f"{scheme}{sep}***@{authority.rpartition('@')[2]}{slash}{path}"


def cluster_name(url: str) -> str:
    """A service URL as it may be shown and recorded: scheme, hosts and ports only (any path
    dropped, default ports written out), so one cluster has one name."""
    scheme = url.strip().partition("://")[0]
    return f"{scheme}://{','.join(str(address) for address in parse_service_url(url))}"


def is_tls_url(url: str) -> bool:
    """Whether ``url`` asks for TLS (``pulsar+ssl://``)."""
    return url.strip().startswith(TLS_SCHEME + "://")


def _parse_host(url: str, hostport: str, default_port: int) -> BrokerAddress:
    try:
        parts = urlsplit(f"//{hostport}")
        host, port = parts.hostname, parts.port
    except ValueError as exc:
        raise ConfigurationError(f"service.url {url!r}: invalid host or port {hostport!r}") from exc
    if not host:
        raise ConfigurationError(f"service.url {url!r}: missing host")
    return BrokerAddress(host, port or default_port)
