"""The numpy batch scan against the record-by-record walk, on the same bytes.

Where the scan reads a batch it must find exactly what the walk finds; where it cannot (SMMs out
of field order, over 64 KiB, numbers over 2**56, corrupt bytes) it must decline, never guess.
"""

from __future__ import annotations

import base64
import random
import struct
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.decoding import (
    INFO,
    assert_same_columns,
    assert_same_fields,
    batch,
    keys_of,
    outer,
    properties_of,
    record,
    rows,
    smm,
    strings,
    wire_field,
    wire_varint,
)

from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol import batch_scan, pb
from pulsar_spark.protocol.batch_fields import BatchFields
from pulsar_spark.protocol.batch_scan import scan_batch, scan_batches
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.decode import SCAN_MIN_MESSAGES, decode_entries, decode_entry
from pulsar_spark.protocol.messages import EntryInfo

TEXT = "abcdefghijklmnopqrstuvwxyzé鍵🔑 "


def random_text(rng: random.Random, longest: int) -> str:
    return "".join(rng.choice(TEXT) for _ in range(rng.randint(0, longest)))


def random_record(rng: random.Random, index: int) -> tuple[pb.SingleMessageMetadata, bytes]:
    """One record with a random mix of every field the decoders read."""
    size = rng.choice([0, 1, 5, 100, 127, 128, 300, 20_000])
    value = bytes(rng.getrandbits(8) for _ in range(size))
    if rng.random() < 0.2:
        # a payload that looks like the start of a record: a false candidate for the scan
        value = struct.pack(">I", 9) + b"\x0a\x07\x0a\x01a\x12\x01b\x18" + value
    meta = smm(payload_size=len(value))
    if rng.random() < 0.8:
        meta.sequence_id = rng.choice([index, 1 << 20, (1 << 49) + index, 0])
    if rng.random() < 0.7:
        key = random_text(rng, 20).encode()
        if rng.random() < 0.2:
            meta.partition_key = base64.b64encode(key).decode()
            meta.partition_key_b64_encoded = True
        else:
            meta.partition_key = key.decode()
    if rng.random() < 0.1:
        meta.null_partition_key = True
    for _ in range(rng.choice([0, 0, 1, 2, 3])):
        name = random_text(rng, 10)
        item = random_text(rng, rng.choice([5, 40, 200]))
        meta.properties.add(key=name, value=item)
    if rng.random() < 0.5:
        meta.event_time = 1_700_000_000_000 + rng.randint(0, 10**6)
    if rng.random() < 0.1:
        meta.null_value = True
    if rng.random() < 0.1:
        meta.compacted_out = True
    if rng.random() < 0.1:
        meta.ordering_key = b"ord"
    return meta, value


def random_batch(seed: int, count: int) -> bytes:
    rng = random.Random(seed)
    return batch(*(random_record(rng, i) for i in range(count)))


def walked(data: bytes, count: int, base: int = 7) -> BatchFields | None:
    try:
        return walk_batch(data, count, base)
    except CorruptPayloadError:
        return None


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("count", [1, 2, SCAN_MIN_MESSAGES, 200])
def test_scan_finds_what_the_walk_finds(seed: int, count: int) -> None:
    data = random_batch(seed, count)
    scanned = scan_batch(data, count, 7)
    assert scanned is not None
    assert_same_fields(scanned, walk_batch(data, count, 7))


