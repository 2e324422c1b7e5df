"""What the client layer is configured with: frozen, hashable values built once from options.

They travel from the driver to executor tasks inside each task's partition (pickled), and a
:class:`ConnectionSettings` is part of the connection pool's key, so two queries in one Python
worker with different credentials or trust never share a connection. None of their reprs shows
a secret.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pulsar_spark.client.auth import NO_AUTH, Authentication
from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.tls import TlsSettings
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol import compression
from pulsar_spark.protocol.crypto import CryptoFailureAction


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Everything one broker connection needs; ``tls`` is None for plain-text ``pulsar://``.

    With ``sni_proxy`` every connection is made to that proxy, and the TLS server name (SNI)
    says which broker the proxy should pass it on to (Pulsar's SNI routing).
    """

    tls: TlsSettings | None = None
    auth: Authentication = NO_AUTH
    connect_timeout: float = 10.0
    keepalive_interval: float = 30.0
    sni_proxy: BrokerAddress | None = None


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """A client of one cluster: where it is, how to connect, how long to wait for answers."""

    service_url: str
    operation_timeout: float = 30.0
    connection: ConnectionSettings = field(default_factory=ConnectionSettings)
    listener_name: str | None = None

    @property
    def connection_timeout(self) -> float:
        return self.connection.connect_timeout


@dataclass(frozen=True, slots=True)
class ProducerEncryption:
    """The key names a producer encrypts for and each one's public key (PEM, read when the
    write was defined), in name order. The repr names the keys, never their material."""

    public_keys: tuple[tuple[str, bytes], ...]

    def __repr__(self) -> str:
        return f"ProducerEncryption(keys={[name for name, _ in self.public_keys]!r})"


@dataclass(frozen=True, slots=True)
class ReaderDecryption:
    """The private keys a reader decrypts with, by key name (PEM, read when the read was
    defined), and what it does with a message none of them opens. The repr names the keys,
    never their material."""

    private_keys: tuple[tuple[str, bytes], ...] = ()
    action: CryptoFailureAction = CryptoFailureAction.FAIL

    def __repr__(self) -> str:
        names = [name for name, _ in self.private_keys]
        return f"ReaderDecryption(keys={names!r}, action={self.action.name})"


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """How a producer batches, compresses and waits; validated when made."""

    codec: int = compression.NONE
    batching: bool = True
    batch_max_messages: int = 1000
    batch_max_bytes: int = 128 * 1024
    batch_max_delay_ms: int = 10
    max_pending_messages: int = 10_000
    send_timeout: float = 30.0
    encryption: ProducerEncryption | None = None  # None: payloads in plain text

    def __post_init__(self) -> None:
        checks = (
            (self.codec in compression.CODEC_NAMES.values(), "unknown compression code"),
            (self.batch_max_messages >= 1, "batch_max_messages must be >= 1"),
            (self.batch_max_bytes >= 1, "batch_max_bytes must be >= 1"),
            (self.batch_max_delay_ms >= 0, "batch_max_delay_ms must be >= 0"),
            (self.max_pending_messages >= 1, "max_pending_messages must be >= 1"),
            (self.send_timeout > 0, "send_timeout must be > 0"),
        )
        for ok, problem in checks:
            if not ok:
                raise ConfigurationError(f"invalid producer option: {problem}")
