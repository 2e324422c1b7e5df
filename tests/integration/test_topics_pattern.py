"""``topicsPattern`` on Apache Pulsar, which lists a namespace's topics (GetTopicsOfNamespace).

pulsar-lite does not answer that request (see ``test_batch_read.py``), so these tests run on
the session's Apache broker only.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.sql import SparkSession
from support.apache_fixtures import create_partitioned_topic
from support.official import official_client
from support.streaming import QUERY_TIMEOUT, Batches, Message, as_messages, drafts, publish

from pulsar_spark.local import ApacheBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.apache]


@pytest.fixture(scope="module")
def client(apache_broker: ApacheBroker) -> Any:
    official = official_client(apache_broker.service_url)
    yield official
    official.close()


def full(name: str) -> str:
    return f"persistent://public/default/{name}"


def matching_topics(apache_broker: ApacheBroker, client: pulsar.Client) -> dict[str, Any]:
    """``{stem}-plain`` (non-partitioned) and ``{stem}-parts`` (2 partitions) match
    ``{stem}-.*``; ``{stem}x-other`` and ``{stem}`` do not."""
    stem = f"pat-{uuid.uuid4().hex[:8]}"
    create_partitioned_topic(apache_broker, f"{stem}-parts", 2)
    plain = publish(client, f"{stem}-plain", drafts(5, "plain"))
    parts = publish(client, f"{stem}-parts", drafts(8, "parts"), batch_size=2)
    publish(client, f"{stem}x-other", drafts(3, "other"))
    publish(client, stem, drafts(2, "stem"))
    return {"stem": stem, "plain": plain, "parts": parts}


def read_pattern(spark: SparkSession, apache_broker: ApacheBroker, pattern: str) -> list[Message]:
    df = (
        spark.read.format("pulsar")
        .option("service.url", apache_broker.service_url)
        .option("topicsPattern", pattern)
        .load()
    )
    return as_messages(df)


def test_a_batch_read_takes_every_topic_whose_whole_name_matches(
    spark: SparkSession, apache_broker: ApacheBroker, client: pulsar.Client
) -> None:
    topics = matching_topics(apache_broker, client)
    rows = read_pattern(spark, apache_broker, f"{topics['stem']}-.*")
    assert rows == sorted(topics["plain"] + topics["parts"])
    assert {(m.topic, m.partition) for m in rows} == {
        (full(f"{topics['stem']}-plain"), -1),
        (full(f"{topics['stem']}-parts"), 0),
        (full(f"{topics['stem']}-parts"), 1),
    }


def test_a_pattern_never_matches_internal_topics(
    spark: SparkSession, apache_broker: ApacheBroker, client: pulsar.Client
) -> None:
    """Topics whose name starts with ``__`` (Pulsar's own, the transaction registry) are left
    out even when the pattern matches them."""
    stem = f"pat-{uuid.uuid4().hex[:8]}"
    shown = publish(client, f"{stem}-shown", drafts(3, "shown"))
    publish(client, f"__{stem}-internal", drafts(2, "internal"))
    rows = read_pattern(spark, apache_broker, f"(__)?{stem}-.*")
    assert rows == sorted(shown)
    assert {m.topic for m in rows} == {full(f"{stem}-shown")}


def test_a_stream_reads_a_matching_topic_created_while_it_runs(
    spark: SparkSession, apache_broker: ApacheBroker, client: pulsar.Client, tmp_path: Path
) -> None:
    topics = matching_topics(apache_broker, client)
    batches = Batches()
    query = (
        spark.readStream.format("pulsar")
        .option("service.url", apache_broker.service_url)
        .option("topicsPattern", f"public/default/{topics['stem']}-.*")
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.foreachBatch(batches)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        before = sorted(topics["plain"] + topics["parts"])
        wait_for(batches, len(before))
        late = publish(client, f"{topics['stem']}-late", drafts(6, "late"), batch_size=3)
        more = publish(client, f"{topics['stem']}-plain", drafts(4, "plain-2", first=5))
        wait_for(batches, len(before) + len(late) + len(more))
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(batches.all()) == sorted(before + late + more)
    assert len(batches.all()) == len(before) + len(late) + len(more)  # each message once
    late_rows = [m for m in batches.all() if m.topic == full(f"{topics['stem']}-late")]
    assert [m.value for m in late_rows] == [m.value for m in late]


def wait_for(batches: Batches, count: int) -> list[Message]:
    deadline = time.monotonic() + QUERY_TIMEOUT
    while len(batches.all()) < count:
        assert time.monotonic() < deadline, f"{len(batches.all())} of {count} messages read"
        time.sleep(0.5)
    return batches.all()
