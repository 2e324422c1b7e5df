"""The read path below the socket as fuzz targets: bytes in, record batches out.

:func:`read_pulsar` takes bytes as a broker's connection delivers them and does what a reader
does with them: frames, MESSAGE payload sections (checksum, broker-entry metadata, metadata),
chunk reassembly, decompression, every batch decoding path (each entry alone, the batches
together as a group, the one-message entries as a run), record batches, and the ``value``
column typed by every kind of schema (Avro, columnar and one by one, Json, Protobuf,
primitives, KeyValue). :func:`read_tubemq` does the same for TubeMQ frames.

A target may fail only with the project's own errors (:class:`PulsarSparkError`); each entry,
and each schema, is tried on its own, so that one refusal does not keep the rest of an input
from being read. Where two paths read the same entries they must agree (``assert``).
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import fastavro
import numpy as np
import pyarrow as pa
from fuzz_inputs import mutate_bytes
from support import protobuf_messages
from support.schemas import READING, Half, avro_bytes, key_value_schema

from pulsar_spark.arrow.avro_decode import decode_avro
from pulsar_spark.arrow.decode import to_record_batch
from pulsar_spark.arrow.key_values import KeyValueDecoder
from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.chunks import ChunkAssembler, is_chunk
from pulsar_spark.protocol.decode import Entry, decode_entries, decode_group, entry_info, is_batch
from pulsar_spark.protocol.framing import FrameDecoder
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.payload import parse_payload_section
from pulsar_spark.protocol.schemas import SchemaInfo
from pulsar_spark.protocol.single_runs import SingleRun
from pulsar_spark.tubemq.arrow import messages_to_batch
from pulsar_spark.tubemq.errors import TubeMQRemoteCallError
from pulsar_spark.tubemq.wire import messages as tube_messages
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire.framing import FrameDecoder as TubeFrameDecoder

TOPIC = "persistent://public/default/fuzz"
MAX_FRAME = 1024 * 1024  # small: no input makes a decoder hold more than this


def schema(
    kind: str, data: bytes = b"", properties: tuple[tuple[str, str], ...] = ()
) -> SchemaInfo:
    return SchemaInfo(pb.Schema.Type.Value(kind), data, kind, properties, None)


def _key_value() -> SchemaInfo:
    both = key_value_schema(Half.avro(READING), Half("STRING"), "INLINE")
    pairs = tuple((p.key, p.value) for p in both.properties)
    return SchemaInfo(both.type, both.schema_data, both.name, pairs, None)


SCHEMAS: dict[str, SchemaInfo] = {
    "avro": schema("Avro", json.dumps(READING).encode()),
    "json": schema("Json", json.dumps(READING).encode()),
    "protobuf": schema("ProtobufNative", protobuf_messages.schema_data()),
    "string": schema("String"),
    "int64": schema("Int64"),
    "double": schema("Double"),
    "date": schema("Date"),
    "local_date_time": schema("LocalDateTime"),
    "key_value": _key_value(),
}


@dataclass(frozen=True)
class Typed:
    """One schema's decoder of the ``key`` and ``value`` columns."""

    name: str
    value_schema: ValueSchema
    decode: Callable[[pa.Array, pa.Array], tuple[pa.Array, pa.Array]]


def _typed(name: str, info: SchemaInfo) -> Typed:
    value_schema = ValueSchema.of(TOPIC, info)
    assert value_schema is not None
    if value_schema.key is not None:
        pair = KeyValueDecoder(value_schema, lambda version: None)
        return Typed(name, value_schema, lambda k, v: pair.decode_columns(k, v, [None] * len(v)))
    one = ValueDecoder(value_schema, lambda version: None)
    return Typed(name, value_schema, lambda k, v: one.decode_columns(k, v, [None] * len(v)))


TYPED = [_typed(name, info) for name, info in SCHEMAS.items()]
AVRO = next(t for t in TYPED if t.name == "avro")
_AVRO_READER = fastavro.parse_schema(READING)


def read_pulsar(data: bytes) -> int:
    """Everything a reader does with ``data`` as a broker connection's bytes; the rows read."""
    entries = list(_entries(data))
    rows = 0
    for columns in _decoded(entries):
        rows += columns.count
        _to_arrow(columns)
    return rows


def _entries(data: bytes) -> Iterator[Entry]:
    """The entries of the MESSAGE frames in ``data``, decompressed and reassembled."""
    chunks = ChunkAssembler(max_pending_bytes=MAX_FRAME)
    try:
        frames = FrameDecoder(MAX_FRAME).feed(data)
    except PulsarSparkError:
        return
    for frame in frames:
        if frame.command.type != pb.BaseCommand.MESSAGE or frame.payload is None:
            continue
        try:
            entry = _entry(frame.command.message.message_id, frame.payload, chunks)
        except PulsarSparkError:
            continue
        if entry is not None:
            yield entry


def _entry(
    message_id: pb.MessageIdData, section_bytes: bytes, chunks: ChunkAssembler
) -> Entry | None:
    section = parse_payload_section(section_bytes)
    metadata, payload = section.metadata, section.payload
    if metadata.HasField("marker_type"):
        return None
    if is_chunk(metadata):
        assembled = chunks.add(metadata, payload)
        if assembled is None:
            return None
        payload = assembled.payload
    info = entry_info(metadata, message_id.ledgerId, message_id.entryId, message_id.partition)
    data = compression.decompress(metadata.compression, payload, metadata.uncompressed_size)
    return info, metadata, data


