"""Topic names as the tests spell them: short names live in ``public/default``."""

from __future__ import annotations

NS = "persistent://public/default/"
"""The namespace a short topic name stands in."""


def full(topic: str) -> str:
    """``topic`` fully qualified: a short name is put in :data:`NS`, a full one kept."""
    return topic if "://" in topic else NS + topic


def partition_of(topic: str, index: int) -> str:
    """The full name of partition ``index`` of ``topic``."""
    return f"{full(topic)}-partition-{index}"
