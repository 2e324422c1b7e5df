"""The official client publishes, our RangeReader reads: every field of every message.

Messages are published with ``pulsar-client`` (the Apache C++ client) to the session's
pulsar-lite broker and read back with :class:`RangeReader` from the earliest position to the
id :meth:`Consumer.last_message_id` reports. Each message is compared field by field, in
order, with what was sent and with the id the official producer got back: batched and not,
with every codec, chunked, and twenty thousand at once.
"""

from __future__ import annotations

import os

import pulsar
import pytest
from support.official import COMPRESSION
from support.range_reading import (
    FAST,
    KEYS,
    Sent,
    columns_rows,
    ids,
    last_message_id,
    publish,
    read,
    with_sequence_ids,
)

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.read_stage import ReadRange

pytestmark = pytest.mark.integration

CODECS = COMPRESSION
WIRE_CODEC = {"none": pb.NONE, "lz4": pb.LZ4, "zlib": pb.ZLIB, "zstd": pb.ZSTD, "snappy": pb.SNAPPY}


def varied_messages(count: int, *, first_sequence: int) -> list[Sent]:
    """Keys in several scripts (and none), properties, event times, sizes, empty and null."""
    messages = []
    for i in range(count):
        value: bytes | None = f"value-{i}-".encode() + bytes(range(i % 7)) * (i % 5)
        if i % 11 == 4:
            value = b""
        if i % 11 == 9:
            value = None
        props = {"i": str(i), "script": "кириллица 漢字 🚀"} if i % 3 else {}
        messages.append(
            Sent(
                value=value,
                key=KEYS[i % len(KEYS)],
                properties=props,
                event_time=1_700_000_000_000 + i if i % 4 else 0,
                sequence_id=first_sequence + i,
            )
        )
    return messages


