"""Base-128 varints: one at a time (:func:`encode_varint`, :func:`read_varint`), and many at a
time with numpy.

A protobuf or Avro varint is little-endian groups of 7 bits, each byte's high bit set when
another byte follows. :func:`decode_words` takes, for each varint, the eight bytes that begin
it as one little-endian uint64 (a strided view of the buffer gives them without a copy) and
decodes them all at once with bit operations: the first byte whose high bit is clear ends the
varint; the bits past it are masked off and the 7-bit groups squeezed together.
:func:`encode_varints` writes many, laid end to end.
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


def byte_words(buffer: bytes | npt.NDArray[np.uint8]) -> _U64:
    """The little-endian uint64 word that begins at each offset of ``buffer`` up to its last
    eight bytes, as :func:`decode_words` takes them: a strided view, no copy."""
    words: _U64 = np.ndarray(shape=(len(buffer) - 7,), dtype="<u8", buffer=buffer, strides=(1,))
    return words


def decode_words(words: _U64) -> tuple[_U64, _I64]:
    """The varint at the start of each word, and its length (0 when over eight bytes)."""
    ends = ~words & _HIGH_BITS  # the bytes whose high bit is clear
    lowest = ends & (~ends + _ONE)
    kept = _squeeze(words & ((lowest << _ONE) - _ONE) & _LOW_BITS, len(_SQUEEZE))
    lengths = np.frexp(lowest.astype(np.float64))[1].astype(np.int64) >> 3
    return kept, lengths


def decode_fixed(words: _U64, width: int) -> _U64 | None:
    """The varint at the start of each word when every one is exactly ``width`` bytes long (1
    to 8); None when one is not. Fewer steps than :func:`decode_words` for a known length."""
    span = np.uint64((1 << (8 * width)) - 1)
    high = _HIGH_BITS & span
    if not ((words & high) == (high >> np.uint64(8))).all():  # each byte but the last goes on
        return None
    return _squeeze(words & (_LOW_BITS & span), (width - 1).bit_length())


def decode_nine(words: _U64, ninth: npt.NDArray[np.uint8]) -> _U64 | None:
    """Varints of exactly nine bytes (values from 2**56 to 2**63 - 1): their first eight bytes
    as words, and their last bytes; None when one is another length."""
    if not _nine_bytes(words, ninth).all():
        return None
    return _nine_values(words, ninth)


def decode_long_words(words: _U64, ninth: npt.NDArray[np.uint8]) -> tuple[_U64, _I64]:
    """:func:`decode_words` that also reads varints of nine bytes (``ninth`` holds each one's
    ninth byte): the length is 0 only for a varint of ten bytes."""
    values, lengths = decode_words(words)
    nine = (lengths == 0) & _nine_bytes(words, ninth)
    if nine.any():
        values = np.where(nine, _nine_values(words, ninth), values)
        lengths = np.where(nine, 9, lengths)
    return values, lengths


def _nine_bytes(words: _U64, ninth: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]:
    """Which varints take exactly nine bytes: eight that go on, then one that ends."""
    ends_at_ninth: npt.NDArray[np.bool_] = ((words & _HIGH_BITS) == _HIGH_BITS) & (ninth < 0x80)
    return ends_at_ninth


def _nine_values(words: _U64, ninth: npt.NDArray[np.uint8]) -> _U64:
    """Each word and ninth byte read as a varint of nine bytes."""
    top: _U64 = ninth.astype(np.uint64) << np.uint64(56)
    return _squeeze(words & _LOW_BITS, len(_SQUEEZE)) | top


def _squeeze(groups: _U64, steps: int) -> _U64:
    """Close the gaps between the 7-bit groups of each word (one step joins pairs of groups:
    one step is enough for two groups, two for four, three for eight)."""
    for low, high, shift in _SQUEEZE[:steps]:  # 7-bit groups into 14, 28, then 56 bits
        groups = (groups & low) | ((groups & high) >> shift)
    return groups


# A varint of a value at or above the i-th bound takes more than i + 1 bytes.
_BOUNDS = np.array([1 << (7 * i) for i in range(1, 10)], dtype=np.uint64)


def varint_sizes(numbers: _U64) -> _I64:
    """How many bytes each of ``numbers`` takes as a varint (1 to 10)."""
    sizes: _I64 = np.searchsorted(_BOUNDS, numbers, side="right").astype(np.int64) + 1
    return sizes


def encode_varints(numbers: _U64) -> tuple[npt.NDArray[np.uint8], _I64]:
    """``numbers`` as varints laid end to end, and where each begins (one more offset than
    numbers: the last is where the bytes end)."""
    sizes = varint_sizes(numbers)
    offsets = np.zeros(len(numbers) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    out = np.empty(int(offsets[-1]), dtype=np.uint8)
    starts = offsets[:-1]
    for index in range(int(sizes.max(initial=0))):
        rows = sizes > index
        group = (numbers[rows] >> np.uint64(7 * index)) & np.uint64(0x7F)
        more = (sizes[rows] > index + 1).astype(np.uint64) << np.uint64(7)
        out[starts[rows] + index] = (group | more).astype(np.uint8)
    return out, offsets


_ONE_BYTE = [bytes((v,)) for v in range(0x80)]
_TWO_BYTES = [bytes(((v & 0x7F) | 0x80, v >> 7)) for v in range(0x4000)]


def encode_varint(value: int) -> bytes:
    """Protobuf varint of ``value`` (a negative one as its 64-bit two's complement)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if 0 <= value < 0x4000:
        return _TWO_BYTES[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_varint(data: bytes, p: int) -> tuple[int, int]:
    """The varint at ``p`` and the offset after it (IndexError if it runs past the end)."""
    byte = data[p]
    if byte < 0x80:
        return byte, p + 1
    result = byte & 0x7F
    shift = 7
    while True:
        p += 1
        byte = data[p]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, p + 1
        shift += 7
