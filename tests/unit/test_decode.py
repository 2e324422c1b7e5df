"""decode_entry (single messages, the uniform fast path and the general batch walk),
MessageColumns slicing, chunk reassembly, MessageId and TopicName."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import numpy as np
import pytest

from pulsar_spark.errors import ConfigurationError, CorruptPayloadError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import decode, pb
from pulsar_spark.protocol.chunks import Assembled, ChunkAssembler, is_chunk
from pulsar_spark.protocol.decode import decode_entry, entry_info, is_batch, message_key
from pulsar_spark.protocol.messages import EntryInfo, MessageColumns
from pulsar_spark.topic import TopicName, full_topic_name

INFO = EntryInfo(
    ledger_id=12,
    entry_id=34,
    partition=2,
    producer_name="producer-x",
    publish_time=1_700_000_009_999,
    replicated_from=None,
)


# --- helpers ----------------------------------------------------------------------------------


def outer(**fields: Any) -> pb.MessageMetadata:
    base: dict[str, Any] = {
        "producer_name": "producer-x",
        "sequence_id": 1000,
        "publish_time": 1_700_000_009_999,
    }
    base.update(fields)
    return pb.MessageMetadata(**base)


def smm(**fields: Any) -> pb.SingleMessageMetadata:
    props = fields.pop("properties", None)
    message = pb.SingleMessageMetadata(**fields)
    if props:
        message.properties.extend(pb.KeyValue(key=k, value=v) for k, v in props.items())
    return message


def record(meta: pb.SingleMessageMetadata, value: bytes) -> bytes:
    raw = meta.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + value


def batch(*records: tuple[pb.SingleMessageMetadata, bytes]) -> bytes:
    return b"".join(record(m, v) for m, v in records)


def rows(columns: MessageColumns) -> list[dict[str, Any]]:
    """Every message of a MessageColumns as a plain dict, column by column."""
    out = []
    for i in range(columns.count):
        null = columns.null_value is not None and bool(columns.null_value[i])
        start, stop = int(columns.value_offsets[i]), int(columns.value_offsets[i + 1])
        out.append(
            {
                "batch_index": int(columns.batch_index[i]),
                "value": None if null else columns.values[start:stop],
                "key": None if columns.key is None else columns.key[i],
                "properties": () if columns.properties is None else columns.properties[i],
                "event_time": int(columns.event_time[i]),
                "sequence_id": int(columns.sequence_id[i]),
            }
        )
    return out


def row(
    index: int,
    value: bytes | None,
    *,
    key: bytes | None = None,
    props: tuple[tuple[str, str], ...] = (),
    event_time: int = 0,
    seq: int,
) -> dict[str, Any]:
    return {
        "batch_index": index,
        "value": value,
        "key": key,
        "properties": props,
        "event_time": event_time,
        "sequence_id": seq,
    }


def check_shape(columns: MessageColumns) -> None:
    """Every column has ``count`` rows and the documented dtypes."""
    n = columns.count
    assert columns.batch_index.dtype == np.int32 and columns.batch_index.shape == (n,)
    assert columns.value_offsets.dtype == np.int32 and columns.value_offsets.shape == (n + 1,)
    assert columns.event_time.dtype == np.int64 and columns.event_time.shape == (n,)
    assert columns.sequence_id.dtype == np.int64 and columns.sequence_id.shape == (n,)
    assert int(columns.value_offsets[0]) == 0
    assert int(columns.value_offsets[-1]) == len(columns.values)
    assert isinstance(columns.values, bytes)
    if columns.null_value is not None:
        assert columns.null_value.dtype == np.bool_ and columns.null_value.shape == (n,)
    if columns.key is not None:
        assert len(columns.key) == n
    if columns.properties is not None:
        assert len(columns.properties) == n


def assert_same_columns(a: MessageColumns, b: MessageColumns) -> None:
    """Field-by-field identity, including which columns are None."""
    assert a.entry == b.entry
    assert a.count == b.count
    assert a.values == b.values
    for name in ("batch_index", "value_offsets", "event_time", "sequence_id"):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype, name
        assert left.tolist() == right.tolist(), name
    assert (a.null_value is None) == (b.null_value is None)
    if a.null_value is not None and b.null_value is not None:
        assert a.null_value.tolist() == b.null_value.tolist()
    assert a.key == b.key
    assert a.properties == b.properties


def both_paths(metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode via decode_entry, check the fast path was taken and equals the general walk."""
    count = metadata.num_messages_in_batch
    fast = decode._uniform_batch(INFO, metadata, payload, count)
    assert fast is not None, "expected the uniform fast path to apply"
    general = decode._walk_batch(INFO, metadata, payload, count)
    assert_same_columns(fast, general)
    result = decode_entry(INFO, metadata, payload)
    assert_same_columns(result, general)
    check_shape(result)
    return result


