"""TubeMQ decoder throughput on one core: GetMessage reply frames to Arrow record batches.

Builds the frames a broker sends for GetMessage (replies of up to 512 KiB, the test cluster's
``transferSize``), then times what a read task does with them: frame decoding, the RPC
envelope, the reply's messages (checksums, attributes) and the record batch. Layouts:

- plain: 100-byte values, no attributes (what the Java producer of ``bench_tubemq`` writes);
- typed: ``$msgType$`` (one of 3) and ``$msgTime$`` (one minute), as producers that set
  ``putSystemHeader`` send them;
- traced: typed plus a ``trace`` attribute unique to each message, values of 50 to 150 bytes.

    python benchmarks/bench_tubemq_decode.py [--messages 500000]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import report

from pulsar_spark.tubemq.arrow import messages_to_batch
from pulsar_spark.tubemq.client.consumer import Batch
from pulsar_spark.tubemq.wire import messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import FrameDecoder

REPLY_BYTES = 512 * 1024
INDEX_ENTRY = 28

Attributes = Callable[[int], str | None]
LAYOUTS: tuple[tuple[str, Attributes, Callable[[int], int]], ...] = (
    ("plain", lambda i: None, lambda i: 100),
    ("typed", lambda i: f"$msgType$=type{i % 3},$msgTime$=202611281200", lambda i: 100),
    (
        "traced",
        lambda i: f"$msgType$=type{i % 3},$msgTime$=202611281200,trace=t-{i:012d}",
        lambda i: 50 + i * 37 % 101,
    ),
)


def reply_frames(count: int, attributes: Attributes, size: Callable[[int], int]) -> bytes:
    """GetMessage reply frames holding ``count`` messages, each reply up to REPLY_BYTES."""
    call = rpc.CALLS[rpc.Method.GET_MESSAGE]
    frames = []
    reply = broker_pb.GetMessageResponseB2C(success=True, errCode=200, errMsg="OK")
    used = 0
    for i in range(count):
        data, flag = messages.encode_payload(b"v" * size(i), attributes(i))
        if used + len(data) > REPLY_BYTES:
            frames.append(rpc.encode_response(len(frames), call, reply))
            reply = broker_pb.GetMessageResponseB2C(success=True, errCode=200, errMsg="OK")
            used = 0
        reply.messages.add(
            messageId=i, checkSum=messages.checksum(data), payLoadData=data, flag=flag
        )
        used += len(data)
    frames.append(rpc.encode_response(len(frames), call, reply))
    return b"".join(frames)


def run(frames: bytes, count: int) -> float:
    """Decode ``frames`` as a read task does; messages per second."""
    start = time.perf_counter()
    rows = 0
    offset = 0
    for frame in FrameDecoder().feed(frames):
        reply = rpc.decode_get_message(frame).message
        assert isinstance(reply, messages.GetMessageReply)
        decoded = reply.messages
        batch = Batch(offset, decoded, offset + INDEX_ENTRY * len(decoded))
        offsets = batch.message_offsets()
        assert offsets is not None
        rows += messages_to_batch("bench", "1:bench:0", offsets, decoded).num_rows
        offset += INDEX_ENTRY * len(decoded)
    seconds = time.perf_counter() - start
    assert rows == count, f"decoded {rows} of {count} messages"
    return count / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=500_000)
    args = parser.parse_args()
    rows = []
    for label, attributes, size in LAYOUTS:
        frames = reply_frames(args.messages, attributes, size)
        rate = max(run(frames, args.messages) for _ in range(3))
        print(f"  {label:8s} {rate:>12,.0f} msg/s", flush=True)
        rows.append([label, round(rate)])
    report(
        "bench_tubemq_decode", ["layout", "msg/s (best of 3)"], rows, {"messages": args.messages}
    )


if __name__ == "__main__":
    main()
