"""The exceptions of the TubeMQ connector, under the one tree of :mod:`pulsar_spark.errors`.

Its frame errors are remote protocol errors (:class:`BadFrameTokenError`, plus the shared
oversize and truncated frame errors), an errCode in a reply is a :class:`TubeMQServerError`
looked up with :func:`tubemq_error_for`, and a Java exception the server returned in place of a
reply is a :class:`TubeMQRemoteCallError`.
"""

from __future__ import annotations

from pulsar_spark.errors import PulsarSparkError, RemoteProtocolError, ServerError


class BadFrameTokenError(RemoteProtocolError):
    """A TubeMQ frame does not start with the protocol's frame token: the peer does not speak
    TubeMQ, or the stream lost its place."""


class TubeMQServerError(ServerError):
    """A TubeMQ master or broker answered with an errCode other than 200 (success).

    The codes are HTTP-like (``TErrCodeConstants`` in the Java client); one subclass per code a
    client can meet, looked up with :func:`tubemq_error_for`. A code without a subclass builds
    this class itself, not retriable.
    """


_TUBEMQ_BY_CODE: dict[int, type[TubeMQServerError]] = {}


def _tubemq_error(name: str, code: int, *, retriable: bool, doc: str) -> type[TubeMQServerError]:
    attributes = {"code": code, "retriable": retriable, "__doc__": doc}
    cls = type(name, (TubeMQServerError,), attributes)
    _TUBEMQ_BY_CODE[code] = cls
    return cls


# ``retriable`` follows what the Java client does with each code: it waits and asks again for
# transient states (a partition in use or frozen, flow control, an overloaded or starting
# server) and gives up on requests the server will never accept as they are.
TubeMQNotReadyError = _tubemq_error(
    "TubeMQNotReadyError", 201, retriable=True, doc="The server is not ready yet."
)
TubeMQMovedError = _tubemq_error(
    "TubeMQMovedError", 301, retriable=True, doc="The data moved (a read ran past the cache)."
)
TubeMQBadRequestError = _tubemq_error(
    "TubeMQBadRequestError", 400, retriable=False, doc="The request is invalid (e.g. empty data)."
)
TubeMQUnauthorizedError = _tubemq_error(
    "TubeMQUnauthorizedError", 401, retriable=False, doc="Authentication failed."
)
TubeMQForbiddenError = _tubemq_error(
    "TubeMQForbiddenError",
    403,
    retriable=False,
    doc="Refused: no such topic or partition here, a checksum mismatch, or no permission.",
)
TubeMQNotFoundError = _tubemq_error(
    "TubeMQNotFoundError",
    404,
    retriable=True,
    doc="Nothing found; from GetMessage: no message after the current offset yet.",
)
TubeMQPartitionFrozenError = _tubemq_error(
    "TubeMQPartitionFrozenError", 405, retriable=True, doc="All partitions are frozen."
)
TubeMQNoPartitionAssignedError = _tubemq_error(
    "TubeMQNoPartitionAssignedError", 406, retriable=True, doc="No partition assigned yet."
)
TubeMQPartitionWaitingError = _tubemq_error(
    "TubeMQPartitionWaitingError", 407, retriable=True, doc="All partitions are waiting."
)
TubeMQPartitionInUseError = _tubemq_error(
    "TubeMQPartitionInUseError", 408, retriable=True, doc="All partitions are in use."
)
TubeMQPartitionOccupiedError = _tubemq_error(
    "TubeMQPartitionOccupiedError",
    410,
    retriable=True,
    doc="Another consumer of the group holds the partition (until its heartbeat times out).",
)
TubeMQHeartbeatNodeMissingError = _tubemq_error(
    "TubeMQHeartbeatNodeMissingError",
    411,
    retriable=True,
    doc="The server no longer knows this client: register again.",
)
TubeMQDuplicatePartitionError = _tubemq_error(
    "TubeMQDuplicatePartitionError", 412, retriable=False, doc="The partition is registered twice."
)
TubeMQCertificateError = _tubemq_error(
    "TubeMQCertificateError", 415, retriable=False, doc="The client's certificate was refused."
)
TubeMQServerOverflowError = _tubemq_error(
    "TubeMQServerOverflowError", 419, retriable=True, doc="The broker could not store it now."
)
TubeMQTooFrequentError = _tubemq_error(
    "TubeMQTooFrequentError", 421, retriable=True, doc="The client calls too often."
)
TubeMQPartitionUnsubscribableError = _tubemq_error(
    "TubeMQPartitionUnsubscribableError", 422, retriable=False, doc="The topic refuses readers."
)
TubeMQPartitionUnpublishableError = _tubemq_error(
    "TubeMQPartitionUnpublishableError", 423, retriable=False, doc="The topic refuses writers."
)
TubeMQTopicNotDeployedError = _tubemq_error(
    "TubeMQTopicNotDeployedError", 431, retriable=False, doc="The topic is not deployed."
)
TubeMQGroupForbiddenError = _tubemq_error(
    "TubeMQGroupForbiddenError", 450, retriable=False, doc="The consumer group is forbidden."
)
TubeMQConsumeSpeedLimitError = _tubemq_error(
    "TubeMQConsumeSpeedLimitError", 452, retriable=True, doc="Flow control: read later."
)
TubeMQInternalServerError = _tubemq_error(
    "TubeMQInternalServerError", 500, retriable=True, doc="The server failed internally."
)
TubeMQServiceUnavailableError = _tubemq_error(
    "TubeMQServiceUnavailableError",
    503,
    retriable=True,
    doc="The service is stopped or starting (e.g. the broker stopped writes).",
)


def tubemq_error_for(code: int, message: str) -> TubeMQServerError:
    """Build the exception for a TubeMQ errCode; codes without a subclass build the base."""
    cls = _TUBEMQ_BY_CODE.get(code, TubeMQServerError)
    return cls(message, code=code)


class TubeMQRemoteCallError(PulsarSparkError):
    """A TubeMQ server answered a call with a Java exception instead of a reply.

    ``exception_name`` is the Java class name the server sent, ``message`` its text. Whether
    the call may be tried again depends on that class: see :func:`tubemq_remote_exception_for`.
    """

    def __init__(self, exception_name: str, message: str) -> None:
        super().__init__(f"{exception_name}: {message}")
        self.exception_name = exception_name
        self.remote_message = message


class TubeMQRemoteUnavailableError(TubeMQRemoteCallError):
    """The server cannot serve the call now: a standby master, a server still starting or
    stopping, or a full request queue. Another master, or the same server later, may."""

    retriable = True


# The simple class names (any package prefix) that mean "not now" rather than "never".
_TUBEMQ_UNAVAILABLE = frozenset(
    {
        "StandbyException",
        "ServerNotReadyException",
        "ServiceStoppingException",
        "OverflowException",
    }
)


def tubemq_remote_exception_for(exception_name: str, message: str) -> TubeMQRemoteCallError:
    """Build the exception for a Java exception name a TubeMQ server returned."""
    simple = exception_name.rsplit(".", 1)[-1]
    if simple in _TUBEMQ_UNAVAILABLE:
        return TubeMQRemoteUnavailableError(exception_name, message)
    return TubeMQRemoteCallError(exception_name, message)
