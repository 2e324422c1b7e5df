"""The hand-written SingleMessageMetadata parser against the protobuf runtime: unknown
fields, repeated fields and random batches decode as protobuf reads them."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from support.decoding import (
    INFO,
    check_shape,
    outer,
    record,
    row,
    rows,
    smm,
    wire_field,
    wire_varint,
)

from pulsar_spark.protocol import decode, pb
from pulsar_spark.protocol.decode import decode_entry, message_key


def reference_rows(metadata: pb.MessageMetadata, payload: bytes) -> list[dict[str, Any]]:
    """What a batch holds, read with the protobuf runtime (the slow, obviously right way)."""
    out = []
    pos = 0
    for index in range(metadata.num_messages_in_batch):
        (size,) = struct.unpack_from(">I", payload, pos)
        meta = pb.SingleMessageMetadata()
        meta.ParseFromString(payload[pos + 4 : pos + 4 + size])
        pos += 4 + size
        value = payload[pos : pos + meta.payload_size]
        pos += meta.payload_size
        if meta.compacted_out:
            continue
        out.append(
            row(
                index,
                None if meta.null_value else value,
                key=message_key(
                    meta.partition_key,
                    meta.HasField("partition_key"),
                    meta.partition_key_b64_encoded,
                    meta.null_partition_key,
                ),
                props=tuple((kv.key, kv.value) for kv in meta.properties),
                event_time=meta.event_time,
                seq=meta.sequence_id
                if meta.HasField("sequence_id")
                else metadata.sequence_id + index,
            )
        )
    return out


@pytest.mark.parametrize(
    ("extra", "name"),
    [
        (wire_field(7, 2, wire_varint(3) + b"ord"), "ordering_key"),
        (wire_field(11, 0, wire_varint(123456)), "unknown varint"),
        (wire_field(12, 1, b"\x01" * 8), "unknown fixed64"),
        (wire_field(13, 5, b"\x02" * 4), "unknown fixed32"),
        (wire_field(14, 2, wire_varint(3) + b"abc"), "unknown bytes"),
        (wire_field(15, 0, wire_varint(1 << 40)), "unknown long varint"),
    ],
)
def test_unknown_and_unused_fields_are_skipped(extra: bytes, name: str) -> None:
    records = []
    for i in range(3):
        base = smm(payload_size=2, partition_key=f"k{i}", sequence_id=i, event_time=5 + i)
        raw = wire_field(3, 0, wire_varint(2)) + extra + base.SerializeToString()
        records.append(struct.pack(">I", len(raw)) + raw + b"v%d" % i)
    payload = b"".join(records)
    metadata = outer(num_messages_in_batch=3)
    columns = decode_entry(INFO, metadata, payload)
    assert rows(columns) == reference_rows(metadata, payload), name
    assert rows(columns) == [
        row(i, b"v%d" % i, key=f"k{i}".encode(), event_time=5 + i, seq=i) for i in range(3)
    ]


def test_unknown_fields_with_two_byte_tags_are_skipped() -> None:
    """Field numbers from 16 up have two-byte tags. Protobuf skips unknown ones; a newer
    producer adding such a field must not turn every batch into 'malformed'."""
    extra = wire_field(16, 0, wire_varint(5)) + wire_field(100, 2, wire_varint(2) + b"zz")
    values = [b"0", b"11"]  # different sizes: the general path decodes this batch
    records = []
    for i, value in enumerate(values):
        raw = smm(payload_size=len(value), sequence_id=i).SerializeToString() + extra
        records.append(struct.pack(">I", len(raw)) + raw + value)
    payload = b"".join(records)
    metadata = outer(num_messages_in_batch=2)
    assert decode._uniform([(INFO, metadata, payload)]) is None
    expected = [row(0, b"0", seq=0), row(1, b"11", seq=1)]
    assert reference_rows(metadata, payload) == expected
    assert rows(decode_entry(INFO, metadata, payload)) == expected


def test_repeated_scalar_fields_last_one_wins() -> None:
    raw = (
        smm(payload_size=9, partition_key="first", sequence_id=1, event_time=1).SerializeToString()
        + smm(payload_size=1, partition_key="last", sequence_id=2, event_time=2).SerializeToString()
    )
    payload = struct.pack(">I", len(raw)) + raw + b"x"
    metadata = outer(num_messages_in_batch=1)
    assert rows(decode_entry(INFO, metadata, payload)) == reference_rows(metadata, payload)
    assert rows(decode_entry(INFO, metadata, payload)) == [
        row(0, b"x", key=b"last", event_time=2, seq=2)
    ]


def test_random_batches_match_the_protobuf_runtime() -> None:
    rng = np.random.default_rng(20_240_601)
    keys = [None, "", "k", "ключ", "🔑", "AP8=", "QUJD"]
    for _ in range(400):
        count = int(rng.integers(1, 9))
        records = []
        for i in range(count):
            fields: dict[str, Any] = {}
            key = keys[int(rng.integers(len(keys)))]
            if key is not None:
                fields["partition_key"] = key
                if key in ("AP8=", "QUJD") and rng.random() < 0.5:
                    fields["partition_key_b64_encoded"] = True
            if rng.random() < 0.1:
                fields["null_partition_key"] = True
            if rng.random() < 0.4:
                fields["properties"] = {f"p{j}": f"v{i}{j}" for j in range(int(rng.integers(1, 3)))}
            if rng.random() < 0.5:
                fields["event_time"] = int(rng.integers(1, 1 << 45))
            if rng.random() < 0.7:
                fields["sequence_id"] = int(rng.integers(0, 1 << 40))
            if rng.random() < 0.1:
                fields["compacted_out"] = True
            if rng.random() < 0.05:
                fields["ordering_key"] = b"ok"
            null = rng.random() < 0.1
            size = 0 if null else int(rng.integers(0, 40))
            if null:
                fields["null_value"] = True
            value = bytes(rng.integers(0, 256, size, dtype=np.uint8))
            records.append(record(smm(payload_size=size, **fields), value))
        payload = b"".join(records)
        metadata = outer(num_messages_in_batch=count, sequence_id=int(rng.integers(0, 1 << 30)))
        columns = decode_entry(INFO, metadata, payload)
        check_shape(columns)
        assert rows(columns) == reference_rows(metadata, payload)
