"""MurmurHash3 (32-bit, seed 0) and key routing by Java's ``Murmur3_32Hash`` scheme.

The byte vectors are MurmurHash3_x86_32's published ones for seed 0. The key table was printed
by the Java client 4.0.8's own ``Murmur3Hash32.makeHash(String)`` (already ``& 0x7fffffff``)
and ``% n``, not by this code.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from pulsar_spark.protocol.murmur3 import murmur3_32, murmur3_32_many
from pulsar_spark.protocol.routing import (
    MURMUR3_32_HASH,
    UNKEYED,
    partition_for_key,
    partitions_for_keys,
)

VECTORS: dict[bytes, int] = {
    b"": 0,
    b"\x00": 0x514E28B7,
    b"\x00\x00": 0x30F4C306,
    b"\x00\x00\x00": 0x85F0B427,
    b"\x00\x00\x00\x00": 0x2362F9DE,
    b"\x21": 0x72661CF4,
    b"\x21\x43": 0xA0F7B07A,
    b"\x21\x43\x65": 0x7E4A8634,
    b"\x21\x43\x65\x87": 0xF55B516B,
    b"\xff\xff\xff\xff": 0x76293B50,
    b"a": 0x3C2569B2,
    b"abc": 0xB3DD93FA,
    b"Hello, world!": 0xC0363E43,
    b"The quick brown fox jumps over the lazy dog": 0x2E4FF723,
}

# key -> (Java's makeHash, partition for 2, 3, 4, 7 and 12 partitions)
JAVA_MURMUR: dict[str, tuple[int, int, int, int, int, int]] = {
    "": (0, 0, 0, 0, 0, 0),
    "a": (1009084850, 0, 2, 2, 4, 2),
    "ab": (465557343, 1, 0, 3, 6, 3),
    "abc": (870159354, 0, 0, 2, 1, 6),
    "abcd": (1139631978, 0, 0, 2, 2, 6),
    "abcde": (1755028214, 0, 2, 2, 2, 2),
    "key-1": (414258592, 0, 1, 0, 6, 4),
    "Hello, world!": (1077296707, 1, 1, 3, 4, 7),
    "ключ": (442048578, 0, 0, 2, 6, 6),
    "日本語のキー": (909276598, 0, 1, 2, 6, 10),
    "\U0001f600": (1051995898, 0, 1, 2, 2, 10),  # one code point, four UTF-8 bytes
    "emoji-\U0001f680-key": (1610609895, 1, 0, 3, 6, 3),
    "é" * 200: (2129142974, 0, 2, 2, 0, 2),
    "0123456789" * 30: (389726088, 0, 0, 0, 3, 0),
    "a\ud800b": (539005960, 0, 1, 0, 3, 4),  # a lone surrogate: Java encodes it as "?"
    "polygenelubricants": (1101602400, 0, 0, 0, 3, 0),
    "ab\x00cd": (1668721715, 1, 2, 3, 3, 11),
    "AP9iaW4=": (1893097044, 0, 0, 0, 6, 0),  # base64 of b"\x00\xffbin", as keyBytes travel
}
PARTITION_COUNTS = (2, 3, 4, 7, 12)


def reference(data: bytes) -> int:
    """MurmurHash3_x86_32 with seed 0, one byte string at a time, as the algorithm reads."""
    mask = 0xFFFFFFFF

    def rotl(x: int, bits: int) -> int:
        return ((x << bits) | (x >> (32 - bits))) & mask

    def mix_k(k: int) -> int:
        return (rotl((k * 0xCC9E2D51) & mask, 15) * 0x1B873593) & mask

    h = 0
    whole = len(data) - len(data) % 4
    for start in range(0, whole, 4):
        h = rotl(h ^ mix_k(int.from_bytes(data[start : start + 4], "little")), 13)
        h = (h * 5 + 0xE6546B64) & mask
    h ^= mix_k(int.from_bytes(data[whole:], "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


@pytest.mark.parametrize(("data", "expected"), VECTORS.items(), ids=repr)
def test_published_vectors(data: bytes, expected: int) -> None:
    assert murmur3_32(data) == expected
    assert reference(data) == expected


def test_many_strings_at_once_match_one_at_a_time() -> None:
    # Every tail length, empty strings between long ones, and strings of 0 to 3 blocks mixed.
    rng = random.Random(3)
    strings = [
        rng.randbytes(rng.choice([0, 1, 2, 3, 4, 5, 7, 8, 13, 64, 1001])) for _ in range(500)
    ]
    lengths = np.array([len(s) for s in strings], dtype=np.int64)
    hashes = murmur3_32_many(b"".join(strings), lengths)
    assert hashes.dtype == np.uint32
    assert hashes.tolist() == [reference(s) for s in strings]


def test_no_strings() -> None:
    assert murmur3_32_many(b"", np.zeros(0, dtype=np.int64)).tolist() == []
    assert murmur3_32_many(b"", np.zeros(3, dtype=np.int64)).tolist() == [0, 0, 0]


def test_a_long_string() -> None:
    data = bytes(range(256)) * 400 + b"xyz"
    assert murmur3_32(data) == reference(data)


@pytest.mark.parametrize(("key", "expected"), JAVA_MURMUR.items(), ids=repr)
def test_partition_for_key_matches_java(
    key: str, expected: tuple[int, int, int, int, int, int]
) -> None:
    assert murmur3_32(key.encode("utf-8", "replace")) & 0x7FFFFFFF == expected[0]
    for count, partition in zip(PARTITION_COUNTS, expected[1:], strict=True):
        assert partition_for_key(key, count, MURMUR3_32_HASH) == partition


def test_partitions_for_keys_matches_java_on_known_keys() -> None:
    keys: list[str | None] = [*JAVA_MURMUR, None] * 7
    for index, partitions in enumerate(PARTITION_COUNTS, start=1):
        expected = [UNKEYED if key is None else JAVA_MURMUR[key][index] for key in keys]
        assert partitions_for_keys(keys, partitions, MURMUR3_32_HASH) == expected


@pytest.mark.parametrize("alphabet", ["abc-09", "abc-é日\U0001f600\ud800"])
def test_partitions_for_keys_match_the_reference(alphabet: str) -> None:
    rng = random.Random(len(alphabet))
    keys = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 70))) for _ in range(300)]
    expected = [reference(key.encode("utf-8", "replace")) % 2**31 % 12 for key in keys]
    assert partitions_for_keys(keys, 12, MURMUR3_32_HASH) == expected


def test_unkeyed_and_one_partition() -> None:
    assert partitions_for_keys([None, None], 4, MURMUR3_32_HASH) == [UNKEYED, UNKEYED]
    assert partitions_for_keys(["a", None], 1, MURMUR3_32_HASH) == [0, UNKEYED]
    assert partition_for_key("a", 0, MURMUR3_32_HASH) == 0
