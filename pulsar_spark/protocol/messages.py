"""Columnar messages: what one entry (or several) decodes to.

The decoder never builds one Python object per message. It returns :class:`MessageColumns`:
values concatenated in one ``bytes`` with an offsets array, and one array or list per
metadata field. The Arrow layer wraps these without touching each message again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Int64Array = npt.NDArray[np.int64]
Int32Array = npt.NDArray[np.int32]
BoolArray = npt.NDArray[np.bool_]
Properties = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class EntryInfo:
    """What every message of one entry shares."""

    ledger_id: int
    entry_id: int
    partition: int
    producer_name: str
    publish_time: int  # ms since epoch
    replicated_from: str | None


@dataclass(frozen=True, slots=True)
class MessageColumns:
    """The messages of one entry, column by column; ``count`` rows in every column.

    ``values[value_offsets[i]:value_offsets[i+1]]`` is message i's payload. ``batch_index`` is -1
    for a message that was not batched. ``event_time`` is 0 where the producer set none. A
    ``None`` column means "the same for every row": no keys, no properties, no null values.
    """

    entry: EntryInfo
    count: int
    batch_index: Int32Array
    values: bytes
    value_offsets: Int32Array
    null_value: BoolArray | None
    key: list[bytes | None] | None
    properties: list[Properties] | None
    event_time: Int64Array
    sequence_id: Int64Array

    def slice(self, start: int, stop: int) -> MessageColumns:
        """Rows ``start`` to ``stop`` (exclusive), sharing the value bytes where possible."""
        if start == 0 and stop == self.count:
            return self
        offsets = self.value_offsets[start : stop + 1]
        base = int(offsets[0])
        return MessageColumns(
            entry=self.entry,
            count=stop - start,
            batch_index=self.batch_index[start:stop],
            values=self.values[base : int(offsets[-1])],
            value_offsets=offsets - base,
            null_value=None if self.null_value is None else self.null_value[start:stop],
            key=None if self.key is None else self.key[start:stop],
            properties=None if self.properties is None else self.properties[start:stop],
            event_time=self.event_time[start:stop],
            sequence_id=self.sequence_id[start:stop],
        )

    def take(self, rows: npt.NDArray[np.intp]) -> MessageColumns:
        """Only the given rows, in the given order."""
        offsets = self.value_offsets
        values = b"".join(self.values[offsets[i] : offsets[i + 1]] for i in rows)
        lengths = (offsets[1:] - offsets[:-1])[rows]
        new_offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(lengths, out=new_offsets[1:])
        return MessageColumns(
            entry=self.entry,
            count=len(rows),
            batch_index=self.batch_index[rows],
            values=values,
            value_offsets=new_offsets,
            null_value=None if self.null_value is None else self.null_value[rows],
            key=None if self.key is None else [self.key[i] for i in rows],
            properties=None if self.properties is None else [self.properties[i] for i in rows],
            event_time=self.event_time[rows],
            sequence_id=self.sequence_id[rows],
        )
