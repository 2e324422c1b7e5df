"""TLS and authentication options: each form the Java client accepts, each refusal, and that
no error or repr shows a secret."""

from __future__ import annotations

import json
import logging
import pickle
import re
from pathlib import Path

import pytest
from support.certs import TestCerts, make_certs

from pulsar_spark.client.auth import (
    NO_AUTH,
    BasicAuthentication,
    TlsAuthentication,
    TokenAuthentication,
)
from pulsar_spark.client.oauth2 import OAuth2Authentication
from pulsar_spark.common import option_values
from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.tls import TlsSettings
from pulsar_spark.errors import ConfigurationError, CredentialsError
from pulsar_spark.source.client_options import CLIENT_OPTIONS, CLIENT_WITHOUT_EFFECT
from pulsar_spark.source.read_options import READER_WITHOUT_EFFECT, ReadMode, ReadOptions
from pulsar_spark.source.write_options import PRODUCER_WITHOUT_EFFECT, WriteOptions

TLS_URL = "pulsar+ssl://broker.example:6651"
PLAIN_URL = "pulsar://broker.example:6650"
SECRET = "eyJhbGciOiJIUzI1NiJ9.c2VjcmV0LXBheWxvYWQ.c2lnbmF0dXJl"
PASSWORD = "hunter2-is-secret"
TOKEN_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
BASIC_CLASS = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
OAUTH2_CLASS = "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    return make_certs(tmp_path_factory.mktemp("certs"))


def read(**options: str) -> ReadOptions:
    return ReadOptions.parse({"topic": "t", **options}, mode=ReadMode.BATCH)


