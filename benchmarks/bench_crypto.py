"""Encryption's cost: writes and reads of one topic on a local pulsar-lite, plain and encrypted.

Our producer writes the same messages to two topics (one plain, one encrypted for one RSA
2048 key; LZ4, batches of 1000, 100-byte values, no keys) with ``send_columns``, the path a
Spark write takes, then our range reader reads each topic whole, the path a Spark read takes
(without Spark and Arrow, so encryption's share is as large as it gets). Each measurement is
the best of ``--repeat`` runs; the table gives messages per second and encrypted / plain.

    python benchmarks/bench_crypto.py [--messages 500000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

import numpy as np

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.client.settings import (
    ClientSettings,
    ProducerEncryption,
    ProducerSettings,
    ReaderDecryption,
)
from pulsar_spark.local import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import compression
from pulsar_spark.protocol.encode import Blobs, OutgoingColumns
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.topic import full_topic_name

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import format_table  # puts tests/ on the path too, for support
from support.crypto_keys import rsa_key_pair

SIZE = 100
CHUNK = 50_000  # rows handed to send_columns at a time


def columns(count: int) -> OutgoingColumns:
    rng = np.random.default_rng(7)
    data = rng.integers(0, 26, size=count * SIZE, dtype=np.uint8) + ord("a")
    offsets = np.arange(count + 1, dtype=np.int64) * SIZE
    return OutgoingColumns(Blobs(data, offsets))


def write(lookup: Lookup, topic: str, rows: OutgoingColumns, settings: ProducerSettings) -> float:
    started = time.perf_counter()
    with Producer.create(lookup, topic, settings, name=f"bench-{uuid.uuid4().hex[:8]}") as out:
        for start in range(0, len(rows), CHUNK):
            out.send_columns(rows.slice(start, min(start + CHUNK, len(rows))))
    return time.perf_counter() - started


def read(lookup: Lookup, topic: str, settings: ReaderSettings) -> tuple[float, int]:
    with Consumer(lookup, topic, MessageId.earliest(), timeout=30) as consumer:
        last = consumer.last_message_id()
    assert last is not None
    started = time.perf_counter()
    rows = sum(
        part.count
        for part in RangeReader(lookup, ReadRange(topic, MessageId.earliest(), last), settings)
    )
    return time.perf_counter() - started, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    public, private = rsa_key_pair()
    rows = columns(args.messages)
    plain_settings = ProducerSettings(codec=compression.LZ4, batch_max_delay_ms=1000)
    sealed_settings = ProducerSettings(
        codec=compression.LZ4,
        batch_max_delay_ms=1000,
        encryption=ProducerEncryption((("bench", public),)),
    )
    reader_plain = ReaderSettings(poll_timeout=60, request_timeout=30)
    reader_sealed = ReaderSettings(
        poll_timeout=60,
        request_timeout=30,
        decryption=ReaderDecryption((("bench", private),)),
    )
    results: dict[str, list[float]] = {}
    with LocalBroker.start() as broker:
        pool = ConnectionPool()
        lookup = Lookup(ClientSettings(broker.service_url, operation_timeout=30), pool)
        try:
            for run in range(args.repeat):
                for label, write_settings, read_settings in (
                    ("plain", plain_settings, reader_plain),
                    ("encrypted", sealed_settings, reader_sealed),
                ):
                    topic = full_topic_name(f"bench-crypto-{label}-{run}-{uuid.uuid4().hex[:6]}")
                    written = write(lookup, topic, rows, write_settings)
                    took, count = read(lookup, topic, read_settings)
                    assert count == len(rows), (count, len(rows))
                    results.setdefault(f"write {label}", []).append(written)
                    results.setdefault(f"read {label}", []).append(took)
        finally:
            pool.close()
    table = []
    for kind in ("write", "read"):
        plain = min(results[f"{kind} plain"])
        sealed = min(results[f"{kind} encrypted"])
        table.append(
            [
                kind,
                f"{len(rows) / plain:,.0f}",
                f"{len(rows) / sealed:,.0f}",
                f"{plain / sealed:.0%}",
            ]
        )
    print(f"{len(rows):,} messages of {SIZE} bytes, LZ4, batches of 1000; best of {args.repeat}")
    print(format_table(["", "plain msg/s", "encrypted msg/s", "encrypted / plain"], table))


if __name__ == "__main__":
    main()
