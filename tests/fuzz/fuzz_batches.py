"""Generated batches, and every decoding path held to what was written.

A batch is generated message by message (values, some shaped like records; keys plain, base64,
null or not UTF-8; properties not UTF-8; event and sequence ids up to 64 bits; null values,
compacted-out messages), each SingleMessageMetadata written by hand, in field order or out of
it. Several batches make an entry group. :func:`check` decodes them on every path (the walk,
the scan, the uniform path, :func:`decode_entries` and :func:`decode_group`) and asserts that
each path that reads them gives exactly the rows written, and that a batch whose event time no
timestamp holds fails with :class:`CorruptPayloadError` on every path.

The generator draws through a :class:`Chooser`: the quick tests give it hypothesis's draws (so
a failure shrinks to a small batch), the long run a seeded ``random.Random`` (for volume).
"""

from __future__ import annotations

import base64
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from support.decoding import strings, wire_varint

from pulsar_spark.errors import CorruptPayloadError
from pulsar_spark.protocol import decode, pb
from pulsar_spark.protocol.batch_fields import to_columns
from pulsar_spark.protocol.batch_scan import scan_batch
from pulsar_spark.protocol.batch_walk import walk_batch
from pulsar_spark.protocol.decode import Entry, decode_entries, decode_group
from pulsar_spark.protocol.messages import MAX_MILLIS, EntryInfo, MessageColumns

Row = tuple[object, ...]


class Chooser(Protocol):
    def integer(self, low: int, high: int) -> int: ...

    def binary(self, size: int) -> bytes: ...


class RandomChooser:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def binary(self, size: int) -> bytes:
        return self.rng.randbytes(self.rng.randint(0, size))


def choice(chooser: Chooser, options: list[bytes] | list[int]) -> object:
    return options[chooser.integer(0, len(options) - 1)]


RECORD_LIKE = [b"\x00\x00\x00\x02\x18\x01", b"\x00\x00\x00\x04\x12\x02k", b"\x00\x00"]
TEXTS = [b"", b"k", b"user-1", b"\xc3\xa9", b"\xff", b"k\xc3", b"\xf0\x9f\x94\x91"]
TIMES = [0, 1, 1_764_000_000_000, MAX_MILLIS, MAX_MILLIS + 1, 2**56, 2**63, 2**64 - 1]
SEQUENCES = [0, 1, 127, 128, 2**56 - 1, 2**56, 2**63, 2**64 - 1]


@dataclass
class Message:
    value: bytes
    null_value: bool = False
    key: bytes | None = None  # as sent
    b64: bool = False
    null_key: bool = False
    properties: list[tuple[bytes, bytes]] = field(default_factory=list)
    event_time: int = 0
    sequence_id: int | None = None
    compacted_out: bool = False

    def expected(self, index: int, base: int) -> Row | None:
        """The row a decoder must give for this message, the ``index``-th of a batch whose
        sequence id is ``base`` (None: left out)."""
        if self.compacted_out:
            return None
        key = None
        if self.key is not None and not self.null_key:
            key = base64.b64decode(self.key) if self.b64 else self.key
        sequence = (base + index if self.sequence_id is None else self.sequence_id) % 2**64
        signed = sequence - 2**64 if sequence >= 2**63 else sequence
        value = None if self.null_value else self.value
        return (index, value, key, self.properties, self.event_time, signed)


def message(chooser: Chooser, like: Message | None) -> Message:
    """A message: one like ``like`` but for its sequence id (batches the uniform path reads),
    or drawn field by field."""
    if like is not None:
        return Message(
            **{
                **like.__dict__,
                "sequence_id": None if like.sequence_id is None else chooser.integer(0, 120),
            }
        )
    value = chooser.binary(24) + (
        choice(chooser, RECORD_LIKE) if chooser.integer(0, 3) == 0 else b""
    )  # type: ignore[operator]
    drawn = Message(value, null_value=chooser.integer(0, 9) == 0)
    kind = chooser.integer(0, 4)
    if kind == 1:
        drawn.key = choice(chooser, TEXTS)  # type: ignore[assignment]
    elif kind == 2:
        drawn.key, drawn.b64 = base64.b64encode(chooser.binary(6)), True
    elif kind == 3:
        drawn.key, drawn.null_key = b"", True
    drawn.properties = [
        (choice(chooser, TEXTS), chooser.binary(4))  # type: ignore[misc]
        for _ in range(chooser.integer(0, 2))
    ]
    drawn.event_time = choice(chooser, TIMES) if chooser.integer(0, 3) == 0 else 0  # type: ignore[assignment]
    if chooser.integer(0, 1):
        drawn.sequence_id = choice(chooser, SEQUENCES)  # type: ignore[assignment]
    drawn.compacted_out = chooser.integer(0, 19) == 0
    return drawn


