"""Streaming offsets: per topic-partition, the position of the last message already read.

How this works
--------------
An offset is a JSON object from partition name (``persistent://t/ns/x-partition-0``, or the
topic itself when it is not partitioned) to ``{"batchIndex": B, "entryId": E, "ledgerId": L}``:
the id of the **last message consumed** in that partition. It is always *exclusive* as a start
and *inclusive* as an end, so micro-batch N reads exactly ``(start_N, end_N]`` and the end of
one batch is the start of the next: a restarted query neither repeats nor skips a message.
Inside a batched entry the position is exact to the message (``batchIndex``), so a limit may
end a micro-batch in the middle of an entry and the next one resumes right after it. A batch
index of -1 stands for the whole entry; ``(-1, -1, -1)`` means "nothing consumed yet".

A stream that may switch clusters (``failover.secondaryServiceUrls``) records the cluster its
positions belong to under the key ``"cluster"`` (a service URL without user info, see
:func:`~pulsar_spark.common.address.cluster_name`), never a partition name, which always has a
scheme. Offsets on the primary cluster (``service.url``) leave the key out, so they read the
same as before failover existed, and offsets without it mean the primary.

Keys are sorted at every level, because Spark compares offsets as JSON strings: two spellings
of one offset would make it run empty micro-batches forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pulsar_spark.errors import ConfigurationError
from pulsar_spark.message_id import MessageId

NOTHING_CONSUMED = MessageId.earliest()
CLUSTER = "cluster"


@dataclass(frozen=True)
class PulsarOffset:
    """Partition name -> id of the last consumed message, on ``cluster`` (None: the primary;
    see the module docstring)."""

    positions: Mapping[str, MessageId]
    cluster: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The canonical JSON form: keys sorted at every level."""
        data: dict[str, Any] = {
            name: dict(sorted(position.to_json().items()))
            for name, position in self.positions.items()
        }
        if self.cluster is not None:
            data[CLUSTER] = self.cluster
        return dict(sorted(data.items()))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PulsarOffset:
        cluster = data.get(CLUSTER)
        if cluster is not None and not isinstance(cluster, str):
            raise ConfigurationError(f"invalid Pulsar offset {dict(data)!r}: cluster {cluster!r}")
        try:
            positions = {
                name: MessageId.from_json(value) for name, value in data.items() if name != CLUSTER
            }
        except TypeError as exc:
            raise ConfigurationError(f"invalid Pulsar offset {dict(data)!r}: {exc}") from exc
        return cls(positions, cluster)

    def get(self, partition: str) -> MessageId:
        return self.positions.get(partition, NOTHING_CONSUMED)


def consumed_before(first: MessageId) -> MessageId:
    """The exclusive position just before ``first`` (which is to be read next).

    Inside a batch that is the previous index; otherwise "the whole previous entry", which
    exists or not: an exclusive start at (L, E-1, whole entry) resumes at entry E either way.
    """
    if first.is_earliest:
        return NOTHING_CONSUMED
    if first.batch_index > 0:
        return MessageId(first.ledger_id, first.entry_id, first.batch_index - 1, first.partition)
    return MessageId(first.ledger_id, first.entry_id - 1, -1, first.partition)


def has_messages_after(start: MessageId, last: MessageId | None) -> bool:
    """Whether a partition whose last message is ``last`` holds anything after ``start``.

    ``last`` None or "nothing consumed" is an empty partition (or an empty range's end).
    """
    if last is None or last.is_earliest:
        return False
    return start.is_earliest or last.last_key() > start.last_key()
