"""Spark end to end on secured clusters: batch write, batch read and an AvailableNow stream,
over TLS with a token and over mutual TLS, through the proxy that terminates TLS and checks
credentials as Apache Pulsar does (tests/broker_proxy.py). The official client publishes what
Spark reads and reads back what Spark writes, from the broker directly.

The stream's token lives 2 s and is renewed in its file every 0.5 s, so the proxy challenges
the connections mid-query and they answer with the file read again; nothing may be lost or
repeated. No secret may show in ``explain()``, the query's progress or an error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from broker_proxy import BrokerProxy
from pyspark.sql import DataFrame, SparkSession
from support import tokens
from support.certs import TestCerts
from support.fixtures import OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
from support.oauth2_server import OAuth2Server
from support.readme import example

from pulsar_spark.jobs import topic_to_parquet
from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]

NS = "persistent://public/default/"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
QUERY_TIMEOUT = 120


class Secured:
    """Options reaching one secure proxy, plus a way to renew the token mid-query."""

    def __init__(self, proxy: BrokerProxy, options: dict[str, str]) -> None:
        self.proxy = proxy
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

    def __init__(self, path: Path, secret: bytes, lifetime: float) -> None:
        self.path = path
        self.secret = secret
        self.lifetime = lifetime
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renew()

    def renew(self) -> None:
        text = tokens.sign("spark-job", self.secret, time.time() + self.lifetime)
        partial = self.path.with_suffix(".new")
        partial.write_text(text)
        partial.replace(self.path)  # never a half-written token
        self.renewals += 1

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
def token_file(tmp_path: Path, token_secret: bytes) -> Iterator[TokenFile]:
    file = TokenFile(tmp_path / "token.jwt", token_secret, lifetime=600)
    yield file
    file.stop()


def secured(kind: str, request: pytest.FixtureRequest, certs: TestCerts) -> Secured:
    trust = {"pulsar.client.tlsTrustCertsFilePath": str(certs.ca)}
    if kind == "tls+token":
        proxy: BrokerProxy = request.getfixturevalue("token_proxy")
        token: TokenFile = request.getfixturevalue("token_file")
        return Secured(
            proxy,
            {
                "service.url": proxy.url,
                **trust,
                "pulsar.client.authPluginClassName": TOKEN_PLUGIN,
                "pulsar.client.authParams": f"file://{token.path}",
            },
        )
    proxy = request.getfixturevalue("mtls_proxy")
    return Secured(
        proxy,
        {
            "service.url": proxy.url,
            **trust,
            "pulsar.client.authPluginClassName": TLS_PLUGIN,
            "pulsar.client.authParams": (
                f"tlsCertFile:{certs.client_cert},tlsKeyFile:{certs.client_key}"
            ),
        },
    )


@pytest.fixture(params=["tls+token", "mtls"])
def secure(request: pytest.FixtureRequest, test_certs: TestCerts) -> Secured:
    return secured(request.param, request, test_certs)


@pytest.fixture(scope="module")
def client(broker: LocalBroker) -> Iterator[pulsar.Client]:
    official = pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=15,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
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
    rows = rows_for("w", 300)
    df = spark.createDataFrame(
        rows, "key string, value binary, properties map<string,string>"
    ).coalesce(1)
    secure.write(df, topic_name)
    assert read_back(client, topic_name, len(rows)) == rows

    read = secure.reader(spark, topic_name).orderBy("messageId").collect()
    assert as_expected(read) == rows
    assert {r["topic"] for r in read} == {NS + topic_name}


def test_batch_read_of_what_the_official_client_published(
    spark: SparkSession,
    client: pulsar.Client,
    secure: Secured,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    topic = pooled_partitioned_topic(3)
    rows = rows_for("r", 600)
    ids = publish(client, topic, rows)
    got = secure.reader(spark, topic).collect()
    assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr)
    assert ids_of(got) == ids


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


def test_available_now_stream_while_the_token_expires(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    token_proxy: BrokerProxy,
    token_file: TokenFile,
    test_certs: TestCerts,
    pooled_partitioned_topic: Callable[[int], str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    """Tokens live 2 s and the file is renewed every 0.5 s; the query runs many micro-batches
    over several seconds, so connections are challenged mid-query and answer."""
    secure = secured("tls+token", request, test_certs)
    assert token_proxy.auth is not None
    policy = token_proxy.auth
    topic = pooled_partitioned_topic(3)
    rows = rows_for("s", 900)
    ids = publish(client, topic, rows)
    token_file.lifetime = 2
    token_file.renew()
    token_file.keep_renewing(0.5)
    challenged, answered = policy.challenges_sent, policy.responses_accepted
    disconnects = len(policy.disconnects)

    started = time.monotonic()
    got, micro_batches = run_available_now(
        secure.reader(spark, topic, stream=True), tmp_path / "checkpoint"
    )
    assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr)  # exactly once
    assert ids_of(got) == ids
    assert micro_batches >= 900 // 40
    if time.monotonic() - started < 3:  # the query was quicker than a token: force a refresh
        policy.challenge_all()
        time.sleep(0.5)
    assert policy.challenges_sent > challenged
    assert policy.responses_accepted > answered
    assert len(policy.disconnects) == disconnects  # no connection lost its login


def test_available_now_stream_over_mutual_tls(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    mtls_proxy: BrokerProxy,
    test_certs: TestCerts,
    pooled_partitioned_topic: Callable[[int], str],
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> None:
    secure = secured("mtls", request, test_certs)
    topic = pooled_partitioned_topic(2)
    rows = rows_for("m", 200)
    ids = publish(client, topic, rows)
    got, _ = run_available_now(secure.reader(spark, topic, stream=True), tmp_path / "cp")
    assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr)
    assert ids_of(got) == ids


# --- secrets -------------------------------------------------------------------------------------


def test_no_secret_in_explain_progress_or_errors(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    token_proxy: BrokerProxy,
    token_secret: bytes,
    test_certs: TestCerts,
    topic_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = tokens.sign("inline-user", token_secret, time.time() + 600)
    options = {
        "service.url": token_proxy.url,
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

    forged = tokens.sign("inline-user", b"wrong-secret", time.time() + 600)
    bad = (
        spark.read.format("pulsar")
        .options(**{**options, "pulsar.client.authParams": f"token:{forged}"})
        .load()
    )
    with pytest.raises(Exception) as info:
        bad.count()
    assert "rejected the credentials of auth plugin AuthenticationToken" in str(info.value)
    assert forged not in str(info.value)


# --- the README's secure examples, pointed at the test proxies ------------------------------------


def run_readme_example(spark: SparkSession, name: str, replacements: dict[str, str]) -> DataFrame:
    code = example(name)
    for placeholder, value in replacements.items():
        assert placeholder in code, placeholder
        code = code.replace(placeholder, value)
    namespace: dict[str, Any] = {"spark": spark}
    exec(compile(code, f"README.md:{name}", "exec"), namespace)
    df: DataFrame = namespace["df"]
    return df


def test_readme_secure_examples(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    token_proxy: BrokerProxy,
    mtls_proxy: BrokerProxy,
    oauth2_server: OAuth2Server,
    token_file: TokenFile,
    test_certs: TestCerts,
    topic_name: str,
    tmp_path: Path,
) -> None:
    rows = rows_for("readme", 50)
    ids = publish(client, topic_name, rows)
    common = {
        "/etc/pulsar/ca.pem": str(test_certs.ca),
        "persistent://public/default/clicks": NS + topic_name,
    }
    credentials = oauth2_server.write_credentials_file(
        tmp_path / "credentials.json", OAUTH2_CLIENT_ID, OAUTH2_CLIENT_SECRET
    )
    cases = {
        "secure-token": {
            "pulsar+ssl://broker.example.com:6651": token_proxy.url,
            "/etc/pulsar/token.jwt": str(token_file.path),
            **common,
        },
        "secure-mtls": {
            "pulsar+ssl://broker.example.com:6651": mtls_proxy.url,
            "/etc/pulsar/client.pem": str(test_certs.client_cert),
            "/etc/pulsar/client-key.pem": str(test_certs.client_key),
            **common,
        },
        "secure-oauth2": {
            # the example trusts the system CAs; the test CA signed the proxy's certificate
            '.option("pulsar.client.authPluginClassName",': (
                f'.option("pulsar.client.tlsTrustCertsFilePath", "{test_certs.ca}")\n'
                '    .option("pulsar.client.authPluginClassName",'
            ),
            "pulsar+ssl://broker.example.com:6651": token_proxy.url,
            "https://auth.example.com": oauth2_server.issuer_url,
            "/etc/pulsar/credentials.json": str(credentials),
            "persistent://public/default/clicks": NS + topic_name,
        },
    }
    for name, replacements in cases.items():
        got = run_readme_example(spark, name, replacements).collect()
        assert sorted(as_expected(got), key=repr) == sorted(rows, key=repr), name
        assert ids_of(got) == ids, name


def test_spark_submit_job_with_tls_and_a_token(  # noqa: PLR0917
    spark: SparkSession,
    client: pulsar.Client,
    token_proxy: BrokerProxy,
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
                token_proxy.url,
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
