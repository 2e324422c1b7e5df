"""Decoder throughput: raw MESSAGE frames to message columns (and to Arrow) on one core.

Builds batch frames the way Pulsar producers lay them out — 1000 messages per entry, each
SingleMessageMetadata carrying its own sequence id — then times the full decode path a reader
runs per entry: frame decoding, checksum, metadata, decompression, batch decoding; then the
same plus Arrow record batches as a read builds them (up to 65,536 rows each). Layouts:

- uniform: 100-byte values, no keys (the uniform path);
- keyed: every message keyed (``user-<n>``), two properties of which one (a trace id) is
  unique per message, an event time, values of 50 to 150 bytes (the scan); also in batches of
  100, as producers at moderate rates send them (their batches close on time, not count);
- large: the keyed layout with 10 KB values, LZ4, 12 messages per entry (a producer's
  default 128 KiB batch);
- not batched: the keyed layout, one message per entry (``batchingEnabled=false``).

    python benchmarks/bench_decode.py [--entries 200]
"""

from __future__ import annotations

import argparse
import os
import random
import struct
import time
import uuid
from collections.abc import Iterator

from pulsar_spark.arrow.decode import record_batches
from pulsar_spark.protocol import compression, pb
from pulsar_spark.protocol.decode import Entry, decode_entries, decode_group, entry_info, is_batch
from pulsar_spark.protocol.framing import FrameDecoder, encode_payload_frame
from pulsar_spark.protocol.messages import MessageColumns
from pulsar_spark.protocol.payload import encode_payload_section, parse_payload_section
from pulsar_spark.protocol.read_stage import MAX_RUN, group_full
from pulsar_spark.protocol.single_runs import SingleRun

MESSAGES = 1000
SIZE = 100


def batch_frame(
    entry_id: int, *, keyed: bool, codec: int, size: int = SIZE, messages: int = MESSAGES
) -> bytes:
    """One entry: a batch of ``messages``, or with ``messages=0`` one message not batched."""
    rng = random.Random(entry_id)
    records = []
    metadata = pb.MessageMetadata(
        producer_name="bench",
        sequence_id=entry_id * max(messages, 1),
        publish_time=1_700_000_000_000,
        compression=codec,  # type: ignore[arg-type]
    )
    for i in range(max(messages, 1)):
        value_size = rng.randint(size // 2, size * 3 // 2) if keyed else size
        smm = pb.SingleMessageMetadata(payload_size=value_size, sequence_id=entry_id * messages + i)
        fields = smm if messages else metadata
        if keyed:
            fields.partition_key = f"user-{rng.randint(0, 99_999)}"
            fields.properties.add(key="source", value="bench")
            fields.properties.add(key="trace", value=str(uuid.UUID(int=rng.getrandbits(128))))
            fields.event_time = 1_700_000_000_000 + i
        value = os.urandom(value_size)
        body = smm.SerializeToString()
        records.append(struct.pack(">I", len(body)) + body + value if messages else value)
    raw = b"".join(records)
    if messages:
        metadata.num_messages_in_batch = messages
    metadata.uncompressed_size = len(raw)
    command = pb.BaseCommand(
        type=pb.BaseCommand.MESSAGE,
        message=pb.CommandMessage(
            consumer_id=1, message_id=pb.MessageIdData(ledgerId=1, entryId=entry_id)
        ),
    )
    payload = compression.compress(codec, raw)
    return encode_payload_frame(command, encode_payload_section(metadata, payload))


def run(frames: bytes, messages: int, *, arrow: bool) -> float:
    start = time.perf_counter()
    columns = decoded(frames)
    if arrow:
        for _ in record_batches(columns, "persistent://public/default/bench", -1):
            pass
    else:
        for _ in columns:
            pass
    elapsed = time.perf_counter() - start
    return messages / elapsed


def decoded(frames: bytes) -> Iterator[MessageColumns]:
    """Every entry's columns, decoded together as the reader does: one-message entries in runs,
    batched entries in groups as large (see ``group_full``)."""
    run = SingleRun()
    group: list[Entry] = []
    messages = size = 0
    for frame in FrameDecoder().feed(frames):
        message_id = frame.command.message.message_id
        section = parse_payload_section(frame.payload or b"")
        metadata = section.metadata
        data = compression.decompress(
            metadata.compression, section.payload, metadata.uncompressed_size
        )
        info = entry_info(metadata, message_id.ledgerId, message_id.entryId, -1)
        if is_batch(metadata):
            group.append((info, metadata, data))
            messages += metadata.num_messages_in_batch
            size += len(section.payload)
            if group_full(messages, size):
                yield from _group(group)
                group, messages, size = [], 0, 0
            continue
        run.add(info, metadata, data)
        if len(run) >= MAX_RUN:
            yield run.take()
    if group:
        yield from _group(group)
    if len(run):
        yield run.take()


def _group(entries: list[Entry]) -> list[MessageColumns]:
    """A group as the reader decodes one whose every message it reads."""
    together = decode_group(entries)
    return decode_entries(entries) if together is None else [together]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=200)
    args = parser.parse_args()
    print(
        f"{args.entries * MESSAGES:,} messages (a twentieth in the slow cases), in batches of"
        " 1000 unless a case says otherwise; msg/s on one core (best of 3)"
    )
    # the last field: the share of the run's messages a slow case decodes
    for label, keyed, codec, size, per_entry, share in (
        ("uniform, no compression", False, compression.NONE, SIZE, MESSAGES, 1),
        ("uniform, lz4", False, compression.LZ4, SIZE, MESSAGES, 1),
        ("keyed+2 props, no compression", True, compression.NONE, SIZE, MESSAGES, 1),
        ("keyed+2 props, lz4", True, compression.LZ4, SIZE, MESSAGES, 1),
        ("keyed+2 props, 100 per batch", True, compression.NONE, SIZE, 100, 1),
        ("keyed+2 props, 1 per batch", True, compression.NONE, SIZE, 1, 20),
        ("keyed+2 props, 10 KB values, lz4, 12/entry", True, compression.LZ4, 10_000, 12, 20),
        ("keyed+2 props, not batched", True, compression.NONE, SIZE, 0, 20),
    ):
        entries = args.entries * MESSAGES // max(per_entry, 1) // share
        frames = b"".join(
            batch_frame(e, keyed=keyed, codec=codec, size=size, messages=per_entry)
            for e in range(entries)
        )
        messages = entries * max(per_entry, 1)
        columns = max(run(frames, messages, arrow=False) for _ in range(3))
        arrow = max(run(frames, messages, arrow=True) for _ in range(3))
        print(f"  {label:42s} columns {columns:>12,.0f}   + arrow {arrow:>12,.0f}")


if __name__ == "__main__":
    main()
