"""Choosing the partition of an outgoing message, compatible with Java producers.

Keyed messages go where a Java producer's router would put them: ``(hash & 0x7FFFFFFF) %
partitions``, the hash being that of the producer's ``hashingScheme``. With ``JavaStringHash``
(the default) it is ``String.hashCode(key)``; with ``Murmur3_32Hash`` it is MurmurHash3 (32-bit,
seed 0) of the key's UTF-8 bytes (:mod:`pulsar_spark.protocol.murmur3`), an unpaired surrogate
encoded as ``?`` as Java's encoder does. ``String.hashCode`` is
``h = 31 * h + unit`` over the key's UTF-16 code units in signed 32-bit arithmetic, so a
character outside the Basic Multilingual Plane (an emoji) counts as its two surrogate units.
For binary keys the key is the base64 text that travels as ``partition_key``, under either
scheme.

- :func:`java_string_hash` hashes one key (ASCII keys skip the UTF-16 encoding).
- :func:`partitions_for_keys` routes a whole column of keys at once with numpy. For
  ``JavaStringHash`` it uses the
  prefix-sum form of the polynomial: 31 is odd, hence invertible modulo 2**32, so with
  ``G[j] = sum(unit[i] * 31**-i)`` over the concatenated keys, the hash of the key spanning
  ``[s, e)`` is ``31**(e-1) * (G[e-1] - G[s-1])``, every operation wrapping at 32 bits.
- :class:`RoundRobin` spreads unkeyed messages, one run (typically a batch) per partition;
  :class:`SinglePartition` sends them all to one.

No I/O happens here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import cast

import numpy as np
import numpy.typing as npt

from pulsar_spark.protocol.murmur3 import murmur3_32_many

UNKEYED = -1
"""What :func:`partitions_for_keys` returns for a ``None`` key: routing is the caller's choice."""

JAVA_STRING_HASH = "JavaStringHash"
MURMUR3_32_HASH = "Murmur3_32Hash"
HASHING_SCHEMES = (JAVA_STRING_HASH, MURMUR3_32_HASH)
"""Java's ``HashingScheme`` names, the default first."""

_MASK32 = 0xFFFFFFFF
_SIGN_BIT = 0x80000000
_NON_NEGATIVE = 0x7FFFFFFF
_INVERSE_31 = pow(31, -1, 1 << 32)
# UTF-16 in the machine's byte order, so the bytes can be read as uint16 code units. Lone
# surrogates, which Java strings may hold, are encoded as the single unit they are.
_UTF16_NATIVE = "utf-16-le" if sys.byteorder == "little" else "utf-16-be"

# The scalar hash lets its integer grow for this many units before cutting it to 32 bits.
_BLOCK = 64

# Below this many keys numpy's fixed cost outweighs its per-key savings.
_VECTOR_MIN_KEYS = 64
# Keys are hashed in groups of at most this many UTF-16 units, bounding temporary arrays.
_GROUP_UNITS = 1 << 18

_U32 = np.uint32
_Units = npt.NDArray[np.uint32]


def java_string_hash(key: str) -> int:
    """Java's ``key.hashCode()``: a signed 32-bit int."""
    unsigned = _unsigned_hash(key)
    return unsigned - (1 << 32) if unsigned & _SIGN_BIT else unsigned


def partition_for_key(key: str, partitions: int, scheme: str = JAVA_STRING_HASH) -> int:
    """The partition a Java producer with hashing scheme ``scheme`` picks for ``key``."""
    if partitions <= 1:
        return 0
    if scheme == MURMUR3_32_HASH:
        return partitions_for_keys([key], partitions, scheme)[0]
    return (_unsigned_hash(key) & _NON_NEGATIVE) % partitions


def partitions_for_keys(
    keys: Sequence[str | None], partitions: int, scheme: str = JAVA_STRING_HASH
) -> list[int]:
    """:func:`partition_for_key` for every key; ``None`` keys map to :data:`UNKEYED`."""
    if partitions <= 1:
        return [UNKEYED if key is None else 0 for key in keys]
    murmur = scheme == MURMUR3_32_HASH
    if not murmur and len(keys) < _VECTOR_MIN_KEYS:
        return _partitions_scalar(keys, partitions)
    hashes = _murmur_hashes if murmur else _java_hashes
    if None not in keys:
        return _partitions(hashes(cast("Sequence[str]", keys)), partitions)
    present = [key for key in keys if key is not None]
    routed = _partitions(hashes(present), partitions) if present else []
    found = iter(routed)
    return [UNKEYED if key is None else next(found) for key in keys]


class RoundRobin:
    """Partition chooser for unkeyed messages: each call moves on to the next partition.

    Call :meth:`next_partition` once per run of messages that should stay together (a batch,
    an Arrow record batch), as Java and C++ producers switch partitions per batch rather than
    per message. The first partition is ``start`` modulo the partition count: writers give
    each task its own start, so tasks that start at the same time do not all load partition 0.
    """

    def __init__(self, partitions: int, *, start: int) -> None:
        """Cycle over ``range(partitions)`` (a single partition when ``partitions <= 1``)."""
        self.partitions = max(partitions, 1)
        self._next = start % self.partitions

    def next_partition(self) -> int:
        """The partition for the next run of unkeyed messages."""
        chosen = self._next
        self._next = (chosen + 1) % self.partitions
        return chosen


