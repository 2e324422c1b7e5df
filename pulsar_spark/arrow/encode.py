"""Arrow record batches to outgoing messages, column by column.

The writer accepts these columns (and no others):

===========  ===============================  ==============================================
column       type                             becomes
===========  ===============================  ==============================================
value        binary or string (required)      the payload (a null value is sent as null)
key          string or binary                 the partition key (binary keys travel base64)
properties   map<string,string>               message properties
eventTime    timestamp                        event time (ms, rounded down; from
                                              1970-01-01 00:00:00.001 UTC on)
topic        string                           the topic of the row, unless the ``topic``
                                              option is set (the option wins)
===========  ===============================  ==============================================

Payloads, text keys and property names and values go to the producer as they lie in Arrow's
buffers (offsets and bytes), without a Python object per row; only binary keys (base64-encoded)
and the keys used for routing are converted row by row, and topic names once per distinct
spelling.

Pulsar's event time is an unsigned number of milliseconds since the epoch, 0 meaning none.
Spark's microseconds are rounded down to the millisecond (as Spark's ``unix_millis`` does), so
the earliest event time that can be sent is 1970-01-01 00:00:00.001 UTC: an earlier one would
arrive as no event time (0 ms) or as a huge unsigned number (before 1970), and Java's producer
refuses it too. A batch with such a row is refused with :class:`ConfigurationError` before
any of its rows is sent; a null event time is sent as none.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pulsar_spark.common.byte_rows import ranges
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol.encode import Blobs, OutgoingColumns, PropertyBlobs, routing_key
from pulsar_spark.topic import full_topic_name

ACCEPTED_COLUMNS = {
    "value": "binary or string (required)",
    "key": "string or binary",
    "properties": "map<string,string>",
    "eventTime": "timestamp",
    "topic": "string",
    "partition": "int: the partition to send the row to (null: routed by key or mode)",
}

EARLIEST_EVENT_TIME_MS = 1
"""The earliest event time Pulsar carries, in ms since the epoch (0 means no event time)."""


@dataclass(frozen=True, slots=True)
class Rows:
    """Rows of one record batch on their way to a producer; make with :meth:`of`.

    ``batch`` has its keys and event times as they travel: a binary ``key`` column has been
    replaced by its base64 text (``keys_are_base64`` says so), and ``eventTime`` by
    milliseconds since the epoch, 0 for none.
    """

    batch: pa.RecordBatch
    keys_are_base64: bool

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> Rows:
        """The rows of ``batch``; raises ConfigurationError for an event time Pulsar cannot
        carry (see the module's docstring)."""
        batch = _event_times_in_millis(batch)
        if "key" not in batch.schema.names:
            return cls(batch, keys_are_base64=False)
        index = batch.schema.get_field_index("key")
        column = batch.column(index)
        if not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
            return cls(batch, keys_are_base64=False)
        text = pa.array([routing_key(key)[0] for key in column.to_pylist()], pa.string())
        return cls(batch.set_column(index, "key", text), keys_are_base64=True)

    def __len__(self) -> int:
        return int(self.batch.num_rows)

    def keys(self) -> list[str | None] | None:
        """Every row's partition key, or None without a ``key`` column."""
        if "key" not in self.batch.schema.names:
            return None
        keys: list[str | None] = self.batch.column("key").to_pylist()
        return keys

    def partitions(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]] | None:
        """Every row's ``partition`` (0 where null) and which rows give one, or None without
        a ``partition`` column."""
        if "partition" not in self.batch.schema.names:
            return None
        column = self.batch.column("partition")
        given = np.asarray(column.is_valid().to_numpy(zero_copy_only=False), dtype=np.bool_)
        values = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        return values, given

    def by_topic(self) -> list[tuple[str | None, Rows]]:
        """The rows of each topic named in the ``topic`` column, in row order, by full name
        (``foo`` and ``persistent://public/default/foo`` are one topic; None for null), the
        topics in order of first appearance."""
        encoded = self.batch.column("topic").dictionary_encode(null_encoding="encode")
        spellings: list[str | None] = encoded.dictionary.to_pylist()
        groups: dict[str | None, int] = {}  # full name -> group number
        spelling_group = np.array(
            [
                groups.setdefault(None if s is None else full_topic_name(s), len(groups))
                for s in spellings
            ],
            dtype=np.intp,
        )
        row_group = spelling_group[encoded.indices.to_numpy(zero_copy_only=False)]
        return [(topic, self.take(np.flatnonzero(row_group == i))) for topic, i in groups.items()]

    def take(self, indices: npt.NDArray[np.intp]) -> Rows:
        return Rows(self.batch.take(pa.array(indices)), self.keys_are_base64)

    def slice(self, start: int, length: int) -> Rows:
        return Rows(self.batch.slice(start, length), self.keys_are_base64)

    def columns(self) -> OutgoingColumns:
        """The rows as the producer sends them."""
        values, null_values = _blobs(self.batch.column("value"))
        keys, has_key = self._keys()
        return OutgoingColumns(
            values,
            null_values,
            keys,
            has_key,
            self.keys_are_base64,
            self._properties(),
            self._event_times(),
        )

    def _keys(self) -> tuple[Blobs | None, npt.NDArray[np.bool_] | None]:
        if "key" not in self.batch.schema.names:
            return None, None
        column = self.batch.column("key")
        if column.null_count == len(column):
            return None, None
        keys, missing = _blobs(column)
        return keys, np.ones(len(column), dtype=np.bool_) if missing is None else ~missing

    def _properties(self) -> PropertyBlobs | None:
        """The ``properties`` column's names and values read in place; a null map has none.
        (A null property value is refused before the rows get here; it would be empty.)"""
        if "properties" not in self.batch.schema.names:
            return None
        column = self.batch.column("properties")
        offsets = column.offsets.to_numpy().astype(np.int64)
        first = int(offsets[0])
        pairs = column.values.slice(first, int(offsets[-1]) - first)
        offsets -= first
        if column.null_count:  # a null map may still span pairs: leave those out
            valid = column.is_valid().to_numpy(zero_copy_only=False)
            counts = np.where(valid, np.diff(offsets), 0)
            if counts.sum() < len(pairs):
                kept, _ = ranges(offsets[:-1][valid], offsets[1:][valid])
                pairs = pairs.take(pa.array(kept))
                offsets = np.zeros(len(counts) + 1, dtype=np.int64)
                np.cumsum(counts, out=offsets[1:])
        names, _ = _blobs(pairs.field(0))
        values, _ = _blobs(pairs.field(1))
        return PropertyBlobs(offsets, names, values)

    def _event_times(self) -> npt.NDArray[np.int64] | None:
        if "eventTime" not in self.batch.schema.names:
            return None
        times: npt.NDArray[np.int64] = self.batch.column("eventTime").to_numpy()
        return times