def general_only(metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """Decode a batch that must not take the fast path."""
    count = metadata.num_messages_in_batch
    assert decode._uniform_batch(INFO, metadata, payload, count) is None
    result = decode_entry(INFO, metadata, payload)
    check_shape(result)
    return result


# --- single (non-batched) messages ------------------------------------------------------------


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
    assert columns.values == b"hello world"
    assert columns.value_offsets.tolist() == [0, 11]
    assert columns.null_value is None
    assert columns.key == [b"user-42"]
    assert columns.properties == [(("a", "1"), ("b", "2"))]
    assert columns.event_time.tolist() == [1_690_000_000_000]
    assert columns.sequence_id.tolist() == [77]


def test_single_message_without_optional_fields() -> None:
    columns = decode_entry(INFO, outer(sequence_id=0), b"")
    check_shape(columns)
    assert rows(columns) == [row(-1, b"", seq=0)]
    assert columns.null_value is None
    assert columns.key is None
    assert columns.properties is None
    assert columns.value_offsets.tolist() == [0, 0]


def test_single_null_value() -> None:
    columns = decode_entry(INFO, outer(null_value=True, partition_key="nk"), b"")
    check_shape(columns)
    assert columns.values == b""
    assert columns.value_offsets.tolist() == [0, 0]
    assert columns.null_value is not None and columns.null_value.tolist() == [True]
    assert rows(columns) == [row(-1, None, key=b"nk", seq=1000)]


def test_single_null_partition_key() -> None:
    columns = decode_entry(INFO, outer(null_partition_key=True), b"v")
    assert columns.key is None
    assert rows(columns) == [row(-1, b"v", seq=1000)]


def test_single_empty_string_key_is_not_null() -> None:
    columns = decode_entry(INFO, outer(partition_key=""), b"v")
    assert columns.key == [b""]


def test_single_unicode_key_is_utf8() -> None:
    columns = decode_entry(INFO, outer(partition_key="ключ-鍵-🔑"), b"v")
    assert columns.key == ["ключ-鍵-🔑".encode()]


def test_single_base64_key_is_decoded() -> None:
    raw_key = b"\x00\xff\x10binary\x80"
    metadata = outer(
        partition_key=base64.b64encode(raw_key).decode(), partition_key_b64_encoded=True
    )
    columns = decode_entry(INFO, metadata, b"v")
    assert columns.key == [raw_key]


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


# --- uniform batches: the fast path ------------------------------------------------------------


def test_uniform_batch_with_sequence_ids() -> None:
    values = [f"value-{i:03d}".encode() for i in range(8)]
    payload = batch(*((smm(payload_size=9, sequence_id=500 + i), v) for i, v in enumerate(values)))
    metadata = outer(num_messages_in_batch=8, sequence_id=500)
    columns = both_paths(metadata, payload)
    assert columns.entry is INFO
    assert columns.count == 8
    assert rows(columns) == [row(i, values[i], seq=500 + i) for i in range(8)]
    assert columns.values == b"".join(values)
    assert columns.value_offsets.tolist() == [9 * i for i in range(9)]
    assert columns.null_value is None
    assert columns.key is None
    assert columns.properties is None


def test_uniform_batch_with_multi_byte_sequence_ids() -> None:
    # 16384..16393 are all 3-byte varints, so records stay the same length
    seqs = list(range(16_384, 16_394))
    payload = batch(*((smm(payload_size=2, sequence_id=s), b"%02d" % (s % 100)) for s in seqs))
    columns = both_paths(outer(num_messages_in_batch=10, sequence_id=16_384), payload)
    assert columns.sequence_id.tolist() == seqs
    assert [r["value"] for r in rows(columns)] == [b"%02d" % (s % 100) for s in seqs]


def test_uniform_batch_with_huge_sequence_ids() -> None:
    seqs = [(1 << 62) + i for i in range(4)]
    payload = batch(*((smm(payload_size=1, sequence_id=s), b"x") for s in seqs))
    columns = both_paths(outer(num_messages_in_batch=4), payload)
    assert columns.sequence_id.tolist() == seqs


def test_uniform_batch_without_sequence_ids_counts_from_the_batch_id() -> None:
    payload = batch(*((smm(payload_size=3), b"v%02d" % i) for i in range(6)))
    columns = both_paths(outer(num_messages_in_batch=6, sequence_id=41), payload)
    assert rows(columns) == [row(i, b"v%02d" % i, seq=41 + i) for i in range(6)]


def test_uniform_batch_with_shared_key_properties_and_event_time() -> None:
    shared = {"partition_key": "same", "properties": {"p": "q", "r": "s"}, "event_time": 123456}
    payload = batch(
        *((smm(payload_size=4, sequence_id=i, **dict(shared)), b"v-%02d" % i) for i in range(5))
    )
    columns = both_paths(outer(num_messages_in_batch=5), payload)
    props = (("p", "q"), ("r", "s"))
    assert rows(columns) == [
        row(i, b"v-%02d" % i, key=b"same", props=props, event_time=123456, seq=i) for i in range(5)
    ]
    assert columns.key == [b"same"] * 5
    assert columns.properties == [props] * 5


def test_uniform_batch_with_shared_base64_key() -> None:
    key = base64.b64encode(b"\x01\x02\x03").decode()
    payload = batch(
        *(
            (smm(payload_size=1, partition_key=key, partition_key_b64_encoded=True), b"%d" % i)
            for i in range(3)
        )
    )
    columns = both_paths(outer(num_messages_in_batch=3, sequence_id=0), payload)
    assert columns.key == [b"\x01\x02\x03"] * 3


def test_uniform_batch_of_null_values() -> None:
    payload = batch(*((smm(payload_size=0, null_value=True, sequence_id=i), b"") for i in range(4)))
    columns = both_paths(outer(num_messages_in_batch=4), payload)
    assert columns.values == b""
    assert columns.value_offsets.tolist() == [0, 0, 0, 0, 0]
    assert columns.null_value is not None and columns.null_value.tolist() == [True] * 4
    assert rows(columns) == [row(i, None, seq=i) for i in range(4)]


def test_uniform_batch_of_empty_values() -> None:
    payload = batch(*((smm(payload_size=0, sequence_id=i), b"") for i in range(3)))
    columns = both_paths(outer(num_messages_in_batch=3), payload)
    assert columns.null_value is None
    assert rows(columns) == [row(i, b"", seq=i) for i in range(3)]


def test_uniform_batch_with_null_partition_key() -> None:
    payload = batch(*((smm(payload_size=1, null_partition_key=True), b"a") for _ in range(3)))
    columns = both_paths(outer(num_messages_in_batch=3, sequence_id=7), payload)
    assert columns.key is None
    assert rows(columns) == [row(i, b"a", seq=7 + i) for i in range(3)]


def test_large_uniform_batch() -> None:
    rng = np.random.default_rng(7)
    values = [bytes(rng.integers(0, 256, 100, dtype=np.uint8)) for _ in range(1000)]
    # sequence ids 2_000_000.. are all 4-byte varints
    payload = batch(
        *((smm(payload_size=100, sequence_id=2_000_000 + i), v) for i, v in enumerate(values))
    )
    columns = both_paths(outer(num_messages_in_batch=1000), payload)
    assert columns.values == b"".join(values)
    assert columns.sequence_id.tolist() == list(range(2_000_000, 2_001_000))
    assert columns.batch_index.tolist() == list(range(1000))


# --- batches the fast path must refuse --------------------------------------------------------


def test_sequence_ids_crossing_a_varint_width() -> None:
    seqs = list(range(120, 136))  # 127 -> 128 goes from 1 to 2 varint bytes
    payload = batch(*((smm(payload_size=1, sequence_id=s), b"z") for s in seqs))
    columns = general_only(outer(num_messages_in_batch=len(seqs)), payload)
    assert rows(columns) == [row(i, b"z", seq=s) for i, s in enumerate(seqs)]


def test_sequence_width_change_compensated_by_payload_size() -> None:
    # equal record lengths, but the SMMs differ in size: the fast path must notice
    payload = batch(
        (smm(payload_size=3, sequence_id=127), b"abc"),
        (smm(payload_size=2, sequence_id=128), b"de"),
    )
    assert len(payload) % 2 == 0
    columns = general_only(outer(num_messages_in_batch=2), payload)
    assert rows(columns) == [row(0, b"abc", seq=127), row(1, b"de", seq=128)]


def test_varying_payload_sizes() -> None:
    values = [b"", b"a", b"bb", b"ccc" * 100, b"\x00" * 7]
    payload = batch(*((smm(payload_size=len(v), sequence_id=i), v) for i, v in enumerate(values)))
    columns = general_only(outer(num_messages_in_batch=5), payload)
    assert rows(columns) == [row(i, v, seq=i) for i, v in enumerate(values)]
    assert columns.value_offsets.tolist() == [0, 0, 1, 3, 303, 310]
    assert columns.values == b"".join(values)


def test_varying_keys_of_equal_length() -> None:
    payload = batch(
        *((smm(payload_size=1, partition_key=f"k{i}", sequence_id=i), b"v") for i in range(4))
    )
    columns = general_only(outer(num_messages_in_batch=4), payload)
    assert columns.key == [b"k0", b"k1", b"k2", b"k3"]
    assert rows(columns) == [row(i, b"v", key=f"k{i}".encode(), seq=i) for i in range(4)]


def test_mixed_keys_some_missing_some_base64() -> None:
    payload = batch(
        (smm(payload_size=1, partition_key="plain", sequence_id=0), b"0"),
        (smm(payload_size=1, sequence_id=1), b"1"),
        (smm(payload_size=1, partition_key="AP8=", partition_key_b64_encoded=True), b"2"),
        (smm(payload_size=1, null_partition_key=True, sequence_id=3), b"3"),
        (smm(payload_size=1, partition_key="", sequence_id=4), b"4"),
    )
    columns = general_only(outer(num_messages_in_batch=5, sequence_id=900), payload)
    assert columns.key == [b"plain", None, b"\x00\xff", None, b""]
    assert columns.sequence_id.tolist() == [0, 1, 902, 3, 4]


def test_per_message_properties_and_event_times() -> None:
    payload = batch(
        (smm(payload_size=2, properties={"i": "0", "x": "y"}, event_time=10, sequence_id=0), b"m0"),
        (smm(payload_size=2, sequence_id=1), b"m1"),
        (smm(payload_size=2, properties={"i": "2"}, event_time=30, sequence_id=2), b"m2"),
    )
    columns = general_only(outer(num_messages_in_batch=3), payload)
    assert columns.properties == [(("i", "0"), ("x", "y")), (), (("i", "2"),)]
    assert columns.event_time.tolist() == [10, 0, 30]
    assert rows(columns) == [
        row(0, b"m0", props=(("i", "0"), ("x", "y")), event_time=10, seq=0),
        row(1, b"m1", seq=1),
        row(2, b"m2", props=(("i", "2"),), event_time=30, seq=2),
    ]


def test_event_time_differs_in_one_message_only() -> None:
    # same varint width for every event time: only one header byte differs, outside the
    # sequence id, so the fast path must refuse and keep each message's own event time
    payload = batch(
        *((smm(payload_size=1, event_time=100 + (i == 3), sequence_id=i), b"e") for i in range(6))
    )
    columns = general_only(outer(num_messages_in_batch=6), payload)
    assert columns.event_time.tolist() == [100, 100, 100, 101, 100, 100]


def test_properties_without_any_per_message_values_are_none() -> None:
    payload = batch(
        (smm(payload_size=1, sequence_id=0), b"a"), (smm(payload_size=2, sequence_id=1), b"bc")
    )
    columns = general_only(outer(num_messages_in_batch=2), payload)
    assert columns.properties is None
    assert columns.key is None
    assert columns.null_value is None


def test_compacted_out_messages_are_dropped() -> None:
    payload = batch(
        (smm(payload_size=2, sequence_id=0, partition_key="a"), b"m0"),
        (smm(payload_size=2, sequence_id=1, partition_key="b", compacted_out=True), b"m1"),
        (smm(payload_size=3, sequence_id=2, partition_key="c"), b"m22"),
        (smm(payload_size=2, sequence_id=3, partition_key="d", compacted_out=True), b"m3"),
    )
    columns = general_only(outer(num_messages_in_batch=4), payload)
    assert columns.count == 2
    assert columns.batch_index.tolist() == [0, 2]
    assert columns.values == b"m0m22"
    assert columns.value_offsets.tolist() == [0, 2, 5]
    assert rows(columns) == [
        row(0, b"m0", key=b"a", seq=0),
        row(2, b"m22", key=b"c", seq=2),
    ]


def test_compacted_out_first_message_of_an_otherwise_uniform_batch() -> None:
    payload = batch(
        (smm(payload_size=1, compacted_out=True), b"x"),
        *((smm(payload_size=1), b"y") for _ in range(3)),
    )
    columns = decode_entry(INFO, outer(num_messages_in_batch=4, sequence_id=10), payload)
    check_shape(columns)
    assert rows(columns) == [row(i, b"y", seq=10 + i) for i in (1, 2, 3)]


def test_every_message_compacted_out() -> None:
    payload = batch(
        *((smm(payload_size=1, compacted_out=True, sequence_id=i), b"c") for i in range(3))
    )
    columns = decode_entry(INFO, outer(num_messages_in_batch=3), payload)
    check_shape(columns)
    assert columns.count == 0
    assert columns.values == b""
    assert rows(columns) == []


def test_null_values_inside_a_batch() -> None:
    payload = batch(
        (smm(payload_size=2, sequence_id=0), b"v0"),
        (smm(payload_size=0, null_value=True, sequence_id=1), b""),
        (smm(payload_size=0, sequence_id=2), b""),
        (smm(payload_size=2, sequence_id=3), b"v3"),
    )
    columns = general_only(outer(num_messages_in_batch=4), payload)
    assert columns.null_value is not None
    assert columns.null_value.tolist() == [False, True, False, False]
    assert columns.values == b"v0v3"
    assert columns.value_offsets.tolist() == [0, 2, 2, 2, 4]
    assert rows(columns) == [
        row(0, b"v0", seq=0),
        row(1, None, seq=1),
        row(2, b"", seq=2),
        row(3, b"v3", seq=3),
    ]


def test_batch_of_one() -> None:
    metadata = outer(num_messages_in_batch=1, sequence_id=5)
    assert is_batch(metadata)
    payload = record(
        smm(payload_size=3, partition_key="k", properties={"a": "b"}, event_time=9, sequence_id=5),
        b"one",
    )
    columns = decode_entry(INFO, metadata, payload)
    check_shape(columns)
    assert columns.batch_index.tolist() == [0]
    assert rows(columns) == [row(0, b"one", key=b"k", props=(("a", "b"),), event_time=9, seq=5)]


def test_missing_sequence_id_falls_back_to_batch_sequence_plus_index() -> None:
    payload = batch(
        (smm(payload_size=1), b"a"),
        (smm(payload_size=1, sequence_id=77), b"b"),
        (smm(payload_size=2), b"cc"),
    )
    columns = general_only(outer(num_messages_in_batch=3, sequence_id=300), payload)
    assert columns.sequence_id.tolist() == [300, 77, 302]


def test_sequence_id_zero_is_not_missing() -> None:
    payload = batch((smm(payload_size=1, sequence_id=0), b"a"), (smm(payload_size=2), b"bb"))
    columns = general_only(outer(num_messages_in_batch=2, sequence_id=50), payload)
    assert columns.sequence_id.tolist() == [0, 51]


def test_trailing_bytes_after_the_announced_messages_are_ignored() -> None:
    payload = batch(
        (smm(payload_size=1, sequence_id=0), b"a"), (smm(payload_size=2, sequence_id=1), b"bc")
    )
    columns = decode_entry(INFO, outer(num_messages_in_batch=1), payload)
    assert rows(columns) == [row(0, b"a", seq=0)]


# --- corrupt batches --------------------------------------------------------------------------


def test_payload_size_running_past_the_end() -> None:
    payload = batch(
        (smm(payload_size=2, sequence_id=0), b"ok"), (smm(payload_size=50, sequence_id=1), b"short")
    )
    with pytest.raises(
        CorruptPayloadError,
        match=r"^batch of 2 messages is malformed: a message runs past the end of its batch$",
    ):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload)


