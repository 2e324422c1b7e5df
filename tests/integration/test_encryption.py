"""End-to-end encryption against the official client, on both brokers.

The official Python client (the C++ client underneath) reads what our producer encrypts and
ours reads what it encrypts: batched and not, uncompressed, LZ4 and ZSTD. Through Spark, a
``df.write`` with encryption is read back with the private key, every field checked, and the
entries on the broker hold no plain text. A read without the key fails naming the key, or
skips (DISCARD) or delivers the payload still encrypted (CONSUME) as asked; another key pair
under the same name fails clearly. RSA key pairs are made for each test module.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pyspark.sql import SparkSession
from support.crypto_keys import write_key_pair
from support.range_reading import FAST, Row, Sent, publish, read, with_sequence_ids
from support.topics import full
from support.written import Got, read_topic

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.client.settings import ProducerEncryption, ProducerSettings, ReaderDecryption
from pulsar_spark.errors import CryptoError
from pulsar_spark.local import ApacheBroker, LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import compression
from pulsar_spark.protocol.crypto import CryptoFailureAction
from pulsar_spark.protocol.encode import OutgoingMessage
from pulsar_spark.protocol.payload import parse_payload_section
from pulsar_spark.protocol.read_stage import ReadRange

pytestmark = [pytest.mark.integration]

CODECS = {"none": compression.NONE, "lz4": compression.LZ4, "zstd": compression.ZSTD}
OFFICIAL_CODECS = {
    "none": pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zstd": pulsar.CompressionType.ZSTD,
}
KEY = "app"


class KeyFiles:
    """An RSA key pair written as PEM files (what the official CryptoKeyReader takes)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.public, self.private = write_key_pair(directory, name)

    def official_reader(self) -> pulsar.CryptoKeyReader:
        return pulsar.CryptoKeyReader(str(self.public), str(self.private))

    def encryption(self, name: str = KEY) -> ProducerEncryption:
        return ProducerEncryption(((name, self.public.read_bytes()),))

    def decryption(
        self, name: str = KEY, action: CryptoFailureAction = CryptoFailureAction.FAIL
    ) -> ReaderDecryption:
        return ReaderDecryption(((name, self.private.read_bytes()),), action)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return KeyFiles(tmp_path_factory.mktemp("keys"), "main")


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> KeyFiles:
    return KeyFiles(tmp_path_factory.mktemp("other-keys"), "other")


@dataclass(frozen=True)
class Env:
    """A test's broker, official client, our lookup, fresh topic and key pair."""

    broker: LocalBroker | ApacheBroker
    client: pulsar.Client
    lookup: Lookup
    topic: str  # short name
    keys: KeyFiles


@pytest.fixture
def env(
    broker: LocalBroker | ApacheBroker,
    client: pulsar.Client,
    lookup: Lookup,
    topic_name: str,
    keys: KeyFiles,
) -> Env:
    return Env(broker, client, lookup, topic_name, keys)


def messages(count: int) -> list[Sent]:
    return [
        Sent(
            (f"secret-{i:04d} " * (1 + i % 9)).encode(),
            key=f"k{i % 5}" if i % 3 else None,
            properties={"n": str(i)} if i % 2 else {},
            event_time=1_700_000_000_000 + i if i % 4 == 0 else 0,
        )
        for i in range(count)
    ]


def with_decryption(decryption: ReaderDecryption) -> ReaderSettings:
    return ReaderSettings(
        queue_size=FAST.queue_size,
        poll_timeout=FAST.poll_timeout,
        request_timeout=FAST.request_timeout,
        decryption=decryption,
    )


def raw_metadata(env: Env) -> Iterator[tuple[Any, bytes]]:
    """(metadata, payload) of every stored entry of the topic, as the broker sends them."""
    consumer = Consumer(env.lookup, full(env.topic), MessageId.earliest(), timeout=10.0)
    try:
        consumer.flow(1000)
        while True:
            delivery = consumer.receive(2.0)
            if delivery is None:
                return
            if delivery.payload is not None:
                section = parse_payload_section(delivery.payload)
                yield section.metadata, bytes(section.payload)
    finally:
        consumer.close()


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_the_official_client_reads_what_we_encrypt(env: Env, codec: str, batching: bool) -> None:
    sent = messages(120)
    settings = ProducerSettings(
        codec=CODECS[codec],
        batching=batching,
        batch_max_messages=50,
        batch_max_delay_ms=60_000,
        encryption=env.keys.encryption(),
    )
    with Producer.create(env.lookup, full(env.topic), settings, name="encrypting") as producer:
        for message in sent:
            producer.send(
                OutgoingMessage(
                    message.value,
                    key=message.key,
                    properties=tuple(message.properties.items()),
                    event_time=message.event_time,
                )
            )
    got = official_read(env)
    assert [m.value for m in got] == [m.value for m in sent]
    assert [m.key for m in got] == [m.key or "" for m in sent]
    assert [dict(m.properties) for m in got] == [m.properties for m in sent]
    assert [m.event_time for m in got] == [m.event_time for m in sent]
    # on the wire: every entry names the key, carries a 12-byte IV and no plain text
    stored = list(raw_metadata(env))
    assert len(stored) == (3 if batching else len(sent))  # 50 + 50 + 20 when batched
    for metadata, payload in stored:
        assert [k.key for k in metadata.encryption_keys] == [KEY]
        assert len(metadata.encryption_param) == 12
        assert not metadata.HasField("encryption_algo")
        assert metadata.compression == CODECS[codec]
        assert b"secret-" not in payload


