"""``df.write.format("pulsar")``: every field of every row, read back by the official client.

Spark writes; the official Apache client (``pulsar-client``) reads back, and every field it
reports is compared with what was written: value (and whether it was null), partition key,
properties, event time, partition, producer name. What the official Python client does not
expose (whether a key was set at all, the base64 flag of a binary key, sequence ids) is
checked through ``spark.read.format("pulsar")``.
"""

from __future__ import annotations

import collections
import re
from typing import Any

import pulsar
import pytest
from pyspark.errors import PythonException
from pyspark.sql import SparkSession
from support.topics import full
from support.written import Got, expected_fields, read_topic, read_with_spark, ts, write

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]


PRODUCER_NAME = re.compile(r"spark-[0-9a-f]{12}-(\d+)-(\d+)")
"""``spark-<write id>-<task>-<partition>`` for a batch write."""


BINARY_VALUE_ROWS: list[tuple[Any, ...]] = [
    # value binary, key string, properties, eventTime
    (b"plain", None, None, None),
    (b"\x00\xff\x01 all bytes", "k1", {"a": "1"}, ts("2023-01-01T00:00:00.123456")),
    (None, "tombstone", {}, None),  # null value
    (
        b"",
        "\u043a\u043b\u044e\u0447-\u65e5\u672c-\u00fc",
        {"\u00fc": "\u65e5\u672c", "e": ""},
        None,
    ),
    (b"emoji key", "\U0001f600-\U0001d11e", None, ts("1970-01-01T00:00:01")),
    (b"x" * 5000, "same", {"p": "q", "r": "s", "t": "u"}, ts("2024-02-29T23:59:59.999")),
    (b"no key, props", None, {"only": "props"}, ts("2030-06-15T12:00:00")),
    (None, None, None, None),  # null value, no key
    *[(f"row-{i}".encode() * (i % 7), f"key-{i % 5}", {"i": str(i)}, None) for i in range(8, 40)],
]

STRING_VALUE_ROWS: list[tuple[Any, ...]] = [
    # value string, key binary, eventTime
    ("text", bytes([0, 255, 1]), ts("2023-05-05T05:05:05.5")),
    ("\u65e5\u672c\u8a9e \U0001f600", b"plain-ascii-bytes", None),
    ("", b"\xfe\xff" * 40, None),
    (None, b"\x00", None),  # null value, binary key
    ("no key", None, ts("2001-09-09T01:46:40")),
    *[(f"s-{i}", bytes([i, 255 - i, (i * 7) % 256]), None) for i in range(5, 30)],
]


def test_batch_write_every_field_binary_value(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    schema = "value binary, key string, properties map<string,string>, eventTime timestamp"
    df = spark.createDataFrame(BINARY_VALUE_ROWS, schema).repartition(2)
    write(df, broker, topic=topic_name)

    got = read_topic(client, topic_name)
    assert collections.Counter(g.fields() for g in got) == collections.Counter(
        expected_fields(*row) for row in BINARY_VALUE_ROWS
    )
    # spelled out: a null value is a message with null_value set and an empty payload, an
    # event time keeps its milliseconds (the microseconds are cut), absent fields stay unset
    by_key = {g.key: g for g in got}
    assert by_key["tombstone"].null_value and by_key["tombstone"].value == b""
    assert by_key["k1"].event_time == 1_672_531_200_123
    assert by_key["same"].event_time == 1_709_251_199_999
    assert by_key["\U0001f600-\U0001d11e"].event_time == 1000
    assert by_key["\u043a\u043b\u044e\u0447-\u65e5\u672c-\u00fc"].properties == (
        ("e", ""),
        ("\u00fc", "\u65e5\u672c"),
    )
    assert {g.topic for g in got} == {full(topic_name)}
    assert {g.partition for g in got} == {-1}
    _check_producers(got)

    # what the official Python client cannot tell: an unkeyed row has no key at all (not an
    # empty one), and each producer numbers its messages 0, 1, 2, ... in the order sent
    ours = read_with_spark(spark, broker, topic_name)
    assert collections.Counter(
        (r["value"], r["key"].decode() if r["key"] is not None else None) for r in ours
    ) == collections.Counter(
        (bytes(v) if v is not None else None, k) for v, k, _, _ in BINARY_VALUE_ROWS
    )
    _check_sequence_ids(ours)


def test_batch_write_every_field_string_value_binary_key(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    schema = "value string, key binary, eventTime timestamp"
    df = spark.createDataFrame(STRING_VALUE_ROWS, schema).repartition(2)
    write(df, broker, topic=topic_name)

    got = read_topic(client, topic_name)
    assert collections.Counter(g.fields() for g in got) == collections.Counter(
        expected_fields(value, key, None, event) for value, key, event in STRING_VALUE_ROWS
    )
    # the official client shows a binary key as its base64 text (partition_key)
    by_value = {g.value: g for g in got if not g.null_value}
    assert by_value[b"text"].key == "AP8B"
    assert by_value[b"text"].event_time == 1_683_263_105_500
    assert by_value["\u65e5\u672c\u8a9e \U0001f600".encode()].key == "cGxhaW4tYXNjaWktYnl0ZXM="
    assert by_value[b"no key"].key == ""
    assert [g.key for g in got if g.null_value] == ["AA=="]
    _check_producers(got)

    # the base64 flag travels with the key: our reader gives back the original bytes
    ours = read_with_spark(spark, broker, topic_name)
    assert collections.Counter((r["value"], r["key"]) for r in ours) == collections.Counter(
        (v.encode() if v is not None else None, k) for v, k, _ in STRING_VALUE_ROWS
    )
    _check_sequence_ids(ours)


def _check_producers(got: list[Got]) -> None:
    """One producer per Spark task (two here) named ``spark-<write>-<task>-0``."""
    names = {g.producer_name for g in got}
    matches = [PRODUCER_NAME.fullmatch(name) for name in names]
    assert all(matches), names
    assert len({name.rsplit("-", 2)[0] for name in names}) == 1  # one write id
    assert {(int(m[1]), int(m[2])) for m in matches if m} == {(0, 0), (1, 0)}


def _check_sequence_ids(rows: list[dict[str, Any]]) -> None:
    by_producer: dict[str, list[int]] = collections.defaultdict(list)
    for row in rows:
        by_producer[row["producerName"]].append(row["sequenceId"])
    for sequence_ids in by_producer.values():
        assert sorted(sequence_ids) == list(range(len(sequence_ids)))


def test_event_time_before_1970_fails_the_write(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """Pulsar carries event times as unsigned milliseconds, 0 meaning none: 1.5 ms before
    the epoch (-2 ms, rounded down as Spark does) cannot be sent, and the row is named."""
    rows = [("a", ts("2024-01-01T00:00:00")), ("b", ts("1969-12-31T23:59:59.998500"))]
    df = spark.createDataFrame(rows, "value string, eventTime timestamp").coalesce(1)
    with pytest.raises(
        PythonException,
        match=re.escape(
            "column 'eventTime': a row has event time 1969-12-31 23:59:59.998500+00:00 "
            "(-2 ms since the epoch)"
        ),
    ):
        write(df, broker, topic=topic_name)
    # the task checks every row of a record batch before sending any of it
    assert read_topic(client, topic_name) == []
