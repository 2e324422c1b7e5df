"""The one exception tree of pulsar-spark.

Everything the connector raises derives from :class:`PulsarSparkError`. Each class says, with
its ``retriable`` flag, whether doing the same thing again (after a fresh lookup or a new
connection) may succeed, so callers never guess from message text.

- :class:`ConfigurationError` — an option or input the user gave is wrong; never retriable.
- :class:`ProtocolError` — bytes on the wire break the protocol. ``LocalProtocolError`` means we
  were asked to do something the protocol does not allow; ``RemoteProtocolError`` means the peer
  sent something invalid (bad checksum, oversize or truncated frame, unknown codec).
- :class:`PulsarConnectionError` family — the link to a broker failed or was lost
  (:class:`TlsError`, a failed TLS handshake, is the one that is not retriable).
- :class:`CredentialsError` — the auth plugin could not produce credentials.
- :class:`RequestTimeoutError` — a request got no answer in time.
- :class:`RetriesExhaustedError` — retriable failures went on past the time limit.
- :class:`ServerError` family — the broker answered with an error code; one subclass per code,
  looked up with :func:`server_error_for`.

Apache InLong TubeMQ, the second system, shares the tree: its own classes are in
:mod:`pulsar_spark.tubemq.errors`, under the classes above.
"""

from __future__ import annotations

from typing import ClassVar


class PulsarSparkError(Exception):
    """Root of every error raised by pulsar-spark."""

    retriable: ClassVar[bool] = False


class ConfigurationError(PulsarSparkError, ValueError):
    """A user-supplied option, URL, topic name or input schema is invalid."""


class ProtocolError(PulsarSparkError):
    """The Pulsar binary protocol was violated."""


class LocalProtocolError(ProtocolError):
    """We were asked to produce something the protocol cannot express."""


class RemoteProtocolError(ProtocolError):
    """The broker sent bytes that are not valid Pulsar protocol."""


class ChecksumMismatchError(RemoteProtocolError):
    """A payload's checksum does not match the one sent with it (CRC32C in a Pulsar frame,
    CRC-32 in a TubeMQ message)."""


class FrameTooLargeError(RemoteProtocolError):
    """A frame announces a size above the connection's maximum frame size."""


class TruncatedFrameError(RemoteProtocolError):
    """A frame ended before the sizes inside it said it would."""


class UnsupportedCompressionError(RemoteProtocolError):
    """A message uses a compression codec this client does not know."""


class CorruptPayloadError(RemoteProtocolError):
    """A payload could not be decompressed or its batch could not be parsed."""


class PulsarConnectionError(PulsarSparkError):
    """The connection to a broker could not be made or was lost."""

    retriable = True


class BrokerUnreachableError(PulsarConnectionError):
    """No TCP connection (or no Connected handshake) could be made to a broker."""


class ConnectionClosedError(PulsarConnectionError):
    """An established connection was closed while requests were outstanding."""


class ResourceClosedError(PulsarConnectionError):
    """The broker closed a consumer or producer (its topic was unloaded, moved to another
    broker or migrated); look the topic up again, or go to ``broker_url`` when it names one."""

    def __init__(self, message: str, *, broker_url: str = "") -> None:
        super().__init__(message)
        self.broker_url = broker_url


class TlsError(PulsarConnectionError):
    """The TLS handshake failed: an untrusted, expired or misnamed certificate, or a peer that
    does not speak TLS. Trying again does not change the broker's certificate."""

    retriable = False


class CredentialsError(PulsarSparkError):
    """The auth plugin could not produce credentials (an unreadable token file, an OAuth2
    issuer that refused the client or could not be reached)."""


class RequestTimeoutError(PulsarSparkError):
    """A request got no response within its timeout."""

    retriable = True


class PollTimeoutError(RequestTimeoutError):
    """The broker delivered nothing for ``pollTimeoutMs`` before a read reached its end; a
    reconnect would not be any faster, so it is not retried."""

    retriable = False


class RetriesExhaustedError(PulsarSparkError):
    """An operation kept failing with retriable errors until its time limit; the last
    failure is the ``__cause__``."""


class TopicLookupError(PulsarSparkError):
    """A topic could not be located (too many redirects, or an invalid answer)."""


class TransactionsUnavailableError(PulsarSparkError):
    """The broker has no transaction coordinator (transactions are off, or it does not
    implement them): a transactional write cannot start."""


class TransactionTimedOutError(PulsarSparkError):
    """A transaction was ended by its coordinator before it was committed: it ran past its
    timeout, and what was published in it is aborted."""


class SeekError(PulsarSparkError):
    """A subscription did not stay where a seek moved it; starting again may succeed."""

    retriable = True


class DataLossError(PulsarSparkError):
    """Data the query expects to read no longer exists (see the failOnDataLoss option)."""


