"""SendMessage acknowledgements read many frames at a time (send_acks): exactly what decoding
each frame gives, and nothing for a frame that is not a stored message's acknowledgement,
which is left whole for FrameDecoder."""

from __future__ import annotations

import random

import pytest

from pulsar_spark.errors import PulsarSparkError, RemoteProtocolError
from pulsar_spark.tubemq.wire import rpc
from pulsar_spark.tubemq.wire._generated import tubemq_broker_pb2 as broker_pb
from pulsar_spark.tubemq.wire.framing import FRAME_TOKEN, Frame, FrameDecoder, encode_frame
from pulsar_spark.tubemq.wire.send_acks import scan_acks

CALL = rpc.CALLS[rpc.Method.SEND_MESSAGE]
APPEND_TIME = 1795921612705
# Frame data of two replies a TubeMQ 2.4 broker sent, and what they acknowledge.
CAPTURED = {
    (3713573055667109888, 0): bytes.fromhex(
        "020801040800180333080d122f080110c8011a1333373133353733303535363637313039383838"
        "200028808080f4cce0d0c43330a19f94aaa2343800"
    ),
    (3713568262114508800, 28): bytes.fromhex(
        "020801040800180333080d122f080110c8011a1333373133353638323632313134353038383030"
        "200028808080c48bd5cfc43330a29f94aaa234381c"
    ),
}
TOKEN = FRAME_TOKEN.to_bytes(4, "big")


def ack(
    serial_no: int,
    message_id: int,
    offset: int,
    *,
    err_msg: str | None = None,
    require_auth: bool | None = False,
    append_time: int = APPEND_TIME,
) -> bytes:
    """The frame of a broker's reply that stored a message."""
    reply = broker_pb.SendMessageResponseB2P(
        success=True,
        errCode=200,
        errMsg=str(message_id) if err_msg is None else err_msg,
        messageId=message_id,
        appendTime=append_time,
        appendOffset=offset,
    )
    if require_auth is not None:
        reply.requireAuth = require_auth
    return rpc.encode_response(serial_no, CALL, reply)


def refusal(serial_no: int) -> bytes:
    """The frame of a broker's reply that refused a message (error 419)."""
    reply = broker_pb.SendMessageResponseB2P(
        success=False, errCode=419, errMsg="topic is busy", requireAuth=False
    )
    return rpc.encode_response(serial_no, CALL, reply)


def decoded_acks(buffer: bytes) -> dict[int, tuple[int, int]]:
    """The acknowledgements in ``buffer`` decoded frame by frame as every reply is."""
    found = {}
    for frame in FrameDecoder().feed(buffer):
        reply = rpc.decode_response(frame).message
        assert isinstance(reply, broker_pb.SendMessageResponseB2P)
        assert (reply.success, reply.errCode) == (True, 200)
        found[frame.serial_no] = (reply.messageId, reply.appendOffset)
    return found


def frames_one_by_one(buffer: bytes) -> list[tuple[int, int, tuple[int, int] | None]]:
    """Each frame FrameDecoder reads from ``buffer`` fed a byte at a time, until it refuses
    one: where it ends, its serial number, and what it acknowledges with errCode 200 when
    decode_response reads it (None when it raises or gives something else)."""
    decoder = FrameDecoder()
    read: list[tuple[int, int, tuple[int, int] | None]] = []
    for at in range(len(buffer)):
        try:
            frames = decoder.feed(buffer[at : at + 1])
        except PulsarSparkError:
            break
        for frame in frames:
            try:
                reply = rpc.decode_response(frame).message
            except PulsarSparkError:
                read.append((at + 1, frame.serial_no, None))
                continue
            stored = isinstance(reply, broker_pb.SendMessageResponseB2P) and reply.errCode == 200
            found = (reply.messageId, reply.appendOffset) if stored else None
            read.append((at + 1, frame.serial_no, found))
    return read