def test_metadata_size_running_past_the_end() -> None:
    good = record(smm(payload_size=2, sequence_id=0), b"ok")
    bad = struct.pack(">I", 1000) + smm(payload_size=1).SerializeToString() + b"x"
    with pytest.raises(CorruptPayloadError):
        decode_entry(INFO, outer(num_messages_in_batch=2), good + bad)


def test_fewer_messages_than_announced() -> None:
    payload = batch(
        (smm(payload_size=2, sequence_id=0), b"ok"), (smm(payload_size=2, sequence_id=1), b"ok")
    )
    message = r"^batch of 3 messages is malformed: a message runs past the end of its batch$"
    with pytest.raises(CorruptPayloadError, match=message):
        decode_entry(INFO, outer(num_messages_in_batch=3), payload)
    with pytest.raises(CorruptPayloadError, match=message):
        decode_entry(INFO, outer(num_messages_in_batch=3), payload + b"\x00\x00")


def test_fewer_uniform_messages_than_announced() -> None:
    # four equal records announced as eight: the fast path must not split records in half
    payload = batch(*((smm(payload_size=20, sequence_id=i), bytes(20)) for i in range(4)))
    with pytest.raises(CorruptPayloadError):
        decode_entry(INFO, outer(num_messages_in_batch=8), payload)


