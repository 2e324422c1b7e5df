"""Writing the bytes of many messages at once, field by field, with numpy.

A message's bytes are cut into pieces, each the same field (or run of fields) in every
message. A short piece is a :class:`Short`: a byte matrix with a row per message, of which
message ``i`` writes the first ``lengths[i]`` bytes (a tag and a varint, a fixed header, a
constant). Longer ones (payloads) come laid end to end with each message's length.
:func:`pack` joins neighbouring short pieces into one, and :func:`interleave` writes message
0's share of every piece, then message 1's, and so on, into one buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pulsar_spark.common.varints import varint_sizes

Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
# A piece: every message's bytes laid end to end, and each one's length.
Piece = tuple[Bytes, Ints]


@dataclass(frozen=True, slots=True)
class Short:
    """A field of a few bytes in every message: message ``i`` writes ``matrix[i, :lengths[i]]``."""

    matrix: Bytes
    lengths: Ints


def varints(
    values: npt.NDArray[np.int64 | np.uint64],
    tag: int | None = None,
    present: npt.NDArray[np.bool_] | None = None,
) -> Short:
    """``tag`` (when given), then ``values[i]`` as a varint (negative ones in ten bytes), in
    the messages where ``present``."""
    numbers = values.astype(np.uint64)
    sizes = varint_sizes(numbers)
    width = int(sizes.max(initial=1))
    groups = (numbers[:, None] >> (np.arange(width, dtype=np.uint64) * np.uint64(7))) & 0x7F
    more = np.arange(width) < (sizes - 1)[:, None]
    lead = 0 if tag is None else 1
    matrix = np.empty((len(numbers), width + lead), dtype=np.uint8)
    if tag is not None:
        matrix[:, 0] = tag
    matrix[:, lead:] = groups | (more.astype(np.uint64) << np.uint64(7))
    lengths = sizes + lead
    return Short(matrix, lengths if present is None else np.where(present, lengths, 0))


def constant(data: bytes, count: int) -> Short:
    """The same ``data`` in each of ``count`` messages."""
    row = np.frombuffer(data, dtype=np.uint8)
    return Short(np.tile(row, (count, 1)), np.full(count, len(data), dtype=np.int64))


def pack(shorts: list[Short]) -> Piece:
    """Neighbouring short pieces as one piece."""
    matrix = np.hstack([short.matrix for short in shorts])
    used = np.hstack([np.arange(s.matrix.shape[1]) < s.lengths[:, None] for s in shorts])
    return matrix[used], np.sum([short.lengths for short in shorts], axis=0, dtype=np.int64)


def interleave(pieces: list[Piece], count: int) -> tuple[memoryview, Ints]:
    """Message 0's share of every piece, then message 1's, ...; and where each message ends."""
    lengths = np.column_stack([piece_lengths for _, piece_lengths in pieces])
    ends = np.cumsum(lengths.sum(axis=1))
    owner = np.repeat(np.tile(np.arange(len(pieces), dtype=np.uint8), count), lengths.ravel())
    out = np.empty(int(ends[-1]) if count else 0, dtype=np.uint8)
    for index, (data, _) in enumerate(pieces):
        out[owner == index] = data
    return out.data, ends


def ranges(starts: Ints, stops: Ints) -> tuple[npt.NDArray[np.intp], Ints]:
    """The indices ``starts[i]`` to ``stops[i]`` (exclusive) for every i, end to end, and the
    offsets at which each range begins in them."""
    counts = stops - starts
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    indices = np.arange(int(offsets[-1]), dtype=np.intp) + np.repeat(starts - offsets[:-1], counts)
    return indices, offsets