class CryptoError(PulsarSparkError):
    """An encrypted message could not be decrypted: no private key for any key name it was
    encrypted for, a key that does not open it, or a payload that does not authenticate."""


class SchemaError(PulsarSparkError, ValueError):
    """A topic's schema cannot type the ``value`` column: a type with no Spark mapping, topics
    with different schemas, or a message whose writer schema does not resolve to the reader's."""


class ServerError(PulsarSparkError):
    """The broker answered a request with an error code (``pb.ServerError``)."""

    code: ClassVar[int] = -1

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.server_message = message
        if code is not None and code != type(self).code:
            self.code = code  # type: ignore[misc]

    def __str__(self) -> str:
        return f"{type(self).__name__} (server error {self.code}): {self.server_message}"


_BY_CODE: dict[int, type[ServerError]] = {}


def _server_error(name: str, code: int, *, retriable: bool, doc: str) -> type[ServerError]:
    cls = type(name, (ServerError,), {"code": code, "retriable": retriable, "__doc__": doc})
    _BY_CODE[code] = cls
    return cls


# One class per ServerError code. ``retriable`` follows the rule the official clients share:
# transient broker-side conditions are retried after a new lookup, configuration and
# permission problems are not.
UnknownServerError = _server_error("UnknownServerError", 0, retriable=True, doc="Unknown error.")
MetadataError = _server_error("MetadataError", 1, retriable=True, doc="Broker metadata error.")
PersistenceError = _server_error("PersistenceError", 2, retriable=True, doc="Storage error.")
AuthenticationError = _server_error(
    "AuthenticationError", 3, retriable=False, doc="Credentials rejected."
)
AuthorizationError = _server_error(
    "AuthorizationError", 4, retriable=False, doc="Not allowed to use this resource."
)
ConsumerBusyError = _server_error(
    "ConsumerBusyError", 5, retriable=False, doc="Another consumer holds the subscription."
)
ServiceNotReadyError = _server_error(
    "ServiceNotReadyError", 6, retriable=True, doc="Broker not ready; look the topic up again."
)
ProducerBlockedQuotaExceededError = _server_error(
    "ProducerBlockedQuotaExceededError", 7, retriable=False, doc="Backlog quota exceeded."
)
ProducerBlockedQuotaExceededException = _server_error(
    "ProducerBlockedQuotaExceededException", 8, retriable=False, doc="Backlog quota exceeded."
)
ChecksumServerError = _server_error(
    "ChecksumServerError", 9, retriable=False, doc="The broker found a bad checksum."
)
UnsupportedVersionError = _server_error(
    "UnsupportedVersionError", 10, retriable=False, doc="Protocol feature not supported."
)
TopicNotFoundError = _server_error("TopicNotFoundError", 11, retriable=False, doc="No such topic.")
SubscriptionNotFoundError = _server_error(
    "SubscriptionNotFoundError", 12, retriable=False, doc="No such subscription."
)
ConsumerNotFoundError = _server_error(
    "ConsumerNotFoundError", 13, retriable=True, doc="No such consumer on this connection."
)
TooManyRequestsError = _server_error(
    "TooManyRequestsError", 14, retriable=True, doc="Broker is throttling requests."
)
TopicTerminatedError = _server_error(
    "TopicTerminatedError", 15, retriable=False, doc="The topic was terminated."
)
ProducerBusyError = _server_error(
    "ProducerBusyError", 16, retriable=False, doc="A producer with this name is connected."
)
InvalidTopicNameError = _server_error(
    "InvalidTopicNameError", 17, retriable=False, doc="The topic name is invalid."
)
IncompatibleSchemaError = _server_error(
    "IncompatibleSchemaError", 18, retriable=False, doc="Schema is incompatible."
)
ConsumerAssignError = _server_error(
    "ConsumerAssignError", 19, retriable=False, doc="Consumer could not be assigned."
)
TransactionCoordinatorNotFoundError = _server_error(
    "TransactionCoordinatorNotFoundError", 20, retriable=True, doc="No transaction coordinator."
)
InvalidTxnStatusError = _server_error(
    "InvalidTxnStatusError", 21, retriable=False, doc="Invalid transaction status."
)
NotAllowedError = _server_error("NotAllowedError", 22, retriable=False, doc="Operation refused.")
TransactionConflictError = _server_error(
    "TransactionConflictError", 23, retriable=False, doc="Transaction conflict."
)
TransactionNotFoundError = _server_error(
    "TransactionNotFoundError", 24, retriable=False, doc="No such transaction."
)
ProducerFencedError = _server_error(
    "ProducerFencedError", 25, retriable=False, doc="Producer was fenced by another."
)


def server_error_for(code: int, message: str) -> ServerError:
    """Build the exception for a broker error code (unknown codes map to UnknownServerError)."""
    cls = _BY_CODE.get(code, UnknownServerError)
    return cls(message, code=code)