def test_unparseable_single_message_metadata() -> None:
    payload = struct.pack(">I", 3) + b"\xff\xff\xff" + b"rest"
    with pytest.raises(
        CorruptPayloadError,
        match=r"^batch of 1 messages is malformed: wire type 7 in a SingleMessageMetadata$",
    ):
        decode_entry(INFO, outer(num_messages_in_batch=1), payload)


def test_empty_batch_payload() -> None:
    with pytest.raises(
        CorruptPayloadError,
        match=r"^batch of 2 messages is malformed: a message runs past the end of its batch$",
    ):
        decode_entry(INFO, outer(num_messages_in_batch=2), b"")


@pytest.mark.parametrize("count", [0, -1])
def test_batch_announcing_no_messages(count: int) -> None:
    with pytest.raises(CorruptPayloadError, match=rf"^batch announces {count} messages$"):
        decode_entry(INFO, outer(num_messages_in_batch=count), b"")


def test_metadata_truncated_inside_a_varint() -> None:
    raw = smm(payload_size=1, sequence_id=300).SerializeToString()[:-1]  # cut the 2-byte varint
    payload = struct.pack(">I", len(raw)) + raw
    with pytest.raises(CorruptPayloadError, match=r"^batch of 2 messages is malformed: "):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload)


def test_property_that_does_not_parse() -> None:
    raw = smm(payload_size=1).SerializeToString() + b"\x0a\x03\xff\xff\xff"
    payload = struct.pack(">I", len(raw)) + raw + b"x"
    other = record(smm(payload_size=2), b"yy")
    with pytest.raises(CorruptPayloadError, match=r"^a message property does not parse$"):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload + other)
    # a uniform batch goes through the protobuf runtime, which refuses it as a whole
    with pytest.raises(
        CorruptPayloadError, match=r"^a SingleMessageMetadata in a batch does not parse$"
    ):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload + payload)


