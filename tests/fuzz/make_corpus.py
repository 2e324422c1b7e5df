"""Write the fuzz seed corpus (``corpus/pulsar/*.bin``): streams of MESSAGE frames laid out as
producers lay them out, one file per layout the read path tells apart, and values of every
schema kind the targets type.

    python tests/fuzz/make_corpus.py

The files are kept in the repository; this script says how they were made.
"""

from __future__ import annotations

import base64
import json
import struct
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from support import protobuf_messages  # noqa: E402
from support.schemas import READING, avro_bytes, key_value_layout  # noqa: E402

from pulsar_spark.protocol import compression, pb  # noqa: E402
from pulsar_spark.protocol.framing import encode_payload_frame  # noqa: E402
from pulsar_spark.protocol.payload import encode_payload_section  # noqa: E402

PUBLISHED = 1_764_000_000_000


def reading(n: int) -> dict[str, Any]:
    return {
        "name": f"user-{n}",
        "count": (PUBLISHED + n) << 22 if n % 2 else n,
        "ratio": n / 7,
        "ok": n % 2 == 0,
        "note": None if n % 3 else f"note {n}",
        "at": PUBLISHED + n,
        "tags": ["red", "green"][: n % 3],
        "place": {"city": "Oslo", "zip": n},
    }


def smm(value: bytes, n: int, **fields: Any) -> bytes:
    props = fields.pop("properties", {})
    meta = pb.SingleMessageMetadata(payload_size=len(value), **fields)
    meta.properties.extend(pb.KeyValue(key=k, value=v) for k, v in props.items())
    raw = meta.SerializeToString()
    return struct.pack(">I", len(raw)) + raw + value


def message(entry: int, metadata: pb.MessageMetadata, payload: bytes, **ids: int) -> bytes:
    """A MESSAGE frame of entry ``entry``, compressed as ``metadata`` says, with a checksum."""
    codec = metadata.compression
    if codec != compression.NONE:
        metadata.uncompressed_size = len(payload)
    command = pb.BaseCommand(
        type=pb.BaseCommand.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=1,
            message_id=pb.MessageIdData(
                ledgerId=ids.get("ledger", 7), entryId=entry, partition=ids.get("partition", 0)
            ),
        ),
    )
    section = encode_payload_section(metadata, compression.compress(codec, payload))
    return encode_payload_frame(command, section)


def outer(**fields: Any) -> pb.MessageMetadata:
    props = fields.pop("properties", {})
    meta = pb.MessageMetadata(
        producer_name="fuzz", sequence_id=fields.pop("sequence_id", 1), publish_time=PUBLISHED
    )
    for name, value in fields.items():
        setattr(meta, name, value)
    meta.properties.extend(pb.KeyValue(key=k, value=v) for k, v in props.items())
    return meta


def batch(entry: int, values: list[bytes], codec: int = compression.NONE, **each: Any) -> bytes:
    records = b"".join(smm(v, n, sequence_id=100 * entry + n, **each) for n, v in enumerate(values))
    return message(entry, outer(num_messages_in_batch=len(values), compression=codec), records)


def keyed(entry: int, count: int, codec: int = compression.NONE) -> bytes:
    """Keys (plain, base64, null), two properties, event times, null values, varying sizes."""
    records = b""
    for n in range(count):
        fields: dict[str, Any] = {"sequence_id": 1000 * entry + n, "properties": {"i": str(n)}}
        if n % 5 == 1:
            fields.update(partition_key=base64.b64encode(b"\xffk%d" % n).decode())
            fields.update(partition_key_b64_encoded=True)
        elif n % 7 == 3:
            fields.update(null_partition_key=True)
        else:
            fields.update(partition_key=f"user-{n}", event_time=PUBLISHED + n)
        value = b"v" * (n % 13)
        if n % 11 == 4:
            fields.update(null_value=True)
            value = b""
        records += smm(value, n, **fields)
    return message(entry, outer(num_messages_in_batch=count, compression=codec), records)


