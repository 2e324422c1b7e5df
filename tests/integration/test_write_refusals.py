"""What a Pulsar write refuses when it is defined or started: columns it cannot write, options
it does not know or cannot use, save modes other than append. Nothing is sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.errors import AnalysisException, StreamingQueryException
from pyspark.sql import SparkSession
from support.written import read_topic, write

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]


ACCEPTED = (
    "accepted columns: value (binary or string (required)), key (string or binary), "
    "properties (map<string,string>), eventTime (timestamp), topic (string)"
)

SCHEMA_ERRORS: list[tuple[str, str, str]] = [
    # (id, select expression over spark.range(3), message fragment)
    (
        "no value",
        "cast(id as string) as key",
        "needs a 'value' column (binary or string); got columns key",
    ),
    (
        "value int",
        "cast(id as int) as value",
        "column 'value' has type int; it must be binary or string",
    ),
    (
        "key int",
        "cast(id as string) as value, cast(id as int) as key",
        "column 'key' has type int; it must be string or binary",
    ),
    (
        "properties map<string,int>",
        "cast(id as string) as value, map('a', cast(id as int)) as properties",
        "column 'properties' has type map<string,int>; it must be map<string,string>",
    ),
    (
        "unknown column",
        "cast(id as string) as value, id as foo",
        f"column 'foo' cannot be written to Pulsar; {ACCEPTED}",
    ),
    (
        "eventTime string",
        "cast(id as string) as value, '2024-01-01' as eventTime",
        "column 'eventTime' has type string; it must be timestamp",
    ),
    (
        "eventTime timestamp_ntz",
        "cast(id as string) as value, timestamp_ntz'2024-01-01 00:00:00' as eventTime",
        "column 'eventTime' has type timestamp_ntz; it must be timestamp",
    ),
    (
        "topic int",
        "cast(id as string) as value, cast(id as int) as topic",
        "column 'topic' has type int; it must be string",
    ),
]


@pytest.mark.parametrize(
    ("expression", "fragment"), [c[1:] for c in SCHEMA_ERRORS], ids=[c[0] for c in SCHEMA_ERRORS]
)
def test_refused_schema_fails_at_save_and_sends_nothing(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    expression: str,
    fragment: str,
) -> None:
    df = spark.range(3).selectExpr(*[e.strip() for e in _split(expression)])
    with pytest.raises(AnalysisException) as info:
        write(df, broker, topic=topic_name)
    message = str(info.value)
    assert "ConfigurationError" in message
    assert fragment in message
    assert read_topic(client, topic_name) == []


def _split(expression: str) -> list[str]:
    """Split a select list on the commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in expression:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [*parts, current]


OPTION_ERRORS: list[tuple[str, dict[str, str | None], str]] = [
    ("no service.url", {"service.url": None}, "option 'service.url' is required"),
    (
        "bad service.url",
        {"service.url": "http://localhost:8080"},
        "must look like pulsar://host:6650",
    ),
    (
        "no topic",
        {"topic": None},
        "say where to write: set the 'topic' option, or give the DataFrame a 'topic' column",
    ),
    (
        "two topics",
        {"topic": "a,b"},
        "option 'topic' takes one topic; to write to several, leave it out and give each row "
        "a 'topic' column",
    ),
    (
        "bad compressionType",
        {"pulsar.producer.compressionType": "brotli"},
        "option 'pulsar.producer.compressionType': unknown compression 'brotli': use one of "
        "none, lz4, zlib, zstd, snappy",
    ),
    (
        "non-numeric batchingMaxMessages",
        {"pulsar.producer.batchingMaxMessages": "many"},
        "option 'pulsar.producer.batchingMaxMessages' must be a positive integer, got 'many'",
    ),
    (
        "zero maxPendingMessages",
        {"pulsar.producer.maxPendingMessages": "0"},
        "option 'pulsar.producer.maxPendingMessages' must be a positive integer, got 0",
    ),
    (
        "bad batchingEnabled",
        {"pulsar.producer.batchingEnabled": "yes"},
        "option 'pulsar.producer.batchingEnabled' must be 'true' or 'false', got 'yes'",
    ),
    (
        "misspelt option",
        {"pulsar.producer.compresionType": "lz4"},
        "unknown option 'pulsar.producer.compresiontype' for writing to Pulsar. Did you mean "
        "'pulsar.producer.compressionType'?",
    ),
    (
        "read option",
        {"startingOffsets": "earliest"},
        "unknown option 'startingoffsets' for writing",
    ),
    (
        "encryption asked for without a public key",
        {"pulsar.producer.encryptionKeys": "orders-key"},
        "option 'pulsar.producer.publicKeyFiles' gives no public key file for key(s) "
        "'orders-key' named in 'pulsar.producer.encryptionKeys'",
    ),
    (
        "TLS versions restricted",
        {"Pulsar.Client.TlsProtocols": "TLSv1.3"},
        "option 'pulsar.client.tlsProtocols' is not supported yet: the connection would accept "
        "every TLS version Python's default allows (TLSv1.2 and later), not only those listed",
    ),
]


@pytest.mark.parametrize(
    ("options", "fragment"), [c[1:] for c in OPTION_ERRORS], ids=[c[0] for c in OPTION_ERRORS]
)
def test_refused_option_fails_at_save_and_sends_nothing(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    options: dict[str, str | None],
    fragment: str,
) -> None:
    df = spark.range(3).selectExpr("cast(id as string) as value")
    given: dict[str, Any] = {"topic": topic_name, **options}
    with pytest.raises(AnalysisException) as info:
        write(df, broker, **given)
    message = str(info.value)
    assert "ConfigurationError" in message
    assert fragment in message
    assert read_topic(client, topic_name) == []


def test_save_modes(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Only append writes. Spark itself refuses the default mode (ErrorIfExists) and
    ``ignore`` for a Python data source, before the connector is asked; overwrite reaches the
    connector, which refuses it."""
    df = spark.range(3).selectExpr("cast(id as string) as value")
    with pytest.raises(AnalysisException) as info:
        write(df, broker, mode="overwrite", topic=topic_name)
    assert (
        "Pulsar topics are append-only: use mode('append') (overwrite would need to delete "
        "messages, which the connector never does)"
    ) in str(info.value)
    for mode, shown in ((None, "ErrorIfExists"), ("error", "ErrorIfExists"), ("ignore", "Ignore")):
        with pytest.raises(AnalysisException) as info:
            write(df, broker, mode=mode, topic=topic_name)
        assert info.value.getCondition() == "UNSUPPORTED_DATA_SOURCE_SAVE_MODE"
        assert f'The data source "pulsar" cannot be written in the "{shown}" mode' in str(
            info.value
        )
    assert read_topic(client, topic_name) == []
    write(df, broker, mode="append", topic=topic_name)
    assert sorted(g.value for g in read_topic(client, topic_name)) == [b"0", b"1", b"2"]


def test_streaming_write_with_an_unknown_column_fails_at_start(
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    topic_name: str,
    tmp_path: Path,
) -> None:
    df = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 100)
        .load()
        .selectExpr("cast(value as string) as value", "value as foo")
    )
    query = (
        df.writeStream.format("pulsar")
        .option("service.url", broker.service_url)
        .option("topic", topic_name)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(60)
    finally:
        query.stop()
    message = str(info.value)
    assert "ConfigurationError" in message
    assert f"column 'foo' cannot be written to Pulsar; {ACCEPTED}" in message
    assert read_topic(client, topic_name) == []