def official_encrypted(
    env: Env, *, batching: bool, codec: str = "lz4", count: int = 30, per_batch: int = 10
) -> list[Row]:
    """``count`` messages the official producer encrypts for ``KEY``; the rows to expect."""
    return publish(
        env.client,
        full(env.topic),
        messages(count),
        batching_enabled=batching,
        batching_max_messages=per_batch,
        compression_type=OFFICIAL_CODECS[codec],
        encryption_key=KEY,
        crypto_key_reader=env.keys.official_reader(),
    ).rows


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_we_read_what_the_official_client_encrypts(env: Env, codec: str, batching: bool) -> None:
    published = official_encrypted(env, batching=batching, codec=codec, count=120, per_batch=50)
    # what the official producer writes: one key entry, a 12-byte IV, no encryption_algo
    for metadata, _ in raw_metadata(env):
        assert [k.key for k in metadata.encryption_keys] == [KEY]
        assert len(metadata.encryption_param) == 12
        assert not metadata.HasField("encryption_algo")
    got = read(env.lookup, full(env.topic), settings=with_decryption(env.keys.decryption()))
    assert got == with_sequence_ids(published, 0)


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
def test_without_the_key_the_read_fails_naming_it(env: Env, batching: bool) -> None:
    """Never the ciphertext as if it were the value: not even for a message sent alone and
    uncompressed, whose payload would decode."""
    official_encrypted(env, batching=batching, codec="none")
    with pytest.raises(CryptoError, match=r"encrypted for key\(s\) 'app': no private key given"):
        read(env.lookup, full(env.topic))


def test_another_key_pair_under_the_name_fails_clearly(env: Env, other_keys: KeyFiles) -> None:
    official_encrypted(env, batching=False)
    with pytest.raises(CryptoError, match="the private key given for 'app' does not open it"):
        read(env.lookup, full(env.topic), settings=with_decryption(other_keys.decryption()))


def test_discard_skips_what_no_key_opens(
    env: Env, other_keys: KeyFiles, caplog: pytest.LogCaptureFixture
) -> None:
    official_encrypted(env, batching=True)
    plain = publish(env.client, full(env.topic), [Sent(b"plain", key="p")]).rows
    settings = with_decryption(other_keys.decryption(action=CryptoFailureAction.DISCARD))
    with caplog.at_level(logging.DEBUG):
        assert read(env.lookup, full(env.topic), settings=settings) == with_sequence_ids(plain, 0)
    # each discard is logged naming the keys, never showing one
    assert "cryptoFailureAction DISCARD" in caplog.text and "'app'" in caplog.text
    assert "PRIVATE KEY" not in caplog.text
    assert other_keys.private.read_text().splitlines()[1] not in caplog.text


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
def test_consume_delivers_each_entry_still_encrypted_and_flagged(env: Env, batching: bool) -> None:
    official_encrypted(env, batching=batching)
    stored = list(raw_metadata(env))
    with Consumer(env.lookup, full(env.topic), MessageId.earliest(), timeout=10) as consumer:
        last = consumer.last_message_id()
    assert last is not None
    reader = RangeReader(
        env.lookup,
        ReadRange(full(env.topic), MessageId.earliest(), last),
        with_decryption(ReaderDecryption((), CryptoFailureAction.CONSUME)),
    )
    parts = list(reader)
    values = [
        part.values.buffer[int(s) : int(s) + int(n)]
        for part in parts
        for s, n in zip(part.values.starts, part.values.lengths, strict=True)
    ]
    assert values == [payload for _, payload in stored]
    assert all(part.encrypted is not None and part.encrypted.all() for part in parts)
    assert all((part.batch_index == -1).all() for part in parts)


