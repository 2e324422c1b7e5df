"""Where one cluster's messages lie on another cluster that geo-replication copied them to.

How this works
--------------
Geo-replication writes every entry of a topic on cluster A again on cluster B, whole and in
A's order. The copy names A in ``replicated_from`` and the original's position in the
property :data:`SOURCE_POSITION` (``"ledger:entry"``) of the entry's metadata, so a batch's
copy keeps each message at its batch index. A range of A's message ids therefore maps to a
range of B's: :func:`locate_copies` reads B's entries from a position known to lie before
the copies (a replicated subscription's), looking at metadata only, and bounds the range on B
by the copy of the range's first entry and that of its last. B's own messages, and copies from
a third cluster, may lie in between: the caller keeps only the rows ``replicated_from`` A
(:attr:`Copies.source`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader, ReaderSettings
from pulsar_spark.errors import DataLossError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.read_stage import RawEntry, ReadRange

SOURCE_POSITION = "__MSG_PROP_REPL_SOURCE_POSITION"
"""The property a replicated copy carries: ``ledger:entry`` of its original."""


@dataclass(frozen=True, slots=True)
class Copies:
    """The copies of a range on another cluster."""

    range: ReadRange  # on the other cluster, holding every copy found (and maybe its own rows)
    source: str  # the ``replicated_from`` of the copies: the cluster the range was on
    complete: bool  # whether the copy of the range's last entry was found


def source_position(raw: RawEntry) -> tuple[int, int] | None:
    """The (ledger, entry) of the original of a replicated copy; None for any other entry."""
    metadata = raw.section.metadata
    if not metadata.HasField("replicated_from") or metadata.HasField("marker_type"):
        return None
    for prop in metadata.properties:
        if prop.key == SOURCE_POSITION:
            ledger, _, entry = str(prop.value).partition(":")
            if ledger.lstrip("-").isdigit() and entry.lstrip("-").isdigit():
                return int(ledger), int(entry)
    return None


def locate_copies(
    lookup: Lookup,
    wanted: ReadRange,
    after: MessageId,
    last: MessageId,
    settings: ReaderSettings,
) -> Copies | None:
    """The copies of ``wanted`` (a range of another cluster's ids) on the cluster ``lookup``
    reaches, searched among its entries in (``after``, ``last``]; None when none is there."""
    start, end = wanted.start, wanted.end
    searched = ReadRange(wanted.topic, after, last, start_inclusive=False)
    reader = RangeReader(lookup, searched, settings)
    first: MessageId | None = None
    final: MessageId | None = None
    source: str | None = None
    complete = end_inclusive = False
    start_inclusive = True
    for raw in reader.entries():
        original = source_position(raw)
        if original is None or (not start.is_earliest and original < start.entry):
            continue
        if original > end.entry:
            complete = True
            break
        named = raw.section.metadata.replicated_from
        if source is not None and named != source:
            raise DataLossError(
                f"{wanted.topic} holds copies from clusters {source} and {named} at once: "
                "which of them the range read was on cannot be told"
            )
        source = named
        if first is None:
            exact = original == start.entry
            first = MessageId(*raw.entry, start.batch_index if exact else -1, after.partition)
            start_inclusive = wanted.start_inclusive or not exact
        final, end_inclusive = MessageId(*raw.entry, -1, after.partition), True
        if original == end.entry:
            final = MessageId(*raw.entry, end.batch_index, after.partition)
            complete, end_inclusive = True, wanted.end_inclusive
            break
    if first is None or final is None or source is None:
        return None
    found = ReadRange(wanted.topic, first, final, start_inclusive, end_inclusive)
    return Copies(found, source, complete)