def assert_stops_before(stopper: bytes, left: Frame | None) -> None:
    """Acks, then ``stopper``: the acks come back, and the scan ends where ``stopper`` starts,
    which FrameDecoder then reads as ``left`` (None: not yet complete)."""
    acks = ack(1, 10, 0) + ack(2, 2**60, 128, require_auth=True)
    buffer = acks + stopper + ack(4, 12, 2)
    if left is None:
        buffer = acks + stopper
    end, found = scan_acks(buffer, 0)
    assert end == len(acks)
    assert found == {1: (10, 0), 2: (2**60, 128)}
    decoder = FrameDecoder()
    rest = decoder.feed(buffer[end:])
    if left is None:
        assert rest == []
        assert decoder.buffered == len(stopper)
    else:
        assert rest[0] == left
        assert len(rest) == 2


def generated(count: int) -> tuple[bytes, dict[int, tuple[int, int]]]:
    """``count`` acknowledgement frames with numbers of every varint length the scan reads."""
    rng = random.Random(20240611)
    ids = [0, 1, 127, 128, 2**49, 2**56 - 1, 2**56, 2**63 - 1, 3713573055667109888]
    offsets = [0, 127, 128, 16383, 16384, 2**40, 2**56 - 1]
    parts, expected = [], {}
    for index in range(count):
        serial_no = index - count // 2
        kind = index % 3
        if kind == 0:
            message_id = rng.randrange(128)
        elif kind == 1:
            message_id = rng.randrange(2**49, 2**56)
        else:
            message_id = rng.randrange(2**56, 2**63)
        if index < len(ids):
            message_id = ids[index]
        offset = offsets[index % len(offsets)]
        text = "".join(rng.choice("0123456789abc") for _ in range(index % 31))
        auth = (None, False, True)[(index // 3) % 3]
        parts.append(
            ack(
                serial_no,
                message_id,
                offset,
                err_msg=text,
                require_auth=auth,
                append_time=APPEND_TIME + rng.randrange(2**20),
            )
        )
        expected[serial_no] = (message_id, offset)
    return b"".join(parts), expected


def test_captured_broker_replies() -> None:
    """The two replies a broker sent read as their messages' ids and offsets."""
    buffer = b"".join(encode_frame(serial, data) for serial, data in enumerate(CAPTURED.values()))
    expected = {0: (3713573055667109888, 0), 1: (3713568262114508800, 28)}
    assert decoded_acks(buffer) == expected
    assert scan_acks(buffer, 0) == (len(buffer), expected)


def test_generated_acks_match_decoding_each_frame() -> None:
    """500 acks with 1-, 8- and 9-byte ids, offsets of 1 to 8 bytes, errMsg of 0 to 30 bytes,
    requireAuth absent, false or true, then the captured ones: all read, exactly."""
    buffer, expected = generated(500)
    captured = b"".join(encode_frame(1000 + i, data) for i, data in enumerate(CAPTURED.values()))
    buffer += captured
    expected |= {1000: (3713573055667109888, 0), 1001: (3713568262114508800, 28)}
    assert len(expected) == 502
    end, found = scan_acks(buffer, 0)
    assert end == len(buffer)
    assert found == expected
    assert decoded_acks(buffer) == expected


def test_read_from_a_start_in_a_bytearray() -> None:
    """Bytes already consumed in front are skipped; a bytearray reads as bytes do."""
    frames = ack(7, 99, 5) + ack(8, 2**56 + 3, 2**40)
    consumed = b"\x00\x01" + ack(6, 1, 1)
    buffer = bytearray(consumed + frames)
    assert scan_acks(buffer, len(consumed)) == (
        len(buffer),
        {7: (99, 5), 8: (2**56 + 3, 2**40)},
    )
    assert scan_acks(buffer, 2) == (len(buffer), {6: (1, 1), 7: (99, 5), 8: (2**56 + 3, 2**40)})


def test_negative_serial_numbers() -> None:
    """Serial numbers come back signed, as the frame carries them."""
    buffer = ack(-5, 3, 4) + ack(-(2**31), 5, 6) + ack(2**31 - 1, 7, 8)
    assert scan_acks(buffer, 0) == (len(buffer), {-5: (3, 4), -(2**31): (5, 6), 2**31 - 1: (7, 8)})


def test_stops_at_a_refusal() -> None:
    """A reply with success false and errCode 419 is left to decode_response."""
    assert_stops_before(refusal(3), Frame(3, (refusal(3)[16:],)))


def test_stops_at_an_exception() -> None:
    exception = rpc.encode_exception(3, "java.lang.Exception", "boom")
    assert_stops_before(exception, Frame(3, (exception[16:],)))


def test_stops_at_a_reply_to_another_call() -> None:
    """A GetMessage reply, even one whose bytes would suit a SendMessage reply."""
    reply = broker_pb.GetMessageResponseB2C(success=True, errCode=200, errMsg="OK!", currOffset=9)
    frame = rpc.encode_response(3, rpc.CALLS[rpc.Method.GET_MESSAGE], reply)
    assert_stops_before(frame, Frame(3, (frame[16:],)))
    send_like = ack(3, 11, 1)
    data = send_like[16:].replace(b"\x08\x0d\x12", b"\x08\x11\x12", 1)
    assert data != send_like[16:]
    assert_stops_before(encode_frame(3, data), Frame(3, (data,)))


@pytest.mark.parametrize("kept", [0, 1, 15, 16, 17, 40, 75])
def test_stops_at_a_frame_cut_short(kept: int) -> None:
    """The last frame's bytes partly there: it is left buffered, and the acks come back."""
    whole = ack(3, 3713573055667109888, 28)
    assert len(whole) == 76
    assert_stops_before(whole[:kept], None)


def test_stops_at_a_frame_longer_than_its_reply() -> None:
    """A frame whose chunk holds 5 bytes past the reply: cut where the reply ends, it is not
    complete; whole, decode_response reads it but the scan leaves it."""
    data = ack(3, 11, 1)[16:] + b"extra"
    frame = encode_frame(3, data)
    assert_stops_before(frame[:-5], None)
    assert_stops_before(frame, Frame(3, (data,)))
    assert decoded_acks(frame) == {3: (11, 1)}


@pytest.mark.parametrize("change", [-1, 1])
def test_stops_at_a_body_size_that_disagrees(change: int) -> None:
    """RspResponseBody's size one off, the reply inside it intact: not an ack."""
    data = bytearray(ack(3, 11, 1)[16:])
    size_at = len(rpc.SUCCESS_HEADERS)
    assert data[size_at] == len(data) - size_at - 1
    data[size_at] += change
    frame = encode_frame(3, bytes(data))
    with pytest.raises(RemoteProtocolError):
        decoded_acks(frame)
    assert_stops_before(frame, Frame(3, (bytes(data),)))


def test_stops_at_a_frame_of_several_chunks() -> None:
    """An ack cut into two chunks by hand, and an errMsg too large for one chunk."""
    data = ack(3, 11, 1)[16:]
    head = TOKEN + (3).to_bytes(4, "big") + (2).to_bytes(4, "big")
    split = head + (10).to_bytes(4, "big") + data[:10] + (len(data) - 10).to_bytes(4, "big")
    split += data[10:]
    assert_stops_before(split, Frame(3, (data[:10], data[10:])))
    whole_then_empty = head + len(data).to_bytes(4, "big") + data + bytes(4)
    assert_stops_before(whole_then_empty, Frame(3, (data, b"")))
    large = ack(3, 11, 1, err_msg="x" * 9000)
    (frame,) = FrameDecoder().feed(large)
    assert len(frame.chunks) == 2
    assert_stops_before(large, frame)


def test_stops_at_an_ack_the_layout_does_not_match() -> None:
    """Valid acks this layout does not describe (a 10-byte negative id, an offset of nine
    bytes, a body of 128 bytes or more) are left to decode_response."""
    for frame in (
        ack(3, -1, 0),
        ack(3, 1, 2**56),
        ack(3, 1, 0, err_msg="x" * 120),
    ):
        assert decoded_acks(frame)
        assert_stops_before(frame, Frame(3, (frame[16:],)))


def test_nothing_at_start() -> None:
    """No frame where the scan starts: garbage, too few bytes, nothing."""
    whole = ack(1, 2, 3)
    for buffer, start in (
        (b"garbage!" * 5 + whole, 0),
        (b"\x00" + whole, 0),
        (whole[:15], 0),
        (whole + whole[:15], len(whole)),
        (whole[1:] + whole, 0),
        (b"", 0),
        (whole, len(whole)),
    ):
        assert scan_acks(buffer, start) == (start, {})


def test_bytes_after_the_acks_are_left() -> None:
    """Garbage after complete acks: the acks are read, the garbage left where it is."""
    acks = ack(1, 2, 3) + ack(4, 5, 6)
    assert scan_acks(acks + b"\x00" * 20, 0) == (len(acks), {1: (2, 3), 4: (5, 6)})
    assert scan_acks(acks + b"\xff", 0) == (len(acks), {1: (2, 3), 4: (5, 6)})
    assert scan_acks(acks + b"\x00" + ack(7, 8, 9), 0) == (len(acks), {1: (2, 3), 4: (5, 6)})


def with_token_in_err_msg(
    serial_no: int, message_id: int, offset: int, inside: bytes = TOKEN
) -> bytes:
    """An ack whose errMsg holds ``inside``, the frame token unless told (the broker does not
    check its text)."""
    data = ack(serial_no, message_id, offset, err_msg="<" + "T" * len(inside) + ">")[16:]
    return encode_frame(serial_no, data.replace(b"T" * len(inside), inside))


def scan_until_stuck(buffer: bytes) -> tuple[int, dict[int, tuple[int, int]], int]:
    """Scan from where each scan ended until one does not advance: where it stopped, every
    ack found, and how many scans found some."""
    at, found, calls = 0, {}, 0
    while True:
        end, acks = scan_acks(buffer, at)
        if end == at:
            assert acks == {}
            return at, found, calls
        assert not found.keys() & acks.keys()
        found |= acks
        at, calls = end, calls + 1


def test_frame_token_inside_a_frame() -> None:
    """A token in an errMsg, or a serial number that is the token, never starts a frame: the
    acks still come back exactly, over several scans."""
    token_serial = FRAME_TOKEN - 2**32
    buffer = (
        ack(1, 10, 0)
        + with_token_in_err_msg(2, 20, 1)
        + ack(3, 30, 2)
        + ack(token_serial, 40, 3)
        + ack(5, 50, 4)
        + with_token_in_err_msg(6, 60, 5)
    )
    expected = {1: (10, 0), 2: (20, 1), 3: (30, 2), token_serial: (40, 3), 5: (50, 4), 6: (60, 5)}
    assert decoded_acks(buffer) == expected
    end, found, calls = scan_until_stuck(buffer)
    assert (end, found) == (len(buffer), expected)
    assert calls == 3
    assert scan_acks(buffer, 0) == (buffer.index(ack(3, 30, 2)), {1: (10, 0), 2: (20, 1)})


def test_an_ack_inside_an_err_msg_is_not_read() -> None:
    """A whole ack frame in another's errMsg is that errMsg's text, not an ack."""
    inner = ack(99, 9, 9)
    outer = with_token_in_err_msg(2, 20, 1, inner)
    buffer = ack(1, 10, 0) + outer + ack(3, 30, 2)
    expected = {1: (10, 0), 2: (20, 1), 3: (30, 2)}
    assert decoded_acks(buffer) == expected
    assert scan_acks(buffer, 0) == (buffer.index(ack(3, 30, 2)), {1: (10, 0), 2: (20, 1)})
    end, found, _ = scan_until_stuck(buffer)
    assert (end, found) == (len(buffer), expected)


def test_a_flipped_byte_never_makes_up_an_ack() -> None:
    """Each of the first 200 bytes of three acks flipped in turn: the scan gives the acks
    that FrameDecoder and decode_response give for the frames before it stops, no more."""
    buffer = ack(1, 3713573055667109888, 0) + ack(2, 2**56 + 9, 300, require_auth=True)
    buffer += ack(3, 77, 2**40, err_msg="")
    assert len(buffer) > 200
    reached = set()
    for position in range(200):
        mutated = bytearray(buffer)
        mutated[position] ^= 0xFF
        end, found = scan_acks(mutated, 0)
        read = frames_one_by_one(bytes(mutated))
        ends = [0] + [frame_end for frame_end, _, _ in read]
        assert end in ends
        before = read[: ends.index(end)]
        assert all(stored is not None for _, _, stored in before)
        assert found == {serial_no: stored for _, serial_no, stored in before}
        reached.add(len(found))
    # a flip in an errMsg or a serial number leaves every frame an ack
    assert reached == {0, 1, 2, 3}