def refused(**options: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        read(**options)
    return str(info.value)


def client(**options: str) -> dict[str, str]:
    """``pulsar.client.<name>`` options from keyword names."""
    return {f"pulsar.client.{name}": value for name, value in options.items()}


# --- TLS --------------------------------------------------------------------------------------


def test_plain_url_has_no_tls_and_no_auth() -> None:
    parsed = read(**{"service.url": PLAIN_URL})
    assert parsed.client.connection.tls is None
    assert parsed.client.connection.auth == NO_AUTH
    assert parsed.client.listener_name is None
    assert parsed.client.connection.keepalive_interval == 30.0


def test_tls_url_verifies_hostnames_by_default(certs: TestCerts) -> None:
    parsed = read(**{"service.url": TLS_URL}, **client(tlsTrustCertsFilePath=str(certs.ca)))
    assert parsed.client.connection.tls == TlsSettings(
        trust_certs_file=str(certs.ca),
        allow_insecure=False,
        verify_hostname=True,
        cert_file=None,
        key_file=None,
    )


def test_tls_without_trust_file_uses_the_system_store() -> None:
    parsed = read(**{"service.url": "pulsar+ssl://a:6651,b"})
    assert parsed.client.connection.tls == TlsSettings()


def test_tls_switches(certs: TestCerts) -> None:
    parsed = read(
        **{"service.url": TLS_URL},
        **client(
            tlsTrustCertsFilePath=str(certs.ca),
            tlsHostnameVerificationEnable="false",
            tlsAllowInsecureConnection="true",
        ),
    )
    tls = parsed.client.connection.tls
    assert tls is not None
    assert (tls.verify_hostname, tls.allow_insecure) == (False, True)


def test_mutual_tls_by_options(certs: TestCerts) -> None:
    parsed = read(
        **{"service.url": TLS_URL},
        **client(
            tlsTrustCertsFilePath=str(certs.ca),
            tlsCertificateFilePath=str(certs.client_cert),
            tlsKeyFilePath=str(certs.client_key),
        ),
    )
    tls = parsed.client.connection.tls
    assert tls is not None
    assert (tls.cert_file, tls.key_file) == (str(certs.client_cert), str(certs.client_key))
    assert parsed.client.connection.auth == NO_AUTH


@pytest.mark.parametrize("name", [TLS_CLASS, "tls"])
@pytest.mark.parametrize("form", ["pairs", "json"])
def test_mutual_tls_by_auth_plugin(certs: TestCerts, name: str, form: str) -> None:
    cert, key = str(certs.client_cert), str(certs.client_key)
    params = (
        f"tlsCertFile:{cert},tlsKeyFile:{key}"
        if form == "pairs"
        else json.dumps({"tlsCertFile": cert, "tlsKeyFile": key})
    )
    parsed = read(
        **{"service.url": TLS_URL},
        **client(tlsTrustCertsFilePath=str(certs.ca), authPluginClassName=name, authParams=params),
    )
    assert parsed.client.connection.auth == TlsAuthentication(cert_file=cert, key_file=key)
    tls = parsed.client.connection.tls
    assert tls is not None
    assert (tls.cert_file, tls.key_file) == (cert, key)


def test_tls_options_with_a_plain_url_are_refused(certs: TestCerts) -> None:
    message = refused(**{"service.url": PLAIN_URL}, **client(tlsTrustCertsFilePath=str(certs.ca)))
    assert message == (
        "pulsar.client.tlsTrustCertsFilePath need TLS, but service.url uses pulsar://; use "
        "pulsar+ssl://host:6651"
    )


def test_tls_auth_plugin_with_a_plain_url_is_refused(certs: TestCerts) -> None:
    message = refused(
        **{"service.url": PLAIN_URL},
        **client(
            authPluginClassName="tls",
            authParams=f"tlsCertFile:{certs.client_cert},tlsKeyFile:{certs.client_key}",
        ),
    )
    assert "pulsar.client.authPluginClassName AuthenticationTls need TLS" in message


def test_certificate_without_key_is_refused(certs: TestCerts) -> None:
    message = refused(
        **{"service.url": TLS_URL}, **client(tlsCertificateFilePath=str(certs.client_cert))
    )
    assert message == (
        "options 'pulsar.client.tlsCertificateFilePath' and 'pulsar.client.tlsKeyFilePath' go "
        "together: give both or neither"
    )


def test_missing_trust_file_fails_when_defined(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    message = refused(**{"service.url": TLS_URL}, **client(tlsTrustCertsFilePath=str(missing)))
    assert message.startswith(f"TLS set-up failed: trust file {missing}: ")
    assert "No such file" in message


def test_key_that_does_not_match_the_certificate_fails_when_defined(certs: TestCerts) -> None:
    message = refused(
        **{"service.url": TLS_URL},
        **client(
            tlsCertificateFilePath=str(certs.client_cert), tlsKeyFilePath=str(certs.server_key)
        ),
    )
    assert message.startswith(
        f"TLS set-up failed: certificate {certs.client_cert}, key {certs.server_key}: "
    )
    assert "KEY_VALUES_MISMATCH" in message


# --- token ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [TOKEN_CLASS, "token", "TOKEN"])
@pytest.mark.parametrize(
    "params", [f"token:{SECRET}", SECRET, json.dumps({"token": SECRET}), f" token:{SECRET} "]
)
def test_inline_token(name: str, params: str) -> None:
    parsed = read(
        **{"service.url": PLAIN_URL}, **client(authPluginClassName=name, authParams=params)
    )
    auth = parsed.client.connection.auth
    assert auth == TokenAuthentication(token=SECRET)
    assert auth.credentials(1.0) == SECRET.encode()
    assert auth.method == "token"


def test_token_file_is_read_again_for_every_use(tmp_path: Path) -> None:
    path = tmp_path / "token.jwt"
    path.write_text(SECRET + "\n")
    parsed = read(
        **{"service.url": PLAIN_URL},
        **client(authPluginClassName="token", authParams=f"file://{path}"),
    )
    auth = parsed.client.connection.auth
    assert auth == TokenAuthentication(path=str(path))
    assert auth.credentials(1.0) == SECRET.encode()
    path.write_text("renewed-token")
    assert auth.credentials(1.0) == b"renewed-token"
    path.unlink()
    with pytest.raises(CredentialsError) as info:
        auth.credentials(1.0)
    assert str(info.value) == f"cannot read the token file {path}: No such file or directory"


def test_missing_or_empty_token_file_fails_when_defined(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jwt"
    message = refused(
        **{"service.url": PLAIN_URL},
        **client(authPluginClassName="token", authParams=f"file://{missing}"),
    )
    assert message == (
        f"option 'pulsar.client.authParams': cannot read the token file {missing}: "
        "No such file or directory"
    )
    empty = tmp_path / "empty.jwt"
    empty.write_text("\n")
    message = refused(
        **{"service.url": PLAIN_URL},
        **client(authPluginClassName="token", authParams=f"file://{empty}"),
    )
    assert message == f"option 'pulsar.client.authParams': the token file {empty} is empty"


def test_empty_token_is_refused() -> None:
    message = refused(
        **{"service.url": PLAIN_URL}, **client(authPluginClassName="token", authParams="token:")
    )
    assert message.startswith("option 'pulsar.client.authParams': the token is empty; give ")


def test_plugin_without_params_and_params_without_plugin() -> None:
    message = refused(**{"service.url": PLAIN_URL}, **client(authPluginClassName="token"))
    assert message.startswith(
        "option 'pulsar.client.authParams' is required with token: give token:<jwt>"
    )
    message = refused(**{"service.url": PLAIN_URL}, **client(authParams=f"token:{SECRET}"))
    assert message.startswith(
        "option 'pulsar.client.authParams' is set but 'pulsar.client.authPluginClassName' is not"
    )
    assert SECRET not in message


def test_unknown_plugin_is_refused() -> None:
    message = refused(
        **{"service.url": PLAIN_URL},
        **client(authPluginClassName="com.example.Kerberos", authParams=f"token:{SECRET}"),
    )
    assert message == (
        "option 'pulsar.client.authPluginClassName': unknown auth plugin "
        "'com.example.Kerberos'; supported: "
        f"{TOKEN_CLASS}, {TLS_CLASS}, {BASIC_CLASS}, {OAUTH2_CLASS} "
        "(or the short names token, tls, basic, oauth2)"
    )


# --- basic ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        json.dumps({"userId": "spark", "password": PASSWORD}),
        f"userId:spark,password:{PASSWORD}",
    ],
)
def test_basic(params: str) -> None:
    parsed = read(
        **{"service.url": PLAIN_URL}, **client(authPluginClassName=BASIC_CLASS, authParams=params)
    )
    auth = parsed.client.connection.auth
    assert auth == BasicAuthentication(user_id="spark", password=PASSWORD)
    assert auth.credentials(1.0) == f"spark:{PASSWORD}".encode()
    assert (auth.method, auth.plugin) == ("basic", "AuthenticationBasic")


@pytest.mark.parametrize(
    "params", [json.dumps({"userId": "spark"}), f"user:spark,pass:{PASSWORD}", f"{PASSWORD}"]
)
def test_malformed_basic_params_never_show_the_password(params: str) -> None:
    message = refused(
        **{"service.url": PLAIN_URL}, **client(authPluginClassName="basic", authParams=params)
    )
    assert message == (
        'option \'pulsar.client.authParams\': give {"userId": "...", "password": "..."} '
        "(or userId:...,password:...)"
    )
    assert PASSWORD not in message


def test_malformed_json_params_never_show_them() -> None:
    message = refused(
        **{"service.url": PLAIN_URL},
        **client(
            authPluginClassName="basic", authParams='{"userId": "a", "password": "' + PASSWORD
        ),
    )
    assert message.startswith("option 'pulsar.client.authParams' is not a JSON object; give ")
    assert PASSWORD not in message


# --- OAuth2 -----------------------------------------------------------------------------------


def credentials_file(tmp_path: Path) -> Path:
    path = tmp_path / "credentials.json"
    path.write_text(json.dumps({"client_id": "spark-job", "client_secret": PASSWORD}))
    return path


def test_oauth2(tmp_path: Path) -> None:
    key = credentials_file(tmp_path)
    params = json.dumps(
        {
            "issuerUrl": "https://issuer.example/",
            "privateKey": f"file://{key}",
            "audience": "urn:pulsar",
            "scope": "read write",
        }
    )
    parsed = read(
        **{"service.url": PLAIN_URL}, **client(authPluginClassName="oauth2", authParams=params)
    )
    assert parsed.client.connection.auth == OAuth2Authentication(
        issuer_url="https://issuer.example",
        private_key=f"file://{key}",
        audience="urn:pulsar",
        scope="read write",
    )


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {"privateKey": "file:///x.json"},
            "option 'pulsar.client.authParams': issuerUrl and privateKey are required; give",
        ),
        (
            {"issuerUrl": "ftp://issuer", "privateKey": "file:///x.json"},
            "option 'pulsar.client.authParams': issuerUrl must be an http(s) URL",
        ),
        (
            {"issuerUrl": "https://issuer", "privateKey": "/x.json"},
            "option 'pulsar.client.authParams': privateKey must be file:///path/credentials.json",
        ),
        (
            {"issuerUrl": "https://issuer", "privateKey": "file:///does/not/exist.json"},
            "option 'pulsar.client.authParams': cannot read the OAuth2 key file "
            "/does/not/exist.json: No such file or directory",
        ),
    ],
)
def test_oauth2_refusals(params: dict[str, str], expected: str) -> None:
    message = refused(
        **{"service.url": PLAIN_URL},
        **client(authPluginClassName=OAUTH2_CLASS, authParams=json.dumps(params)),
    )
    assert message.startswith(expected)


