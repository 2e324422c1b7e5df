"""Java's key routing, written here independently of the connector's implementation.

A Java producer's default router sends a keyed message to partition
``(String.hashCode(key) & 0x7FFFFFFF) % partitions``; tests use these to predict where keys
land.
"""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """``text.hashCode()`` in Java: ``h = 31 * h + c`` over UTF-16 code units, 32-bit signed."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def java_partition(key: str, partitions: int) -> int:
    """The partition a Java producer's default router picks for ``key``."""
    return (java_string_hash(key) & 0x7FFFFFFF) % partitions
