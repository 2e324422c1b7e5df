"""Arrow record batches to outgoing messages, column by column.

The writer accepts these columns (and no others):

===========  ===============================  ==============================================
column       type                             becomes
===========  ===============================  ==============================================
value        binary or string (required)      the payload (a null value is sent as null)
key          string or binary                 the partition key (binary keys travel base64)
properties   map<string,string>               message properties
eventTime    timestamp                        event time (ms)
topic        string                           the topic of the row, unless the ``topic``
                                              option is set (the option wins)
===========  ===============================  ==============================================

Payloads and text keys go to the producer as they lie in Arrow's buffers (offsets and bytes),
without a Python object per row; only properties, binary keys (base64-encoded) and the keys
and topics used for routing are converted row by row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from pulsar_spark.protocol.encode import Blobs, MessageColumns, routing_key

ACCEPTED_COLUMNS = {
    "value": "binary or string (required)",
    "key": "string or binary",
    "properties": "map<string,string>",
    "eventTime": "timestamp",
    "topic": "string",
}


@dataclass(frozen=True, slots=True)
class Rows:
    """Rows of one record batch on their way to a producer; make with :meth:`of`.

    ``batch`` has its keys as text, as they travel: a binary ``key`` column has been replaced
    by its base64 text, and ``keys_are_base64`` says so.
    """

    batch: pa.RecordBatch
    keys_are_base64: bool

    @classmethod
    def of(cls, batch: pa.RecordBatch) -> Rows:
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

    def by_topic(self) -> list[tuple[str | None, Rows]]:
        """The rows of each value of the ``topic`` column (None for null), in order of first
        appearance."""
        encoded = self.batch.column("topic").dictionary_encode(null_encoding="encode")
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        topics: list[str | None] = encoded.dictionary.to_pylist()
        return [(topic, self.take(np.flatnonzero(codes == i))) for i, topic in enumerate(topics)]

    def take(self, indices: npt.NDArray[np.intp]) -> Rows:
        return Rows(self.batch.take(pa.array(indices)), self.keys_are_base64)

    def slice(self, start: int, length: int) -> Rows:
        return Rows(self.batch.slice(start, length), self.keys_are_base64)

    def columns(self) -> MessageColumns:
        """The rows as the producer sends them."""
        values, null_values = _blobs(self.batch.column("value"))
        keys, has_key = self._keys()
        return MessageColumns(
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

    def _properties(self) -> Sequence[tuple[tuple[str, str], ...]] | None:
        if "properties" not in self.batch.schema.names:
            return None
        return [tuple(p) if p else () for p in self.batch.column("properties").to_pylist()]

    def _event_times(self) -> npt.NDArray[np.int64] | None:
        if "eventTime" not in self.batch.schema.names:
            return None
        column = self.batch.column("eventTime")
        millis = pc.divide(column.cast(pa.timestamp("us")).cast(pa.int64()), 1000)
        times: npt.NDArray[np.int64] = pc.fill_null(millis, 0).to_numpy()
        return times


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