def test_oauth2_key_file_without_a_secret(tmp_path: Path) -> None:
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"client_id": "spark-job"}))
    params = json.dumps({"issuerUrl": "https://issuer", "privateKey": f"file://{key}"})
    message = refused(
        **{"service.url": PLAIN_URL}, **client(authPluginClassName="oauth2", authParams=params)
    )
    assert message == (
        f"option 'pulsar.client.authParams': {key} must hold client_id and client_secret"
    )


# --- secrets stay out of reprs; settings travel to executors -----------------------------------


def test_no_secret_in_the_repr_of_the_options(tmp_path: Path) -> None:
    for plugin, params in (
        ("token", f"token:{SECRET}"),
        ("basic", json.dumps({"userId": "spark", "password": PASSWORD})),
    ):
        options = {"service.url": PLAIN_URL, "topic": "t"}
        options |= client(authPluginClassName=plugin, authParams=params)
        text = repr(ReadOptions.parse(options, mode=ReadMode.BATCH)) + repr(
            WriteOptions.parse(options)
        )
        assert SECRET not in text
        assert PASSWORD not in text


def test_settings_survive_pickling_and_stay_equal(certs: TestCerts) -> None:
    parsed = read(
        **{"service.url": TLS_URL},
        **client(
            tlsTrustCertsFilePath=str(certs.ca), authPluginClassName="token", authParams=SECRET
        ),
    )
    copy = pickle.loads(pickle.dumps(parsed.client))
    assert copy == parsed.client
    assert hash(copy.connection) == hash(parsed.client.connection)
    assert pickle.loads(pickle.dumps(NO_AUTH)) == NO_AUTH


