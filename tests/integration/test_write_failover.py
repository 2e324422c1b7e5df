"""Writes that go on on the next cluster: a pair of geo-replicated Apache clusters of its own
(``geo_pair``: this test kills ``c1``), written with ``failover.secondaryServiceUrls`` naming
``c2``.

A producer that has written to ``c1`` (every message acknowledged, and replicated) goes on on
``c2`` once ``c1`` is SIGKILLed: nothing it had acknowledged is sent again, nothing is lost; a
producer created after the switch starts on ``c2``; and ``df.write`` given ``c1`` while it is
gone writes every row to ``c2``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from support.geo_fixtures import GeoClusters, geo_pair, held_on

from pulsar_spark.client.failover import ActiveCluster
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.settings import ProducerSettings
from pulsar_spark.common.address import cluster_name
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.source.planning import make_lookup
from pulsar_spark.source.write_options import WriteOptions

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.apache]

FAILOVER_DELAY_MS = 1000


def failover_options(geo: GeoClusters, topic: str) -> dict[str, str]:
    """Write options naming ``c1`` and, after it, ``c2``."""
    return {
        "service.url": geo.c1.service_url,
        "topic": topic,
        "failover.secondaryServiceUrls": geo.c2.service_url,
        "failover.failoverDelayMs": str(FAILOVER_DELAY_MS),
        "failover.checkIntervalMs": "250",
        "pulsar.client.operationTimeoutMs": "5000",
    }


def test_writes_go_on_on_c2_when_c1_is_killed(
    spark: SparkSession, topic_name: str, tmp_path: Path
) -> None:
    with geo_pair() as geo:
        c1, c2 = geo.c1, geo.c2
        topic = geo.topic(topic_name)
        options = WriteOptions.parse(failover_options(geo, topic))
        assert options.failover is not None
        active = ActiveCluster(options.failover, make_lookup)
        settings = ProducerSettings(batch_max_messages=100, max_pending_messages=1_000)
        before = [b"c1-%05d" % i for i in range(2_000)]
        after = [b"c2-%05d" % i for i in range(2_000)]
        with Producer.create(
            active.lookup, topic, settings, name="geo-writer", failover=active
        ) as producer:
            for value in before:
                producer.send(OutgoingMessage(value, key=value[-2:].decode()))
            producer.flush()
            assert producer.messages_acknowledged == len(before)
            held_on(spark, c2, topic, len(before))

            c1.kill()
            killed = time.monotonic()
            for value in after:
                producer.send(OutgoingMessage(value, key=value[-2:].decode()))
            producer.flush()
            switch_seconds = time.monotonic() - killed
            assert (producer.reconnects, producer.messages_acknowledged) == (1, 4_000)
        assert active.name == cluster_name(c2.service_url)
        with Producer.create(
            active.lookup, topic, settings, name="late-writer", failover=active
        ) as late:
            late.send(OutgoingMessage(b"late", properties=(("by", "late-writer"),)))
            late.flush()

        rows = [(m.value, m.key) for m in held_on(spark, c2, topic, 4_001)]
        written = [(v, v[-2:].decode()) for v in before + after] + [(b"late", None)]
        assert sorted(rows, key=str) == sorted(written, key=str)
        print(f"write failover: the producer went on on c2 {switch_seconds:.1f} s after the kill")

        # df.write given c1, gone: every row lands on c2.
        spark_topic = geo.topic(f"{topic_name}-spark")
        df = spark.createDataFrame(
            [(f"k{i}", f"row-{i}".encode(), {"i": str(i)}) for i in range(30)],
            "key string, value binary, properties map<string,string>",
        )
        df.write.format("pulsar").mode("append").options(
            **failover_options(geo, spark_topic)
        ).save()
        stored = held_on(spark, c2, spark_topic, 30)
        assert sorted((m.key, m.value, m.properties) for m in stored) == sorted(
            (f"k{i}", f"row-{i}".encode(), (("i", str(i)),)) for i in range(30)
        )