def out_of_order(entry: int, count: int) -> bytes:
    """SingleMessageMetadata written with fields out of number order, and values that look
    like records."""
    records = b""
    for n in range(count):
        value = struct.pack(">I", 2) + b"\x18\x01" + b"x" * (n % 3)
        fields = (
            b"\x40"
            + bytes([n])
            + b"\x18"
            + bytes([len(value)])
            + b"\x12\x02k"
            + bytes([48 + n % 10])
        )
        records += struct.pack(">I", len(fields)) + fields + value
    return message(entry, outer(num_messages_in_batch=count), records)


def singles(first: int) -> bytes:
    """One-message entries: keys, properties (one not UTF-8, written by hand), a null value."""
    frames = b""
    for n in range(3):
        meta = outer(partition_key=f"k{n}", event_time=PUBLISHED, properties={"a": str(n)})
        frames += message(first + n, meta, b"single-%d" % n)
    hostile = outer().SerializeToString() + b"\x22\x07\x0a\x01k\x12\x02\xff\xfe"  # 4: KeyValue
    meta = pb.MessageMetadata.FromString(hostile)
    meta.null_value = True
    return frames + message(first + 3, meta, b"")


def chunked(entry: int) -> bytes:
    whole = b"chunk" * 40
    parts = [whole[:100], whole[100:]]
    return b"".join(
        message(
            entry + i,
            outer(
                uuid="fuzz-uuid", num_chunks_from_msg=2, chunk_id=i, total_chunk_msg_size=len(whole)
            ),
            part,
        )
        for i, part in enumerate(parts)
    )


def with_broker_entry(entry: int) -> bytes:
    plain = batch(entry, [b"be-%d" % n for n in range(3)])
    command_size = struct.unpack_from(">I", plain, 4)[0]
    head, section = plain[8 : 8 + command_size], plain[8 + command_size :]
    block = pb.BrokerEntryMetadata(broker_timestamp=PUBLISHED, index=9).SerializeToString()
    section = b"\x0e\x02" + struct.pack(">I", len(block)) + block + section
    body = struct.pack(">I", command_size) + head + section
    return struct.pack(">I", len(body)) + body


def typed(entry: int) -> dict[str, bytes]:
    """Batches whose values are of each schema kind the targets type."""
    avro = [avro_bytes(reading(n), READING) for n in range(6)]
    json_values = [json.dumps({**reading(n), "at": PUBLISHED + n}).encode() for n in range(6)]
    protobuf = [
        protobuf_messages.Reading(
            name=f"r{n}", count=-n, big=2**64 - 1 - n, small=-n
        ).SerializeToString()
        for n in range(6)
    ]
    numbers = [struct.pack(">q", n * 2**40 - 3) for n in range(6)]
    key_value = [key_value_layout(b"key-%d" % n, avro[n]) for n in range(6)]
    return {
        "avro": batch(entry, avro),
        "json": batch(entry + 1, json_values),
        "protobuf": batch(entry + 2, protobuf),
        "int64": batch(entry + 3, numbers),
        "key_value": batch(entry + 4, key_value),
    }


def corpus() -> dict[str, bytes]:
    seeds = {
        "uniform": batch(0, [b"u%03d" % n for n in range(60)]),
        "uniform_groups": b"".join(
            batch(e, [b"g%03d" % n for n in range(30)]) for e in range(1, 4)
        ),
        "keyed_scan": keyed(4, 60),
        "keyed_walk": keyed(5, 9),
        "keyed_groups": keyed(6, 30) + keyed(7, 30),
        "out_of_order": out_of_order(8, 8),
        "singles": singles(10),
        "chunked": chunked(20),
        "broker_entry": with_broker_entry(22),
    }
    for name, codec in (
        ("lz4", compression.LZ4),
        ("zlib", compression.ZLIB),
        ("zstd", compression.ZSTD),
        ("snappy", compression.SNAPPY),
    ):
        seeds[f"keyed_{name}"] = keyed(30, 50, codec)
    seeds.update(typed(40))
    return seeds


def main() -> None:
    target = HERE / "corpus" / "pulsar"
    target.mkdir(parents=True, exist_ok=True)
    for name, data in corpus().items():
        (target / f"{name}.bin").write_bytes(data)
    print(f"{len(corpus())} seeds in {target}")


if __name__ == "__main__":
    main()