def smm(message: Message, chooser: Chooser) -> bytes:
    """The message's SingleMessageMetadata, its fields in number order or shuffled (properties
    keep their order among themselves)."""

    def varint_field(number: int, value: int) -> bytes:
        return wire_varint(number << 3) + wire_varint(value)

    def text_field(number: int, text: bytes) -> bytes:
        return wire_varint(number << 3 | 2) + wire_varint(len(text)) + text

    pairs = [text_field(1, text_field(1, n) + text_field(2, v)) for n, v in message.properties]
    others = [varint_field(3, len(message.value) if not message.null_value else 0)]
    if message.key is not None:
        others.append(text_field(2, message.key))
    for number, flag in (
        (4, message.compacted_out),
        (6, message.b64),
        (9, message.null_value),
        (10, message.null_key),
    ):
        if flag:
            others.append(varint_field(number, 1))
    if message.event_time:
        others.append(varint_field(5, message.event_time))
    if message.sequence_id is not None:
        others.append(varint_field(8, message.sequence_id))
    if chooser.integer(0, 2) == 0:  # out of field order
        fields = others + pairs
        order = sorted(range(len(fields)), key=lambda _: chooser.integer(0, 1000))
        shuffled = [fields[i] for i in order]
        slots = [i for i, f in enumerate(shuffled) if f in pairs]
        for slot, pair in zip(slots, pairs, strict=True):
            shuffled[slot] = pair
        return b"".join(shuffled)
    by_number = sorted(others, key=lambda f: f[0] >> 3)
    return b"".join(pairs + by_number)


@dataclass
class Batch:
    messages: list[Message]
    base: int
    payload: bytes

    def entry(self, entry_id: int) -> Entry:
        metadata = pb.MessageMetadata(
            producer_name="fuzz",
            sequence_id=self.base,
            publish_time=1_764_000_000_000,
            num_messages_in_batch=len(self.messages),
        )
        return EntryInfo(3, entry_id, 0, "fuzz", 1_764_000_000_000, None), metadata, self.payload

    def rows(self) -> list[Row]:
        found = (m.expected(i, self.base) for i, m in enumerate(self.messages))
        return [row for row in found if row is not None]

    def too_late(self) -> bool:
        return any(m.event_time > MAX_MILLIS for m in self.messages)


def batch(chooser: Chooser) -> Batch:
    count = chooser.integer(1, 60)
    uniform = chooser.integer(0, 2) == 0
    first = message(chooser, None)
    if uniform:
        first.compacted_out = False
    messages = [first] + [message(chooser, first if uniform else None) for _ in range(count - 1)]
    records = b""
    for m in messages:
        meta = smm(m, chooser)
        records += struct.pack(">I", len(meta)) + meta + (b"" if m.null_value else m.value)
    return Batch(messages, choice(chooser, SEQUENCES), records)  # type: ignore[arg-type]


def group(chooser: Chooser) -> list[Batch]:
    return [batch(chooser) for _ in range(chooser.integer(1, 3))]


def rows_of(columns: MessageColumns) -> list[Row]:
    values, keys = strings(columns.values), [None] * columns.count
    if columns.key is not None:
        keys = strings(columns.key)
    properties: list[list[tuple[bytes, bytes]]] = [[] for _ in range(columns.count)]
    if columns.properties is not None:
        names, items = strings(columns.properties.names), strings(columns.properties.values)
        offsets = columns.properties.offsets.tolist()
        for i in range(columns.count):
            properties[i] = list(zip(names, items, strict=True))[offsets[i] : offsets[i + 1]]  # type: ignore[arg-type]
    return list(
        zip(
            columns.batch_index.tolist(),
            values,
            keys,
            properties,
            columns.event_time.tolist(),
            columns.sequence_id.tolist(),
            strict=True,
        )
    )


Read = Callable[[], "list[Row] | None"]


def paths(entry: Entry) -> dict[str, Read]:
    """Each path that may read one batch: its rows, or None where it declines."""
    info, metadata, payload = entry
    count, base = metadata.num_messages_in_batch, metadata.sequence_id

    def scanned() -> list[Row] | None:
        fields = scan_batch(payload, count, base)
        return None if fields is None else rows_of(to_columns(info, payload, fields))

    def uniform() -> list[Row] | None:
        read = decode._uniform([entry])
        return None if read is None else rows_of(read[0])

    return {
        "walk": lambda: rows_of(to_columns(info, payload, walk_batch(payload, count, base))),
        "scan": scanned,
        "uniform": uniform,
        "entries": lambda: rows_of(decode_entries([entry])[0]),
    }


def check(batches: list[Batch]) -> None:
    """Every path gives each batch's rows as written, or fails as it must."""
    entries = [b.entry(i) for i, b in enumerate(batches)]
    for one, entry in zip(batches, entries, strict=True):
        for name, read in paths(entry).items():
            _agrees(name, read, one.rows(), one.too_late())
    late = any(b.too_late() for b in batches)
    written = [row for b in batches for row in b.rows()]

    def together() -> list[Row]:
        return [row for part in decode_entries(entries) for row in rows_of(part)]

    def as_group() -> list[Row] | None:
        whole = decode_group(entries)
        return None if whole is None else rows_of(whole)

    _agrees("entries together", together, written, late)
    if len(entries) > 1:
        _agrees("group", as_group, written, late)


def _agrees(name: str, read: Read, written: list[Row], late: bool) -> None:
    try:
        found = read()
    except CorruptPayloadError as exc:
        assert late and "event time" in str(exc), f"{name}: {exc}"
        return
    if found is not None:
        assert not late, f"{name} read an event time no timestamp holds"
        assert found == written, name


def check_batches(seed: bytes) -> int:
    """A group generated from ``seed`` through :func:`check`; the batches' messages."""
    batches = group(RandomChooser(random.Random(seed)))
    check(batches)
    return sum(len(b.messages) for b in batches)
