"""Frame encoding and the incremental frame decoder.

How this works
--------------
Every Pulsar frame starts with a 4-byte big-endian ``total_size`` that does not count itself,
followed by a 4-byte ``command_size`` and the serialized ``BaseCommand``::

    simple:   [total_size][command_size][BaseCommand]
    payload:  [total_size][command_size][BaseCommand][payload section]

The payload section (SEND and MESSAGE only) is parsed by :mod:`pulsar_spark.protocol.payload`.

:class:`FrameDecoder` is fed whatever bytes the transport read — half a frame, ten frames — and
returns the complete frames it now holds. It reads ``total_size`` as soon as 4 bytes are there
and refuses a frame larger than ``max_frame_size`` *before* buffering its body, so a broken or
hostile peer cannot make it allocate without bound. The buffering itself is
:class:`~pulsar_spark.common.stream_decoder.StreamDecoder`'s.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from google.protobuf.message import DecodeError

from pulsar_spark.common.stream_decoder import StreamDecoder
from pulsar_spark.errors import (
    FrameTooLargeError,
    RemoteProtocolError,
    TruncatedFrameError,
)
from pulsar_spark.protocol import pb

# The broker's default maxMessageSize, and the slack Pulsar clients allow on top of it for the
# command and metadata that travel with a maximum-size payload.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
FRAME_PADDING = 10 * 1024

_U32 = struct.Struct(">I")
_U32_PAIR = struct.Struct(">II")


class Frame(NamedTuple):
    """One decoded frame: the command and, for SEND/MESSAGE, the raw payload section (a tuple:
    one is made for every frame)."""

    command: pb.BaseCommand
    payload: memoryview | None = None


def encode_command(command: pb.BaseCommand) -> bytes:
    """Serialize a simple frame (no payload)."""
    body = command.SerializeToString()
    return _U32_PAIR.pack(len(body) + 4, len(body)) + body


def encode_payload_frame(command: pb.BaseCommand, payload_section: bytes) -> bytes:
    """Serialize a frame whose command is followed by a payload section."""
    body = command.SerializeToString()
    return _U32_PAIR.pack(len(body) + 4 + len(payload_section), len(body)) + body + payload_section


def max_frame_size_for(max_message_size: int) -> int:
    """The largest frame a connection accepts when messages may be ``max_message_size``."""
    return max_message_size + FRAME_PADDING


class FrameDecoder(StreamDecoder[Frame]):
    """Turns a byte stream into :class:`Frame` objects; see the module docstring."""

    def __init__(self, max_frame_size: int = max_frame_size_for(DEFAULT_MAX_MESSAGE_SIZE)) -> None:
        super().__init__(max_frame_size)

    def _next_frame(self) -> Frame | None:
        available = len(self._buffer) - self._offset
        if available < 4:
            return None
        (total,) = _U32.unpack_from(self._buffer, self._offset)
        if total > self.max_frame_size:
            raise FrameTooLargeError(
                f"frame of {total} bytes exceeds the maximum frame size of "
                f"{self.max_frame_size} bytes"
            )
        if available < 4 + total:
            return None
        start = self._offset + 4
        self._offset = start + total
        return decode_frame_body(bytes(memoryview(self._buffer)[start : start + total]))


def decode_frame_body(body: bytes) -> Frame:
    """Decode one frame without its leading ``total_size`` field."""
    if len(body) < 4:
        raise TruncatedFrameError(f"frame of {len(body)} bytes has no command size")
    (command_size,) = _U32.unpack_from(body, 0)
    if command_size > len(body) - 4:
        raise TruncatedFrameError(
            f"command size {command_size} exceeds the {len(body) - 4} bytes left in the frame"
        )
    command = pb.BaseCommand()
    try:
        command.ParseFromString(body[4 : 4 + command_size])
    except DecodeError as exc:
        raise RemoteProtocolError(f"command of {command_size} bytes does not parse") from exc
    rest = len(body) - 4 - command_size
    payload = memoryview(body)[4 + command_size :] if rest else None
    return Frame(command, payload)
