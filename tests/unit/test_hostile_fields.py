"""Fields the wire allows but a column cannot hold as they are, on every decode path.

- Property names and values that are not valid UTF-8: kept as the bytes sent, whichever path
  reads the entry (one message, a run of them, a chunked message, a batch on the uniform path,
  scanned, walked, or batches read as a group); the record batch reads them as Java does.
- uint64 ids and times: an entry's ledger id and entry id at most 2**63 - 1 (bigint), publish
  and event times at most what a microsecond timestamp holds; above that, CorruptPayloadError
  naming the field. Sequence ids keep their 64 bits, as Java's long does.

Metadata is written byte by byte here: protobuf's Python writer refuses bytes that are not
UTF-8 in a string field.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest
from support.decoding import INFO, strings, wire_field, wire_varint

from pulsar_spark.arrow.decode import to_record_batch
from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol import decode, pb
from pulsar_spark.protocol.batch_scan import scan_batch
from pulsar_spark.protocol.chunks import ChunkAssembler
from pulsar_spark.protocol.decode import (
    SCAN_MIN_MESSAGES,
    Entry,
    decode_entries,
    decode_group,
    entry_info,
)
from pulsar_spark.protocol.messages import INT64_MAX, MAX_MILLIS, MessageColumns
from pulsar_spark.protocol.single_runs import SingleRun

TOPIC = "persistent://public/default/hostile"
PUBLISHED = 1_700_000_009_999
NAME, VALUE = b"k\xff", b"\xfe\x00v"  # neither is UTF-8
PAIR = wire_field(1, 2, wire_varint(2) + NAME) + wire_field(2, 2, wire_varint(3) + VALUE)
HOSTILE = wire_field(1, 2, wire_varint(len(PAIR)) + PAIR)  # one KeyValue, as field 1
AS_JAVA_READS = [("k\ufffd", "\ufffd\x00v")]
PRODUCER, ORIGIN = b"producer-\xff", b"east-\xc3"


def text(number: int, raw: bytes) -> bytes:
    return wire_field(number, 2, wire_varint(len(raw)) + raw)


def number(field: int, value: int) -> bytes:
    return wire_field(field, 0, wire_varint(value))


def metadata(*fields: bytes) -> pb.MessageMetadata:
    """A MessageMetadata of the required fields (a producer name that is not UTF-8), an origin
    that is not UTF-8 either, then ``fields``, parsed from its bytes."""
    required = text(1, PRODUCER) + number(2, 1000) + number(3, PUBLISHED)
    return pb.MessageMetadata.FromString(required + text(5, ORIGIN) + b"".join(fields))


def record(properties: bytes, value: bytes, event_time: int, sequence_id: int) -> bytes:
    """One batch record: SingleMessageMetadata fields 1, 3, 5 and 8, then the value."""
    fields = properties + number(3, len(value))
    if event_time:
        fields += number(5, event_time)
    smm = fields + number(8, sequence_id)
    return len(smm).to_bytes(4, "big") + smm + value


def batch_entry(properties: bytes, sizes: list[int], event_time: int, entry_id: int) -> Entry:
    payload = b"".join(
        record(properties, b"v" * size, event_time, 100 * entry_id + i)
        for i, size in enumerate(sizes)
    )
    meta = metadata(number(11, len(sizes)))
    return entry_info(meta, 12, entry_id, 2), meta, payload


def one_message(properties: bytes, event_time: int, entry_id: int) -> Entry:
    outer_properties = b"" if not properties else text(4, PAIR)
    meta = metadata(outer_properties, number(12, event_time) if event_time else b"")
    return entry_info(meta, 12, entry_id, 2), meta, b"value-%d" % entry_id


def single(properties: bytes, event_time: int) -> list[MessageColumns]:
    return decode_entries([one_message(properties, event_time, 0)])


def run(properties: bytes, event_time: int) -> list[MessageColumns]:
    messages = SingleRun()
    for entry_id in range(3):
        messages.add(*one_message(properties, event_time, entry_id))
    return [messages.take()]


def chunked(properties: bytes, event_time: int) -> list[MessageColumns]:
    """A message sent in two chunks (its uuid not UTF-8 either), reassembled."""
    chunks = ChunkAssembler()
    parts = [b"first half ", b"second half"]
    for chunk_id, part in enumerate(parts):
        chunk = metadata(
            text(4, PAIR) if properties else b"",
            number(12, event_time) if event_time else b"",
            text(26, b"uuid-\xff"),
            number(27, len(parts)),
            number(29, chunk_id),
        )
        whole = chunks.add(chunk, part)
    assert whole is not None and chunks.pending == 0
    info = entry_info(whole.metadata, 12, 1, 2)
    return decode_entries([(info, whole.metadata, whole.payload)])


def uniform(properties: bytes, event_time: int) -> list[MessageColumns]:
    entry = batch_entry(properties, [5, 5, 5], event_time, 0)
    assert decode._uniform([entry]) is not None
    return decode_entries([entry])


def scanned(properties: bytes, event_time: int) -> list[MessageColumns]:
    sizes = [1 + i % 5 for i in range(SCAN_MIN_MESSAGES)]
    entry = batch_entry(properties, sizes, event_time, 0)
    if event_time < 1 << 56:  # a longer varint is left to the walk
        assert scan_batch(entry[2], len(sizes), 1000) is not None
    return decode_entries([entry])


def walked(properties: bytes, event_time: int) -> list[MessageColumns]:
    entry = batch_entry(properties, [3, 4], event_time, 0)
    assert decode._uniform([entry]) is None
    return decode_entries([entry])


def group(properties: bytes, event_time: int) -> list[MessageColumns]:
    entries = [batch_entry(properties, [5, 5], event_time, entry_id) for entry_id in range(2)]
    whole = decode_group(entries)
    assert whole is not None
    return [whole]


def group_scanned(properties: bytes, event_time: int) -> list[MessageColumns]:
    half = SCAN_MIN_MESSAGES // 2
    sizes = [1 + i % 5 for i in range(half)]
    entries = [batch_entry(properties, sizes, event_time, entry_id) for entry_id in range(2)]
    whole = decode_group(entries)
    if event_time >= 1 << 56:  # the scan declines: the reader then decodes entry by entry
        assert whole is None
        return decode_entries(entries)
    assert whole is not None
    return [whole]


Path = Callable[[bytes, int], list[MessageColumns]]
PATHS: dict[str, Path] = {
    "single": single,
    "run": run,
    "chunked": chunked,
    "uniform": uniform,
    "scanned": scanned,
    "walked": walked,
    "group": group,
    "group_scanned": group_scanned,
}


def raw_properties(columns: MessageColumns) -> list[list[tuple[bytes | None, bytes | None]]]:
    """Each row's property names and values as the bytes they point at."""
    assert columns.properties is not None
    names, values = strings(columns.properties.names), strings(columns.properties.values)
    offsets = columns.properties.offsets.tolist()
    pairs = list(zip(names, values, strict=True))
    return [pairs[offsets[i] : offsets[i + 1]] for i in range(columns.count)]