class SinglePartition:
    """Partition chooser for unkeyed messages that keeps to one partition (Java's
    ``SinglePartition`` routing mode): ``start`` modulo the partition count."""

    def __init__(self, partitions: int, *, start: int) -> None:
        self.partitions = max(partitions, 1)
        self._partition = start % self.partitions

    def next_partition(self) -> int:
        """The partition for the next run of unkeyed messages: always the same."""
        return self._partition


# --- scalar hashing --------------------------------------------------------------------------


def _unsigned_hash(key: str) -> int:
    """``key.hashCode()`` as an unsigned 32-bit value."""
    if key.isascii():
        return _hash_units(key.encode("ascii"))
    return _hash_units(memoryview(key.encode(_UTF16_NATIVE, "surrogatepass")).cast("H"))


def _hash_units(units: Sequence[int]) -> int:
    # Horner's rule; the 32-bit wrap-around is applied once per block, not per unit.
    unsigned = 0
    if len(units) <= _BLOCK:
        for unit in units:
            unsigned = 31 * unsigned + unit
        return unsigned & _MASK32
    for start in range(0, len(units), _BLOCK):
        for unit in units[start : start + _BLOCK]:
            unsigned = 31 * unsigned + unit
        unsigned &= _MASK32
    return unsigned


def _partitions_scalar(keys: Sequence[str | None], partitions: int) -> list[int]:
    cache: dict[str, int] = {}
    out = []
    for key in keys:
        if key is None:
            out.append(UNKEYED)
            continue
        partition = cache.get(key)
        if partition is None:
            partition = cache[key] = (_unsigned_hash(key) & _NON_NEGATIVE) % partitions
        out.append(partition)
    return out


# --- vectorized hashing ----------------------------------------------------------------------


def _partitions(hashes: _Units, partitions: int) -> list[int]:
    routed: list[int] = ((hashes & _U32(_NON_NEGATIVE)) % _U32(partitions)).tolist()
    return routed


def _murmur_hashes(keys: Sequence[str]) -> _Units:
    """MurmurHash3 of each key's UTF-8 bytes, an unpaired surrogate encoded as ``?``."""
    text = "".join(keys)
    data = text.encode("utf-8", "replace")
    chars = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    if len(data) == len(text):  # ASCII: a byte per character
        return murmur3_32_many(data, chars)
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    widths = 1 + (points >= 0x80) + (points >= 0x800) + (points >= 0x10000)
    widths[(points >= 0xD800) & (points < 0xE000)] = 1  # encoded as "?"
    byte_ends = np.concatenate(([0], np.cumsum(widths, dtype=np.int64)))[np.cumsum(chars)]
    return murmur3_32_many(data, np.diff(byte_ends, prepend=0))


def _java_hashes(keys: Sequence[str]) -> _Units:
    text = "".join(keys)
    if text.isascii():
        units: npt.NDArray[np.uint8 | np.uint16] = np.frombuffer(text.encode(), dtype=np.uint8)
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    else:
        units = np.frombuffer(text.encode(_UTF16_NATIVE, "surrogatepass"), dtype=np.uint16)
        sizes = (len(key.encode(_UTF16_NATIVE, "surrogatepass")) // 2 for key in keys)
        lengths = np.fromiter(sizes, dtype=np.int64, count=len(keys))
    ends = np.cumsum(lengths)
    hashes = np.empty(len(keys), dtype=_U32)
    first = 0
    while first < len(keys):
        first = _hash_group(keys, units, ends, first, hashes)
    return hashes


def _hash_group(
    keys: Sequence[str],
    units: npt.NDArray[np.uint8 | np.uint16],
    ends: npt.NDArray[np.int64],
    first: int,
    out: _Units,
) -> int:
    """Hash the keys from ``first`` spanning at most _GROUP_UNITS units into ``out``.

    Returns the index of the first key not hashed yet.
    """
    origin = int(ends[first - 1]) if first else 0
    stop = int(np.searchsorted(ends, origin + _GROUP_UNITS, side="right"))
    if stop == first:  # one key longer than a whole group
        out[first] = _unsigned_hash(keys[first])
        return first + 1
    group_ends = ends[first:stop] - origin
    group_starts = np.concatenate(([0], group_ends[:-1]))
    total = int(group_ends[-1])
    inverse, forward = _power_tables()
    # prefix[j] = sum of units[i] * 31**-i for i < j, so a key's slice gives its hash / 31**(e-1)
    prefix = np.zeros(total + 1, dtype=_U32)
    np.cumsum(units[origin : origin + total] * inverse[:total], dtype=_U32, out=prefix[1:])
    out[first:stop] = (prefix[group_ends] - prefix[group_starts]) * forward[group_ends]
    return stop


_tables: tuple[_Units, _Units] | None = None


def _power_tables() -> tuple[_Units, _Units]:
    """``31**-i`` at index i, and ``31**(e-1)`` at index e (0 at index 0), for one group."""
    global _tables  # noqa: PLW0603 - built once, on first use, then read-only
    if _tables is None:
        inverse = _powers(_INVERSE_31, _GROUP_UNITS)
        forward = np.concatenate((np.zeros(1, dtype=_U32), _powers(31, _GROUP_UNITS)))
        _tables = (inverse, forward)
    return _tables


def _powers(base: int, count: int) -> _Units:
    """``base**i`` modulo 2**32 for i in 0..count-1."""
    steps = np.full(count, base, dtype=_U32)
    steps[0] = 1
    powers: _Units = np.cumprod(steps, dtype=_U32)
    return powers
