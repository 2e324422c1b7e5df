"""MessageId: the position of one message in a topic-partition.

A Pulsar message is addressed by ``(ledger_id, entry_id)`` — one stored entry — plus
``batch_index`` inside a batched entry (``-1`` when the entry holds a single message).
Within one partition these ids are totally ordered by ``(ledger_id, entry_id, batch_index)``:
ledgers are created in increasing id order and entries are appended in order. A non-batched
message (batch_index -1) sorts before index 0 of the same entry, which never coexist anyway.

``partition`` says which partition of a partitioned topic the id came from (-1 when the topic is
not partitioned). It is carried along but takes no part in ordering or equality, because ids are
only ever compared within one partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The broker's sentinels. uint64 on the wire: -1 travels as 2**64 - 1.
_EARLIEST_LEDGER = -1
_LATEST_LEDGER = (1 << 63) - 1
_UINT64 = 1 << 64


@dataclass(frozen=True, order=True, slots=True)
class MessageId:
    """A ledger/entry/batch-index position; ``partition`` is informational."""

    ledger_id: int
    entry_id: int
    batch_index: int = -1
    partition: int = field(default=-1, compare=False)

    @classmethod
    def earliest(cls) -> MessageId:
        """Before the first message of any topic."""
        return cls(_EARLIEST_LEDGER, _EARLIEST_LEDGER)

    @classmethod
    def latest(cls) -> MessageId:
        """After the last message of any topic."""
        return cls(_LATEST_LEDGER, _LATEST_LEDGER)

    @property
    def is_earliest(self) -> bool:
        return self.ledger_id == _EARLIEST_LEDGER and self.entry_id == _EARLIEST_LEDGER

    @property
    def is_latest(self) -> bool:
        return self.ledger_id == _LATEST_LEDGER and self.entry_id == _LATEST_LEDGER

    # Positions as comparable keys (ledger, entry, batch index), for ranges and offsets. A
    # batch index of -1 stands for the whole entry, so as a bound it widens to the entry's edge
    # on that side: it starts before the entry's first message and ends after its last.

    def first_key(self) -> tuple[int, int, int]:
        """This position as the first message of a range (inclusive start)."""
        return (self.ledger_id, self.entry_id, -1 if self.batch_index < 0 else self.batch_index)

    def last_key(self) -> tuple[int, int, int]:
        """This position as the last message of a range (inclusive end)."""
        batch = _PAST_LAST_INDEX if self.batch_index < 0 else self.batch_index
        return (self.ledger_id, self.entry_id, batch)

    def key_after(self) -> tuple[int, int, int]:
        """The first key after this position (an exclusive start)."""
        batch = _PAST_LAST_INDEX + 1 if self.batch_index < 0 else self.batch_index + 1
        return (self.ledger_id, self.entry_id, batch)

    def key_before(self) -> tuple[int, int, int]:
        """The last key before this position (an exclusive end)."""
        return (self.ledger_id, self.entry_id, -2 if self.batch_index < 0 else self.batch_index - 1)

    @property
    def entry(self) -> tuple[int, int]:
        """The (ledger_id, entry_id) of the stored entry holding this message."""
        return (self.ledger_id, self.entry_id)

    def with_partition(self, partition: int) -> MessageId:
        return MessageId(self.ledger_id, self.entry_id, self.batch_index, partition)

    @staticmethod
    def from_wire(ledger_id: int, entry_id: int, batch_index: int, partition: int) -> MessageId:
        """Build from MessageIdData fields, turning uint64-encoded negatives back into -1."""
        return MessageId(_signed64(ledger_id), _signed64(entry_id), batch_index, partition)

    def wire_ids(self) -> tuple[int, int]:
        """(ledgerId, entryId) as the uint64 values MessageIdData carries."""
        return (self.ledger_id % _UINT64, self.entry_id % _UINT64)

    def to_json(self) -> dict[str, int]:
        return {
            "ledgerId": self.ledger_id,
            "entryId": self.entry_id,
            "batchIndex": self.batch_index,
        }

    @classmethod
    def from_json(cls, value: Any) -> MessageId:
        """Parse ``{"ledgerId": L, "entryId": E, "batchIndex": B}`` (batchIndex optional)."""
        if not isinstance(value, dict):
            raise TypeError(f"expected an object with ledgerId/entryId, got {value!r}")
        try:
            ledger, entry = value["ledgerId"], value["entryId"]
        except KeyError as exc:
            raise TypeError(f"missing {exc.args[0]!r} in message id {value!r}") from exc
        batch = value.get("batchIndex", -1)
        for name, v in (("ledgerId", ledger), ("entryId", entry), ("batchIndex", batch)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"{name} must be an integer, got {v!r}")
        return cls(ledger, entry, batch)

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}:{self.batch_index}"


_PAST_LAST_INDEX = 1 << 31  # above every batch index


def _signed64(value: int) -> int:
    return value - _UINT64 if value >= 1 << 63 else value
