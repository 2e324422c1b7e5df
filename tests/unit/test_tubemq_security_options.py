"""The ``tubemq`` format's TLS and authentication options: parsed once, and every wrong
combination refused at definition, naming the option, without the password."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.certs import TestCerts, make_certs

from pulsar_spark.common.tls import TlsSettings
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.tubemq.client.connection import TubeMQSecurity
from pulsar_spark.tubemq.spark.options import Mode, TubeMQReadOptions, TubeMQWriteOptions
from pulsar_spark.tubemq.wire.auth import Credentials

BASE = {"master.addresses": "m1:8716", "topic": "t"}
PASSWORD = "s3cret-Pa55"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_certs(tmp_path_factory.mktemp("tubemq-certs"))


def secure_options(certs: TestCerts) -> dict[str, str]:
    return {
        **BASE,
        "tlsEnable": "true",
        "tlsTrustCertsFilePath": str(certs.ca),
        "tlsCertificateFilePath": str(certs.client_cert),
        "tlsKeyFilePath": str(certs.client_key),
        "usrName": " alice ",
        "usrPassWord": PASSWORD,
    }


def test_security_is_parsed_for_reads_and_writes(certs: TestCerts) -> None:
    expected = TubeMQSecurity(
        tls=TlsSettings(
            trust_certs_file=str(certs.ca),
            verify_hostname=True,
            cert_file=str(certs.client_cert),
            key_file=str(certs.client_key),
        ),
        credentials=Credentials("alice", PASSWORD),
    )
    options = secure_options(certs)
    assert TubeMQReadOptions.parse(options, mode=Mode.BATCH).security == expected
    assert TubeMQWriteOptions.parse(options).security == expected
    assert PASSWORD not in repr(TubeMQWriteOptions.parse(options))


def test_no_security_by_default() -> None:
    assert TubeMQWriteOptions.parse(BASE).security == TubeMQSecurity(None, None)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"tlsEnable": None},
            "option(s) tlsTrustCertsFilePath, tlsCertificateFilePath, tlsKeyFilePath need "
            "TLS: set 'tlsEnable' to true",
        ),
        ({"tlsEnable": "yes please"}, "option 'tlsEnable' must be 'true' or 'false'"),
        (
            {"tlsKeyFilePath": None},
            "options 'tlsCertificateFilePath' and 'tlsKeyFilePath' go together",
        ),
        ({"tlsTrustCertsFilePath": "/nonexistent/ca.pem"}, "TLS set-up failed: trust file"),
        (
            {"tlsTrustStorePath": "/etc/truststore.jks"},
            "option 'tlsTrustStorePath' is not supported yet: JVM key and trust stores are not "
            "read; give the CAs to trust as a PEM file in 'tlsTrustCertsFilePath'",
        ),
        ({"usrName": None}, "option 'usrName' (the TubeMQ user name) is needed"),
        ({"usrName": "  "}, "option 'usrName' (the TubeMQ user name) is needed"),
        (
            {"usrPassWord": None},
            "option 'usrPassWord' (the password of TubeMQ user 'alice') is needed",
        ),
        ({"usrpassword": ""}, "option 'usrPassWord' (the password of TubeMQ user 'alice')"),
    ],
)
def test_wrong_combinations_name_the_option(
    certs: TestCerts, changes: dict[str, str | None], message: str
) -> None:
    options = secure_options(certs)
    if "usrpassword" in changes:
        options.pop("usrPassWord")
    given = {k: v for k, v in {**options, **changes}.items() if v is not None}
    for parse in (
        lambda: TubeMQReadOptions.parse(given, mode=None),
        lambda: TubeMQWriteOptions.parse(given),
    ):
        with pytest.raises(ConfigurationError) as info:
            parse()
        assert message in str(info.value)
        assert PASSWORD not in str(info.value)


def test_tls_files_are_checked_at_definition(tmp_path: Path, certs: TestCerts) -> None:
    bad = tmp_path / "not-a-cert.pem"
    bad.write_text("not a certificate")
    options = {**secure_options(certs), "tlsCertificateFilePath": str(bad)}
    with pytest.raises(ConfigurationError, match="TLS set-up failed"):
        TubeMQWriteOptions.parse(options)