def test_scans_in_several_threads_and_of_any_size_find_what_the_walk_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The byte masks a scan works in are kept per thread and reused: a small batch after a
    large one, scans in threads at once, and batches over the size kept all read right."""
    batches = [(random_batch(seed, count), count) for seed, count in [(1, 200), (2, 3), (3, 60)]]

    def scan_all(rounds: int) -> list[bool]:
        return [
            (found := scan_batch(data, count, 7)) is not None
            and _same(found, walk_batch(data, count, 7))
            for _ in range(rounds)
            for data, count in batches
        ]

    assert all(scan_all(2))
    with ThreadPoolExecutor(4) as pool:
        assert all(all(done) for done in pool.map(scan_all, [20] * 4))
    monkeypatch.setattr(batch_scan, "KEPT_MASK_BYTES", 100)
    assert all(scan_all(1))


def _same(a: BatchFields, b: BatchFields) -> bool:
    try:
        assert_same_fields(a, b)
    except AssertionError:
        return False
    return True


def test_decode_entry_at_the_scan_threshold() -> None:
    data = random_batch(99, SCAN_MIN_MESSAGES)
    columns = decode_entry(INFO, outer(num_messages_in_batch=SCAN_MIN_MESSAGES), data)
    rng = random.Random(99)
    expected = [random_record(rng, i) for i in range(SCAN_MIN_MESSAGES)]
    kept = [(i, m, v) for i, (m, v) in enumerate(expected) if not m.compacted_out]
    assert columns.batch_index.tolist() == [i for i, _, _ in kept]
    assert [r["value"] for r in rows(columns)] == [None if m.null_value else v for _, m, v in kept]
    assert properties_of(columns) == [
        tuple((p.key, p.value) for p in m.properties) for _, m, _ in kept
    ]


def test_sequence_ids_default_to_the_batch_sequence_id() -> None:
    data = batch(*((smm(payload_size=1), b"x") for _ in range(20)))
    scanned = scan_batch(data, 20, 2**63 + 5)
    assert scanned is not None
    assert scanned.sequence_id.view("uint64").tolist() == [2**63 + 5 + i for i in range(20)]


def test_the_last_record_may_end_the_batch_with_its_metadata() -> None:
    # an empty last payload: the scan reads varints in the batch's last eight bytes
    data = batch(*((smm(payload_size=0, sequence_id=(1 << 40) + i), b"") for i in range(20)))
    scanned = scan_batch(data, 20, 0)
    assert scanned is not None
    assert scanned.sequence_id.tolist() == [(1 << 40) + i for i in range(20)]


def out_of_order_record(value: bytes) -> bytes:
    """An SMM with sequence_id (8) before payload_size (3): legal protobuf, not field order."""
    raw = wire_field(8, 0, wire_varint(5)) + wire_field(3, 0, wire_varint(len(value)))
    return struct.pack(">I", len(raw)) + raw + value


def unknown_field_record(number: int, wire_type: int, body: bytes) -> bytes:
    raw = smm(payload_size=1).SerializeToString() + wire_field(number, wire_type, body)
    return struct.pack(">I", len(raw)) + raw + b"u"


@pytest.mark.parametrize(
    "odd",
    [
        pytest.param(out_of_order_record(b"v"), id="fields-out-of-order"),
        pytest.param(record(smm(payload_size=1, sequence_id=1 << 57), b"v"), id="9-byte-varint"),
        pytest.param(unknown_field_record(20, 0, b"\x01"), id="two-byte-tag"),
        pytest.param(unknown_field_record(12, 1, bytes(8)), id="fixed64-field"),
        pytest.param(unknown_field_record(9, 2, b"\x05Y\xf2+\x8b\xd3"), id="flag-sent-as-bytes"),
        pytest.param(unknown_field_record(10, 2, b"\x01\x01"), id="null-key-sent-as-bytes"),
        pytest.param(
            record(smm(payload_size=1, properties={"big": "x" * 70_000}), b"v"), id="smm-over-64k"
        ),
    ],
)
def test_scan_declines_what_it_does_not_read_and_the_walk_reads_it(odd: bytes) -> None:
    data = batch(*((smm(payload_size=1, sequence_id=i), b"a") for i in range(20))) + odd
    assert scan_batch(data, 21, 0) is None
    fields = walk_batch(data, 21, 0)
    assert fields.value_length.tolist() == [1] * 21


def test_a_field_sent_with_another_wire_type_is_skipped_as_protobuf_skips_it() -> None:
    """null_value (field 9, a varint) sent length-delimited: protobuf and the walk skip it;
    the scan once read its length as the flag, and the value as null."""
    data = batch(*((smm(payload_size=1, sequence_id=i), b"a") for i in range(SCAN_MIN_MESSAGES)))
    data += unknown_field_record(9, 2, b"\x05Y\xf2+\x8b\xd3")
    columns = decode_entry(INFO, outer(num_messages_in_batch=SCAN_MIN_MESSAGES + 1), data)
    assert columns.values.valid is None
    assert strings(columns.values) == [b"a"] * SCAN_MIN_MESSAGES + [b"u"]


def test_unknown_fields_in_order_are_skipped_like_the_walk() -> None:
    data = batch(*((smm(payload_size=1, sequence_id=i), b"a") for i in range(20)))
    data += unknown_field_record(12, 0, wire_varint(300)) + unknown_field_record(13, 2, b"\x02hi")
    scanned = scan_batch(data, 22, 0)
    assert scanned is not None
    assert_same_fields(scanned, walk_batch(data, 22, 0))


def test_a_payload_holding_a_whole_batch_is_not_mistaken_for_records() -> None:
    inner = batch(*((smm(payload_size=2, sequence_id=i), b"in") for i in range(20)))
    data = batch(*((smm(payload_size=len(inner), sequence_id=i), inner) for i in range(20)))
    scanned = scan_batch(data, 20, 0)
    walk = walk_batch(data, 20, 0)
    assert walk.value_length.tolist() == [len(inner)] * 20
    if scanned is not None:
        assert_same_fields(scanned, walk)


@pytest.mark.parametrize("seed", range(40))
def test_corrupt_batches_are_declined_or_read_as_the_walk_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    data = bytearray(random_batch(seed, 30))
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.getrandbits(8)
    if rng.random() < 0.3:
        del data[rng.randrange(len(data)) :]
    scanned = scan_batch(bytes(data), 30, 0)
    if scanned is not None:
        walk = walked(bytes(data), 30, 0)
        assert walk is not None
        assert_same_fields(scanned, walk)


def test_short_or_empty_payloads_are_declined() -> None:
    assert scan_batch(b"", 16, 0) is None
    assert scan_batch(b"\x00\x00\x00", 16, 0) is None
    assert scan_batch(batch((smm(payload_size=1), b"a")), 16, 0) is None


def test_every_message_with_the_same_number_of_properties() -> None:
    records = [
        (smm(payload_size=1, properties={"a": f"x{i}", "bb": "y" * i}, sequence_id=i), b"p")
        for i in range(SCAN_MIN_MESSAGES)
    ]
    data = batch(*records)
    scanned = scan_batch(data, len(records), 0)
    assert scanned is not None
    assert_same_fields(scanned, walk_batch(data, len(records), 0))
    columns = decode_entry(INFO, outer(num_messages_in_batch=len(records)), data)
    assert properties_of(columns) == [
        (("a", f"x{i}"), ("bb", "y" * i)) for i in range(SCAN_MIN_MESSAGES)
    ]


def alike_records(
    seed: int, count: int, *, look_alike: bool
) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Records that all carry the same fields (as one producer writes them) with random
    contents; with ``look_alike``, some payloads hold a record of that same shape."""
    rng = random.Random(seed)
    keyed, b64, names = rng.random() < 0.7, rng.random() < 0.3, rng.choice([0, 1, 2, 3])
    timed, sequenced, nulls = rng.random() < 0.5, rng.random() < 0.7, rng.random() < 0.3

    def one(index: int, value: bytes) -> tuple[pb.SingleMessageMetadata, bytes]:
        meta = smm(payload_size=len(value))
        if keyed:
            key = random_text(rng, 20)
            meta.partition_key = base64.b64encode(key.encode()).decode() if b64 else key
            meta.partition_key_b64_encoded = b64
        for n in range(names):
            meta.properties.add(key=f"p{n}", value=random_text(rng, rng.choice([5, 40, 200])))
        if timed:
            meta.event_time = 1_700_000_000_000 + index
        if sequenced:
            meta.sequence_id = 1000 + index
        if nulls:
            meta.null_value = index % 3 == 0
            meta.compacted_out = index % 5 == 0
        return meta, value

    records = []
    for i in range(count):
        value = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 50, 127, 128, 300])))
        if look_alike and i % 4 == 1:
            value = record(*one(i, b"fake")) + value
        records.append(one(i, value))
    return records


