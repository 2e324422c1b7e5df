"""``df.write.format("pulsar")`` with every codec, batched and not, and a message too large
for one entry: read back by the official client, and the codec checked on the raw entries.
"""

from __future__ import annotations

import os
from typing import Any

import pulsar
import pytest
from pyspark.sql import SparkSession
from support.written import expected_fields, raw_entry_codecs, read_topic, ts, write

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.local import LocalBroker
from pulsar_spark.protocol import compression

pytestmark = [pytest.mark.integration, pytest.mark.spark]


CODEC_ROWS: list[tuple[Any, ...]] = [
    # value, key, properties, eventTime: compressible values, nulls, empties
    *[
        (
            (f"codec-row-{i:04d} " * (1 + i % 20)).encode(),
            f"k{i % 7}" if i % 3 else None,
            {"n": str(i), "\u00e9": "\u00fc"} if i % 4 == 0 else None,
            ts("2022-02-02T02:02:02.002") if i % 5 == 0 else None,
        )
        for i in range(300)
    ],
    (None, "null-value", None, None),
    (b"", "empty-value", {"e": ""}, None),
    (b"", None, None, None),
]


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("codec", list(compression.CODEC_NAMES))
def test_compression_and_batching(  # noqa: PLR0917
    spark: SparkSession,
    broker: LocalBroker,
    client: pulsar.Client,
    lookup: Lookup,
    topic_name: str,
    codec: str,
    batching: bool,
) -> None:
    schema = "value binary, key string, properties map<string,string>, eventTime timestamp"
    df = spark.createDataFrame(CODEC_ROWS, schema).coalesce(1)
    write(
        df,
        broker,
        topic=topic_name,
        **{
            "pulsar.producer.compressionType": codec.upper() if codec == "zstd" else codec,
            "pulsar.producer.batchingEnabled": str(batching).lower(),
            "pulsar.producer.batchingMaxMessages": "100",
        },
    )
    got = read_topic(client, topic_name)
    # one task, one producer: the official client reads the rows back in order, exactly
    assert [g.fields() for g in got] == [expected_fields(*row) for row in CODEC_ROWS]
    if batching:
        assert [g.position[2] for g in got] == [i % 100 for i in range(len(CODEC_ROWS))]
    else:
        assert {g.position[2] for g in got} == {-1}

    # on the wire: every entry is compressed with the codec asked for (an unbatched empty or
    # null value is sent uncompressed, as the official clients do)
    entries = 4 if batching else len(CODEC_ROWS)
    stored = raw_entry_codecs(lookup, topic_name, entries)
    code = compression.CODEC_NAMES[codec]
    if batching:
        assert stored == [(code, 100), (code, 100), (code, 100), (code, 3)]
    else:
        assert stored == [(code if row[0] else compression.NONE, 0) for row in CODEC_ROWS]


def test_message_over_the_broker_limit_is_chunked(
    spark: SparkSession, broker: LocalBroker, client: pulsar.Client, topic_name: str
) -> None:
    """pulsar-lite takes entries of up to 5 MB: a 6 MB value goes as chunks of one message,
    which the official reader puts back together."""
    big = os.urandom(6 * 1024 * 1024)
    rows = [
        (b"before", "a", None),
        (big, "big", {"size": "6M"}),
        (b"after", None, {"p": "q"}),
    ]
    df = spark.createDataFrame(rows, "value binary, key string, properties map<string,string>")
    write(df.coalesce(1), broker, topic=topic_name)
    got = read_topic(client, topic_name)
    assert [len(g.value) for g in got] == [6, len(big), 5]
    assert [g.fields() for g in got] == [expected_fields(*row) for row in rows]
    # the chunks took entries 1 and 2; the message's id is its last chunk's
    assert [g.position[:2] for g in got] == [(got[0].position[0], e) for e in (0, 2, 3)]
