"""decode_entry on batches: the uniform fast path, and the batches it must leave to the
general walk (which must then give the same rows)."""

from __future__ import annotations

import base64

import numpy as np
from support.decoding import (
    INFO,
    batch,
    both_paths,
    check_shape,
    general_only,
    joined_values,
    keys_of,
    null_values,
    outer,
    properties_of,
    record,
    row,
    rows,
    smm,
    value_offsets,
)

from pulsar_spark.protocol.decode import decode_entry, is_batch

# --- uniform batches: the fast path ------------------------------------------------------------


def test_uniform_batch_with_sequence_ids() -> None:
    values = [f"value-{i:03d}".encode() for i in range(8)]
    payload = batch(*((smm(payload_size=9, sequence_id=500 + i), v) for i, v in enumerate(values)))
    metadata = outer(num_messages_in_batch=8, sequence_id=500)
    columns = both_paths(metadata, payload)
    assert columns.entry is INFO
    assert columns.count == 8
    assert rows(columns) == [row(i, values[i], seq=500 + i) for i in range(8)]
    assert joined_values(columns) == b"".join(values)
    assert value_offsets(columns) == [9 * i for i in range(9)]
    assert null_values(columns) is None
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
    assert keys_of(columns) == [b"same"] * 5
    assert properties_of(columns) == [props] * 5


def test_uniform_batch_with_shared_base64_key() -> None:
    key = base64.b64encode(b"\x01\x02\x03").decode()
    payload = batch(
        *(
            (smm(payload_size=1, partition_key=key, partition_key_b64_encoded=True), b"%d" % i)
            for i in range(3)
        )
    )
    columns = both_paths(outer(num_messages_in_batch=3, sequence_id=0), payload)
    assert keys_of(columns) == [b"\x01\x02\x03"] * 3


def test_uniform_batch_of_null_values() -> None:
    payload = batch(*((smm(payload_size=0, null_value=True, sequence_id=i), b"") for i in range(4)))
    columns = both_paths(outer(num_messages_in_batch=4), payload)
    assert joined_values(columns) == b""
    assert value_offsets(columns) == [0, 0, 0, 0, 0]
    assert null_values(columns) == [True] * 4
    assert rows(columns) == [row(i, None, seq=i) for i in range(4)]


def test_uniform_batch_of_empty_values() -> None:
    payload = batch(*((smm(payload_size=0, sequence_id=i), b"") for i in range(3)))
    columns = both_paths(outer(num_messages_in_batch=3), payload)
    assert null_values(columns) is None
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
    assert joined_values(columns) == b"".join(values)
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
    assert value_offsets(columns) == [0, 0, 1, 3, 303, 310]
    assert joined_values(columns) == b"".join(values)


def test_varying_keys_of_equal_length() -> None:
    payload = batch(
        *((smm(payload_size=1, partition_key=f"k{i}", sequence_id=i), b"v") for i in range(4))
    )
    columns = general_only(outer(num_messages_in_batch=4), payload)
    assert keys_of(columns) == [b"k0", b"k1", b"k2", b"k3"]
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
    assert keys_of(columns) == [b"plain", None, b"\x00\xff", None, b""]
    assert columns.sequence_id.tolist() == [0, 1, 902, 3, 4]


def test_per_message_properties_and_event_times() -> None:
    payload = batch(
        (smm(payload_size=2, properties={"i": "0", "x": "y"}, event_time=10, sequence_id=0), b"m0"),
        (smm(payload_size=2, sequence_id=1), b"m1"),
        (smm(payload_size=2, properties={"i": "2"}, event_time=30, sequence_id=2), b"m2"),
    )
    columns = general_only(outer(num_messages_in_batch=3), payload)
    assert properties_of(columns) == [(("i", "0"), ("x", "y")), (), (("i", "2"),)]
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
    assert null_values(columns) is None


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
    assert joined_values(columns) == b"m0m22"
    assert value_offsets(columns) == [0, 2, 5]
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
    assert joined_values(columns) == b""
    assert rows(columns) == []


def test_null_values_inside_a_batch() -> None:
    payload = batch(
        (smm(payload_size=2, sequence_id=0), b"v0"),
        (smm(payload_size=0, null_value=True, sequence_id=1), b""),
        (smm(payload_size=0, sequence_id=2), b""),
        (smm(payload_size=2, sequence_id=3), b"v3"),
    )
    columns = general_only(outer(num_messages_in_batch=4), payload)
    assert null_values(columns) == [False, True, False, False]
    assert joined_values(columns) == b"v0v3"
    assert value_offsets(columns) == [0, 2, 2, 2, 4]
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
