"""TubeMQ frames: exact bytes out of encode_frame, exact frames out of FrameDecoder."""

from __future__ import annotations

import pytest

from pulsar_spark.errors import FrameTooLargeError, RemoteProtocolError, TruncatedFrameError
from pulsar_spark.tubemq.errors import BadFrameTokenError
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import (
    CHUNK_SIZE,
    FRAME_TOKEN,
    MAX_CHUNKS,
    MAX_FRAME_DATA,
    Frame,
    FrameDecoder,
    encode_frame,
)
from pulsar_spark.tubemq.wire.send_acks import scan_acks

# A frame of serial number 5 with the two chunks b"ab" and b"" (hand-built).
TWO_CHUNKS = bytes.fromhex("ff7ff4fe 00000005 00000002 00000002 6162 00000000")


def test_constants_are_the_java_client_values() -> None:
    assert FRAME_TOKEN == 0xFF7FF4FE
    assert CHUNK_SIZE == 8192
    assert MAX_CHUNKS == 3584
    assert MAX_FRAME_DATA == 28 * 1024 * 1024


def test_encode_small_frame_exact_bytes() -> None:
    assert encode_frame(1, b"hello") == bytes.fromhex("ff7ff4fe 00000001 00000001 00000005") + (
        b"hello"
    )


def test_encode_empty_data_writes_one_empty_chunk() -> None:
    assert encode_frame(7, b"") == bytes.fromhex("ff7ff4fe 00000007 00000001 00000000")


def test_encode_negative_serial_number_is_twos_complement() -> None:
    assert encode_frame(-2, b"x")[:12] == bytes.fromhex("ff7ff4fe fffffffe 00000001")


def test_encode_cuts_at_8_kib() -> None:
    data = bytes(range(256)) * 65  # 16640 bytes: 8192 + 8192 + 256
    frame = encode_frame(3, data)
    assert frame[:12] == bytes.fromhex("ff7ff4fe 00000003 00000003")
    assert frame[12:16] == (8192).to_bytes(4, "big")
    assert frame[16 + 8192 : 20 + 8192] == (8192).to_bytes(4, "big")
    assert frame[20 + 16384 : 24 + 16384] == (256).to_bytes(4, "big")
    assert len(frame) == 12 + 3 * 4 + len(data)
    (decoded,) = FrameDecoder().feed(frame)
    assert decoded.serial_no == 3
    assert [len(c) for c in decoded.chunks] == [8192, 8192, 256]
    assert decoded.data == data


def test_encode_refuses_what_the_wire_cannot_carry() -> None:
    with pytest.raises(ValueError, match="does not fit in 32 bits"):
        encode_frame(2**31, b"")
    with pytest.raises(ValueError, match=f"exceed the {MAX_FRAME_DATA} bytes"):
        encode_frame(1, bytes(MAX_FRAME_DATA + 1))


def test_decode_keeps_chunks_as_they_came() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(TWO_CHUNKS) == [Frame(5, (b"ab", b""))]
    assert decoder.buffered == 0
    decoder.eof()


def test_decode_frame_without_chunks() -> None:
    assert FrameDecoder().feed(bytes.fromhex("ff7ff4fe 00000009 00000000")) == [Frame(9, ())]


def test_byte_by_byte_gives_each_frame_on_its_last_byte() -> None:
    stream = TWO_CHUNKS + encode_frame(6, b"xyz") + encode_frame(7, b"")
    decoder = FrameDecoder()
    got = []
    ends = []
    for i in range(len(stream)):
        frames = decoder.feed(stream[i : i + 1])
        if frames:
            ends.append(i + 1)
            got.extend(frames)
    assert got == [Frame(5, (b"ab", b"")), Frame(6, (b"xyz",)), Frame(7, (b"",))]
    assert ends == [len(TWO_CHUNKS), len(TWO_CHUNKS) + 19, len(stream)]
    assert decoder.buffered == 0


def test_several_frames_in_one_feed_and_a_split_tail() -> None:
    stream = encode_frame(1, b"one") + encode_frame(2, b"two")
    decoder = FrameDecoder()
    assert decoder.feed(stream[:-2]) == [Frame(1, (b"one",))]
    assert decoder.buffered == 17
    with pytest.raises(TruncatedFrameError, match=r"\(17 bytes pending\)"):
        decoder.eof()
    assert decoder.feed(stream[-2:]) == [Frame(2, (b"two",))]
    decoder.eof()