@pytest.mark.parametrize("seed", range(16))
def test_records_written_alike_scan_as_the_walk_reads_them(seed: int) -> None:
    # Records with the same fields are read field by field for all at once, without a table.
    data = batch(*alike_records(seed, 120, look_alike=False))
    scanned = scan_batch(data, 120, 7)
    assert scanned is not None
    assert_same_fields(scanned, walk_batch(data, 120, 7))


@pytest.mark.parametrize("seed", range(4))
def test_a_payload_holding_a_record_of_the_same_shape_is_left_to_the_walk(seed: int) -> None:
    # The record inside the payload is a candidate that reads as an SMM like the others: the
    # chain is ambiguous, the scan declines, and the walk reads every value as sent.
    records = alike_records(seed, 120, look_alike=True)
    data = batch(*records)
    assert scan_batch(data, 120, 7) is None
    walk = walk_batch(data, 120, 7)
    read = [
        data[int(at) : int(at) + int(n)]
        for at, n in zip(walk.value_start, walk.value_length, strict=True)
    ]
    assert read == [value for _, value in records]


# --- several batches in one scan -----------------------------------------------------------


def group(
    seeds_and_counts: list[tuple[int, int]],
) -> list[tuple[EntryInfo, pb.MessageMetadata, bytes]]:
    """Entries of random batches, each with its own entry id and batch sequence id."""
    return [
        (
            INFO._replace(entry_id=INFO.entry_id + n),
            outer(num_messages_in_batch=count, sequence_id=1000 * (n + 1)),
            random_batch(seed, count),
        )
        for n, (seed, count) in enumerate(seeds_and_counts)
    ]