def _decoded(entries: list[Entry]) -> Iterator[MessageColumns]:
    """Each entry alone; the batches together (as a group, and with one call) and the
    one-message entries as a run, which must give what the entries alone give."""
    alone = [_alone(entry) for entry in entries]
    yield from (columns for columns in alone if columns is not None)
    readable = [e for e, columns in zip(entries, alone, strict=True) if columns is not None]
    batches = [e for e in readable if is_batch(e[1])]
    if batches:
        together = decode_entries(batches)
        expected = [
            c for e, c in zip(entries, alone, strict=True) if c is not None and is_batch(e[1])
        ]
        assert [_rows(c) for c in together] == [_rows(c) for c in expected]
        group = _group(batches)
        if group is not None:
            assert _rows(group) == [r for c in expected for r in _rows(c)]
            yield group
    singles = [e for e in readable if not is_batch(e[1])]
    if singles:
        run = SingleRun()
        for entry in singles:
            run.add(*entry)
        yield run.take()


def _alone(entry: Entry) -> MessageColumns | None:
    try:
        return decode_entries([entry])[0]
    except PulsarSparkError:
        return None


def _group(batches: list[Entry]) -> MessageColumns | None:
    try:
        return decode_group(batches)
    except PulsarSparkError:
        return None


def _rows(columns: MessageColumns) -> list[tuple[object, ...]]:
    """Every row of ``columns`` as plain values, to compare two decodings."""
    batch = to_record_batch([columns], TOPIC, 0)
    plain = (column.view(_plain(column.type)).to_pylist() for column in batch.columns)
    return list(zip(*plain, strict=True))


def _to_arrow(columns: MessageColumns) -> None:
    """The record batch of ``columns``, then its ``key`` and ``value`` typed by every schema."""
    batch = to_record_batch([columns], TOPIC, 0)
    keys, values = batch.column("key"), batch.column("value")
    for typed in TYPED:
        try:
            typed.decode(keys, values)
        except PulsarSparkError:
            continue
    avro_agrees(values)


def avro_agrees(values: pa.Array) -> None:
    """The columnar Avro decoder may decline ``values``, never read them otherwise than fastavro
    does; where fastavro fails on a value, it must decline."""
    kind = AVRO.value_schema.arrow_type()
    columnar = decode_avro(values, READING, kind)
    if columnar is None:
        return
    plain = _plain(kind)
    read = columnar.view(plain).to_pylist()
    for value, got in zip(values.to_pylist(), read, strict=True):
        expected = None if value is None else _fastavro(value, kind).view(plain).to_pylist()[0]
        assert repr(got) == repr(expected), (value, got, expected)


def _fastavro(value: bytes, kind: pa.DataType) -> pa.Array:
    try:
        record = fastavro.schemaless_reader(io.BytesIO(value), _AVRO_READER, None)
        return pa.array([record], kind)
    except Exception as exc:  # any failure: the columnar decoder read what fastavro refuses
        raise AssertionError(f"fastavro cannot read {value!r}, the columnar decoder did") from exc


def _plain(kind: pa.DataType) -> pa.DataType:
    """``kind`` with times and dates as the integers they are stored as (they compare without
    Python's date range)."""
    if pa.types.is_struct(kind):
        return pa.struct(
            [kind.field(i).with_type(_plain(kind.field(i).type)) for i in range(kind.num_fields)]
        )
    if pa.types.is_map(kind):
        return pa.map_(_plain(kind.key_type), _plain(kind.item_type))
    if pa.types.is_list(kind):
        return pa.list_(_plain(kind.value_type))
    if pa.types.is_timestamp(kind) or pa.types.is_time64(kind):
        return pa.int64()
    if pa.types.is_date32(kind) or pa.types.is_time32(kind):
        return pa.int32()
    return kind


def check_avro(seed: bytes) -> int:
    """Thirty records of READING generated from ``seed`` (longs of any size, times past
    Python's dates, one in five mutated) through :func:`avro_agrees`; the records."""
    rng = random.Random(seed)
    payloads = [avro_bytes(_reading(rng), READING) for _ in range(30)]
    for index in range(len(payloads)):
        if rng.random() < 0.2:
            payloads[index] = mutate_bytes(rng, payloads[index], payloads)
    avro_agrees(pa.array(payloads, pa.binary()))
    return len(payloads)


def _reading(rng: random.Random) -> dict[str, object]:
    def long() -> int:
        return rng.choice((rng.randint(-(2**63), 2**63 - 1), rng.randint(-300, 300)))

    def text() -> str:
        return "".join(rng.choice("ab é€😀") for _ in range(rng.randint(0, 8)))

    return {
        "name": text(),
        "count": long(),
        "ratio": rng.choice((0.0, -0.0, float("inf"), rng.uniform(-1e300, 1e300))),
        "ok": rng.random() < 0.5,
        "note": None if rng.random() < 0.5 else text(),
        "at": rng.choice((rng.randint(-(2**62), 2**62), rng.randint(0, 2 * 10**12))),
        "tags": [text() for _ in range(rng.randint(0, 3))],
        "place": {"city": text(), "zip": long()},
    }


def read_tubemq(data: bytes) -> int:
    """What the TubeMQ client does with ``data`` as a connection's bytes; the messages read."""
    try:
        frames = TubeFrameDecoder(MAX_FRAME).feed(data)
    except PulsarSparkError:
        return 0
    read = 0
    for frame in frames:
        try:
            response = rpc.decode_get_message(frame)
            if isinstance(response.message, tube_messages.GetMessageReply):
                found = response.message.messages
                messages_to_batch("fuzz", "1:1", np.arange(len(found)), found)
                read += len(found)
        except (PulsarSparkError, TubeMQRemoteCallError):
            continue
    return read
