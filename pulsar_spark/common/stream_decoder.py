"""The buffering both frame decoders share: bytes in, complete frames out.

A subclass says where the next frame ends (``_next_frame``) and raises for a frame that cannot
be valid; this class keeps the bytes. They live in one ``bytearray`` with a read offset;
consumed space is reclaimed when more than half of the buffer is dead, which keeps feeding
linear in the number of bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from pulsar_spark.errors import TruncatedFrameError

F = TypeVar("F")
S = TypeVar("S")


class StreamDecoder(Generic[F]):
    """Collects bytes from a transport and returns the frames they complete."""

    def __init__(self, max_frame_size: int) -> None:
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._offset = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buffer) - self._offset

    def feed(self, data: bytes | bytearray | memoryview) -> list[F]:
        """Add bytes from the transport; return every frame completed by them."""
        self._buffer += data
        return self._frames()

    def feed_scanned(
        self, data: bytes | bytearray | memoryview, scan: Callable[[bytearray, int], tuple[int, S]]
    ) -> tuple[S, list[F]]:
        """:meth:`feed`, with ``scan`` reading first: it takes the buffer and where the next
        frame starts, and returns where the frames it read end and what it found in them (it
        must read complete frames only). The frames after those come as :meth:`feed` returns
        them."""
        self._buffer += data
        self._offset, found = scan(self._buffer, self._offset)
        return found, self._frames()

    def _frames(self) -> list[F]:
        frames = []
        while (frame := self._next_frame()) is not None:
            frames.append(frame)
        if self._offset > len(self._buffer) // 2:
            del self._buffer[: self._offset]
            self._offset = 0
        return frames

    def take_buffered(self) -> bytes:
        """Hand over the bytes of a frame not yet complete (and forget them)."""
        rest = bytes(self._buffer[self._offset :])
        self._buffer.clear()
        self._offset = 0
        return rest

    def eof(self) -> None:
        """Declare the stream finished; raise if it stopped in the middle of a frame."""
        if self.buffered:
            raise TruncatedFrameError(
                f"connection closed in the middle of a frame ({self.buffered} bytes pending)"
            )

    def _next_frame(self) -> F | None:
        """The next complete frame, advancing ``_offset`` past it; None until it is all here."""
        raise NotImplementedError
