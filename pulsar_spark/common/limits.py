"""A budget of messages shared fairly among the parts of a micro-batch, for
``maxMessagesPerTrigger``: Pulsar's partitions (:mod:`pulsar_spark.source.counting`) and
TubeMQ's stores (:mod:`pulsar_spark.tubemq.spark.limits`) alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

P_co = TypeVar("P_co", covariant=True)
T = TypeVar("T")


class Countable(Protocol[P_co]):
    """What :func:`limit_ends` shares a budget over: a position that :meth:`take` advances
    over messages, until it is ``exhausted``."""

    @property
    def position(self) -> P_co: ...

    @property
    def exhausted(self) -> bool: ...

    def take(self, wanted: int) -> int: ...


def limit_ends(counters: Mapping[str, Countable[T]], budget: int) -> dict[str, T]:
    """Share ``budget`` messages fairly among the parts; return each one's end position."""
    remaining = budget
    active = list(counters)
    while active and remaining > 0:
        share = max(1, remaining // len(active))
        still = []
        for name in active:
            if remaining <= 0:
                break
            remaining -= counters[name].take(min(share, remaining))
            if not counters[name].exhausted:
                still.append(name)
        active = still
    return {name: counter.position for name, counter in counters.items()}
