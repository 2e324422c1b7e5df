"""More tasks than partitions (``minPartitions``): each partition's range cut at entry boundaries.

How this works: each range gets its share of the tasks and is cut into that many pieces, by
the rule of :mod:`pulsar_spark.common.task_shares`. The cuts are entry ids, so the pieces meet
exactly: piece ``k`` reads the whole entries from cut ``k`` up to the entry before cut
``k + 1`` (both inclusive); the first piece keeps the range's start and the last its end, batch
indexes and all. No message is read twice and none is left out, and a chunked message cut in
two is read by the piece where it begins (readers finish a message past their end and skip the
chunks of one that began before their start).

Size is counted in entries (a batch of many messages is one entry). The binary protocol tells
a range's first and last entry ids but not how many entries a ledger holds, so only the entries
of the range's last ledger can be counted: a range that starts in an earlier ledger (Apache
Pulsar rolls ledgers; pulsar-lite keeps one per topic) gets everything before its last ledger
in its first piece, and the last ledger's entries spread over all pieces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pulsar_spark.common.task_shares import even_cuts, task_shares
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.planning import PartitionRead


def split_reads(reads: Sequence[PartitionRead], min_partitions: int | None) -> list[PartitionRead]:
    """``reads`` cut into at least ``min_partitions`` pieces where the entries allow."""
    shares = task_shares([_entries(read) for read in reads], min_partitions)
    pieces: list[PartitionRead] = []
    for read, share in zip(reads, shares, strict=True):
        pieces += split(read, share)
    return pieces


def split(read: PartitionRead, parts: int) -> list[PartitionRead]:
    """``read`` cut into at most ``parts`` pieces of whole entries, as even as can be known."""
    span = _countable(read)
    if span is None or parts <= 1:
        return [read]
    first, last = span
    cuts = even_cuts(first, last - first + 1, parts)
    ledger, partition = read.end.ledger_id, read.end.partition
    starts = [(read.start, read.start_inclusive)] + [
        (MessageId(ledger, cut, -1, partition), True) for cut in cuts
    ]
    ends = [(MessageId(ledger, cut - 1, -1, partition), True) for cut in cuts] + [
        (read.end, read.end_inclusive)
    ]
    return [
        dataclasses.replace(
            read, start=start, start_inclusive=start_in, end=end, end_inclusive=end_in
        )
        for (start, start_in), (end, end_in) in zip(starts, ends, strict=True)
    ]


def _entries(read: PartitionRead) -> int:
    span = _countable(read)
    return 0 if span is None else span[1] - span[0] + 1


def _countable(read: PartitionRead) -> tuple[int, int] | None:
    """The first and last entry ids of the range's last ledger that the range surely reads
    some of, or None when it reads none there for sure."""
    start, end = read.start, read.end
    ledger = end.ledger_id
    if start.is_earliest or start.ledger_id < ledger:
        first = 0
    else:
        whole_entry_excluded = not read.start_inclusive and start.batch_index < 0
        first = start.entry_id + (1 if whole_entry_excluded else 0)
    last = end.entry_id
    if not read.end_inclusive and end.batch_index <= 0:
        last -= 1  # an exclusive end before the entry's first message reads none of it
    return (first, last) if first <= last else None
