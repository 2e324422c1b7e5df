"""Seeds and mutations: the inputs of the fuzz targets.

Seeds are the golden frames captured from a broker (``tests/data/frames``), the corpus kept
here (``corpus/pulsar``, written by ``make_corpus.py``: every batch layout and schema the read
path knows) and TubeMQ's golden frames (``support.tubemq_golden``). A mutation changes one
seed at one layer of a Pulsar frame, and rebuilds the layers around it so that sizes and
checksums hold and the change reaches the decoder meant:

- ``frame``: the bytes as they come off the socket;
- ``command``: the MESSAGE command (its message id set to an edge value, or its bytes);
- ``metadata``: the MessageMetadata's bytes, or a field appended with an edge value (the last
  value of a field is the one protobuf keeps);
- ``payload``: the decompressed payload (recompressed with the entry's codec, its size
  updated), or one SingleMessageMetadata of a batch given an extra field;

each with byte flips, edge values, cuts, insertions and copies, or a splice with another seed.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import crc32c
from google.protobuf.message import DecodeError
from support import tubemq_golden
from support.decoding import wire_varint

from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.framing import FrameDecoder

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
GOLDEN = HERE.parent / "data" / "frames"
EDGES = [
    0,
    1,
    0x7F,
    0x80,
    0xFF,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**55,
    2**56,
    2**63 - 1,
    2**63,
    2**64 - 1,
]
EDGE_BYTES = [b"\x00", b"\x7f", b"\x80", b"\xff", b"\xfe", b"\xc3", b"\x0e\x01", b"\x0e\x02"]
_U32 = struct.Struct(">I")


def pulsar_seeds() -> list[bytes]:
    """Every Pulsar seed: golden MESSAGE frames, then the corpus's streams of frames."""
    files = sorted(GOLDEN.glob("*.bin")) + sorted((CORPUS / "pulsar").glob("*.bin"))
    return [f.read_bytes() for f in files]


def tubemq_seeds() -> list[bytes]:
    """TubeMQ's golden frames: requests and replies captured from a cluster."""
    return [value for name, value in vars(tubemq_golden).items() if name.isupper()]


def mutate_bytes(rng: random.Random, data: bytes, others: list[bytes]) -> bytes:
    """``data`` with one to four changes."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(out) + 1)
        kind = rng.randrange(8)
        if kind == 0 and out:
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1 and out:
            out[min(at, len(out) - 1)] = rng.choice(EDGE_BYTES)[0]
        elif kind == 2:
            del out[at : at + rng.choice((1, 2, 4, 8, 64, len(out)))]
        elif kind == 3:
            out[at:at] = rng.choice((rng.randbytes(rng.randint(1, 8)), rng.choice(EDGE_BYTES)))
        elif kind == 4:
            out[at : at + 10] = wire_varint(rng.choice(EDGES))
        elif kind == 5 and len(out) >= 4:
            at = min(at, len(out) - 4)
            out[at : at + 4] = _U32.pack(rng.choice(EDGES) & 0xFFFFFFFF)
        elif kind == 6 and out:  # a copy of a piece of itself
            start = rng.randrange(len(out))
            out[at:at] = out[start : start + rng.randint(1, 32)]
        elif kind == 7 and others:  # a piece of another seed
            other = rng.choice(others)
            start = rng.randrange(len(other) + 1)
            out[at:] = other[start:]
    return bytes(out)


def appended_field(rng: random.Random, message: bytes, fields: int) -> bytes:
    """``message`` (protobuf bytes) with one more field: a varint of an edge value, or a short
    string (bytes that are not UTF-8, sometimes)."""
    number = rng.randint(1, fields)
    if rng.random() < 0.6:
        return message + wire_varint(number << 3) + wire_varint(rng.choice(EDGES))
    text = rng.choice((b"", b"x", b"\xff", b"k\xc3", b"\x00" * 3, rng.randbytes(5)))
    return message + wire_varint(number << 3 | 2) + wire_varint(len(text)) + text


# --- Pulsar frames, layer by layer ------------------------------------------------------------


def split_frames(stream: bytes) -> list[tuple[pb.BaseCommand, bytes | None]]:
    try:
        return [
            (f.command, None if f.payload is None else bytes(f.payload))
            for f in FrameDecoder().feed(stream)
        ]
    except PulsarSparkError:
        return []


def frame(command: bytes, section: bytes | None) -> bytes:
    """A frame of a serialized command and a payload section."""
    body = _U32.pack(len(command)) + command + (section or b"")
    return _U32.pack(len(body)) + body


class Section:
    """A payload section taken apart: broker-entry block, checksum or not, metadata, payload."""

    def __init__(self, section: bytes | memoryview) -> None:
        raw = bytes(section)
        self.broker_entry = b""
        pos = 0
        if raw[:2] == b"\x0e\x02":
            size = _U32.unpack_from(raw, 2)[0]
            self.broker_entry, pos = raw[: 6 + size], 6 + size
        self.checksum = raw[pos : pos + 2] == b"\x0e\x01"
        pos += 6 if self.checksum else 0
        size = _U32.unpack_from(raw, pos)[0]
        self.metadata = raw[pos + 4 : pos + 4 + size]
        self.payload = raw[pos + 4 + size :]

    def bytes(self) -> bytes:
        covered = _U32.pack(len(self.metadata)) + self.metadata + self.payload
        checked = b"\x0e\x01" + _U32.pack(crc32c.crc32c(covered)) if self.checksum else b""
        return self.broker_entry + checked + covered


def mutate_pulsar(rng: random.Random, seed: bytes, others: list[bytes]) -> bytes:
    """A mutation of one of ``seed``'s frames at one layer, the others rebuilt around it."""
    frames = split_frames(seed)
    with_payload = [i for i, (_, section) in enumerate(frames) if section]
    if not with_payload or rng.random() < 0.2:
        return mutate_bytes(rng, seed, others)
    index = rng.choice(with_payload)
    command, raw = frames[index]
    assert raw is not None
    layer = rng.choice((_command, _metadata, _metadata, _payload, _payload, _payload))
    try:
        command_bytes, section = layer(rng, command, Section(raw), others)
    except (PulsarSparkError, DecodeError, struct.error, IndexError, ValueError):
        return mutate_bytes(rng, seed, others)
    return b"".join(
        frame(command_bytes, section) if i == index else frame(c.SerializeToString(), s)
        for i, (c, s) in enumerate(frames)
    )