def test_varint_longer_than_64_bits_is_corrupt() -> None:
    """A ten-byte varint whose last byte carries more than one bit does not fit in 64 bits:
    corrupt input, which must surface as CorruptPayloadError like any other malformed batch
    (not as a bare OverflowError from numpy)."""
    raw = bytes([0x18, 0x01, 0x40]) + b"\xff" * 9 + b"\x7f"  # payload_size=1, sequence_id=?
    payload = struct.pack(">I", len(raw)) + raw + b"x"
    other = record(smm(payload_size=2, sequence_id=1), b"yy")
    with pytest.raises(CorruptPayloadError):
        decode_entry(INFO, outer(num_messages_in_batch=2), payload + other)


# --- the hand-written SingleMessageMetadata parser against the protobuf runtime -------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, wire_type: int, body: bytes) -> bytes:
    return _varint(number << 3 | wire_type) + body


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
        (_field(7, 2, _varint(3) + b"ord"), "ordering_key"),
        (_field(11, 0, _varint(123456)), "unknown varint"),
        (_field(12, 1, b"\x01" * 8), "unknown fixed64"),
        (_field(13, 5, b"\x02" * 4), "unknown fixed32"),
        (_field(14, 2, _varint(3) + b"abc"), "unknown bytes"),
        (_field(15, 0, _varint(1 << 40)), "unknown long varint"),
    ],
)
def test_unknown_and_unused_fields_are_skipped(extra: bytes, name: str) -> None:
    records = []
    for i in range(3):
        base = smm(payload_size=2, partition_key=f"k{i}", sequence_id=i, event_time=5 + i)
        raw = _field(3, 0, _varint(2)) + extra + base.SerializeToString()
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
    extra = _field(16, 0, _varint(5)) + _field(100, 2, _varint(2) + b"zz")
    values = [b"0", b"11"]  # different sizes: the general path decodes this batch
    records = []
    for i, value in enumerate(values):
        raw = smm(payload_size=len(value), sequence_id=i).SerializeToString() + extra
        records.append(struct.pack(">I", len(raw)) + raw + value)
    payload = b"".join(records)
    metadata = outer(num_messages_in_batch=2)
    assert decode._uniform_batch(INFO, metadata, payload, 2) is None
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


