"""``maxMessagesPerTrigger`` for TubeMQ: micro-batch ends planned from the offsets alone.

The partitions of a store share its index, one 28-byte entry per message, and every entry
belongs to one partition. So the ranges of a store's partitions that all end at one offset
``cut`` hold at most ``(cut - first start) / 28`` messages between them, and exactly that many
when they all start at the same offset (a stream's partitions of a store do: they start where
the store ended, or where the previous limit cut it). The budget is shared among stores as
the Pulsar source shares it among partitions (:func:`~pulsar_spark.common.limits.limit_ends`),
and each store's partitions end at its cut, or where they are when they start past it.
"""

from __future__ import annotations

from collections.abc import Mapping

from pulsar_spark.common.limits import limit_ends
from pulsar_spark.tubemq.client.consumer import INDEX_ENTRY_SIZE


class StoreCounter:
    """Index entries of one store from ``start`` to ``end``, handed out by count."""

    def __init__(self, start: int, end: int) -> None:
        self.position = start
        self._end = end

    @property
    def exhausted(self) -> bool:
        return self._end - self.position < INDEX_ENTRY_SIZE

    def take(self, wanted: int) -> int:
        """Advance over up to ``wanted`` entries; return how many it advanced over."""
        taken = min(wanted, (self._end - self.position) // INDEX_ENTRY_SIZE)
        self.position += taken * INDEX_ENTRY_SIZE
        return taken


def limited_ends(
    starts: Mapping[str, int],
    ends: Mapping[str, int],
    stores: Mapping[str, str],
    budget: int,
) -> dict[str, int]:
    """Ends, per partition key, of a micro-batch of at most ``budget`` messages that starts
    at ``starts`` and may read up to ``ends``; ``stores`` names each partition's store."""
    members: dict[str, list[str]] = {}
    for key in ends:
        members.setdefault(stores[key], []).append(key)
    counters = {
        store: StoreCounter(min(starts[k] for k in keys), max(ends[k] for k in keys))
        for store, keys in sorted(members.items())
    }
    cuts = limit_ends(counters, budget)
    return {key: max(starts[key], min(ends[key], cuts[stores[key]])) for key in ends}