# --- other pulsar.client / reader / producer names --------------------------------------------


def test_honoured_client_names() -> None:
    parsed = read(
        **{"service.url": PLAIN_URL},
        **client(listenerName="external", keepAliveIntervalSeconds="7"),
        **{"pulsar.reader.receiverQueueSize": "1000"},
    )
    assert parsed.client.listener_name == "external"
    assert parsed.client.connection.keepalive_interval == 7.0
    assert parsed.receiver_queue_size == 1000


def test_java_names_without_effect_are_accepted_with_one_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(option_values, "_warned", set())
    options = {
        "service.url": PLAIN_URL,
        "topic": "t",
        "pulsar.client.statsIntervalSeconds": "60",
        "pulsar.reader.readerName": "mine",
    }
    with caplog.at_level(logging.WARNING, logger="pulsar_spark.common.option_values"):
        ReadOptions.parse(options, mode=ReadMode.BATCH)
        ReadOptions.parse(options, mode=ReadMode.BATCH)
    assert [r.getMessage() for r in caplog.records] == [
        f"option {name!r} is accepted for compatibility with the Java Pulsar client but has no "
        "effect in pulsar-spark"
        for name in ("pulsar.client.statsIntervalSeconds", "pulsar.reader.readerName")
    ]


def test_producer_names_without_effect_are_accepted_for_writes() -> None:
    parsed = WriteOptions.parse(
        {
            "service.url": PLAIN_URL,
            "topic": "t",
            "pulsar.producer.blockIfQueueFull": "true",
            "pulsar.client.numIoThreads": "4",
        }
    )
    assert parsed.topic == "persistent://public/default/t"


