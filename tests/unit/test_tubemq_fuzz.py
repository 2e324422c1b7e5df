"""Fuzzing the TubeMQ frame decoder and what reads its frames: random bytes, random frames and
mutated golden frames, fed in random pieces. Each input must end in complete frames or one of
the package's own errors (a ProtocolError, or the Java exception a response carries), never
another exception, a hang or unbounded buffering. Seeded, and bounded to about a second per
test."""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable, Iterator

from support import tubemq_golden as golden

from pulsar_spark.errors import ProtocolError
from pulsar_spark.tubemq.errors import TubeMQRemoteCallError
from pulsar_spark.tubemq.wire import messages, rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import FRAME_TOKEN, Frame, FrameDecoder

SECONDS = 1.0
MAX_FRAME = 64 * 1024  # a small limit, so that no input can make the decoder buffer much
GOLDEN = [value for name, value in vars(golden).items() if name.isupper()]
CLEAN = (ProtocolError, TubeMQRemoteCallError)


def rounds(seed: int) -> Iterator[random.Random]:
    """One seeded generator, handed out until the time budget is spent (at least 200 times)."""
    rng = random.Random(seed)
    deadline = time.monotonic() + SECONDS
    count = 0
    while count < 200 or time.monotonic() < deadline:
        count += 1
        yield rng


def pieces(rng: random.Random, data: bytes) -> Iterator[bytes]:
    """``data`` cut at random places."""
    pos = 0
    while pos < len(data):
        step = rng.choice((1, 2, 3, 7, 12, 64, 1000, len(data)))
        yield data[pos : pos + step]
        pos += step


def decode_all(rng: random.Random, data: bytes, use: Callable[[Frame], None]) -> None:
    """Feed ``data`` in random pieces; pass each complete frame to ``use``. Only the
    package's own errors may come out, and nothing beyond one frame's limit is buffered."""
    decoder = FrameDecoder(MAX_FRAME)
    try:
        for piece in pieces(rng, data):
            for frame in decoder.feed(piece):
                assert sum(len(c) for c in frame.chunks) <= MAX_FRAME
                use(frame)
            assert decoder.buffered <= len(data)
        decoder.eof()
    except CLEAN:
        return


def read_response(frame: Frame) -> None:
    """What a read does with a frame (the response, a GetMessage reply's messages found in its
    bytes at once), which must end as the protobuf runtime's reading of it does: the same
    messages and fields, or the same error."""
    try:
        runtime = rpc.decode_response(frame)
        if isinstance(runtime.message, broker_pb.GetMessageResponseB2C):
            decoded = messages.decode_messages(runtime.message)
            del runtime.message.messages[:]
            expected: object = messages.GetMessageReply(runtime.message, decoded)
        else:
            expected = runtime.message
    except CLEAN as exc:
        expected = type(exc)
    try:
        got: object = rpc.decode_get_message(frame).message
    except CLEAN as exc:
        got = type(exc)
    assert comparable(got) == comparable(expected)


def comparable(outcome: object) -> object:
    """A reply with its messages as rows (their columns are arrays), anything else as is."""
    if isinstance(outcome, messages.GetMessageReply):
        return outcome.response, outcome.messages.rows()
    return outcome


def mutate(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(5)
        at = rng.randrange(len(out) + 1)
        if kind == 0 and out:  # flip a byte
            out[min(at, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif kind == 1:  # cut the rest off
            del out[at:]
        elif kind == 2:  # insert random bytes
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif kind == 3 and len(out) >= 4:  # overwrite an integer with an edge value
            at = min(at, len(out) - 4)
            edge = rng.choice((0, 1, -1, 2**31 - 1, -(2**31), MAX_FRAME, MAX_FRAME + 1))
            out[at : at + 4] = struct.pack(">i", edge)
        else:  # repeat a slice
            end = rng.randint(at, len(out))
            out[at:at] = out[at:end]
    return bytes(out)


def test_random_bytes() -> None:
    for rng in rounds(1):
        decode_all(rng, rng.randbytes(rng.randint(0, 300)), read_response)


def test_random_frames_with_a_valid_token() -> None:
    for rng in rounds(2):
        count = rng.choice((0, 1, 2, 5, -1, 3585, 2**31 - 1))
        data = struct.pack(">Iii", FRAME_TOKEN, rng.randrange(2**31), count)
        for _ in range(max(0, min(count, 6))):
            size = rng.choice((0, 1, 10, 200, -1, MAX_FRAME + 1))
            data += struct.pack(">i", size) + rng.randbytes(max(0, min(size, 300)))
        decode_all(rng, data, read_response)


def test_mutated_golden_frames() -> None:
    for rng in rounds(3):
        frames = rng.sample(GOLDEN, rng.randint(1, 3))
        decode_all(rng, mutate(rng, b"".join(frames)), read_response)


def test_mutated_replies_of_many_messages() -> None:
    for rng in rounds(5):
        reply = broker_pb.GetMessageResponseB2C(success=True, errCode=200, currOffset=28)
        for i in range(rng.randint(1, 30)):
            value = rng.randbytes(rng.choice((0, 1, 20, 130, 300)))
            attributes = rng.choice((None, "$msgType$=t", "k=v,j=w"))
            payload, flag = messages.encode_payload(value, attributes)
            reply.messages.add(
                messageId=rng.choice((i, 2**50 + i, 2379089522840305664 + i)),
                checkSum=messages.checksum(payload),
                payLoadData=payload,
                flag=flag,
            )
        call = rpc.CALLS[rpc.Method.GET_MESSAGE]
        frame = rpc.encode_response(1, call, reply)
        decode_all(rng, frame if rng.random() < 0.2 else mutate(rng, frame), read_response)


def test_golden_frames_in_random_pieces_decode_whole() -> None:
    for rng in rounds(4):
        chosen = rng.sample(GOLDEN, rng.randint(1, 4))
        decoder = FrameDecoder()
        found = [f for piece in pieces(rng, b"".join(chosen)) for f in decoder.feed(piece)]
        assert [len(f.chunks) for f in found] == [struct.unpack_from(">i", g, 8)[0] for g in chosen]
        assert decoder.buffered == 0
