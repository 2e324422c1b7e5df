"""Key routing must match Java's ``String.hashCode`` and its default partition router.

Every expected number below was produced by OpenJDK 17 (``"...".hashCode()`` and
``(h & 0x7fffffff) % n``), not by this code.
"""

from __future__ import annotations

import random

import pytest

from pulsar_spark.protocol import routing
from pulsar_spark.protocol.routing import (
    UNKEYED,
    RoundRobin,
    java_string_hash,
    partition_for_key,
    partitions_for_keys,
)

EMOJI = "\U0001f600"  # one code point, two UTF-16 units
ROCKET = "\U0001f680"

JAVA_HASHES: dict[str, int] = {
    "": 0,
    "a": 97,
    "hello": 99162322,
    "key-1": 101943363,
    "Hello, World!": 1498789909,
    "привет мир": -59024724,
    "ключ": 33309882,
    "été": 227742,
    "日本語のキー": -841196058,
    EMOJI: 1772899,
    f"emoji-{ROCKET}-key": -455498020,
    "\U0001d11e\U0001f3b5": 1705043939,  # two non-BMP characters
    "The quick brown fox jumps over the lazy dog": -609428141,
    "user-123456789": 935451827,
    "ab\x00cd": 92504224,
    "polygenelubricants": -(2**31),  # Integer.MIN_VALUE
    "x" * 1000: -1715418112,
    "Aa": 2112,
    "BB": 2112,
    "a\ud800b": 1807491,  # a lone surrogate: one UTF-16 unit, as in a Java String
}

# key -> (hash, partition for 2, 3, 4, 7 and 12 partitions)
JAVA_PARTITIONS: dict[str, tuple[int, int, int, int, int, int]] = {
    "key-0": (101943362, 0, 2, 2, 3, 2),
    "key-1": (101943363, 1, 0, 3, 4, 3),
    "key-2": (101943364, 0, 1, 0, 5, 4),
    "key-3": (101943365, 1, 2, 1, 6, 5),
    "user-42": (-147182656, 0, 1, 0, 4, 4),
    "order/2026/11/22": (840350371, 1, 1, 3, 0, 7),
    "AP9iaW4=": (1331178846, 0, 0, 2, 4, 6),  # base64 of b"\x00\xffbin"
    f"ключ-日本-{EMOJI}": (1135427638, 0, 1, 2, 2, 10),
    EMOJI * 40 + "ž" * 70: (2138635192, 0, 1, 0, 1, 4),  # non-ASCII, longer than a block
    "é" * 200: (-554946432, 0, 2, 0, 4, 8),
    "0123456789" * 30: (-1399250474, 0, 0, 2, 3, 6),
}
PARTITION_COUNTS = (2, 3, 4, 7, 12)


@pytest.mark.parametrize(("key", "expected"), JAVA_HASHES.items(), ids=repr)
def test_java_string_hash_matches_java(key: str, expected: int) -> None:
    assert java_string_hash(key) == expected


@pytest.mark.parametrize(("key", "expected"), JAVA_PARTITIONS.items(), ids=repr)
def test_partition_for_key_matches_java(
    key: str, expected: tuple[int, int, int, int, int, int]
) -> None:
    assert java_string_hash(key) == expected[0]
    for count, partition in zip(PARTITION_COUNTS, expected[1:], strict=True):
        assert partition_for_key(key, count) == partition


def test_hash_is_signed_32_bit() -> None:
    for key in [*JAVA_HASHES, *JAVA_PARTITIONS]:
        assert -(2**31) <= java_string_hash(key) < 2**31


def test_min_value_hash_goes_to_partition_zero() -> None:
    # Integer.MIN_VALUE & 0x7fffffff == 0 (Java's signSafeMod would give the same).
    assert partition_for_key("polygenelubricants", 5) == 0


@pytest.mark.parametrize("partitions", [-1, 0, 1])
def test_one_partition_or_fewer_always_gives_zero(partitions: int) -> None:
    assert partition_for_key("key-1", partitions) == 0
    assert partitions_for_keys(["key-1", None, "x"], partitions) == [0, UNKEYED, 0]


def _expected_partitions(keys: list[str | None], partitions: int) -> list[int]:
    return [UNKEYED if key is None else partition_for_key(key, partitions) for key in keys]


@pytest.mark.parametrize("count", [0, 1, 10, 63, 64, 65, 1000])
def test_partitions_for_keys_matches_scalar_routing(count: int) -> None:
    rng = random.Random(count)
    pool: list[str | None] = [*JAVA_HASHES, *JAVA_PARTITIONS, None]
    keys = [rng.choice(pool) for _ in range(count)]
    for partitions in PARTITION_COUNTS:
        assert partitions_for_keys(keys, partitions) == _expected_partitions(keys, partitions)


def test_partitions_for_keys_matches_java_on_known_keys() -> None:
    keys = list(JAVA_PARTITIONS) * 10  # enough keys for the vectorized path
    for index, partitions in enumerate(PARTITION_COUNTS, start=1):
        expected = [JAVA_PARTITIONS[key][index] for key in keys]
        assert partitions_for_keys(keys, partitions) == expected


def test_partitions_for_keys_ascii_only_batch() -> None:
    keys: list[str | None] = [f"user-{i}" for i in range(5000)]
    assert partitions_for_keys(keys, 7) == _expected_partitions(keys, 7)


def test_partitions_for_keys_all_unkeyed() -> None:
    assert partitions_for_keys([None] * 100, 4) == [UNKEYED] * 100


def test_partitions_for_keys_empty_keys_hash_to_zero() -> None:
    keys: list[str | None] = ["", "a", "", None, ""] * 30
    assert partitions_for_keys(keys, 3) == _expected_partitions(keys, 3)
    assert partitions_for_keys([""] * 100, 3) == [0] * 100


def test_partitions_for_keys_spanning_several_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small groups exercise the group boundaries, including a key longer than a whole group.
    monkeypatch.setattr(routing, "_GROUP_UNITS", 50)
    monkeypatch.setattr(routing, "_tables", None)
    rng = random.Random(7)
    alphabet = "abcxyz-é日" + EMOJI
    keys: list[str | None] = [
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 80))) for _ in range(400)
    ]
    keys[10] = None
    keys[20] = "q" * 500
    assert partitions_for_keys(keys, 12) == _expected_partitions(keys, 12)


def test_round_robin_cycles_from_start() -> None:
    chooser = RoundRobin(3, start=2)
    assert [chooser.next_partition() for _ in range(7)] == [2, 0, 1, 2, 0, 1, 2]


def test_round_robin_start_wraps_around_the_partitions() -> None:
    chooser = RoundRobin(4, start=9)
    assert [chooser.next_partition() for _ in range(5)] == [1, 2, 3, 0, 1]


@pytest.mark.parametrize("partitions", [0, 1])
def test_round_robin_single_partition(partitions: int) -> None:
    chooser = RoundRobin(partitions, start=5)
    assert [chooser.next_partition() for _ in range(3)] == [0, 0, 0]