def test_unknown_client_name_is_refused_with_a_hint() -> None:
    message = refused(**{"service.url": PLAIN_URL}, **client(tlsTrustCertFilePath="/x"))
    assert message.startswith(
        "unknown option 'pulsar.client.tlstrustcertfilepath' for reading Pulsar. Did you mean "
        "'pulsar.client.tlsTrustCertsFilePath'?"
    )


def test_reader_names_are_not_write_options() -> None:
    with pytest.raises(ConfigurationError) as info:
        WriteOptions.parse(
            {"service.url": PLAIN_URL, "topic": "t", "pulsar.reader.readerName": "x"}
        )
    assert str(info.value).startswith("unknown option 'pulsar.reader.readername' for writing to")


# --- SNI proxy ----------------------------------------------------------------------------------


def test_sni_proxy() -> None:
    parsed = read(
        **{"service.url": TLS_URL},
        **client(proxyServiceUrl="pulsar+ssl://sni-proxy.example:4443", proxyProtocol="SNI"),
    )
    assert parsed.client.connection.sni_proxy == BrokerAddress("sni-proxy.example", 4443)


@pytest.mark.parametrize(
    ("url", "given", "expected"),
    [
        (
            TLS_URL,
            {"proxyServiceUrl": "pulsar+ssl://p:4443"},
            "options 'pulsar.client.proxyServiceUrl' and 'pulsar.client.proxyProtocol' go "
            "together, and the only proxy protocol is SNI: give both, e.g. "
            "pulsar+ssl://proxy:4443 and SNI",
        ),
        (
            TLS_URL,
            {"proxyServiceUrl": "pulsar+ssl://p:4443", "proxyProtocol": "HTTP"},
            "options 'pulsar.client.proxyServiceUrl' and 'pulsar.client.proxyProtocol' go "
            "together, and the only proxy protocol is SNI: give both, e.g. "
            "pulsar+ssl://proxy:4443 and SNI",
        ),
        (
            PLAIN_URL,
            {"proxyServiceUrl": "pulsar+ssl://p:4443", "proxyProtocol": "SNI"},
            "option 'pulsar.client.proxyServiceUrl': SNI routing needs TLS; use pulsar+ssl:// "
            "in 'service.url'",
        ),
        (
            TLS_URL,
            {"proxyServiceUrl": "https://p:4443", "proxyProtocol": "SNI"},
            "option 'pulsar.client.proxyServiceUrl': service.url 'https://p:4443' must look like "
            "pulsar://host:6650 or pulsar+ssl://host:6651",
        ),
    ],
)
def test_sni_proxy_refusals(url: str, given: dict[str, str], expected: str) -> None:
    assert refused(**{"service.url": url}, **client(**given)) == expected


# --- the reference page lists exactly what is accepted -------------------------------------------

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def readme_names(prefix: str) -> set[str]:
    """The option names docs/reference.md's "accepted without effect" list gives for ``prefix``."""
    text = REFERENCE.read_text(encoding="utf-8")
    start = text.index(f"- `{prefix}`")
    end = (
        text.index("\n- ", start + 1) if prefix != "pulsar.producer." else text.index("\n\n", start)
    )
    return {prefix + name for name in re.findall(r"`(\w+)`", text[start:end])}


def test_readme_lists_the_names_without_effect() -> None:
    assert readme_names("pulsar.client.") == set(CLIENT_WITHOUT_EFFECT)
    assert readme_names("pulsar.reader.") == set(READER_WITHOUT_EFFECT)
    assert readme_names("pulsar.producer.") == set(PRODUCER_WITHOUT_EFFECT)


def test_readme_documents_every_client_option() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    for name in CLIENT_OPTIONS:
        assert f"| `{name}` |" in text, name