def _event_times_in_millis(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its ``eventTime`` column as milliseconds since the epoch, rounded down,
    0 for null; a row before :data:`EARLIEST_EVENT_TIME_MS` is refused, naming its time."""
    if "eventTime" not in batch.schema.names:
        return batch
    index = batch.schema.get_field_index("eventTime")
    column = batch.column(index).cast(pa.timestamp("us", tz="UTC"))
    millis = np.floor_divide(column.cast(pa.int64()).fill_null(0).to_numpy(), 1000)
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    early = np.flatnonzero((millis < EARLIEST_EVENT_TIME_MS) & valid)
    if early.size:
        row = int(early[0])
        raise ConfigurationError(
            f"column 'eventTime': a row has event time {column[row].as_py().isoformat(' ')} "
            f"({millis[row]} ms since the epoch); Pulsar carries event times as milliseconds "
            "after the epoch, 0 meaning none, so the earliest is 1970-01-01 00:00:00.001 UTC "
            "(give the row a null eventTime to send it without one)"
        )
    return batch.set_column(index, "eventTime", pa.array(millis))


def _blobs(column: pa.Array) -> tuple[Blobs, npt.NDArray[np.bool_] | None]:
    """A binary or string column's bytes and offsets, read in place; null rows are empty and
    flagged in the second array (None without nulls)."""
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        column = column.cast(pa.large_binary())
    nulls = None
    if column.null_count:
        nulls = column.is_null().to_numpy(zero_copy_only=False)
        column = column.fill_null(b"")
    width = np.int64 if pa.types.is_large_binary(column.type) else np.int32
    _, offset_buffer, data_buffer = column.buffers()
    offsets = np.frombuffer(
        offset_buffer,
        dtype=width,
        count=len(column) + 1,
        offset=column.offset * np.dtype(width).itemsize,
    ).astype(np.int64)
    data = np.frombuffer(data_buffer if data_buffer is not None else b"", dtype=np.uint8)
    return Blobs(data, offsets), nulls
