"""Spark end to end on a secured Apache Pulsar cluster: batch write, batch read and an
AvailableNow stream over TLS, logged in with a token, a client certificate, basic credentials
or an OAuth2 issuer's token, each a role the broker authorizes (``secure_apache``, see
tests/support/apache_secure.py). The official client, logged in as the superuser, publishes
what Spark reads and reads back what Spark writes.

The stream's token lives 3 s and is renewed in its file every second, so the broker's refresh
check (every 2 s) challenges the connections mid-query and they answer with the file read
again; nothing may be lost or repeated. A role without permission gets AuthorizationError.
No secret may show in ``explain()``, the query's progress, an error or the broker's log.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.sql import DataFrame, SparkSession
from support import tokens
from support.apache_secure import (
    BASIC_PASSWORD,
    BASIC_USER,
    OAUTH2_AUDIENCE,
    OUTSIDER_ROLE,
    TOKEN_ROLE,
    SecureApache,
)
from support.certs import TestCerts
from support.fixtures import OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
from support.oauth2_server import OAuth2Server
from support.readme import example, source
from support.waiting import wait_until

from pulsar_spark.jobs import topic_to_parquet

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.apache]

NS = "persistent://public/default/"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
BASIC_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
OAUTH2_PLUGIN = "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"
QUERY_TIMEOUT = 120
KINDS = ("token", "mtls", "basic", "oauth2")
"""Every way to log in that a test runs with."""


class Secured:
    """Options reaching the secured broker with one kind of credentials."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def reader(self, spark: SparkSession, topic: str, *, stream: bool = False) -> DataFrame:
        source = spark.readStream if stream else spark.read
        load = source.format("pulsar").options(**self.options).option("topic", topic)
        if stream:
            load = load.option("startingOffsets", "earliest").option("maxMessagesPerTrigger", "40")
        return load.load()

    def write(self, df: DataFrame, topic: str) -> None:
        writer = df.write.format("pulsar").mode("append").options(**self.options)
        writer.option("topic", topic).save()


class TokenFile:
    """A token file that a background thread keeps renewing with short-lived tokens."""

    def __init__(self, path: Path, secure: SecureApache, role: str, lifetime: float) -> None:
        self.path = path
        self.secure = secure
        self.role = role
        self.lifetime = lifetime
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renew()

    def renew(self) -> None:
        partial = self.path.with_suffix(".new")
        partial.write_text(self.secure.token(self.role, self.lifetime))
        partial.replace(self.path)  # never a half-written token

    def keep_renewing(self, every: float) -> None:
        def loop() -> None:
            while not self._stop.wait(every):
                self.renew()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@pytest.fixture
def token_file(tmp_path: Path, secure_apache: SecureApache) -> Iterator[TokenFile]:
    file = TokenFile(tmp_path / "token.jwt", secure_apache, TOKEN_ROLE, lifetime=600)
    yield file
    file.stop()


def secured(kind: str, request: pytest.FixtureRequest) -> Secured:
    secure: SecureApache = request.getfixturevalue("secure_apache")
    certs: TestCerts = request.getfixturevalue("test_certs")
    common = {
        "service.url": secure.tls_url,
        "pulsar.client.tlsTrustCertsFilePath": str(certs.ca),
    }
    if kind == "token":
        token: TokenFile = request.getfixturevalue("token_file")
        plugin, params = TOKEN_PLUGIN, f"file://{token.path}"
    elif kind == "mtls":
        plugin = TLS_PLUGIN
        params = f"tlsCertFile:{certs.client_cert},tlsKeyFile:{certs.client_key}"
    elif kind == "basic":
        plugin = BASIC_PLUGIN
        params = json.dumps({"userId": BASIC_USER, "password": BASIC_PASSWORD})
    else:
        issuer: OAuth2Server = request.getfixturevalue("oauth2_server")
        tmp_path: Path = request.getfixturevalue("tmp_path")
        key = issuer.write_credentials_file(
            tmp_path / "credentials.json", OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
        )
        plugin = OAUTH2_PLUGIN
        params = json.dumps(
            {
                "issuerUrl": issuer.issuer_url,
                "privateKey": f"file://{key}",
                "audience": OAUTH2_AUDIENCE,
            }
        )
    return Secured(
        {
            **common,
            "pulsar.client.authPluginClassName": plugin,
            "pulsar.client.authParams": params,
        }
    )


@pytest.fixture(params=KINDS)
def secure(request: pytest.FixtureRequest) -> Secured:
    return secured(request.param, request)