def official_read(env: Env) -> list[Got]:
    """Every message of the topic as the official reader decrypts it, each id once."""
    return read_topic(env.client, env.topic, env.keys.official_reader())


@pytest.mark.spark
def test_spark_writes_encrypted_and_reads_back_with_the_private_key(
    spark: SparkSession, env: Env
) -> None:
    rows = [
        (
            f"spark-secret-{i:03d}".encode() * (1 + i % 3),
            f"key-{i % 4}" if i % 5 else None,
            {"i": str(i), "even": str(i % 2 == 0)} if i % 3 else None,
        )
        for i in range(100)
    ]
    df = spark.createDataFrame(rows, "value binary, key string, properties map<string,string>")
    (
        df.coalesce(1)
        .write.format("pulsar")
        .mode("append")
        .option("service.url", env.broker.service_url)
        .option("topic", env.topic)
        .option("pulsar.producer.encryptionKeys", KEY)
        .option("pulsar.producer.publicKeyFiles", f"{KEY}={env.keys.public}")
        .option("pulsar.producer.compressionType", "ZSTD")
        .option("pulsar.producer.batchingMaxMessages", "40")
        .save()
    )
    for metadata, payload in raw_metadata(env):
        assert [k.key for k in metadata.encryption_keys] == [KEY]
        assert b"spark-secret" not in payload

    read_df = (
        spark.read.format("pulsar")
        .option("service.url", env.broker.service_url)
        .option("topic", env.topic)
        .option("pulsar.reader.privateKeyFiles", f"{KEY}={env.keys.private}")
        .load()
    )
    assert "encrypted" not in read_df.columns
    plan = read_df._jdf.queryExecution().toString()
    assert "PRIVATE KEY" not in plan
    assert env.keys.private.read_text().splitlines()[1] not in plan
    got = read_df.orderBy("messageId").collect()  # one task wrote them, in order
    expected_keys = [None if k is None else k.encode() for _, k, _ in rows]
    assert [bytes(r["value"]) for r in got] == [v for v, _, _ in rows]
    assert [None if r["key"] is None else bytes(r["key"]) for r in got] == expected_keys
    assert [dict(r["properties"]) for r in got] == [p or {} for _, _, p in rows]
    assert {r["topic"] for r in got} == {full(env.topic)}
    # and the official client reads the same
    assert [m.value for m in official_read(env)] == [v for v, _, _ in rows]


@pytest.mark.spark
def test_spark_failure_actions(spark: SparkSession, env: Env) -> None:
    official_encrypted(env, batching=True)
    plain = publish(env.client, full(env.topic), [Sent(b"plain")]).rows

    def load(action: str | None = None) -> Any:
        reader = (
            spark.read.format("pulsar")
            .option("service.url", env.broker.service_url)
            .option("topic", env.topic)
        )
        if action is not None:
            reader = reader.option("pulsar.reader.cryptoFailureAction", action)
        return reader.load()

    with pytest.raises(Exception, match=r"encrypted for key\(s\) 'app'"):
        load().collect()
    discarded = load("DISCARD").collect()
    assert [bytes(r["value"]) for r in discarded] == [plain[0].value]
    consumed_df = load("CONSUME")
    assert consumed_df.columns[-1] == "encrypted"
    consumed = consumed_df.orderBy("messageId").collect()
    # one row per encrypted batch (the producer's batches of up to 10), then the plain one
    assert len(consumed) >= 4
    assert [r["encrypted"] for r in consumed] == [True] * (len(consumed) - 1) + [False]
    assert {r["messageId"]["batchIndex"] for r in consumed} == {-1}
    assert bytes(consumed[-1]["value"]) == b"plain"
    assert all(b"secret-" not in bytes(r["value"]) for r in consumed[:-1])


def test_no_plain_text_in_a_chunked_encrypted_message(env: Env) -> None:
    """A value larger than an entry goes as chunks, each encrypted on its own: the official
    client and ours put it back together."""
    big = (b"chunked-secret-" * 500_000)[: 6 * 1024 * 1024]
    settings = ProducerSettings(batching=False, encryption=env.keys.encryption())
    with Producer.create(env.lookup, full(env.topic), settings, name="chunks") as producer:
        producer.send(OutgoingMessage(big, key="big"))
        producer.send(OutgoingMessage(b"after"))
    stored = list(raw_metadata(env))
    assert len(stored) > 2
    assert all(b"chunked-secret" not in payload for _, payload in stored)
    got = read(env.lookup, full(env.topic), settings=with_decryption(env.keys.decryption()))
    assert [r.value for r in got] == [big, b"after"]
    assert [m.value for m in official_read(env)] == [big, b"after"]
