"""The ``tubemq`` format on a secure TubeMQ 2.4.0 cluster: TLS on the master's and broker's
TLS ports (with a client certificate, which the servers ask for) and authentication of every
producer and consumer call (``tubemq_secure_cluster``, see tests/support/tubemq_cluster.py).

Spark writes, reads back and streams over TLS with credentials; a call without credentials,
or with a stale signature, is refused by the master and the broker with
TubeMQCertificateError; an unknown CA fails the TLS handshake with TlsError. Each failure comes
within seconds, and no error, log line, plan, stream progress or server log shows the
password.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from support.certs import TestCerts
from support.streaming import drain
from support.tubemq_cluster import TubeMQCluster
from support.tubemq_fixtures import SECURE_CLIENT_TOPIC, SECURE_SPARK_TOPIC, TUBEMQ_PARTITIONS
from support.tubemq_reading import rows

from pulsar_spark.common.tls import TlsSettings
from pulsar_spark.tubemq.client.cluster import connect, lookup_partitions
from pulsar_spark.tubemq.client.connection import TubeMQConnection, TubeMQSecurity
from pulsar_spark.tubemq.client.consumer import offset_bounds
from pulsar_spark.tubemq.client.producer import TubeMQProducer
from pulsar_spark.tubemq.errors import TubeMQCertificateError
from pulsar_spark.tubemq.wire import auth
from pulsar_spark.tubemq.wire._generated import tubemq_master_pb2 as master_pb

pytestmark = [pytest.mark.integration, pytest.mark.tubemq, pytest.mark.spark]

USER = "spark_writer"
PASSWORD = "Tube-Secret-9f2c"
# How long a refused connection or identity may take to fail a query.
FAILS_WITHIN = 30


def secure_options(
    cluster: TubeMQCluster, certs: TestCerts, **changes: str | None
) -> dict[str, str]:
    options = {
        "master.addresses": cluster.tls_master,
        "tlsEnable": "true",
        "tlsTrustCertsFilePath": str(certs.ca),
        "tlsCertificateFilePath": str(certs.client_cert),
        "tlsKeyFilePath": str(certs.client_key),
        "usrName": USER,
        "usrPassWord": PASSWORD,
    }
    return {k: v for k, v in {**options, **changes}.items() if v is not None}


def tls_settings(certs: TestCerts) -> TlsSettings:
    return TlsSettings(
        trust_certs_file=str(certs.ca),
        cert_file=str(certs.client_cert),
        key_file=str(certs.client_key),
    )


def secure_read(spark: SparkSession, options: dict[str, str], topic: str) -> DataFrame:
    return spark.read.format("tubemq").options(**options).option("topic", topic).load()


def failure_of(action: Any) -> str:
    """The text of what ``action()`` raised, which must come within FAILS_WITHIN seconds."""
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        action()
    assert time.monotonic() - started < FAILS_WITHIN
    return str(info.value)


def test_spark_writes_and_reads_over_tls_with_credentials(  # noqa: PLR0917
    spark: SparkSession,
    tubemq_secure_cluster: TubeMQCluster,
    test_certs: TestCerts,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="pulsar_spark")
    options = secure_options(tubemq_secure_cluster, test_certs)
    written = spark.createDataFrame(
        [(f"secure {i}".encode(), {"$msgType$": "sec", "n": str(i)}) for i in range(6)],
        "value binary, attributes map<string,string>",
    ).coalesce(1)
    written.write.format("tubemq").options(**options).option("topic", SECURE_SPARK_TOPIC).mode(
        "append"
    ).save()

    read = secure_read(spark, options, SECURE_SPARK_TOPIC)
    read.explain(True)
    # One task from partition 0: message i on partition i % 3. (The partitions share one
    # store, so a read of one spans the others' entries and its offsets are not per message.)
    assert [(r[0], r[1], r[2], r[4], r[5]) for r in rows(read)] == [
        (
            f"secure {i}".encode(),
            SECURE_SPARK_TOPIC,
            f"1:{SECURE_SPARK_TOPIC}:{i % TUBEMQ_PARTITIONS}",
            {"$msgType$": "sec", "n": str(i)},
            None,
        )
        for i in range(6)
    ]
    # A stream reads them too, and neither its plan nor its progress shows the password.
    stream = (
        spark.readStream.format("tubemq")
        .options(**options)
        .option("topic", SECURE_SPARK_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
    )
    stream.explain(True)
    streamed: list[bytes] = []
    query = (
        stream.writeStream.foreachBatch(
            lambda df, _: streamed.extend(bytes(r.value) for r in df.collect())
        )
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    drain(query)
    assert sorted(streamed) == [f"secure {i}".encode() for i in range(6)]
    progress = "\n".join(p.json for p in query.recentProgress)
    assert SECURE_SPARK_TOPIC in progress  # the source's offsets are in it
    assert PASSWORD not in progress
    printed = capsys.readouterr().out
    assert printed.count("== Physical Plan ==") == 2
    assert PASSWORD not in printed
    assert PASSWORD not in caplog.text
    assert PASSWORD not in tubemq_secure_cluster.logs()


def test_spark_without_credentials_is_refused_by_the_master(
    spark: SparkSession, tubemq_secure_cluster: TubeMQCluster, test_certs: TestCerts
) -> None:
    options = secure_options(tubemq_secure_cluster, test_certs, usrName=None, usrPassWord=None)
    text = failure_of(lambda: secure_read(spark, options, SECURE_SPARK_TOPIC).count())
    assert (
        "TubeMQCertificateError (server error 415): Illegal value: authInfo.userName is Blank!"
        in text
    )


def test_an_unknown_ca_fails_the_handshake(
    spark: SparkSession, tubemq_secure_cluster: TubeMQCluster, test_certs: TestCerts
) -> None:
    options = secure_options(
        tubemq_secure_cluster, test_certs, tlsTrustCertsFilePath=str(test_certs.other_ca)
    )
    for action in (
        lambda: secure_read(spark, options, SECURE_SPARK_TOPIC).count(),
        lambda: (
            spark.createDataFrame([(b"x",)], "value binary")
            .write.format("tubemq")
            .options(**options)
            .option("topic", SECURE_SPARK_TOPIC)
            .mode("append")
            .save()
        ),
    ):
        text = failure_of(action)
        assert (
            f"TlsError: TLS handshake with {tubemq_secure_cluster.tls_master} failed: the "
            "broker's certificate was not accepted: unable to get local issuer certificate "
            f"(trusted: {test_certs.other_ca})"
        ) in text
        assert PASSWORD not in text


def test_brokers_refuse_calls_without_a_signed_token(
    tubemq_secure_cluster: TubeMQCluster, test_certs: TestCerts
) -> None:
    signed = TubeMQSecurity(tls_settings(test_certs), auth.Credentials(USER, PASSWORD))
    unsigned = TubeMQSecurity(tls_settings(test_certs), None)
    partitions = lookup_partitions(
        tubemq_secure_cluster.tls_masters, SECURE_CLIENT_TOPIC, security=signed
    )
    # The master hands a client over TLS the broker's TLS port.
    assert {p.broker.port for p in partitions} == {tubemq_secure_cluster.broker_tls_port}
    with (
        TubeMQProducer(partitions, security=unsigned) as producer,
        pytest.raises(
            TubeMQCertificateError, match=r"\(server error 415\): authAuthorizedToken is Blank!"
        ),
    ):
        producer.send(b"unsigned")
    with (
        connect(partitions[0], 10, unsigned) as conn,
        pytest.raises(
            TubeMQCertificateError, match=r"\(server error 415\): authAuthorizedToken is Blank!"
        ),
    ):
        offset_bounds(conn, partitions[0], "unsigned_group", "unsigned-client")
    # Signed, the same calls go through: the message is the store's first.
    with TubeMQProducer(partitions, security=signed) as producer:
        sent = producer.send(b"signed")
    assert (sent.partition, sent.offset) == (partitions[0], 0)
    with connect(partitions[0], 10, signed) as conn:
        bounds = offset_bounds(conn, partitions[0], "signed_group", "signed-client")
    assert (bounds.first, bounds.end) == (0, 28)


def test_the_master_checks_the_identity_and_its_time_not_the_password(
    tubemq_secure_cluster: TubeMQCluster, test_certs: TestCerts
) -> None:
    """TubeMQ 2.4.0's master checks that an identity is there and signed within
    ``authValidTimeStampPeriodMs`` (20 s) of its clock; the password is for the cluster's
    authentication plug-in to check, and the stock one does not."""

    def register(credentials: auth.Credentials, timestamp_ms: int) -> master_pb.RegisterResponseM2P:
        request = master_pb.RegisterRequestP2M(
            clientId=f"auth-probe-{timestamp_ms}",
            topicList=[SECURE_CLIENT_TOPIC],
            brokerCheckSum=-1,
            hostName="127.0.0.1",
        )
        auth.sign(request, auth.identity(credentials, timestamp_ms, 12345))
        with TubeMQConnection(
            "127.0.0.1",
            tubemq_secure_cluster.master_tls_port,
            security=TubeMQSecurity(tls_settings(test_certs), None),
        ) as master:
            return master.call(request, master_pb.RegisterResponseM2P)

    now = int(time.time() * 1000)
    with pytest.raises(
        TubeMQCertificateError,
        match=r"\(server error 415\): Illegal value: timestamp out of effective period",
    ):
        register(auth.Credentials(USER, PASSWORD), now - 60_000)
    assert register(auth.Credentials(USER, PASSWORD), now).errCode == 200
    assert register(auth.Credentials(USER, "not the password"), now).errCode == 200