@pytest.fixture(scope="module")
def client(secure_apache: SecureApache) -> Iterator[pulsar.Client]:
    official = secure_apache.official_client()
    yield official
    official.close()


Expected = tuple[str, bytes, dict[str, str]]


def rows_for(prefix: str, count: int) -> list[Expected]:
    return [
        (f"{prefix}-k{i % 7}", f"{prefix}-value-{i}".encode() * (1 + i % 3), {"n": str(i)})
        for i in range(count)
    ]


Ids = dict[bytes, tuple[int, int, int, int]]


def publish(client: pulsar.Client, topic: str, rows: list[Expected]) -> Ids:
    """Publish ``rows`` (keyed, with properties) in batches; return each value's message id
    (partition, ledger, entry, batch index)."""
    producer = client.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=25,
    )
    ids: Ids = {}

    def sent(value: bytes) -> Callable[[Any, Any], None]:
        def record(_result: Any, mid: Any) -> None:
            ids[value] = (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index())

        return record

    for key, value, properties in rows:
        producer.send_async(value, sent(value), partition_key=key, properties=properties)
    producer.flush()
    producer.close()
    assert len(ids) == len(rows)
    return ids


def ids_of(rows: list[Any]) -> Ids:
    return {
        bytes(r["value"]): (
            r["partition"],
            r["messageId"]["ledgerId"],
            r["messageId"]["entryId"],
            r["messageId"]["batchIndex"],
        )
        for r in rows
    }


def read_back(client: pulsar.Client, topic: str, count: int) -> list[Expected]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        got = [reader.read_next(5000) for _ in range(count)]
        assert not reader.has_message_available()
    finally:
        reader.close()
    return [(m.partition_key(), m.data(), m.properties()) for m in got]


def as_expected(rows: list[Any]) -> list[Expected]:
    return [(r["key"].decode(), bytes(r["value"]), dict(r["properties"])) for r in rows]


# --- batch ---------------------------------------------------------------------------------------


def test_batch_write_then_batch_read(
    spark: SparkSession, client: pulsar.Client, secure: Secured, topic_name: str
) -> None:
    rows = rows_for("w", 120)
    df = spark.createDataFrame(
        rows, "key string, value binary, properties map<string,string>"
    ).coalesce(1)
    secure.write(df, topic_name)
    assert read_back(client, topic_name, len(rows)) == rows

    read = secure.reader(spark, topic_name).orderBy("messageId").collect()
    assert as_expected(read) == rows
    assert {r["topic"] for r in read} == {NS + topic_name}


def test_batch_read_of_what_the_official_client_published(
    spark: SparkSession, client: pulsar.Client, secure: Secured, secure_apache: SecureApache
) -> None:
    topic = secure_apache.new_partitioned_topic(3)
    rows = rows_for("r", 300)
    ids = publish(client, topic, rows)
    got = secure.reader(spark, topic).collect()
    assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr)
    assert ids_of(got) == ids


def test_a_role_without_permission_gets_an_authorization_error(
    spark: SparkSession, secure_apache: SecureApache, test_certs: TestCerts, topic_name: str
) -> None:
    options = {
        "service.url": secure_apache.tls_url,
        "pulsar.client.tlsTrustCertsFilePath": str(test_certs.ca),
        "pulsar.client.authPluginClassName": "token",
        "pulsar.client.authParams": f"token:{secure_apache.token(OUTSIDER_ROLE)}",
        "topic": topic_name,
    }
    with pytest.raises(Exception) as info:
        spark.read.format("pulsar").options(**options).load().collect()
    assert (
        f"AuthorizationError (server error 4): partitioned metadata of {NS}{topic_name}: "
        "Client is not authorized to Get Partition Metadata"
    ) in str(info.value)
    df = spark.createDataFrame(
        rows_for("o", 3), "key string, value binary, properties map<string,string>"
    )
    with pytest.raises(Exception) as info:
        df.write.format("pulsar").mode("append").options(**options).save()
    assert "AuthorizationError (server error 4)" in str(info.value)
    assert "Client is not authorized" in str(info.value)


# --- streaming -----------------------------------------------------------------------------------


def run_available_now(df: DataFrame, checkpoint: Path) -> tuple[list[Any], int]:
    """Run an AvailableNow query to its end; every row and the number of micro-batches."""
    collected: list[Any] = []
    batches: list[int] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        collected.extend(batch.collect())
        batches.append(batch_id)

    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT), "the AvailableNow query did not stop"
    assert query.exception() is None
    return collected, len(batches)


