"""MurmurHash3's 32-bit variant (x86_32) with seed 0, over many byte strings at once.

This is the hash of Java's ``HashingScheme.Murmur3_32Hash``: the message routers hash the
UTF-8 bytes of a message's key with it. The byte strings are hashed together with numpy: each
is padded with zeros to a whole number of 4-byte little-endian words, so that its last, partial
word is exactly the tail that MurmurHash3 mixes after the full blocks. The full blocks of one
string must be mixed one after the other, so the loop runs over block positions (as many steps
as the longest string has blocks), each step mixing that block of every string long enough to
have it, across all strings at once.

No I/O happens here.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_U32 = np.uint32
_C1 = _U32(0xCC9E2D51)
_C2 = _U32(0x1B873593)
_H_ADD = _U32(0xE6546B64)
_F1 = _U32(0x85EBCA6B)
_F2 = _U32(0xC2B2AE35)

Hashes = npt.NDArray[np.uint32]
Lengths = npt.NDArray[np.int64]


def murmur3_32(data: bytes) -> int:
    """The hash of ``data`` as an unsigned 32-bit value."""
    lengths = np.array([len(data)], dtype=np.int64)
    return int(murmur3_32_many(data, lengths)[0])


def murmur3_32_many(data: bytes, lengths: Lengths) -> Hashes:
    """The hashes (unsigned) of the byte strings of ``lengths`` that ``data`` holds one after
    the other."""
    count = len(lengths)
    if count == 0:
        return np.zeros(0, dtype=_U32)
    words, word_starts = _padded_words(data, lengths)
    blocks = lengths // 4
    # Longest first, so that the strings with a given block form a prefix of this order.
    order = np.argsort(-blocks, kind="stable")
    sorted_blocks = blocks[order]
    starts = word_starts[order]
    having = np.searchsorted(-sorted_blocks, -np.arange(int(sorted_blocks[0])), side="left")
    h = np.zeros(count, dtype=_U32)
    for block, reach in enumerate(having.tolist()):
        h[:reach] = _mix_h(h[:reach], _mix_k(words[starts[:reach] + block]))
    tails = np.zeros(count, dtype=_U32)
    partial = (lengths[order] % 4) != 0
    tails[partial] = words[(starts + sorted_blocks)[partial]]
    h ^= _mix_k(tails)  # a zero tail mixes to zero: no change without one
    h ^= lengths[order].astype(_U32)
    hashes = np.empty(count, dtype=_U32)
    hashes[order] = _finish(h)
    return hashes


def _padded_words(data: bytes, lengths: Lengths) -> tuple[Hashes, Lengths]:
    """The strings as little-endian words, each padded with zero bytes to a word boundary,
    and the index of each string's first word."""
    word_counts = (lengths + 3) // 4
    word_starts = np.cumsum(word_counts) - word_counts
    byte_starts = np.cumsum(lengths) - lengths
    padded = np.zeros(int(word_counts.sum()) * 4, dtype=np.uint8)
    shift = np.repeat(4 * word_starts - byte_starts, lengths)
    padded[np.arange(len(data), dtype=np.int64) + shift] = np.frombuffer(data, dtype=np.uint8)
    words: Hashes = padded.view("<u4").astype(_U32, copy=False)
    return words, word_starts


def _rotl(x: Hashes, bits: int) -> Hashes:
    rotated: Hashes = (x << _U32(bits)) | (x >> _U32(32 - bits))
    return rotated


def _mix_k(k: Hashes) -> Hashes:
    mixed: Hashes = _rotl(k * _C1, 15) * _C2
    return mixed


def _mix_h(h: Hashes, k: Hashes) -> Hashes:
    mixed: Hashes = _rotl(h ^ k, 13) * _U32(5) + _H_ADD
    return mixed


def _finish(h: Hashes) -> Hashes:
    """MurmurHash3's final avalanche (``fmix32``)."""
    h = h ^ (h >> _U32(16))
    h = h * _F1
    h = h ^ (h >> _U32(13))
    h = h * _F2
    finished: Hashes = h ^ (h >> _U32(16))
    return finished
