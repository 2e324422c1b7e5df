"""Base-128 varints decoded many at a time, with numpy.

A protobuf or Avro varint is little-endian groups of 7 bits, each byte's high bit set when
another byte follows. :func:`decode_words` takes, for each varint, the eight bytes that begin
it as one little-endian uint64 (a strided view of the buffer gives them without a copy) and
decodes them all at once with bit operations: the first byte whose high bit is clear ends the
varint; the bits past it are masked off and the 7-bit groups squeezed together.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_U64 = npt.NDArray[np.uint64]
_I64 = npt.NDArray[np.int64]

_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)
_ONE, _TWO, _FOUR = np.uint64(1), np.uint64(2), np.uint64(4)
_SQUEEZE = (
    (np.uint64(0x007F007F007F007F), np.uint64(0x7F007F007F007F00), _ONE),
    (np.uint64(0x00003FFF00003FFF), np.uint64(0x3FFF00003FFF0000), _TWO),
    (np.uint64(0x000000000FFFFFFF), np.uint64(0x0FFFFFFF00000000), _FOUR),
)


def decode_words(words: _U64) -> tuple[_U64, _I64]:
    """The varint at the start of each word, and its length (0 when over eight bytes)."""
    ends = ~words & _HIGH_BITS  # the bytes whose high bit is clear
    lowest = ends & (~ends + _ONE)
    kept = words & ((lowest << _ONE) - _ONE) & _LOW_BITS
    for low, high, shift in _SQUEEZE:  # 7-bit groups into 14, 28, then 56 contiguous bits
        kept = (kept & low) | ((kept & high) >> shift)
    lengths = np.frexp(lowest.astype(np.float64))[1].astype(np.int64) >> 3
    return kept, lengths
