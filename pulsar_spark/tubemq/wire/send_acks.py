"""Reading a producer's acknowledgements many frames at a time, with numpy.

How this works
--------------
A broker answers each SendMessage that stored its message with a frame of one chunk laid out
the same way every time, only the lengths of a few numbers and of ``errMsg`` varying::

    [token][serial][1][chunk length]           frame header (see .framing)
    SUCCESS_HEADERS                            RpcConnHeader, ResponseHeader (see .rpc)
    [body size] 08 0D 12 [reply size]          RspResponseBody: method 13, then the reply
    08 01 10 C8 01 1A [n] errMsg               success, errCode 200, errMsg (the id as text)
    (20 [b])  28 messageId  30 appendTime  38 appendOffset

:func:`scan_acks` reads the frames in a receive buffer at once: every place the frame token
occurs may start a frame; the frames are those candidates from the first on for as long as
each one's length leads to the next (a token inside a frame's bytes is never reached). It
then checks every byte of the layout above in all frames together and decodes the three
numbers with :mod:`~pulsar_spark.common.varints`. It stops at the first frame that is not
such an acknowledgement (a refusal, an exception, a frame of several chunks or one still
arriving) and leaves it, and the frames after it, to :class:`.framing.FrameDecoder` and
:func:`.rpc.decode_response`, which read any frame.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.varints import byte_words, decode_long_words, decode_words
from pulsar_spark.tubemq.wire.framing import FRAME_TOKEN
from pulsar_spark.tubemq.wire.rpc import SUCCESS_HEADERS, Method

# What an acknowledgement gives: the stored message's id and offset.
Ack = tuple[int, int]

_HEADER = 16  # token, serial number, chunk count, chunk length
_SHORT = 0x80  # a one-byte varint is below this
_LOW4 = np.uint64(0xFFFF_FFFF)
_LOW6 = np.uint64(0xFFFF_FFFF_FFFF)
_TOKEN = np.uint64(int.from_bytes(FRAME_TOKEN.to_bytes(4, "big"), "little"))
_ONE_CHUNK = np.uint64(int.from_bytes((1).to_bytes(4, "big"), "little"))
_HEADERS = np.uint64(int.from_bytes(SUCCESS_HEADERS, "little"))
# RspResponseBody's method tag, SendMessage's method id, and the tag of the reply's bytes.
_BODY = (0x08, int(Method.SEND_MESSAGE), 0x12)
# success (true), errCode (200) and the tag of errMsg.
_STORED = np.uint64(int.from_bytes(bytes([0x08, 0x01, 0x10, 0xC8, 0x01, 0x1A]), "little"))
_REQUIRE_AUTH, _MESSAGE_ID, _APPEND_TIME, _APPEND_OFFSET = 0x20, 0x28, 0x30, 0x38
# Zero bytes after the buffer, so that a word can be read at every offset of it.
_PADDING = bytes(32)

_I64 = npt.NDArray[np.int64]
_U8 = npt.NDArray[np.uint8]
_Bool = npt.NDArray[np.bool_]


def scan_acks(buffer: bytes | bytearray, start: int) -> tuple[int, dict[int, Ack]]:
    """Where the acknowledgements from ``start`` on end, and what they acknowledge, by serial
    number; ``(start, {})`` when none starts there."""
    size = len(buffer) - start
    if size < _HEADER:
        return start, {}
    buf = np.frombuffer(bytes(buffer[start:]) + _PADDING, dtype=np.uint8)
    words = byte_words(buf)
    heads = np.flatnonzero((words[: size - _HEADER + 1] & _LOW4) == _TOKEN)
    if len(heads) == 0 or heads[0] != 0:
        return start, {}
    ends = heads + _HEADER + _big_endian(buf, heads + 12)
    linked = ends[:-1] == heads[1:]
    count = len(heads) if linked.all() else int(np.argmin(linked)) + 1
    heads, ends = heads[:count], ends[:count]
    ok = (ends <= size) & ((words[heads + 8] & _LOW4) == _ONE_CHUNK)
    # past the buffer's end only in frames already refused: read anywhere within it
    ends = np.minimum(ends, size)
    ok &= words[heads + _HEADER] == _HEADERS
    ids, offsets, ok = _reply(buf, words, heads + _HEADER + 8, ends, ok)
    taken = len(ok) if ok.all() else int(np.argmin(ok))
    if taken == 0:
        return start, {}
    serials = _big_endian(buf, heads[:taken] + 4)
    serials -= (serials >= 1 << 31) << 32  # signed, as the frame carries them
    acks = zip(ids[:taken].tolist(), offsets[:taken].tolist(), strict=True)
    return start + int(ends[taken - 1]), dict(zip(serials.tolist(), acks, strict=True))


def _reply(
    buf: _U8, words: npt.NDArray[np.uint64], at: _I64, ends: _I64, ok: _Bool
) -> tuple[_I64, _I64, _Bool]:
    """The message ids and offsets of the RspResponseBody at ``at`` of each frame, and which
    frames are acknowledgements laid out as the module docstring shows."""
    ok = ok & (buf[at] < _SHORT) & (at + 1 + buf[at] == ends)
    for step, byte in enumerate(_BODY, start=1):
        ok &= buf[at + step] == byte
    ok &= (buf[at + 4] < _SHORT) & (at + 5 + buf[at + 4] == ends)
    at = _within(at + 5, ends)
    ok &= (words[at] & _LOW6) == _STORED
    ok &= buf[at + 6] < _SHORT
    at = _within(at + 7 + buf[at + 6], ends)
    auth = buf[at] == _REQUIRE_AUTH
    ok &= ~auth | (buf[at + 1] < _SHORT)
    at = _within(at + 2 * auth, ends)
    ok &= buf[at] == _MESSAGE_ID
    ids, length = decode_long_words(words[at + 1], buf[at + 9])
    ok &= length > 0
    at = _within(at + 1 + length, ends)
    ok &= buf[at] == _APPEND_TIME
    _, length = decode_words(words[at + 1])
    ok &= length > 0
    at = _within(at + 1 + length, ends)
    ok &= buf[at] == _APPEND_OFFSET
    offsets, length = decode_words(words[at + 1])
    ok &= (length > 0) & (at + 1 + length == ends)
    return ids.astype(np.int64), offsets.astype(np.int64), ok


def _within(at: _I64, ends: _I64) -> _I64:
    """``at``, kept inside its frame (where it runs past, the frame is already refused)."""
    return np.minimum(at, ends)


def _big_endian(buf: _U8, at: _I64) -> _I64:
    """The unsigned 32-bit big-endian numbers at ``at``."""
    value = buf[at].astype(np.int64)
    for step in (1, 2, 3):
        value = (value << 8) | buf[at + step]
    return value