def record_batch(parts: list[MessageColumns]) -> pa.RecordBatch:
    return to_record_batch(parts, TOPIC, 2)


@pytest.mark.parametrize("path", PATHS)
def test_properties_that_are_not_utf8_are_kept_as_their_bytes_on_every_path(path: str) -> None:
    parts = PATHS[path](HOSTILE, 0)
    rows = sum(part.count for part in parts)
    assert [r for part in parts for r in raw_properties(part)] == [[(NAME, VALUE)]] * rows
    properties = record_batch(parts).column("properties").to_pylist()
    assert properties == [AS_JAVA_READS] * rows


@pytest.mark.parametrize("path", PATHS)
def test_the_latest_event_time_a_timestamp_holds_is_read_on_every_path(path: str) -> None:
    parts = PATHS[path](b"", MAX_MILLIS)
    assert [t for part in parts for t in part.event_time.tolist()] == [MAX_MILLIS] * sum(
        part.count for part in parts
    )
    times = record_batch(parts).column("eventTime").cast(pa.int64()).to_pylist()
    assert set(times) == {MAX_MILLIS * 1000}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("event_time", [MAX_MILLIS + 1, 1 << 63, (1 << 64) - 1])
def test_a_later_event_time_is_corrupt_on_every_path(path: str, event_time: int) -> None:
    message = rf"^event time {event_time} is out of range \(at most {MAX_MILLIS} ms\)$"
    with pytest.raises(CorruptPayloadError, match=message):
        PATHS[path](b"", event_time)


