"""``failOnDataLoss``: what counts as lost data in a stream, and what happens then.

Data is lost when a partition the offsets name vanished, when a partition no longer reaches the
checkpointed position (deleted and re-created, say), or when a task's start position no longer
exists (retention removed its ledger). With ``failOnDataLoss=true`` (the default) the query
fails with :class:`~pulsar_spark.errors.DataLossError`; otherwise a warning is logged and the
query goes on from what exists. Every message says what is gone and how to go on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from pulsar_spark.errors import DataLossError

# The streaming source's logger, which users filter on: the warnings are about their query.
log = logging.getLogger("pulsar_spark.spark.stream_reader")


class Position(Protocol):
    """A position in a partition, as :meth:`DataLossPolicy.check_start` compares them (a
    Pulsar message id is one): ``is_earliest`` before every message, ``last_key`` the position
    as the last message of a range, in the order of positions."""

    @property
    def is_earliest(self) -> bool: ...

    def last_key(self) -> tuple[int, ...]: ...


@dataclass(frozen=True, slots=True)
class DataLossPolicy:
    fail_on_data_loss: bool

    def report(self, what: str) -> None:
        """Fail with ``what`` is lost, or log it as a warning."""
        message = (
            f"{what}: data the query expected is gone. Set failOnDataLoss=false to continue "
            "from what exists (the missing messages are skipped)"
        )
        if self.fail_on_data_loss:
            raise DataLossError(message)
        log.warning(message)

    def check_vanished(self, begin: Iterable[str], current: Iterable[str]) -> None:
        """Report every partition of ``begin`` that is not ``current`` any more."""
        for name in sorted(set(begin) - set(current)):
            self.report(f"partition {name} no longer exists")

    def check_start(
        self,
        name: str,
        first: Position,
        last: Position | None,
        current_last: Callable[[], Position | None] | None = None,
    ) -> bool:
        """Whether partition ``name``, ending at ``last`` (None: empty), no longer holds
        position ``first`` (reported as data loss).

        Under Trigger.AvailableNow ``last`` is the end recorded when the query started. A start
        can lie beyond it without loss (Spark records the ends before it asks for the initial
        offset, which may be ``latest``), so such a start is checked against the current end,
        which ``current_last`` gives.
        """
        if not ends_before(first, last):
            return False
        if current_last is not None:
            last = current_last()
            if not ends_before(first, last):
                return False
        self.report(
            f"partition {name} was read up to {first} but now ends at "
            f"{last if last is not None else 'nothing (it is empty)'}"
        )
        return True

    def start_gone(self, name: str, start: Position, first: Position) -> None:
        """Report that a task's exclusive ``start`` no longer exists; ``first`` is the first
        message left."""
        self.report(
            f"partition {name} was read up to {start}, which no longer exists (removed by "
            f"retention, or the topic was re-created); the first message left is in {first}"
        )


def ends_before(first: Position, last: Position | None) -> bool:
    """Whether a partition ending at ``last`` (None: empty) ends before position ``first``;
    any partition holds "nothing consumed"."""
    if first.is_earliest:
        return False
    return last is None or last.last_key() < first.last_key()
