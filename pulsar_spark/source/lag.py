"""How far a stream is behind: per partition, the entries between what a micro-batch read up to
and the latest message the driver saw when it planned that micro-batch.

Both ends are message ids from the query's progress (``endOffset`` and ``latestOffset`` of
the source), so nothing is asked of the broker. Pulsar ids are not dense counters, but entry
ids are consecutive within one ledger: when both ends lie in the same ledger, the entries after
the end's entry up to the latest one are exact, and an entry read part-way (an end inside a
batch) counts as not yet read. Each entry is one message unless producers batch; then it holds
several. When the ends lie in different ledgers (Apache Pulsar rolls ledgers over; pulsar-lite
keeps one per topic), the entries of the ledgers in between are not known from the ids alone,
and the partition's lag is None; so it is for a partition nothing was read from yet (where its
first entry lies is not known either).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import PulsarOffset


def entries_behind(end: MessageId, latest: MessageId) -> int | None:
    """Entries after ``end`` (last message read) up to ``latest`` (last message available);
    None when they lie in different ledgers."""
    if latest.is_earliest or latest.last_key() <= end.last_key():
        return 0
    if end.is_earliest or end.ledger_id != latest.ledger_id:
        return None
    partly_read = 1 if end.batch_index >= 0 else 0
    return latest.entry_id - end.entry_id + partly_read


def offset_lag(end: Mapping[str, Any], latest: Mapping[str, Any]) -> dict[str, int | None]:
    """Per partition of ``latest``, :func:`entries_behind` between two offsets' JSON forms."""
    ends = PulsarOffset.from_json(end)
    lasts = PulsarOffset.from_json(latest).positions
    return {name: entries_behind(ends.get(name), lasts[name]) for name in sorted(lasts)}


def lag(query: Any) -> dict[str, int | None]:
    """Entries each partition was behind after the query's last micro-batch, from
    ``query.lastProgress`` (a :class:`pyspark.sql.streaming.StreamingQuery`); ``{}`` before
    the first progress."""
    return progress_lag(query.lastProgress)


def progress_lag(progress: Mapping[str, Any] | None) -> dict[str, int | None]:
    """:func:`lag` of one progress report (one of ``query.recentProgress``, say): the
    partitions of every Pulsar source in it."""
    if not progress:
        return {}
    behind: dict[str, int | None] = {}
    for source in progress.get("sources") or []:
        end, latest = _offset(source.get("endOffset")), _offset(source.get("latestOffset"))
        if end is None or latest is None:
            continue
        behind.update(offset_lag(end, latest))
    return behind


def _offset(value: Any) -> Mapping[str, Any] | None:
    """A source offset as progress shows it (JSON text or already parsed), if it is a Pulsar
    offset."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict) or not value:
        return None
    if not all(isinstance(v, dict) and "ledgerId" in v for v in value.values()):
        return None
    return value