def test_bad_token_is_refused_on_the_header() -> None:
    with pytest.raises(BadFrameTokenError, match="frame token 0x00000010 is not 0xff7ff4fe"):
        FrameDecoder().feed(bytes.fromhex("00000010 00000001 00000001"))


def test_pulsar_frame_is_not_a_tubemq_frame() -> None:
    # A Pulsar PING frame: total size 8, command size 4, ...
    with pytest.raises(BadFrameTokenError, match="frame token 0x00000008"):
        FrameDecoder().feed(bytes.fromhex("00000008 00000004 08121a00"))


def test_too_many_chunks_is_refused_before_any_chunk() -> None:
    header = FRAME_TOKEN.to_bytes(4, "big") + bytes(4) + (MAX_CHUNKS + 1).to_bytes(4, "big")
    with pytest.raises(FrameTooLargeError, match="frame of 3585 chunks exceeds the limit of 3584"):
        FrameDecoder().feed(header)


def test_negative_chunk_count_is_refused() -> None:
    with pytest.raises(RemoteProtocolError, match=r"negative chunk count \(-1\)"):
        FrameDecoder().feed(bytes.fromhex("ff7ff4fe 00000001 ffffffff"))


def test_oversize_chunk_is_refused_before_its_bytes_arrive() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    with pytest.raises(FrameTooLargeError, match="chunk of 101 bytes takes the frame past"):
        decoder.feed(bytes.fromhex("ff7ff4fe 00000004 00000001 00000065"))


def test_chunks_adding_up_past_the_limit_are_refused() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    stream = (
        bytes.fromhex("ff7ff4fe 00000004 00000002 00000060")
        + bytes(0x60)
        + (bytes.fromhex("00000005"))
    )
    with pytest.raises(FrameTooLargeError, match="frame 4: a chunk of 5 bytes"):
        decoder.feed(stream)


def test_negative_chunk_length_is_refused() -> None:
    with pytest.raises(RemoteProtocolError, match="frame 1: negative chunk length -2"):
        FrameDecoder().feed(bytes.fromhex("ff7ff4fe 00000001 00000001 fffffffe"))


def test_truncated_inside_a_chunk_waits_then_eof_raises() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(TWO_CHUNKS[:15]) == []
    assert decoder.buffered == 15
    with pytest.raises(TruncatedFrameError, match=r"\(15 bytes pending\)"):
        decoder.eof()


def send_ack(serial_no: int, message_id: int, offset: int) -> bytes:
    """The frame of a broker's reply that stored a message."""
    reply = broker_pb.SendMessageResponseB2P(
        success=True,
        errCode=200,
        errMsg=str(message_id),
        requireAuth=False,
        messageId=message_id,
        appendTime=1795921612705,
        appendOffset=offset,
    )
    return rpc.encode_response(serial_no, rpc.CALLS[rpc.Method.SEND_MESSAGE], reply)


def test_feed_scanned_gives_the_scan_then_the_frames_after() -> None:
    """Acks read by scan_acks, the exception frame that stops it as a Frame, then an ack after
    it as a Frame too; the part of a frame still to come stays buffered for the next feed."""
    exception = rpc.encode_exception(3, "java.lang.Exception", "boom")
    later, partial = send_ack(4, 40, 4), send_ack(5, 50, 5)
    decoder = FrameDecoder()
    acks = send_ack(1, 10, 1) + send_ack(2, 20, 2)
    found, frames = decoder.feed_scanned(acks + exception + later + partial[:30], scan_acks)
    assert found == {1: (10, 1), 2: (20, 2)}
    assert frames == [Frame(3, (exception[16:],)), Frame(4, (later[16:],))]
    assert decoder.buffered == 30
    assert decoder.feed_scanned(partial[30:-1], scan_acks) == ({}, [])
    assert decoder.buffered == len(partial) - 1
    assert decoder.feed_scanned(partial[-1:] + send_ack(6, 60, 6), scan_acks) == (
        {5: (50, 5), 6: (60, 6)},
        [],
    )
    assert decoder.buffered == 0
    decoder.eof()


def test_feed_scanned_with_a_scan_that_reads_nothing_is_feed() -> None:
    """A scan that leaves the buffer where it is: the frames come as feed gives them."""
    decoder = FrameDecoder()
    found, frames = decoder.feed_scanned(TWO_CHUNKS + b"\xff", lambda buffer, start: (start, 7))
    assert (found, frames) == (7, [Frame(5, (b"ab", b""))])
    assert decoder.buffered == 1
