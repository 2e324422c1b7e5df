"""A TubeMQ client's signed identity, as the master and the brokers take it.

How this works
--------------
A client proves its user name with a signature over the name, the time and a random number,
keyed with its password: ``HMAC-SHA1(key=password, data=user + timestamp + nonce)`` (the
timestamp in milliseconds and the nonce, a non-negative int32, both as decimal text), in
Base64, then URL-encoded (``+``, ``/`` and ``=`` become ``%2B``, ``%2F`` and ``%3D``). The
password itself never travels.

Where the identity goes depends on the server:

* to the master, in the ``authInfo`` of each producer and consumer call: an
  ``AuthenticateInfo`` (user name, timestamp, nonce, an empty ``othParams`` and the
  signature) inside a ``MasterCertificateInfo``;
* to a broker, in the ``authInfo`` (``AuthorizedInfo``) of SendMessage, consumer
  registration and heartbeat: ``authAuthorizedToken`` is the text
  ``"<user> <timestamp> <nonce> <signature>"``. ``visitAuthorizedToken`` is required by the
  message; it only matters when the master hands out visit tokens for brokers to check
  (its ``startVisitTokenCheck``), and this client sends :data:`NO_VISIT_TOKEN`.

A master refuses a call that lacks the identity, or whose timestamp is further than its
``authValidTimeStampPeriodMs`` from its own clock, with error code 415
(:class:`~pulsar_spark.tubemq.errors.TubeMQCertificateError`). What else it checks (the password,
the user's rights) is the business of the authentication and authorisation plug-ins the
cluster runs.

:func:`identity` signs the credentials once for both forms, and :func:`sign` puts that
identity into a request, whatever its call.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import Message

from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb

# The visit token a client that holds none sends (TubeMQ's "undefined" value).
NO_VISIT_TOKEN = -2
# A nonce is drawn from [0, NONCE_BOUND).
NONCE_BOUND = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Credentials:
    """A user name and its password; the password is left out of ``repr``."""

    user: str
    password: str = field(repr=False)


def signature(credentials: Credentials, timestamp_ms: int, nonce: int) -> str:
    """The URL-encoded Base64 HMAC-SHA1 of user, timestamp and nonce (see the module)."""
    data = f"{credentials.user}{timestamp_ms}{nonce}".encode()
    digest = hmac.new(credentials.password.encode(), data, hashlib.sha1).digest()
    return urllib.parse.quote(base64.b64encode(digest).decode("ascii"), safe="")


def master_certificate(
    credentials: Credentials, timestamp_ms: int, nonce: int
) -> master_pb.MasterCertificateInfo:
    """The ``authInfo`` of a producer's or consumer's call to the master."""
    return master_pb.MasterCertificateInfo(
        authInfo=master_pb.AuthenticateInfo(
            userName=credentials.user,
            timestamp=timestamp_ms,
            nonce=nonce,
            othParams="",
            signature=signature(credentials, timestamp_ms, nonce),
        )
    )


def broker_token(credentials: Credentials, timestamp_ms: int, nonce: int) -> str:
    """The ``authAuthorizedToken`` a broker takes: user, timestamp, nonce and signature."""
    return " ".join(
        (
            credentials.user,
            str(timestamp_ms),
            str(nonce),
            signature(credentials, timestamp_ms, nonce),
        )
    )


@dataclass(frozen=True, slots=True)
class Identity:
    """One signature of a user, in the form the master takes and the form a broker takes."""

    master: master_pb.MasterCertificateInfo
    broker: broker_pb.AuthorizedInfo


def identity(credentials: Credentials, timestamp_ms: int, nonce: int) -> Identity:
    """``credentials`` signed at ``timestamp_ms`` with ``nonce``, for every server."""
    return Identity(
        master=master_certificate(credentials, timestamp_ms, nonce),
        broker=broker_pb.AuthorizedInfo(
            visitAuthorizedToken=NO_VISIT_TOKEN,
            authAuthorizedToken=broker_token(credentials, timestamp_ms, nonce),
        ),
    )


def sign(request: Message, signed: Identity) -> None:
    """Set ``request``'s ``authInfo`` to ``signed``, in the form its server takes; a request
    without ``authInfo`` (GetMessage, CommitOffset) is left as it is. One identity may sign
    many requests: the signing is the costly part (about 9 us against 0.4 us)."""
    auth_field = request.DESCRIPTOR.fields_by_name.get("authInfo")
    if auth_field is None:
        return
    target: Any = request
    if auth_field.message_type is master_pb.MasterCertificateInfo.DESCRIPTOR:
        target.authInfo.CopyFrom(signed.master)
    elif auth_field.message_type is broker_pb.AuthorizedInfo.DESCRIPTOR:
        target.authInfo.CopyFrom(signed.broker)
    else:
        raise TypeError(f"{type(request).__name__}.authInfo is not a TubeMQ identity")


def signed_field(request_type: type[Message], signed: Identity) -> bytes:
    """The ``authInfo`` field :func:`sign` sets, serialized: appended to a request of
    ``request_type`` serialized without it, it signs that request (a message's fields may come
    in any order). Empty for a request without ``authInfo``."""
    request = request_type()
    sign(request, signed)
    return request.SerializePartialToString()