def test_available_now_stream(
    spark: SparkSession,
    client: pulsar.Client,
    secure: Secured,
    secure_apache: SecureApache,
    tmp_path: Path,
) -> None:
    topic = secure_apache.new_partitioned_topic(2)
    rows = rows_for("m", 200)
    ids = publish(client, topic, rows)
    got, micro_batches = run_available_now(
        secure.reader(spark, topic, stream=True), tmp_path / "cp"
    )
    assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr)
    assert ids_of(got) == ids
    assert micro_batches == 5  # 40 messages a trigger


def expiring_token_options(
    secure: SecureApache,
    certs: TestCerts,
    role: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> dict[str, str]:
    """Options logging in as ``role`` (granted) with 3 s tokens from a file renewed every
    second, until the test ends."""
    secure.grant(role)
    token_file = TokenFile(tmp_path / f"{role}.jwt", secure, role, lifetime=3)
    request.addfinalizer(token_file.stop)
    token_file.keep_renewing(1.0)
    return {
        "service.url": secure.tls_url,
        "pulsar.client.tlsTrustCertsFilePath": str(certs.ca),
        "pulsar.client.authPluginClassName": TOKEN_PLUGIN,
        "pulsar.client.authParams": f"file://{token_file.path}",
    }


def test_available_now_stream_while_the_token_expires(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    secure_apache: SecureApache,
    test_certs: TestCerts,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """Tokens live 3 s and the file is renewed every second; the broker checks every 2 s, so
    connections open across the query are challenged and answer with the file read again."""
    role = "spark-stream"
    options = expiring_token_options(secure_apache, test_certs, role, request, tmp_path)
    topic = secure_apache.new_partitioned_topic(3)
    rows = rows_for("s", 900)
    ids = publish(client, topic, rows)
    refreshed = secure_apache.refreshes(role)
    refused = secure_apache.log().count(f"operation=authentication-refresh, principal={role},")

    got, micro_batches = run_available_now(
        Secured(options).reader(spark, topic, stream=True), tmp_path / "checkpoint"
    )
    assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr)  # exactly once
    assert ids_of(got) == ids
    assert micro_batches == -(-900 // 40)
    # Connections the query opened stay in the pool and keep answering challenges.
    wait_until(lambda: secure_apache.refreshes(role) > refreshed, "a refresh challenge", timeout=15)
    assert (
        secure_apache.log().count(f"operation=authentication-refresh, principal={role},") == refused
    )


def test_running_stream_keeps_reading_while_its_tokens_expire(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    secure_apache: SecureApache,
    test_certs: TestCerts,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """A query on a processing-time trigger runs across several token lifetimes: the broker
    challenges its connections while it runs, they answer, and what is published before and
    during the challenges is read exactly once."""
    role = "spark-live"
    options = expiring_token_options(secure_apache, test_certs, role, request, tmp_path)
    topic = secure_apache.new_partitioned_topic(2)
    first, second = rows_for("a", 100), rows_for("b", 100)
    publish(client, topic, first)
    collected: list[Any] = []

    def sink(batch: DataFrame, _batch_id: int) -> None:
        collected.extend(batch.collect())

    query = (
        Secured(options)
        .reader(spark, topic, stream=True)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:
        wait_until(lambda: len(collected) >= len(first), "the first rows", timeout=QUERY_TIMEOUT)
        refreshed = secure_apache.refreshes(role)
        wait_until(
            lambda: secure_apache.refreshes(role) > refreshed, "a challenge answered", timeout=20
        )
        assert query.isActive
        publish(client, topic, second)
        wait_until(
            lambda: len(collected) >= len(first) + len(second), "the rest", timeout=QUERY_TIMEOUT
        )
        time.sleep(1.5)  # three more triggers: nothing more may come
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(as_expected(collected), key=repr) == sorted(first + second, key=repr)
    assert f"operation=authentication-refresh, principal={role}," not in secure_apache.log()


# --- secrets -------------------------------------------------------------------------------------


def test_no_secret_in_explain_progress_errors_or_the_broker_log(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    secure_apache: SecureApache,
    test_certs: TestCerts,
    topic_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = secure_apache.token()
    options = {
        "service.url": secure_apache.tls_url,
        "pulsar.client.tlsTrustCertsFilePath": str(test_certs.ca),
        "pulsar.client.authPluginClassName": "token",
        "pulsar.client.authParams": f"token:{token}",
        "topic": topic_name,
    }
    publish(client, topic_name, rows_for("x", 10))
    batch = spark.read.format("pulsar").options(**options).load()
    batch.explain(True)
    assert batch.count() == 10
    stream = (
        spark.readStream.format("pulsar")
        .options(**options)
        .option("startingOffsets", "earliest")
        .load()
    )
    stream.explain(True)
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(QUERY_TIMEOUT)
    progress = "\n".join(p.json for p in query.recentProgress)
    printed = capsys.readouterr().out
    assert "== Physical Plan ==" in printed
    assert sum(p.numInputRows for p in query.recentProgress) == 10
    assert topic_name in progress  # the source offsets are in it
    assert token not in printed
    assert token not in progress

    forged = tokens.sign(TOKEN_ROLE, b"wrong-secret" * 3, time.time() + 600)
    bad = (
        spark.read.format("pulsar")
        .options(**{**options, "pulsar.client.authParams": f"token:{forged}"})
        .load()
    )
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        bad.count()
    assert time.monotonic() - started < 30
    assert (
        f"AuthenticationError (server error 3): broker {secure_apache.address} rejected the "
        "credentials of auth plugin AuthenticationToken (method 'token'): Failed to authenticate"
    ) in str(info.value)
    assert forged not in str(info.value)
    log = secure_apache.log()
    assert token not in log
    assert forged not in log


# --- the secure examples of docs/security.md, pointed at the secured broker -----------------------


def run_readme_example(spark: SparkSession, name: str, replacements: dict[str, str]) -> DataFrame:
    code = example(name)
    for placeholder, value in replacements.items():
        assert placeholder in code, placeholder
        code = code.replace(placeholder, value)
    namespace: dict[str, Any] = {"spark": spark}
    exec(compile(code, source(name), "exec"), namespace)
    df: DataFrame = namespace["df"]
    return df


def test_readme_secure_examples(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    secure_apache: SecureApache,
    oauth2_server: OAuth2Server,
    token_file: TokenFile,
    test_certs: TestCerts,
    topic_name: str,
    tmp_path: Path,
) -> None:
    rows = rows_for("readme", 50)
    ids = publish(client, topic_name, rows)
    common = {
        "pulsar+ssl://broker.example.com:6651": secure_apache.tls_url,
        "persistent://public/default/clicks": NS + topic_name,
    }
    credentials = oauth2_server.write_credentials_file(
        tmp_path / "credentials.json", OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
    )
    cases = {
        "secure-token": {
            "/etc/pulsar/ca.pem": str(test_certs.ca),
            "/etc/pulsar/token.jwt": str(token_file.path),
            **common,
        },
        "secure-mtls": {
            "/etc/pulsar/ca.pem": str(test_certs.ca),
            "/etc/pulsar/client.pem": str(test_certs.client_cert),
            "/etc/pulsar/client-key.pem": str(test_certs.client_key),
            **common,
        },
        "secure-oauth2": {
            # the example trusts the system CAs; the test CA signed the broker's certificate
            '.option("pulsar.client.authPluginClassName",': (
                f'.option("pulsar.client.tlsTrustCertsFilePath", "{test_certs.ca}")\n'
                '    .option("pulsar.client.authPluginClassName",'
            ),
            "https://auth.example.com": oauth2_server.issuer_url,
            "/etc/pulsar/credentials.json": str(credentials),
            "urn:pulsar:my-cluster": OAUTH2_AUDIENCE,
            **common,
        },
    }
    for name, replacements in cases.items():
        got = run_readme_example(spark, name, replacements).collect()
        assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr), name
        assert ids_of(got) == ids, name


def test_spark_submit_job_with_tls_and_a_token(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    secure_apache: SecureApache,
    token_file: TokenFile,
    test_certs: TestCerts,
    topic_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The job passes ``--option NAME=VALUE`` on as read options."""
    rows = rows_for("job", 30)
    publish(client, topic_name, rows)
    output = tmp_path / "out"
    assert (
        topic_to_parquet.main(
            [
                "--service-url",
                secure_apache.tls_url,
                "--topic",
                topic_name,
                "--output",
                str(output),
                "--option",
                f"pulsar.client.tlsTrustCertsFilePath={test_certs.ca}",
                "--option",
                "pulsar.client.authPluginClassName=token",
                "--option",
                f"pulsar.client.authParams=file://{token_file.path}",
            ]
        )
        == 0
    )
    assert f"copied {topic_name} to {output}, which now holds 30 rows" in capsys.readouterr().out
    copied = spark.read.parquet(str(output)).collect()
    assert sorted(as_expected(copied), key=repr) == sorted(rows, key=repr)
