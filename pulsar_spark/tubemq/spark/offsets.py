"""Streaming offsets of the ``tubemq`` source: per partition, the next store offset to read.

An offset is a JSON object from partition key (``brokerId:topic:partitionId``) to the store
offset where the next micro-batch starts. As in Spark's Kafka source the start is inclusive
and the end exclusive, so micro-batch N reads ``[start_N, end_N)`` and its end is the next
one's start. Keys are sorted, because Spark compares offsets as JSON strings.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulsar_spark.errors import ConfigurationError


@dataclass(frozen=True)
class TubeMQOffset:
    """Partition key -> next store offset to read."""

    positions: Mapping[str, int]

    def to_json(self) -> dict[str, Any]:
        """The canonical JSON form: keys sorted."""
        return {key: int(self.positions[key]) for key in sorted(self.positions)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TubeMQOffset:
        positions = {}
        for key, value in data.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigurationError(f"invalid TubeMQ offset {dict(data)!r}: {key!r}")
            positions[str(key)] = value
        return cls(positions)