# --- content: batching, codecs, keys, properties, ids -------------------------------------------


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("batching", [True, False], ids=["batched", "single"])
def test_every_field_of_every_message(
    client: pulsar.Client, lookup: Lookup, topic: str, codec: str, batching: bool
) -> None:
    messages = varied_messages(23, first_sequence=1000)
    options: dict[str, object] = {
        "producer_name": f"interop-{codec}-{batching}",
        "compression_type": CODECS[codec],
        "batching_enabled": batching,
    }
    if batching:
        options.update(batching_max_messages=5, batching_max_publish_delay_ms=5000)
    published = publish(client, topic, messages, **options)
    expected = published.rows
    assert published.producer_name == f"interop-{codec}-{batching}"

    # the layout the official producer reported: 5 batches of 5,5,5,5,3 or 23 entries
    ledger = expected[0].ledger
    if batching:
        assert ids(expected) == [(ledger, i // 5, i % 5) for i in range(23)]
    else:
        assert ids(expected) == [(ledger, i, -1) for i in range(23)]
    assert {r.partition for r in expected} == {-1}

    last = last_message_id(lookup, topic)
    assert last == MessageId(ledger, 4 if batching else 22)
    assert last is not None and last.partition == -1

    publish_times: list[int] = []
    got = read(lookup, topic, end=last, publish_times=publish_times)
    assert got == expected
    assert all(published.started_ms <= t <= published.finished_ms for t in publish_times)
    if batching:  # one publish time per batch
        assert publish_times == [publish_times[(i // 5) * 5] for i in range(23)]

    # the codec was really used on the wire, and the batch sizes are as published
    entries = list(
        RangeReader(lookup, ReadRange(topic, MessageId.earliest(), last), FAST).entries()
    )
    assert [e.section.metadata.compression for e in entries] == [WIRE_CODEC[codec]] * len(entries)
    assert [e.message_count for e in entries] == ([5, 5, 5, 5, 3] if batching else [1] * 23)
    assert [e.entry for e in entries] == [(ledger, i) for i in range(5 if batching else 23)]


@pytest.mark.parametrize("per_batch", [1, 3])
def test_small_batches_read_together_and_at_the_edges_of_a_range(
    client: pulsar.Client, lookup: Lookup, topic: str, per_batch: int
) -> None:
    """Batches of one message (a producer sending slowly) or a few are decoded thousands at a
    time; a range that begins and ends inside them still reads exactly its messages."""
    count = 420
    published = publish(
        client,
        topic,
        varied_messages(count, first_sequence=0),
        flush_each=per_batch == 1,
        producer_name=f"small-{per_batch}",
        batching_enabled=True,
        batching_max_messages=max(per_batch, 2),
        batching_max_publish_delay_ms=5000,
    )
    expected = published.rows
    ledger = expected[0].ledger
    assert ids(expected) == [(ledger, i // per_batch, i % per_batch) for i in range(count)]
    assert read(lookup, topic) == expected
    first, last = expected[37], expected[361]
    got = read(
        lookup,
        topic,
        MessageId(ledger, first.entry, first.batch_index),
        MessageId(ledger, last.entry, last.batch_index),
    )
    assert got == expected[37:362]


def test_producer_chosen_sequence_ids_and_broker_named_producer(
    client: pulsar.Client, lookup: Lookup, topic: str
) -> None:
    messages = [Sent(f"m{i}".encode(), key="k") for i in range(7)]
    published = publish(
        client,
        topic,
        messages,
        initial_sequence_id=41,
        batching_enabled=True,
        batching_max_messages=3,
        batching_max_publish_delay_ms=5000,
    )
    expected = with_sequence_ids(published.rows, 42)
    assert published.producer_name  # generated by the broker
    assert {r.producer_name for r in expected} == {published.producer_name}
    assert read(lookup, topic) == expected
    assert [r.sequence_id for r in expected] == list(range(42, 49))


def test_chunked_message(client: pulsar.Client, lookup: Lookup, topic: str) -> None:
    big = os.urandom(6 * 1024 * 1024 + 12345)
    messages = [
        Sent(
            big, key="большой-ключ", properties={"kind": "chunked"}, event_time=123, sequence_id=7
        ),
        Sent(b"after the chunks", key="small", sequence_id=8),
    ]
    published = publish(
        client,
        topic,
        messages,
        producer_name="chunker",
        chunking_enabled=True,
        batching_enabled=False,
    )
    expected = published.rows
    ledger = expected[0].ledger
    # the official id of a chunked message is its last chunk's; 6 MB needs two chunks
    assert ids(expected) == [(ledger, 1, -1), (ledger, 2, -1)]

    raw = list(
        RangeReader(
            lookup, ReadRange(topic, MessageId.earliest(), MessageId(ledger, 2)), FAST
        ).entries()
    )
    metadata = [e.section.metadata for e in raw]
    assert [(m.chunk_id, m.num_chunks_from_msg) for m in metadata[:2]] == [(0, 2), (1, 2)]
    assert metadata[0].uuid == metadata[1].uuid
    assert metadata[0].total_chunk_msg_size == len(big)
    assert not metadata[2].HasField("uuid")

    got = read(lookup, topic, end=MessageId(ledger, 2))
    assert got == expected
    assert got[0].value == big


def test_range_ending_inside_a_chunked_message_still_returns_it_whole(
    client: pulsar.Client, lookup: Lookup, topic: str
) -> None:
    big = bytes(range(256)) * (24 * 1024)  # 6 MiB
    published = publish(
        client,
        topic,
        [Sent(b"before", sequence_id=1), Sent(big, sequence_id=2), Sent(b"after", sequence_id=3)],
        producer_name="chunker-2",
        chunking_enabled=True,
        batching_enabled=False,
    )
    ledger = published.rows[0].ledger
    assert ids(published.rows) == [(ledger, 0, -1), (ledger, 2, -1), (ledger, 3, -1)]
    # the end is the first chunk: the message that starts there is finished and returned
    got = read(lookup, topic, end=MessageId(ledger, 1))
    assert got == published.rows[:2]
    # the next range starts after that first chunk: the message is not returned again
    rest = read(lookup, topic, start=MessageId(ledger, 1), start_inclusive=False)
    assert rest == published.rows[2:]
    # starting at the first chunk (inclusive) returns it
    again = read(lookup, topic, start=MessageId(ledger, 1))
    assert again == published.rows[1:]


# --- volume: no duplicate, no gap --------------------------------------------------------------


def test_twenty_thousand_messages_once_each(
    client: pulsar.Client, lookup: Lookup, topic: str
) -> None:
    count = 20_000
    producer = client.create_producer(
        topic,
        producer_name="bulk",
        batching_enabled=False,
        block_if_queue_full=True,
        max_pending_messages=5000,
    )
    failures: list[pulsar.Result] = []
    for i in range(count):
        producer.send_async(
            b"%05d" % i,
            lambda result, _mid: failures.append(result) if result != pulsar.Result.Ok else None,
        )
    producer.flush()
    producer.close()
    assert failures == []
    last = last_message_id(lookup, topic)
    assert last is not None and last.entry_id == count - 1
    ledger = last.ledger_id
    # Three readers, each nudging only after a second of silence: none needs to unless the
    # broker stops. Each acknowledges before it grants more permits, so pulsar-lite neither
    # stops dispatching (an ack while a large window is open) nor sends entries again
    # (permits while entries are unacknowledged): nothing arrives twice.
    for _ in range(3):
        reader = RangeReader(
            lookup,
            ReadRange(topic, MessageId.earliest(), last),
            ReaderSettings(poll_timeout=30.0, request_timeout=10.0, nudge_interval=1.0),
        )
        got = [r for columns in reader for r in columns_rows(columns)]
        assert (reader.nudges, reader.duplicates_dropped) == (0, 0)
        assert [(r.ledger, r.entry, r.batch_index) for r in got] == [
            (ledger, i, -1) for i in range(count)
        ]
        assert [r.value for r in got] == [b"%05d" % i for i in range(count)]
        assert [r.sequence_id for r in got] == list(range(count))
        assert {r.producer_name for r in got} == {"bulk"}
