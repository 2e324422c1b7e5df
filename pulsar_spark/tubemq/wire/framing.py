"""TubeMQ's frame: a token, a serial number and a list of length-prefixed chunks.

How this works
--------------
Every request and every response travels as one frame (all integers big-endian, signed)::

    [token 0xFF7FF4FE][serial number][chunk count] ([chunk length][chunk bytes]) * count

The serial number pairs a response with its request: the client picks it, the server copies
it. The chunks only matter joined: together they hold the RPC envelope (see :mod:`.rpc`). The
Java client cuts what it writes into chunks of at most 8 KiB (``RPC_MAX_BUFFER_SIZE``), and
:func:`encode_frame` does the same, although a reader must not rely on any chunk size.

:class:`FrameDecoder` is fed whatever bytes the transport read and returns the frames they
complete. It checks the token and the chunk count as soon as the 12-byte header is there and
each chunk length as soon as its 4 bytes are, so a peer that does not speak TubeMQ, or a
length that would exceed ``max_frame_size``, fails before anything is buffered for it. The
Java decoder allows at most ``MAX_CHUNKS`` chunks, which makes the largest legal frame
28 MiB of chunk data (20 MiB, the largest message a cluster may be configured for, plus 8 MiB).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pulsar_spark.common.stream_decoder import StreamDecoder
from pulsar_spark.errors import FrameTooLargeError, RemoteProtocolError
from pulsar_spark.tubemq.errors import BadFrameTokenError

FRAME_TOKEN = 0xFF7FF4FE
CHUNK_SIZE = 8192
# MAX_FRAME_MAX_LIST_SIZE in the Java source: (20 MiB + 8 MiB) / 8 KiB.
MAX_CHUNKS = (20 + 8) * 1024 * 1024 // CHUNK_SIZE
MAX_FRAME_DATA = MAX_CHUNKS * CHUNK_SIZE

_HEADER = struct.Struct(">Iii")
_LENGTH = struct.Struct(">i")
# The header and the chunk length of a frame of one chunk.
_ONE_CHUNK = struct.Struct(">Iiii")


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame: its serial number and its chunks, as they came."""

    serial_no: int
    chunks: tuple[bytes, ...]

    @property
    def data(self) -> bytes:
        """The chunks joined: what the sender wrote before it was cut up."""
        return b"".join(self.chunks)


def encode_frame(serial_no: int, data: bytes) -> bytes:
    """Frame ``data`` under ``serial_no``, cut into chunks of at most :data:`CHUNK_SIZE`.

    Empty data still makes one (empty) chunk, as the Java writer does.
    """
    if not -(2**31) <= serial_no < 2**31:
        raise ValueError(f"serial number {serial_no} does not fit in 32 bits")
    if len(data) > MAX_FRAME_DATA:
        raise ValueError(f"{len(data)} bytes exceed the {MAX_FRAME_DATA} bytes a frame can carry")
    if len(data) <= CHUNK_SIZE:
        return _ONE_CHUNK.pack(FRAME_TOKEN, serial_no, 1, len(data)) + data
    chunks = [data[i : i + CHUNK_SIZE] for i in range(0, len(data), CHUNK_SIZE)]
    parts = [_HEADER.pack(FRAME_TOKEN, serial_no, len(chunks))]
    for chunk in chunks:
        parts.append(_LENGTH.pack(len(chunk)))
        parts.append(chunk)
    return b"".join(parts)


class FrameDecoder(StreamDecoder[Frame]):
    """Turns a byte stream into :class:`Frame` objects; see the module docstring."""

    def __init__(self, max_frame_size: int = MAX_FRAME_DATA) -> None:
        super().__init__(max_frame_size)

    def _next_frame(self) -> Frame | None:
        # Nothing is consumed until the whole frame is there: a partial frame is walked
        # again from its header on the next feed (chunk lengths only, no copying).
        buf, start = self._buffer, self._offset
        if len(buf) - start < _HEADER.size:
            return None
        token, serial_no, count = _HEADER.unpack_from(buf, start)
        _check_header(token, count)
        spans = self._chunk_spans(serial_no, count, start + _HEADER.size)
        if spans is None:
            return None
        self._offset = spans[-1][1] if spans else start + _HEADER.size
        return Frame(serial_no, tuple([bytes(buf[a:b]) for a, b in spans]))

    def _chunk_spans(self, serial_no: int, count: int, pos: int) -> list[tuple[int, int]] | None:
        """Where each chunk's bytes lie in the buffer, or None while some are missing."""
        buf = self._buffer
        spans = []
        total = 0
        for _ in range(count):
            if len(buf) - pos < _LENGTH.size:
                return None
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length < 0:
                raise RemoteProtocolError(f"frame {serial_no}: negative chunk length {length}")
            total += length
            if total > self.max_frame_size:
                raise FrameTooLargeError(
                    f"frame {serial_no}: a chunk of {length} bytes takes the frame past "
                    f"its limit of {self.max_frame_size} bytes"
                )
            pos += _LENGTH.size
            spans.append((pos, pos + length))
            pos += length
        if len(buf) < pos:
            return None
        return spans


def _check_header(token: int, count: int) -> None:
    if token != FRAME_TOKEN:
        raise BadFrameTokenError(f"frame token {token:#010x} is not {FRAME_TOKEN:#010x}")
    if count < 0:
        raise RemoteProtocolError(f"frame announces a negative chunk count ({count})")
    if count > MAX_CHUNKS:
        raise FrameTooLargeError(f"frame of {count} chunks exceeds the limit of {MAX_CHUNKS}")
