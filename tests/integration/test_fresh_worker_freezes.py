"""A worker's first read or write freezes what the worker holds (see ``common/worker_gc.py``).

Each side runs in a fresh interpreter, as a Spark worker would, and goes through the same
reader and writer classes Spark calls; the official client publishes what is read and reads
what is written, so the data is checked too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from support.official import official_client
from support.topics import full

pytestmark = pytest.mark.integration

WRITE = textwrap.dedent(
    """
    import gc, json, sys
    import pyarrow as pa
    from pulsar_spark.source.write_options import WriteOptions
    from pulsar_spark.spark.writer import PulsarBatchWriter

    options = {"service.url": sys.argv[1], "topic": sys.argv[2]}
    writer = PulsarBatchWriter(WriteOptions.parse(options))
    before = gc.get_freeze_count()
    batch = pa.record_batch({"value": [b"first", b"second", b"third"]})
    written = writer.write(iter([batch]))
    frozen = gc.get_freeze_count() > 0
    print(json.dumps({"before": before, "frozen": frozen, "sent": written.counts}))
    """
)

READ = textwrap.dedent(
    """
    import gc, json, sys
    from pulsar_spark.spark.batch_reader import PulsarBatchReader
    from pulsar_spark.source.read_options import ReadMode, ReadOptions

    options = {"service.url": sys.argv[1], "topic": sys.argv[2]}
    reader = PulsarBatchReader(ReadOptions.parse(options, mode=ReadMode.BATCH))
    before = gc.get_freeze_count()
    rows = [
        [row["key"].decode(), row["value"].decode()]
        for partition in reader.partitions()
        for batch in reader.read(partition)
        for row in batch.to_pylist()
    ]
    print(json.dumps({"before": before, "frozen": gc.get_freeze_count() > 0, "rows": rows}))
    """
)


def _run(script: str, service_url: str, topic: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", script, service_url, topic],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_fresh_worker_freezes_on_its_first_write(service_url: str, topic_name: str) -> None:
    client = official_client(service_url)
    try:
        consumer = client.subscribe(full(topic_name), "check")
        result = _run(WRITE, service_url, topic_name)
        received = [consumer.receive(timeout_millis=15_000).data() for _ in range(3)]
    finally:
        client.close()
    assert result == {"before": 0, "frozen": True, "sent": {full(topic_name): 3}}
    assert received == [b"first", b"second", b"third"]


def test_a_fresh_worker_freezes_on_its_first_read(service_url: str, topic_name: str) -> None:
    client = official_client(service_url)
    try:
        producer = client.create_producer(full(topic_name), batching_enabled=False)
        for key, value in (("a", "one"), ("b", "two")):
            producer.send(value.encode(), partition_key=key)
    finally:
        client.close()
    result = _run(READ, service_url, topic_name)
    assert result == {"before": 0, "frozen": True, "rows": [["a", "one"], ["b", "two"]]}
