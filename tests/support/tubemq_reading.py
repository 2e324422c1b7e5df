"""Reading a TubeMQ topic with ``spark.read`` in the tests, and rows in a comparable form."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from .tubemq_cluster import TubeMQCluster
from .waiting import wait_until


def load(spark: SparkSession, cluster: TubeMQCluster, topic: str, **options: str) -> DataFrame:
    reader = spark.read.format("tubemq").option("master.addresses", cluster.master)
    return reader.option("topic", topic).options(**options).load()


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    """(value, topic, partition, offset, attributes, timestamp) per row, sorted."""
    return sorted(
        (bytes(r.value), r.topic, r.partition, r.offset, dict(r.attributes), r.timestamp)
        for r in df.collect()
    )


def wait_until_flushed(cluster: TubeMQCluster, topic: str, count: int) -> None:
    """Until the broker has written ``count`` messages of ``topic`` from its memory cache to
    its files (``memCacheFlushIntvl``, 20 s by default, later on a busy machine)."""
    wait_until(lambda: cluster.flushed_messages(topic) >= count, f"{count} flushed messages", 120)