# --- MessageColumns.slice / take ------------------------------------------------------------


def mixed_columns() -> MessageColumns:
    payload = batch(
        (
            smm(
                payload_size=2,
                partition_key="k0",
                properties={"i": "0"},
                event_time=10,
                sequence_id=100,
            ),
            b"v0",
        ),
        (smm(payload_size=0, null_value=True, sequence_id=101), b""),
        (smm(payload_size=3, partition_key="k2", event_time=12, sequence_id=102), b"v22"),
        (smm(payload_size=1, properties={"i": "3"}, sequence_id=103), b"3"),
        (smm(payload_size=4, partition_key="k4", event_time=14, sequence_id=104), b"v444"),
    )
    return decode_entry(INFO, outer(num_messages_in_batch=5), payload)


MIXED_ROWS = [
    row(0, b"v0", key=b"k0", props=(("i", "0"),), event_time=10, seq=100),
    row(1, None, seq=101),
    row(2, b"v22", key=b"k2", event_time=12, seq=102),
    row(3, b"3", props=(("i", "3"),), seq=103),
    row(4, b"v444", key=b"k4", event_time=14, seq=104),
]


def test_mixed_columns_decode() -> None:
    columns = mixed_columns()
    check_shape(columns)
    assert rows(columns) == MIXED_ROWS
    assert columns.values == b"v0v223v444"
    assert columns.value_offsets.tolist() == [0, 2, 2, 5, 6, 10]


@pytest.mark.parametrize(
    ("start", "stop"), [(0, 5), (1, 4), (0, 1), (4, 5), (2, 3), (3, 3), (0, 0)]
)
def test_slice(start: int, stop: int) -> None:
    columns = mixed_columns()
    part = columns.slice(start, stop)
    check_shape(part)
    assert part.count == stop - start
    assert part.entry is INFO
    assert rows(part) == MIXED_ROWS[start:stop]
    expected_values = b"".join(r["value"] or b"" for r in MIXED_ROWS[start:stop])
    assert part.values == expected_values
    if (start, stop) == (0, 5):
        assert part is columns


def test_slice_keeps_none_columns_none() -> None:
    payload = batch(
        (smm(payload_size=1, sequence_id=0), b"a"),
        (smm(payload_size=2, sequence_id=1), b"bc"),
        (smm(payload_size=1, sequence_id=2), b"d"),
    )
    columns = decode_entry(INFO, outer(num_messages_in_batch=3), payload)
    part = columns.slice(1, 3)
    assert part.key is None and part.properties is None and part.null_value is None
    assert rows(part) == [row(1, b"bc", seq=1), row(2, b"d", seq=2)]
    assert part.value_offsets.tolist() == [0, 2, 3]


@pytest.mark.parametrize("order", [[4, 0, 2], [1], [3, 3], [], [0, 1, 2, 3, 4], [4, 3, 2, 1, 0]])
def test_take(order: list[int]) -> None:
    columns = mixed_columns()
    part = columns.take(np.array(order, dtype=np.intp))
    check_shape(part)
    assert part.count == len(order)
    assert part.entry is INFO
    assert rows(part) == [MIXED_ROWS[i] for i in order]
    assert part.values == b"".join(MIXED_ROWS[i]["value"] or b"" for i in order)


def test_slice_of_a_single_message() -> None:
    columns = decode_entry(INFO, outer(partition_key="k"), b"abc")
    assert columns.slice(0, 1) is columns
    empty = columns.slice(1, 1)
    check_shape(empty)
    assert empty.count == 0 and empty.values == b"" and empty.key == []


# --- ChunkAssembler ---------------------------------------------------------------------------


def chunk(uuid: str, chunk_id: int, total: int, seq: int = 0) -> pb.MessageMetadata:
    return outer(
        sequence_id=seq,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=total,
        total_chunk_msg_size=300,
    )


def test_is_chunk() -> None:
    assert is_chunk(chunk("u", 0, 3))
    assert not is_chunk(outer(uuid="u", chunk_id=0, num_chunks_from_msg=1))
    assert not is_chunk(outer(num_chunks_from_msg=3, chunk_id=1))
    assert not is_chunk(outer())