@pytest.mark.parametrize(
    ("ids", "field", "value", "limit"),
    [
        ((1 << 63, 0, PUBLISHED), "ledger id", 1 << 63, INT64_MAX),
        ((5, (1 << 64) - 1, PUBLISHED), "entry id", (1 << 64) - 1, INT64_MAX),
        ((5, 6, MAX_MILLIS + 1), "publish time", MAX_MILLIS + 1, MAX_MILLIS),
        ((1 << 63, 1 << 63, 1 << 63), "ledger id", 1 << 63, INT64_MAX),
    ],
)
def test_entry_ids_and_publish_times_past_their_columns_are_corrupt(
    ids: tuple[int, int, int], field: str, value: int, limit: int
) -> None:
    ledger_id, entry_id, publish_time = ids
    meta = pb.MessageMetadata.FromString(text(1, b"p") + number(2, 0) + number(3, publish_time))
    message = rf"^{field} {value} is out of range \(at most {limit}\)$"
    with pytest.raises(CorruptPayloadError, match=message):
        entry_info(meta, ledger_id, entry_id, 0)


def test_the_largest_ids_and_latest_publish_time_are_read_as_sent() -> None:
    meta = pb.MessageMetadata.FromString(text(1, b"p") + number(2, 0) + number(3, MAX_MILLIS))
    info = entry_info(meta, INT64_MAX, INT64_MAX, 0)
    messages = SingleRun()
    messages.add(info, meta, b"a")
    messages.add(info._replace(entry_id=0), meta, b"b")
    ids = record_batch([messages.take()]).column("messageId").to_pylist()
    assert ids == [
        {"ledgerId": INT64_MAX, "entryId": INT64_MAX, "batchIndex": -1},
        {"ledgerId": INT64_MAX, "entryId": 0, "batchIndex": -1},
    ]
    published = record_batch(single(b"", 0)).column("publishTime").cast(pa.int64())
    assert published.to_pylist() == [PUBLISHED * 1000]
    latest = record_batch(decode_entries([(info, meta, b"c")])).column("publishTime")
    assert latest.cast(pa.int64()).to_pylist() == [MAX_MILLIS * 1000]


@pytest.mark.parametrize("path", PATHS)
def test_a_producer_name_and_origin_that_are_not_utf8_read_as_java_reads_them(path: str) -> None:
    """Every entry here has them: kept as the bytes sent in the entry fields, as properties
    are; the record batch reads them as Java does, on every path."""
    parts = PATHS[path](b"", 0)
    assert {(p.entry.producer_name, p.entry.replicated_from) for p in parts} == {(PRODUCER, ORIGIN)}
    rows = sum(part.count for part in parts)
    read = record_batch(parts)
    assert read.column("producerName").to_pylist() == ["producer-\ufffd"] * rows
    assert read.column("replicatedFrom").to_pylist() == ["east-\ufffd"] * rows


@pytest.mark.parametrize(
    ("sizes", "taken"),
    [
        ([5, 5, 5], (True, False)),
        ([3, 4, 5], (False, False)),
        ([1 + i % 5 for i in range(60)], (False, True)),
    ],
    ids=["uniform", "walked", "scanned"],
)
def test_sequence_ids_counted_from_the_batch_wrap_as_a_long_does(
    sizes: list[int], taken: tuple[bool, bool]
) -> None:
    """Records without a sequence id of their own count up from the batch's, 2**64 - 1 here:
    every path wraps to 0, as Java's long does."""
    payload = b"".join((2).to_bytes(4, "big") + number(3, size) + b"v" * size for size in sizes)
    meta = pb.MessageMetadata.FromString(
        text(1, b"p") + number(2, (1 << 64) - 1) + number(3, 1) + number(11, len(sizes))
    )
    entry = (INFO, meta, payload)
    scan = (
        scan_batch(payload, len(sizes), (1 << 64) - 1) if len(sizes) >= SCAN_MIN_MESSAGES else None
    )
    assert (decode._uniform([entry]) is not None, scan is not None) == taken
    (columns,) = decode_entries([entry])
    assert columns.sequence_id.tolist() == [-1, *range(len(sizes) - 1)]
    assert columns.sequence_id.dtype == np.int64
