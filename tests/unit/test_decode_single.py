"""decode_entry on single (non-batched) messages: every field, null values and keys, the
key rules and the entry's own information."""

from __future__ import annotations

import base64

import pytest
from support.decoding import (
    INFO,
    check_shape,
    joined_values,
    keys_of,
    null_values,
    outer,
    properties_of,
    row,
    rows,
    value_offsets,
)

from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.decode import decode_entry, entry_info, is_batch, message_key
from pulsar_spark.protocol.messages import EntryInfo


def test_single_message_every_field() -> None:
    metadata = outer(
        sequence_id=77,
        partition_key="user-42",
        properties=[pb.KeyValue(key="a", value="1"), pb.KeyValue(key="b", value="2")],
        event_time=1_690_000_000_000,
    )
    assert not is_batch(metadata)
    columns = decode_entry(INFO, metadata, b"hello world")
    check_shape(columns)
    assert columns.entry is INFO
    assert columns.count == 1
    assert columns.batch_index.tolist() == [-1]
    assert joined_values(columns) == b"hello world"
    assert value_offsets(columns) == [0, 11]
    assert null_values(columns) is None
    assert keys_of(columns) == [b"user-42"]
    assert properties_of(columns) == [(("a", "1"), ("b", "2"))]
    assert columns.event_time.tolist() == [1_690_000_000_000]
    assert columns.sequence_id.tolist() == [77]


def test_single_message_without_optional_fields() -> None:
    columns = decode_entry(INFO, outer(sequence_id=0), b"")
    check_shape(columns)
    assert rows(columns) == [row(-1, b"", seq=0)]
    assert null_values(columns) is None
    assert columns.key is None
    assert columns.properties is None
    assert value_offsets(columns) == [0, 0]


def test_single_null_value() -> None:
    columns = decode_entry(INFO, outer(null_value=True, partition_key="nk"), b"")
    check_shape(columns)
    assert joined_values(columns) == b""
    assert value_offsets(columns) == [0, 0]
    assert null_values(columns) == [True]
    assert rows(columns) == [row(-1, None, key=b"nk", seq=1000)]


def test_single_null_partition_key() -> None:
    columns = decode_entry(INFO, outer(null_partition_key=True), b"v")
    assert columns.key is None
    assert rows(columns) == [row(-1, b"v", seq=1000)]


def test_single_empty_string_key_is_not_null() -> None:
    columns = decode_entry(INFO, outer(partition_key=""), b"v")
    assert keys_of(columns) == [b""]


def test_single_unicode_key_is_utf8() -> None:
    columns = decode_entry(INFO, outer(partition_key="ключ-鍵-🔑"), b"v")
    assert keys_of(columns) == ["ключ-鍵-🔑".encode()]


def test_single_base64_key_is_decoded() -> None:
    raw_key = b"\x00\xff\x10binary\x80"
    metadata = outer(
        partition_key=base64.b64encode(raw_key).decode(), partition_key_b64_encoded=True
    )
    columns = decode_entry(INFO, metadata, b"v")
    assert keys_of(columns) == [raw_key]


def test_single_invalid_base64_key_is_corrupt() -> None:
    metadata = outer(partition_key="not base64!", partition_key_b64_encoded=True)
    with pytest.raises(
        CorruptPayloadError, match=r"^partition key 'not base64!' is not valid base64$"
    ):
        decode_entry(INFO, metadata, b"v")


def test_message_key_rules() -> None:
    assert message_key("k", True, False) == b"k"
    assert message_key("k", False, False) is None
    assert message_key("k", True, False, True) is None
    assert message_key("AAE=", True, True) == b"\x00\x01"
    assert message_key("", True, True) == b""


def test_entry_info() -> None:
    metadata = outer(publish_time=5555)
    assert entry_info(metadata, 1, 2, 3) == EntryInfo(1, 2, 3, "producer-x", 5555, None)
    metadata.replicated_from = "cluster-west"
    assert entry_info(metadata, 1, 2, -1) == EntryInfo(1, 2, -1, "producer-x", 5555, "cluster-west")
