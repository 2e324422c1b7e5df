"""Decoder throughput: raw MESSAGE frames to message columns (and to Arrow) on one core.

Builds batch frames the way Pulsar producers lay them out — 1000 messages of 100 bytes per
entry, each SingleMessageMetadata carrying its own sequence id — then times the full decode
path a reader runs per entry: frame decoding, checksum, metadata, decompression, batch
decoding. Two layouts are timed: uniform (equal-size payloads, no keys: the fast path) and
mixed (varying sizes, keys and properties: the general path). Also times Arrow conversion.

    python benchmarks/bench_decode.py [--entries 200]
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import time

from pulsar_spark.arrow.decode import to_record_batch
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.decode import decode_entry, entry_info
from pulsar_spark.protocol.framing import FrameDecoder, encode_payload_frame
from pulsar_spark.protocol.payload import encode_payload_section, parse_payload_section

MESSAGES = 1000
SIZE = 100


def batch_frame(entry_id: int, *, mixed: bool, codec: int) -> bytes:
    rng = random.Random(entry_id)
    records = []
    for i in range(MESSAGES):
        size = rng.randint(50, 150) if mixed else SIZE
        smm = pb.SingleMessageMetadata(payload_size=size, sequence_id=entry_id * MESSAGES + i)
        if mixed:
            smm.partition_key = f"user-{rng.randint(0, 9999)}"
            smm.properties.add(key="source", value="bench")
            smm.event_time = 1_700_000_000_000 + i
        body = smm.SerializeToString()
        records.append(struct.pack(">I", len(body)) + body + os.urandom(size))
    raw = b"".join(records)
    metadata = pb.MessageMetadata(
        producer_name="bench",
        sequence_id=entry_id * MESSAGES,
        publish_time=1_700_000_000_000,
        num_messages_in_batch=MESSAGES,
        compression=codec,  # type: ignore[arg-type]
        uncompressed_size=len(raw),
    )
    command = pb.BaseCommand(
        type=pb.BaseCommand.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=1, message_id=pb.MessageIdData(ledgerId=1, entryId=entry_id)
        ),
    )
    payload = compression.compress(codec, raw)
    return encode_payload_frame(command, encode_payload_section(metadata, payload))


def run(frames: bytes, entries: int, *, arrow: bool) -> float:
    start = time.perf_counter()
    decoder = FrameDecoder()
    for frame in decoder.feed(frames):
        message_id = frame.command.message.message_id
        section = parse_payload_section(frame.payload or b"")
        metadata = section.metadata
        data = compression.decompress(
            metadata.compression, section.payload, metadata.uncompressed_size
        )
        info = entry_info(metadata, message_id.ledgerId, message_id.entryId, -1)
        columns = decode_entry(info, metadata, data)
        if arrow:
            to_record_batch([columns], "persistent://public/default/bench", -1)
    elapsed = time.perf_counter() - start
    return entries * MESSAGES / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200)
    args = parser.parse_args()
    print(f"{args.entries} entries x {MESSAGES} messages; msg/s on one core (best of 3)")
    for label, mixed, codec in (
        ("uniform, no compression", False, compression.NONE),
        ("uniform, lz4", False, compression.LZ4),
        ("mixed sizes+keys+props, no compression", True, compression.NONE),
        ("mixed sizes+keys+props, lz4", True, compression.LZ4),
    ):
        frames = b"".join(batch_frame(e, mixed=mixed, codec=codec) for e in range(args.entries))
        columns = max(run(frames, args.entries, arrow=False) for _ in range(3))
        arrow = max(run(frames, args.entries, arrow=True) for _ in range(3))
        print(f"  {label:42s} columns {columns:>12,.0f}   + arrow {arrow:>12,.0f}")


if __name__ == "__main__":
    main()