def _command(
    rng: random.Random, command: pb.BaseCommand, section: Section, others: list[bytes]
) -> tuple[bytes, bytes | None]:
    changed = pb.BaseCommand()
    changed.CopyFrom(command)
    message_id = changed.message.message_id
    if rng.random() < 0.5:
        setattr(message_id, rng.choice(("ledgerId", "entryId")), rng.choice(EDGES))
        return changed.SerializeToString(), section.bytes()
    return mutate_bytes(rng, changed.SerializeToString(), others), section.bytes()


def _metadata(
    rng: random.Random, command: pb.BaseCommand, section: Section, others: list[bytes]
) -> tuple[bytes, bytes | None]:
    if rng.random() < 0.5:
        section.metadata = appended_field(rng, section.metadata, 30)
    else:
        section.metadata = mutate_bytes(rng, section.metadata, others)
    return command.SerializeToString(), section.bytes()


def _payload(
    rng: random.Random, command: pb.BaseCommand, section: Section, others: list[bytes]
) -> tuple[bytes, bytes | None]:
    metadata = pb.MessageMetadata.FromString(section.metadata)
    codec = metadata.compression
    data = compression.decompress(codec, section.payload, metadata.uncompressed_size)
    if metadata.HasField("num_messages_in_batch") and rng.random() < 0.5:
        data = _record_field(rng, data)
    else:
        data = mutate_bytes(rng, data, others)
    section.payload = compression.compress(codec, data)
    if codec != compression.NONE:
        metadata.uncompressed_size = len(data)
    section.metadata = metadata.SerializeToString()
    return command.SerializeToString(), section.bytes()


def _record_field(rng: random.Random, batch: bytes) -> bytes:
    """``batch`` with one of its records' SingleMessageMetadata given one more field."""
    starts = []
    pos = 0
    while pos + 4 <= len(batch):
        size = _U32.unpack_from(batch, pos)[0]
        smm = pb.SingleMessageMetadata.FromString(batch[pos + 4 : pos + 4 + size])
        starts.append(pos)
        pos += 4 + size + smm.payload_size
    at = rng.choice(starts)
    size = _U32.unpack_from(batch, at)[0]
    smm = appended_field(rng, batch[at + 4 : at + 4 + size], 10)
    return batch[:at] + _U32.pack(len(smm)) + smm + batch[at + 4 + size :]