@pytest.mark.parametrize(
    "sizes",
    [
        [(1, 60), (2, 60), (3, 60)],
        [(4, 1), (5, 2), (6, SCAN_MIN_MESSAGES), (7, 3)],  # small batches: scanned only together
        [(8, 200), (9, 5), (10, 120), (11, 1), (12, 64), (13, 64), (14, 9), (15, 90)],
    ],
)
def test_batches_scanned_together_decode_as_each_alone(sizes: list[tuple[int, int]]) -> None:
    entries = group(sizes)
    together = decode_entries(entries)
    assert [c.entry for c in together] == [info for info, _, _ in entries]
    for columns, entry in zip(together, entries, strict=True):
        assert_same_columns(columns, decode_entry(*entry))


def test_a_batch_without_keys_properties_or_nulls_keeps_none_among_batches_with_them() -> None:
    plain = batch(*[(smm(payload_size=1 + i % 3), b"p" * (1 + i % 3)) for i in range(40)])
    rich = batch(
        *[
            (smm(payload_size=1, partition_key=f"k{i}", properties={"a": "b"}), b"r")
            for i in range(39)
        ],
        (smm(payload_size=0, null_value=True, null_partition_key=True), b""),
    )
    entries = [
        (INFO._replace(entry_id=n), outer(num_messages_in_batch=40), data)
        for n, data in enumerate([rich, plain, rich])
    ]
    together = decode_entries(entries)
    alone = [decode_entry(*entry) for entry in entries]
    for columns, expected in zip(together, alone, strict=True):
        assert_same_columns(columns, expected)
    assert [c.key is None for c in together] == [False, True, False]
    assert [c.properties is None for c in together] == [False, True, False]
    assert [c.values.valid is None for c in together] == [False, True, False]
    assert keys_of(together[0]) == [f"k{i}".encode() for i in range(39)] + [None]


def test_scan_batches_reads_each_batch_with_its_own_sequence_ids() -> None:
    first = batch((smm(payload_size=1), b"a"), (smm(payload_size=2), b"bc"))
    second = batch((smm(payload_size=1), b"d"), (smm(payload_size=1, sequence_id=5), b"e"))
    whole = scan_batches(first + second, [len(first), len(second)], [2, 2], [100, 2**64 - 1])
    assert whole is not None
    found = whole.split([2, 2])
    assert [list(f.sequence_id) for f in found] == [[100, 101], [-1, 5]]
    # second batch: its second SMM holds a sequence id too (2 more bytes)
    assert [list(f.value_start) for f in found] == [[6, 13], [len(first) + 6, len(first) + 15]]


def test_counts_that_do_not_match_the_batches_are_not_scanned_together() -> None:
    first, second = random_batch(21, 60), random_batch(22, 60)
    sizes = [len(first), len(second)]
    # the same 120 records, but the first batch said to hold 59 and the second 61
    assert scan_batches(first + second, sizes, [59, 61], [0, 0]) is None
    assert scan_batches(first + second, sizes, [60, 60], [0, 0]) is not None


def test_a_group_with_a_batch_only_the_walk_reads_decodes_each_alone() -> None:
    entries = group([(31, 60), (32, 60)])
    # field 3 (payload_size) before field 2 (the key): out of field order, only the walk reads it
    meta = wire_field(3, 0, wire_varint(1)) + wire_field(2, 2, wire_varint(1) + b"k")
    odd = struct.pack(">I", len(meta)) + meta + b"x"
    entries.append((INFO, outer(num_messages_in_batch=1), odd))
    together = decode_entries(entries)
    assert rows(together[2]) == [
        {
            "batch_index": 0,
            "value": b"x",
            "key": b"k",
            "properties": (),
            "event_time": 0,
            "sequence_id": 1000,
        }
    ]
    for columns, entry in zip(together[:2], entries[:2], strict=True):
        assert rows(columns) == rows(decode_entry(*entry))
