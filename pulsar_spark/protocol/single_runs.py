"""Entries of one message each (producers with batching off), decoded many at a time.

A batched entry carries hundreds of messages, and decoding it costs a fixed amount plus a
little per message. An entry of one message would pay that fixed amount for a single row: its
own column arrays, its own share of every Arrow column. :class:`SingleRun` collects the fields
of consecutive one-message entries in plain lists instead and turns them into one
:class:`MessageColumns` (with per-row entry fields, :class:`EntryRows`) when asked, so arrays
are made once per run, not once per message.
"""

from __future__ import annotations

import numpy as np

from pulsar_spark.common.spans import Spans
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.batch_fields import message_key
from pulsar_spark.protocol.messages import (
    EntryInfo,
    EntryRows,
    MessageColumns,
    Properties,
    PropertyColumns,
    checked_times,
)


class SingleRun:
    """Consecutive one-message entries of one partition, in order."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._infos: list[EntryInfo] = []
        self._values: list[bytes | None] = []
        self._keys: list[bytes | None] = []
        self._properties: list[Properties] = []
        self._event_times: list[int] = []
        self._sequence_ids: list[int] = []
        self.size = 0  # value bytes collected

    def __len__(self) -> int:
        return len(self._infos)

    def add(self, info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes) -> None:
        """One entry that is not a batch, ``payload`` decompressed (and reassembled)."""
        self._infos.append(info)
        self._values.append(None if metadata.null_value else payload)
        has_key = metadata.HasField("partition_key")
        self._keys.append(
            message_key(
                metadata.partition_key,
                has_key,
                metadata.partition_key_b64_encoded,
                metadata.null_partition_key,
            )
            if has_key
            else None
        )
        # A list first: quicker than handing tuple() a generator, once per message.
        self._properties.append(tuple([(kv.key, kv.value) for kv in metadata.properties]))
        self._event_times.append(metadata.event_time)
        self._sequence_ids.append(metadata.sequence_id)
        self.size += len(payload)

    def take(self) -> MessageColumns:
        """The columns of every entry added since the last call; the run is then empty."""
        infos, count = self._infos, len(self._infos)
        if not count:
            raise ValueError("an empty run has no columns")
        columns = MessageColumns(
            entry=infos[0],
            count=count,
            batch_index=np.full(count, -1, dtype=np.int32),
            values=Spans.of(self._values),
            key=None if all(k is None for k in self._keys) else Spans.of(self._keys),
            properties=PropertyColumns.of(self._properties) if any(self._properties) else None,
            event_time=checked_times(np.array(self._event_times, dtype=np.uint64), "event time"),
            sequence_id=np.array(self._sequence_ids, dtype=np.uint64).view(np.int64),
            rows=EntryRows.of(infos, np.ones(count, dtype=np.int64)),
        )
        self._reset()
        return columns


def single(info: EntryInfo, metadata: pb.MessageMetadata, payload: bytes) -> MessageColumns:
    """The columns of one entry that is not a batch."""
    run = SingleRun()
    run.add(info, metadata, payload)
    return run.take()