def test_chunks_in_order() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 3), b"a" * 100) is None
    assert assembler.pending == 1
    assert assembler.add(chunk("u1", 1, 3), b"b" * 100) is None
    last = chunk("u1", 2, 3)
    done = assembler.add(last, b"c" * 100)
    assert done == Assembled(last, b"a" * 100 + b"b" * 100 + b"c" * 100)
    assert done is not None and done.metadata is last
    assert assembler.pending == 0
    assert assembler.discarded == 0


def test_interleaved_uuids() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 3), b"1a") is None
    assert assembler.add(chunk("u2", 0, 2), b"2a") is None
    assert assembler.add(chunk("u1", 1, 3), b"1b") is None
    assert assembler.pending == 2
    done2 = assembler.add(chunk("u2", 1, 2, seq=2), b"2b")
    assert done2 is not None
    assert done2.payload == b"2a2b"
    assert done2.metadata.uuid == "u2" and done2.metadata.sequence_id == 2
    assert assembler.pending == 1
    done1 = assembler.add(chunk("u1", 2, 3, seq=1), b"1c")
    assert done1 is not None
    assert done1.payload == b"1a1b1c"
    assert done1.metadata.uuid == "u1" and done1.metadata.sequence_id == 1
    assert assembler.pending == 0
    assert assembler.discarded == 0


def test_missing_first_chunk_is_discarded() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 1, 3), b"b") is None
    assert assembler.add(chunk("u1", 2, 3), b"c") is None
    assert assembler.pending == 0
    assert assembler.discarded == 2
    # a later complete message is unaffected
    assert assembler.add(chunk("u2", 0, 2), b"x") is None
    done = assembler.add(chunk("u2", 1, 2), b"y")
    assert done is not None and done.payload == b"xy"
    assert assembler.discarded == 2


def test_gap_discards_the_partial_message() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 4), b"a") is None
    assert assembler.add(chunk("u1", 2, 4), b"c") is None  # chunk 1 is missing
    assert assembler.pending == 0
    assert assembler.discarded == 1
    assert assembler.add(chunk("u1", 3, 4), b"d") is None  # the rest has no start
    assert assembler.pending == 0
    assert assembler.discarded == 2


def test_restart_from_chunk_zero_replaces_the_partial_message() -> None:
    assembler = ChunkAssembler()
    assert assembler.add(chunk("u1", 0, 2), b"old") is None
    assert assembler.add(chunk("u1", 0, 2), b"new") is None
    assert assembler.pending == 1
    assert assembler.discarded == 1
    done = assembler.add(chunk("u1", 1, 2), b"-end")
    assert done is not None and done.payload == b"new-end"
    assert assembler.pending == 0


def test_pending_bytes_limit_discards() -> None:
    assembler = ChunkAssembler(max_pending_bytes=10)
    assert assembler.add(chunk("u1", 0, 3), b"12345") is None
    assert assembler.add(chunk("u2", 0, 3), b"123") is None
    assert assembler.pending == 2
    assert assembler.add(chunk("u1", 1, 3), b"678") is None  # 11 bytes pending
    assert assembler.pending == 1
    assert assembler.discarded == 1
    assert assembler.add(chunk("u2", 1, 2), b"45") is not None


# --- MessageId ----------------------------------------------------------------------------------


def test_message_id_ordering() -> None:
    ids = [
        MessageId(2, 0),
        MessageId(1, 5, 3),
        MessageId.latest(),
        MessageId(1, 5),
        MessageId(1, 5, 0),
        MessageId.earliest(),
        MessageId(0, 100),
        MessageId(1, 4, 99),
    ]
    assert sorted(ids) == [
        MessageId.earliest(),
        MessageId(0, 100),
        MessageId(1, 4, 99),
        MessageId(1, 5),
        MessageId(1, 5, 0),
        MessageId(1, 5, 3),
        MessageId(2, 0),
        MessageId.latest(),
    ]


def test_message_id_partition_is_not_compared() -> None:
    assert MessageId(1, 2, 3, partition=0) == MessageId(1, 2, 3, partition=5)
    assert not MessageId(1, 2, 3, partition=0) < MessageId(1, 2, 3, partition=5)
    assert hash(MessageId(1, 2, partition=0)) == hash(MessageId(1, 2, partition=1))
    moved = MessageId(1, 2, 3).with_partition(4)
    assert (moved.ledger_id, moved.entry_id, moved.batch_index, moved.partition) == (1, 2, 3, 4)
    assert MessageId(7, 8, 9).entry == (7, 8)
    assert str(MessageId(7, 8, 9)) == "7:8:9"
    assert str(MessageId(7, 8)) == "7:8:-1"


