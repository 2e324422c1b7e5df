"""TubeMQ authentication: the signature matches one computed by OpenSSL, and each call
carries the identity in the form its server takes."""

from __future__ import annotations

import pytest
from google.protobuf.message import Message

from pulsar_spark.tubemq.wire import auth
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb

ALICE = auth.Credentials("alice", "secret-pw")
BOB = auth.Credentials("bob", "pw")
TIME_MS = 1_700_000_000_000


# Expected values: printf '<user><time><nonce>' | openssl dgst -sha1 -hmac <password> -binary
# | base64, then URL-encoded.
@pytest.mark.parametrize(
    ("credentials", "nonce", "expected"),
    [
        (ALICE, 123456789, "SpRy7VFnap8zCjcN5Q1ieKkkvXA%3D"),
        (BOB, 3, "qKLeIQGF90SDFH9yb3AS%2FjTNKdw%3D"),
        (BOB, 5, "Bhz2AhFyR0bHySSdo6W%2BKnYUG40%3D"),
    ],
)
def test_signature_is_url_encoded_base64_hmac_sha1(
    credentials: auth.Credentials, nonce: int, expected: str
) -> None:
    assert auth.signature(credentials, TIME_MS, nonce) == expected


def test_password_is_not_in_repr() -> None:
    assert repr(ALICE) == "Credentials(user='alice')"


def test_master_calls_carry_an_authenticate_info() -> None:
    request = master_pb.RegisterRequestP2M(
        clientId="c", topicList=["t"], brokerCheckSum=-1, hostName="h"
    )
    auth.sign(request, auth.identity(ALICE, TIME_MS, 123456789))
    assert request.authInfo == master_pb.MasterCertificateInfo(
        authInfo=master_pb.AuthenticateInfo(
            userName="alice",
            timestamp=TIME_MS,
            nonce=123456789,
            othParams="",
            signature="SpRy7VFnap8zCjcN5Q1ieKkkvXA%3D",
        )
    )
    assert not request.authInfo.HasField("authorizedToken")


@pytest.mark.parametrize(
    "request_type",
    [broker_pb.SendMessageRequestP2B, broker_pb.RegisterRequestC2B, broker_pb.HeartBeatRequestC2B],
)
def test_broker_calls_carry_the_token_text(
    request_type: type[broker_pb.RegisterRequestC2B],
) -> None:
    request = request_type()
    auth.sign(request, auth.identity(BOB, TIME_MS, 5))
    assert request.authInfo == broker_pb.AuthorizedInfo(
        visitAuthorizedToken=-2,
        authAuthorizedToken="bob 1700000000000 5 Bhz2AhFyR0bHySSdo6W%2BKnYUG40%3D",
    )


def test_calls_without_an_identity_field_are_left_alone() -> None:
    request = broker_pb.GetMessageRequestC2B(
        clientId="c", partitionId=0, groupName="g", topicName="t"
    )
    before = request.SerializeToString()
    auth.sign(request, auth.identity(ALICE, TIME_MS, 1))
    assert request.SerializeToString() == before


@pytest.mark.parametrize(
    "request_",
    [
        broker_pb.SendMessageRequestP2B(
            clientId="c", topicName="t", partitionId=2, data=b"v", flag=0, checkSum=-1, sentAddr=1
        ),
        master_pb.RegisterRequestP2M(
            clientId="c", topicList=["t", "u"], brokerCheckSum=-1, hostName="h"
        ),
        broker_pb.RegisterRequestC2B(
            opType=31, clientId="c", groupName="g", topicName="t", partitionId=0, readStatus=0
        ),
    ],
    ids=["send", "master-register", "broker-register"],
)
def test_signed_field_appended_signs_the_request(request_: Message) -> None:
    """A request's bytes without authInfo, then signed_field: the request sign() makes."""
    signed = auth.identity(ALICE, TIME_MS, 123456789)
    unsigned = request_.SerializeToString()
    field = auth.signed_field(type(request_), signed)
    expected = type(request_)()
    expected.CopyFrom(request_)
    auth.sign(expected, signed)
    assert expected.HasField("authInfo")
    assert type(request_).FromString(unsigned + field) == expected
    assert field[0] == type(request_).DESCRIPTOR.fields_by_name["authInfo"].number << 3 | 2
    alone = type(request_).FromString(field)
    assert [descriptor.name for descriptor, _ in alone.ListFields()] == ["authInfo"]
    assert alone.authInfo == expected.authInfo


def test_signed_field_of_a_request_without_an_identity_is_empty() -> None:
    signed = auth.identity(ALICE, TIME_MS, 1)
    assert auth.signed_field(broker_pb.GetMessageRequestC2B, signed) == b""
    assert auth.signed_field(broker_pb.CommitOffsetRequestC2B, signed) == b""
