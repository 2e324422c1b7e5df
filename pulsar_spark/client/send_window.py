"""What a producer has sent and the broker has not confirmed yet, without I/O.

How this works
--------------
Every SEND frame is recorded as a :class:`Sent` entry (its sequence ids, how many messages its
receipt completes, and its checksummed payload section) before it is written. Receipts arrive
in order, so each must match the oldest entry: :meth:`SendWindow.confirm` pops it, or raises
if the broker confirmed something else. After a reconnect, :meth:`SendWindow.resend_after`
drops what the broker reports as stored (a deduplicating broker tells a producer the highest
sequence id it holds under its name) and returns the rest, in order, to be sent again under
the new producer id with the same sequence ids. Without deduplication the broker reports
nothing stored, so what was in flight when the connection broke is sent again: at most those
messages are stored twice.

:meth:`SendWindow.stored` serves the same rule before anything is sent: a retried task's
producer learns at creation what an earlier attempt stored, and skips those messages.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from pulsar_spark.errors import RemoteProtocolError


@dataclass(frozen=True, slots=True)
class Sent:
    """One SEND frame: the batch (or single message, or chunk) it carried."""

    sequence_id: int
    highest_sequence_id: int
    messages: int  # completed by its receipt: 0 for a chunk before the last
    num_messages: int  # the SEND command's count (1 for a single message or a chunk)
    is_chunk: bool
    section: bytes  # [magic][crc32c][metadata size][metadata][payload]


class SendWindow:
    """SEND frames without a receipt, oldest first; counts messages, not frames."""

    def __init__(self, label: str, stored_through: int = -1) -> None:
        self.label = label  # "producer NAME on TOPIC", for errors
        self.stored_through = stored_through
        self.pending = 0  # messages sent and not confirmed
        self.confirmed = 0
        self.skipped = 0
        self._entries: collections.deque[Sent] = collections.deque()

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def stored(self, first_sequence_id: int, count: int) -> int:
        """How many of ``count`` messages numbered from ``first_sequence_id`` the broker
        already has (they come first); counts them as skipped."""
        stored = min(max(self.stored_through - first_sequence_id + 1, 0), count)
        self.skipped += stored
        return stored

    def add(self, sent: Sent) -> None:
        self._entries.append(sent)
        self.pending += sent.messages

    def confirm(self, sequence_id: int, highest_sequence_id: int | None) -> int:
        """Pop the oldest entry for a receipt naming these ids; the messages it completes."""
        if not self._entries:
            raise RemoteProtocolError(
                f"{self.label}: receipt for sequence id {sequence_id} while no message is in flight"
            )
        oldest = self._entries[0]
        if highest_sequence_id is not None and not _names_a_range(sequence_id, highest_sequence_id):
            highest_sequence_id = None
        named = highest_sequence_id not in (None, oldest.highest_sequence_id)
        if sequence_id != oldest.sequence_id or named:
            ids = (
                sequence_id
                if highest_sequence_id is None
                else (f"{sequence_id}..{highest_sequence_id}")
            )
            raise RemoteProtocolError(
                f"{self.label}: receipt for sequence id {ids} but the oldest SEND in flight "
                f"has {oldest.sequence_id}..{oldest.highest_sequence_id}"
            )
        self._entries.popleft()
        self.pending -= oldest.messages
        self.confirmed += oldest.messages
        return oldest.messages

    def resend_after(self, last_stored: int) -> list[Sent]:
        """Entries to send again on a new producer: those the broker does not report as
        stored (``last_stored`` is -1 when it reports nothing); the others count as
        confirmed."""
        while self._entries and self._entries[0].highest_sequence_id <= last_stored:
            stored = self._entries.popleft()
            self.pending -= stored.messages
            self.confirmed += stored.messages
        return list(self._entries)


def _names_a_range(sequence_id: int, highest_sequence_id: int) -> bool:
    """Whether a receipt's ``highest_sequence_id`` says anything beyond ``sequence_id``.

    A broker answers a SEND without a highest id (a single message, a batch of one) with
    0 (pulsar-lite) or with Java's -1, which arrives as 2**64 - 1 (Apache Pulsar).
    """
    return sequence_id < highest_sequence_id < 1 << 63