def test_message_id_json_round_trip() -> None:
    for mid in (
        MessageId(3, 4),
        MessageId(3, 4, 5, partition=2),
        MessageId.earliest(),
        MessageId.latest(),
    ):
        data = mid.to_json()
        assert data == {
            "ledgerId": mid.ledger_id,
            "entryId": mid.entry_id,
            "batchIndex": mid.batch_index,
        }
        back = MessageId.from_json(json.loads(json.dumps(data)))
        assert back == mid
        assert back.partition == -1
    assert MessageId.from_json({"ledgerId": 1, "entryId": 2}) == MessageId(1, 2, -1)
    assert MessageId.from_json({"ledgerId": 1, "entryId": 2}).batch_index == -1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2], r"^expected an object with ledgerId/entryId, got \[1, 2\]$"),
        ({"ledgerId": 1}, r"^missing 'entryId' in message id \{'ledgerId': 1\}$"),
        ({"entryId": 1}, r"^missing 'ledgerId' in message id \{'entryId': 1\}$"),
        ({"ledgerId": "1", "entryId": 2}, r"^ledgerId must be an integer, got '1'$"),
        ({"ledgerId": 1, "entryId": 2.0}, r"^entryId must be an integer, got 2.0$"),
        (
            {"ledgerId": 1, "entryId": 2, "batchIndex": True},
            r"^batchIndex must be an integer, got True$",
        ),
    ],
)
def test_message_id_json_invalid(value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        MessageId.from_json(value)


def test_message_id_wire_sentinels() -> None:
    earliest = MessageId.earliest()
    assert (earliest.ledger_id, earliest.entry_id, earliest.batch_index) == (-1, -1, -1)
    assert earliest.is_earliest and not earliest.is_latest
    assert earliest.wire_ids() == ((1 << 64) - 1, (1 << 64) - 1)
    latest = MessageId.latest()
    assert (latest.ledger_id, latest.entry_id) == ((1 << 63) - 1, (1 << 63) - 1)
    assert latest.is_latest and not latest.is_earliest
    assert latest.wire_ids() == ((1 << 63) - 1, (1 << 63) - 1)
    back = MessageId.from_wire((1 << 64) - 1, (1 << 64) - 1, -1, -1)
    assert back.is_earliest
    assert back == earliest
    assert MessageId.from_wire(5, 6, 7, 8) == MessageId(5, 6, 7)
    assert MessageId.from_wire(5, 6, 7, 8).partition == 8
    assert MessageId.from_wire(5, (1 << 64) - 1, -1, 0).entry_id == -1
    assert MessageId(5, 6).wire_ids() == (5, 6)
    assert not MessageId(5, 6).is_earliest and not MessageId(5, 6).is_latest


# --- TopicName ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "domain", "tenant", "namespace", "local"),
    [
        ("events", "persistent", "public", "default", "events"),
        ("  events  ", "persistent", "public", "default", "events"),
        ("acme/prod/events", "persistent", "acme", "prod", "events"),
        ("persistent://acme/prod/events", "persistent", "acme", "prod", "events"),
        ("non-persistent://acme/prod/events", "non-persistent", "acme", "prod", "events"),
        ("part3-partition-2", "persistent", "public", "default", "part3-partition-2"),
    ],
)
def test_topic_name_parse(name: str, domain: str, tenant: str, namespace: str, local: str) -> None:
    topic = TopicName.parse(name)
    assert topic == TopicName(domain, tenant, namespace, local)
    assert topic.full_name == f"{domain}://{tenant}/{namespace}/{local}"
    assert str(topic) == topic.full_name
    assert topic.namespace_name == f"{tenant}/{namespace}"
    assert full_topic_name(name) == topic.full_name


def test_topic_partitions() -> None:
    base = TopicName.parse("acme/prod/events")
    assert base.partition_index == -1
    assert base.base_name == "persistent://acme/prod/events"
    assert base.partition(3) == "persistent://acme/prod/events-partition-3"
    part = TopicName.parse(base.partition(3))
    assert part.local_name == "events-partition-3"
    assert part.partition_index == 3
    assert part.base_name == "persistent://acme/prod/events"
    ten = TopicName.parse("x-partition-10")
    assert ten.partition_index == 10
    assert ten.base_name == "persistent://public/default/x"
    odd = TopicName.parse("x-partition-")
    assert odd.partition_index == -1
    assert odd.base_name == "persistent://public/default/x-partition-"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", r"^topic name is empty$"),
        ("   ", r"^topic name is empty$"),
        (
            "http://a/b/c",
            r"^topic 'http://a/b/c': domain must be one of persistent, non-persistent$",
        ),
        (
            "a/b",
            r"^topic 'a/b' is not a valid name: use 'name', 'tenant/namespace/name' or 'persistent://tenant/namespace/name'$",
        ),
        ("a//c", r"is not a valid name"),
        ("a/b/c/d", r"is not a valid name"),
        ("/b/c", r"is not a valid name"),
        ("a/b/", r"is not a valid name"),
        ("persistent://a/b", r"is not a valid name"),
        ("persistent://", r"is not a valid name"),
    ],
)
def test_topic_name_invalid(name: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TopicName.parse(name)


def test_fully_qualified_name_needs_tenant_and_namespace() -> None:
    """Pulsar rejects ``persistent://events``: the short form without a domain is the only
    one that defaults tenant and namespace (Java TopicName throws 'Invalid topic name')."""
    with pytest.raises(ConfigurationError, match=r"is not a valid name"):
        TopicName.parse("persistent://events")
