"""A Pulsar write whose messages cannot be sent fails its task: a broker that is not there or
never answers, a message too large, a null property value. An empty DataFrame sends nothing.
"""

from __future__ import annotations

import time

import pulsar
import pytest
from pyspark.errors import PythonException
from pyspark.sql import SparkSession
from support.fake_broker import closed_port, silent_server
from support.topics import full
from support.written import read_topic, write

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_unreachable_broker_fails_the_write_within_the_operation_timeout(
    spark: SparkSession, broker: LocalBroker
) -> None:
    """Connections refused are retried, with growing pauses, for
    pulsar.client.operationTimeoutMs (2 s here); then the task fails saying what it tried."""
    df = spark.range(10).selectExpr("cast(id as string) as value")
    port = closed_port()  # closed: connections are refused at once
    started = time.monotonic()
    with pytest.raises(PythonException) as info:
        write(
            df,
            broker,
            topic="anything",
            **{
                "service.url": f"pulsar://127.0.0.1:{port}",
                "pulsar.client.operationTimeoutMs": "2000",
            },
        )
    assert time.monotonic() - started < 30
    message = str(info.value)
    assert "RetriesExhaustedError: looking up the partitions of persistent://public/default/" in (
        message
    )
    assert "(pulsar.client.operationTimeoutMs is 2s); last error: cannot connect to Pulsar " in (
        message
    )
    assert f"cannot connect to Pulsar broker at 127.0.0.1:{port} within 10s" in message
    assert "Connection refused" in message


def test_silent_broker_fails_the_write_within_the_timeouts(
    spark: SparkSession, broker: LocalBroker
) -> None:
    df = spark.range(10).selectExpr("cast(id as string) as value")
    with silent_server() as port:
        started = time.monotonic()
        with pytest.raises(PythonException) as info:
            write(
                df,
                broker,
                topic="anything",
                **{
                    "service.url": f"pulsar://127.0.0.1:{port}",
                    "pulsar.client.connectionTimeoutMs": "2000",
                    "pulsar.client.operationTimeoutMs": "1000",
                },
            )
        elapsed = time.monotonic() - started
    assert 2 <= elapsed < 30, elapsed
    assert (
        f"last error: broker at 127.0.0.1:{port} accepted TCP but did not complete "
        "the Pulsar handshake within 2s"
    ) in str(info.value)


def test_message_that_cannot_be_sent_fails_the_task(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Properties are metadata, which is never chunked: 6 MB of them cannot be sent."""
    df = spark.range(1).selectExpr(
        "'v' as value", f"map('big', repeat('x', {6 * 1024 * 1024})) as properties"
    )
    with pytest.raises(PythonException) as info:
        write(df, broker, topic=topic_name)
    # 10 KB under the size the broker announces: pulsar-lite announces none (5 MB is assumed),
    # the tests' Apache brokers 5 MB - 10 KB (see support/apache_fixtures.py).
    limit = 5 * 1024 * 1024 - 10 * 1024 * (1 if isinstance(broker, LocalBroker) else 2)
    assert (
        f"LocalProtocolError: batch of 1 messages for {full(topic_name)} is 6291525 bytes, over "
        f"the maximum entry size of {limit} bytes (keys or properties too large?)"
    ) in str(info.value)
    assert read_topic(client, topic_name) == []


def test_null_property_value_fails_the_task_before_sending(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """A Spark map may hold a null value; a Pulsar property cannot. The record batch holding
    it is refused as a whole, naming the property."""
    df = spark.createDataFrame(
        [("a", {"ok": "1"}), ("b", {"fine": "x", "missing": None})],
        "value string, properties map<string,string>",
    ).coalesce(1)
    with pytest.raises(PythonException) as info:
        write(df, broker, topic=topic_name)
    assert (
        "ConfigurationError: column 'properties': property 'missing' of a row has a null "
        "value; property values must be strings"
    ) in str(info.value)
    assert read_topic(client, topic_name) == []


def test_empty_dataframe_writes_nothing(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    write(spark.range(0).selectExpr("cast(id as string) as value"), broker, topic=topic_name)
    assert read_topic(client, topic_name) == []
