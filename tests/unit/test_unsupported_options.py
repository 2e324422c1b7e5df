"""Java client options the connector does not honour: refused when the DataFrame is defined
(encryption above all: a job asking for it must never get plain text silently), or accepted
with a warning when ignoring them weakens nothing."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from pulsar_spark.common import option_values
from pulsar_spark.common.option_values import Unsupported
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.source.client_options import CLIENT_UNSUPPORTED, CLIENT_WITHOUT_EFFECT
from pulsar_spark.source.read_options import (
    READ_OPTIONS,
    READER_UNSUPPORTED,
    READER_WITHOUT_EFFECT,
    ReadMode,
    ReadOptions,
    check_read_options,
)
from pulsar_spark.source.write_options import (
    PRODUCER_UNSUPPORTED,
    PRODUCER_WITHOUT_EFFECT,
    WRITE_OPTIONS,
    WriteOptions,
)
from pulsar_spark.spark import datasource
from pulsar_spark.spark.datasource import PulsarDataSource
from pulsar_spark.tubemq.spark.options import Mode, TubeMQReadOptions, TubeMQWriteOptions

PLAIN_URL = "pulsar://broker.example:6650"
TLS_URL = "pulsar+ssl://broker.example:6651"
BASE = {"service.url": PLAIN_URL, "topic": "t"}
# A value that must never show in an error: some of these options hold passwords.
VALUE = "s3cret-Value_42"
VALUE_ONLY = StructType([StructField("value", StringType())])

NO_JAVA_CLASS = "a Java class cannot be loaded here; give each key's"
PEM_TRUST = "give the CAs to trust as a PEM file in 'pulsar.client.tlsTrustCertsFilePath'"
PEM_IDENTITY = (
    "give the client certificate and key as PEM files in 'pulsar.client.tlsCertificateFilePath' "
    "and 'pulsar.client.tlsKeyFilePath'"
)
NO_SOCKS = "connections would go straight to the brokers, not through the SOCKS5 proxy"
NO_PLUGIN = (
    "TLS would be set up from the PEM files of the tls*FilePath options (or the system's "
    "trusted CAs), not by an SSL factory plugin"
)
OWN_ROUTING = (
    "messages would be routed as by the Java producer's own routers: keyed ones by the hash "
    "'pulsar.producer.hashingScheme' names, the others as 'pulsar.producer.messageRoutingMode' "
    "says"
)

# Every refused option and its whole error, written out.
CLIENT_REFUSALS = {
    "pulsar.client.authParamMap": "option 'pulsar.client.authParamMap' is not supported yet: "
    "the connection would not authenticate with these parameters; give them in "
    "'pulsar.client.authParams' (a JSON object)",
    "pulsar.client.socks5ProxyAddress": "option 'pulsar.client.socks5ProxyAddress' is not "
    f"supported yet: {NO_SOCKS}",
    "pulsar.client.socks5ProxyPassword": "option 'pulsar.client.socks5ProxyPassword' is not "
    f"supported yet: {NO_SOCKS}",
    "pulsar.client.socks5ProxyUsername": "option 'pulsar.client.socks5ProxyUsername' is not "
    f"supported yet: {NO_SOCKS}",
    "pulsar.client.sslFactoryPlugin": "option 'pulsar.client.sslFactoryPlugin' is not supported "
    "yet (only 'org.apache.pulsar.common.util.DefaultPulsarSslFactory' is accepted): "
    f"{NO_PLUGIN}",
    "pulsar.client.sslFactoryPluginParams": "option 'pulsar.client.sslFactoryPluginParams' is "
    f"not supported yet (only '' is accepted): {NO_PLUGIN}",
    "pulsar.client.tlsCiphers": "option 'pulsar.client.tlsCiphers' is not supported yet: the "
    "connection would offer Python's default cipher suites, not only those listed",
    "pulsar.client.tlsProtocols": "option 'pulsar.client.tlsProtocols' is not supported yet: "
    "the connection would accept every TLS version Python's default allows (TLSv1.2 and "
    "later), not only those listed",
    "pulsar.client.tlsTrustStorePath": "option 'pulsar.client.tlsTrustStorePath' is not "
    "supported yet: JVM trust stores are not read, so the broker's certificate would be "
    f"checked against the system's trusted CAs instead; {PEM_TRUST}",
    "pulsar.client.tlsTrustStorePassword": "option 'pulsar.client.tlsTrustStorePassword' is "
    f"not supported yet: JVM trust stores are not read; {PEM_TRUST}",
    "pulsar.client.tlsKeyStorePath": "option 'pulsar.client.tlsKeyStorePath' is not supported "
    "yet: JVM key stores are not read, so no client certificate would be presented; "
    f"{PEM_IDENTITY}",
    "pulsar.client.tlsKeyStorePassword": "option 'pulsar.client.tlsKeyStorePassword' is not "
    f"supported yet: JVM key stores are not read; {PEM_IDENTITY}",
    "pulsar.client.useKeyStoreTls": "option 'pulsar.client.useKeyStoreTls' is not supported "
    f"yet (only 'false' is accepted): JVM key and trust stores are not read; {PEM_TRUST}, and "
    f"{PEM_IDENTITY}",
}
READER_REFUSALS = {
    "pulsar.reader.cryptoKeyReader": "option 'pulsar.reader.cryptoKeyReader' is not supported "
    f"yet: {NO_JAVA_CLASS} private key file in 'pulsar.reader.privateKeyFiles' ('name=path,...')",
    "pulsar.reader.keyHashRanges": "option 'pulsar.reader.keyHashRanges' is not supported yet: "
    "every message would be read, whatever the hash of its key; filter the rows in Spark",
    "pulsar.reader.readCompacted": "option 'pulsar.reader.readCompacted' is not supported yet "
    "(only 'false' is accepted): every message of the topic would be read, not only the "
    "latest of each key",
    "pulsar.reader.startMessageFromRollbackDurationInSec": "option "
    "'pulsar.reader.startMessageFromRollbackDurationInSec' is not supported yet (only '0' is "
    "accepted): the read would start at 'startingOffsets'; give a publish time in "
    "'startingTime' instead",
}
PRODUCER_REFUSALS = {
    "pulsar.producer.cryptoKeyReader": "option 'pulsar.producer.cryptoKeyReader' is not "
    f"supported yet: {NO_JAVA_CLASS} public key file in 'pulsar.producer.publicKeyFiles' "
    "('name=path,...') and the names in 'pulsar.producer.encryptionKeys'",
    "pulsar.producer.cryptoFailureAction": "option 'pulsar.producer.cryptoFailureAction' is not "
    "supported yet (only 'FAIL' is accepted): a message that cannot be encrypted fails the "
    "write; it is never sent in plain text",
    "pulsar.producer.accessMode": "option 'pulsar.producer.accessMode' is not supported yet "
    "(only 'Shared' is accepted): every task opens its own producer in Shared mode; no other "
    "producer would be kept off the topic",
    "pulsar.producer.batcherBuilder": "option 'pulsar.producer.batcherBuilder' is not supported "
    "yet (only 'DEFAULT' is accepted): a batch would hold messages of several keys, which "
    "Key_Shared consumers receive together; set 'pulsar.producer.batchingEnabled' to false to "
    "send each message in its own entry",
    "pulsar.producer.customMessageRouter": "option 'pulsar.producer.customMessageRouter' is not "
    f"supported yet: {OWN_ROUTING}",
}
READ_REFUSALS = CLIENT_REFUSALS | READER_REFUSALS
WRITE_REFUSALS = CLIENT_REFUSALS | PRODUCER_REFUSALS


@pytest.fixture(autouse=True)
def _no_gc_freeze(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasource, "freeze_worker_objects", lambda: None)


@pytest.fixture
def warnings(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[], list[str]]]:
    """The no-effect warnings logged, each name warned about afresh."""
    monkeypatch.setattr(option_values, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="pulsar_spark.common.option_values"):
        yield lambda: [r.getMessage() for r in caplog.records]


def warning(name: str) -> str:
    return (
        f"option {name!r} is accepted for compatibility with the Java Pulsar client but has no "
        "effect in pulsar-spark"
    )


# Where a read or a write is defined: the schema at load(), the batch or stream reader, the
# batch or stream writer. Each parses the options first, before any connection.
READS: dict[str, Callable[[dict[str, str]], object]] = {
    "load": lambda options: PulsarDataSource(options).schema(),
    "batch": lambda options: PulsarDataSource(options).reader(VALUE_ONLY),
    "stream": lambda options: PulsarDataSource(options).streamReader(VALUE_ONLY),
}
WRITES: dict[str, Callable[[dict[str, str]], object]] = {
    "batch": lambda options: PulsarDataSource(options).writer(VALUE_ONLY, False),
    "stream": lambda options: PulsarDataSource(options).streamWriter(VALUE_ONLY, False),
}


def batch_read(options: dict[str, str]) -> ReadOptions:
    return ReadOptions.parse(options, mode=ReadMode.BATCH)


def refusal(define: Callable[[dict[str, str]], object], options: dict[str, str]) -> str:
    with pytest.raises(ConfigurationError) as info:
        define({**BASE, **options})
    assert type(info.value) is ConfigurationError
    return str(info.value)


# --- each refused option, read and write, batch and stream -------------------------------------


@pytest.mark.parametrize("define", READS.values(), ids=READS.keys())
@pytest.mark.parametrize(("name", "expected"), READ_REFUSALS.items(), ids=READ_REFUSALS.keys())
def test_read_refuses(define: Callable[[dict[str, str]], object], name: str, expected: str) -> None:
    message = refusal(define, {name: VALUE})
    assert message == expected
    assert VALUE not in message


@pytest.mark.parametrize("define", WRITES.values(), ids=WRITES.keys())
@pytest.mark.parametrize(("name", "expected"), WRITE_REFUSALS.items(), ids=WRITE_REFUSALS.keys())
def test_write_refuses(
    define: Callable[[dict[str, str]], object], name: str, expected: str
) -> None:
    message = refusal(define, {name: VALUE})
    assert message == expected
    assert VALUE not in message


def test_the_expected_messages_cover_every_refused_option() -> None:
    assert {u.name for u in CLIENT_UNSUPPORTED} == set(CLIENT_REFUSALS)
    assert {u.name for u in READER_UNSUPPORTED} == set(READER_REFUSALS)
    assert {u.name for u in PRODUCER_UNSUPPORTED} == set(PRODUCER_REFUSALS)


@pytest.mark.parametrize(
    "spelling",
    [
        "pulsar.producer.cryptokeyreader",
        "PULSAR.PRODUCER.CRYPTOKEYREADER",
        "Pulsar.Producer.CryptoKeyReader",
    ],
)
def test_any_case_of_the_name_is_refused_under_its_canonical_name(spelling: str) -> None:
    message = refusal(WriteOptions.parse, {spelling: "com.example.KeyReader"})
    assert message == PRODUCER_REFUSALS["pulsar.producer.cryptoKeyReader"]


@pytest.mark.parametrize("value", ["", " ", "true", "CONSUME", "DISCARD", "SEND"])
def test_a_producer_crypto_failure_action_other_than_fail_is_refused(value: str) -> None:
    """SEND (Java: send in plain text when encryption fails) and anything else but FAIL."""
    write = refusal(WriteOptions.parse, {"pulsar.producer.cryptoFailureAction": value})
    assert write == PRODUCER_REFUSALS["pulsar.producer.cryptoFailureAction"]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pulsar.reader.readCompacted", "true"),
        ("pulsar.reader.startMessageFromRollbackDurationInSec", "3600"),
        ("pulsar.client.useKeyStoreTls", "true"),
        ("pulsar.client.sslFactoryPlugin", "com.example.PinningSslFactory"),
        ("pulsar.client.sslFactoryPluginParams", "pin=abc"),
    ],
)
def test_a_value_asking_for_more_than_the_default_is_refused(name: str, value: str) -> None:
    assert refusal(batch_read, {name: value}) == READ_REFUSALS[name]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pulsar.producer.accessMode", "Exclusive"),
        ("pulsar.producer.accessMode", "WaitForExclusive"),
        ("pulsar.producer.batcherBuilder", "KEY_BASED"),
    ],
)
def test_a_producer_value_asking_for_more_than_the_default_is_refused(
    name: str, value: str
) -> None:
    assert refusal(WriteOptions.parse, {name: value}) == PRODUCER_REFUSALS[name]


@pytest.mark.parametrize(
    ("define", "name"),
    [
        *[
            (batch_read, name)
            for name in (
                "encryptionKeys",
                "pulsar.encryptionKeys",
                "pulsar.client.encryptionKeys",
                "pulsar.producer.encryptionKeys",
                "pulsar.consumer.cryptoKeyReader",
                "cryptoKeyReader",
                "pulsar.client.cryptoKeyReader",
                "tlsProtocols",
            )
        ],
        *[
            (WriteOptions.parse, name)
            for name in (
                "pulsar.reader.cryptoKeyReader",
                "pulsar.consumer.cryptoKeyReader",
                "encryptionKeys",
                "pulsar.client.encryptionKeys",
                "tlsCiphers",
            )
        ],
    ],
)
def test_other_prefixes_are_refused_as_unknown(
    define: Callable[[dict[str, str]], object], name: str
) -> None:
    """Given under another prefix, or none, these names are unknown options: refused too."""
    message = refusal(define, {name: VALUE})
    assert message.startswith(f"unknown option {name.lower()!r} for ")
    assert VALUE not in message


def test_a_misspelt_refused_name_gets_a_hint_towards_it() -> None:
    message = refusal(WriteOptions.parse, {"pulsar.producer.encryptionKey": "k"})
    assert message.startswith(
        "unknown option 'pulsar.producer.encryptionkey' for writing to Pulsar. Did you mean "
        "'pulsar.producer.encryptionKeys'?"
    )


# --- values that ask for nothing more, and the options still ignored ----------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pulsar.client.useKeyStoreTls", "false"),
        ("pulsar.client.useKeyStoreTls", " FALSE "),
        (
            "pulsar.client.sslFactoryPlugin",
            "org.apache.pulsar.common.util.DefaultPulsarSslFactory",
        ),
        ("pulsar.client.sslFactoryPluginParams", ""),
        ("pulsar.reader.readCompacted", "False"),
        ("pulsar.reader.startMessageFromRollbackDurationInSec", "0"),
    ],
)
def test_the_default_value_of_a_refused_read_option_only_warns(
    warnings: Callable[[], list[str]], name: str, value: str
) -> None:
    check_read_options({**BASE, name: value})
    for mode in ReadMode:
        ReadOptions.parse({**BASE, name: value}, mode=mode)
    assert warnings() == [warning(name)]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("pulsar.producer.accessMode", "shared"),
        ("pulsar.producer.batcherBuilder", "DEFAULT"),
    ],
)
def test_the_default_value_of_a_refused_write_option_only_warns(
    warnings: Callable[[], list[str]], name: str, value: str
) -> None:
    for define in WRITES.values():
        define({**BASE, name: value})
    assert warnings() == [warning(name)]


@pytest.mark.parametrize("name", [*CLIENT_WITHOUT_EFFECT, *READER_WITHOUT_EFFECT])
def test_read_options_still_ignored_only_warn(warnings: Callable[[], list[str]], name: str) -> None:
    ReadOptions.parse({**BASE, name: "1"}, mode=ReadMode.BATCH)
    ReadOptions.parse({**BASE, name.upper(): "1"}, mode=ReadMode.STREAM)
    assert warnings() == [warning(name)]


@pytest.mark.parametrize("name", [*CLIENT_WITHOUT_EFFECT, *PRODUCER_WITHOUT_EFFECT])
def test_write_options_still_ignored_only_warn(
    warnings: Callable[[], list[str]], name: str
) -> None:
    WriteOptions.parse({**BASE, name: "1"})
    assert warnings() == [warning(name)]


def test_no_name_is_both_honoured_ignored_or_refused() -> None:
    for known, ignored, refused in (
        (READ_OPTIONS, (*CLIENT_WITHOUT_EFFECT, *READER_WITHOUT_EFFECT), READ_REFUSALS),
        (WRITE_OPTIONS, (*CLIENT_WITHOUT_EFFECT, *PRODUCER_WITHOUT_EFFECT), WRITE_REFUSALS),
    ):
        lists = [{n.lower() for n in names} for names in (known, ignored, refused)]
        assert sum(len(names) for names in lists) == len(set().union(*lists))


# --- useTls: the URL decides, but true with pulsar:// is refused --------------------------------


def test_use_tls_true_with_a_plain_url_is_refused() -> None:
    for define in (batch_read, WriteOptions.parse):
        message = refusal(define, {"pulsar.client.useTls": "true"})
        assert message == (
            "pulsar.client.useTls need TLS, but service.url uses pulsar://; use "
            "pulsar+ssl://host:6651"
        )


@pytest.mark.parametrize(
    ("url", "value", "tls"),
    [(TLS_URL, "true", True), (TLS_URL, "false", True), (PLAIN_URL, "false", False)],
)
def test_use_tls_otherwise_follows_the_url(url: str, value: str, tls: bool) -> None:
    options = {**BASE, "service.url": url, "PULSAR.CLIENT.USETLS": value}
    parsed = ReadOptions.parse(options, mode=ReadMode.BATCH)
    assert (parsed.client.connection.tls is not None) is tls
    assert (WriteOptions.parse(options).client.connection.tls is not None) is tls


def test_use_tls_takes_a_boolean() -> None:
    assert refusal(WriteOptions.parse, {"pulsar.client.useTls": "yes"}) == (
        "option 'pulsar.client.useTls' must be 'true' or 'false', got 'yes'"
    )


# --- TubeMQ has no such names: all refused as unknown -------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "encryptionKeys",
        "pulsar.producer.encryptionKeys",
        "pulsar.reader.cryptoKeyReader",
        "cryptoFailureAction",
        "tlsProtocols",
        "pulsar.client.tlsTrustStorePath",
    ],
)
def test_tubemq_refuses_them_as_unknown(name: str) -> None:
    options = {"master.addresses": "m1:8715", "topic": "t", name: VALUE}
    for mode in (Mode.BATCH, Mode.STREAM, None):
        with pytest.raises(ConfigurationError) as info:
            TubeMQReadOptions.parse(options, mode=mode)
        assert str(info.value).startswith(f"unknown option {name.lower()!r} for reading from ")
    with pytest.raises(ConfigurationError) as info:
        TubeMQWriteOptions.parse(options)
    assert str(info.value).startswith(f"unknown option {name.lower()!r} for writing to TubeMQ")
    assert VALUE not in str(info.value)


# --- the reference page's table of refused options ---------------------------------------------


def readme_refusals() -> dict[str, str]:
    """Option name to accepted value, from docs/reference.md's table of refused options."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text(
        encoding="utf-8"
    )
    start = text.index("| Option | Accepted value | Why it is refused |")
    rows = re.findall(r"^\| `([\w.]+)` \| (.+?) \|", text[start:].split("\n\n")[0], re.MULTILINE)
    return dict(rows)


def shown(entry: Unsupported) -> str:
    """The accepted value as the reference page's table shows it."""
    if not entry.accepted:
        return "\N{EN DASH}"
    return f"`{entry.accepted[0]}`" if entry.accepted[0] else "empty"


def test_readme_lists_every_refused_option_with_its_accepted_value() -> None:
    entries = (*CLIENT_UNSUPPORTED, *READER_UNSUPPORTED, *PRODUCER_UNSUPPORTED)
    assert readme_refusals() == {u.name: shown(u) for u in entries}
