"""``minPartitions``: how many tasks each range gets, and where a range is cut into them.

The rule of Spark's Kafka source, shared by the ``pulsar`` and ``tubemq`` sources: when a read
has fewer ranges than ``minPartitions``, every range gets a share of the tasks proportional to
its size (at least one), and is cut into that many pieces of as equal a number of units as
whole units allow. What a unit is belongs to each source: an entry of a Pulsar ledger
(:mod:`pulsar_spark.source.splitting`), an index entry of a TubeMQ store
(:mod:`pulsar_spark.tubemq.spark.reader`).
"""

from __future__ import annotations

from collections.abc import Sequence


def task_shares(sizes: Sequence[int], min_partitions: int | None) -> list[int]:
    """How many pieces each range of ``sizes`` (in units; 0 when unknown) is cut into: one
    each when ``min_partitions`` is None or not more than the ranges."""
    if min_partitions is None or len(sizes) >= min_partitions:
        return [1] * len(sizes)
    total = sum(size for size in sizes if size) or 1
    return [max(1, round(size / total * min_partitions)) for size in sizes]


def even_cuts(first: int, count: int, parts: int) -> list[int]:
    """Where ``count`` units numbered from ``first`` are cut into ``parts`` pieces (at most one
    per unit): the first unit of every piece but the first, ascending."""
    parts = min(parts, count)
    return [first + (k * count) // parts for k in range(1, parts)]
