"""Message columns to Arrow record batches, bounded in rows and bytes.

A :class:`RecordBatchBuilder` collects the :class:`MessageColumns` of consecutive entries of one
partition and turns them into one ``pa.RecordBatch`` of :data:`ARROW_SCHEMA` whenever the rows
or value bytes reach their limit, so memory stays flat however large the topic is. Columns are
assembled from whole arrays (numpy concatenation, repeated constants, buffer wrapping); only
keys and properties, when present, are converted per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pulsar_spark.arrow.schema import ARROW_SCHEMA, MESSAGE_ID_TYPE, PROPERTIES_TYPE, TIMESTAMP_TYPE
from pulsar_spark.protocol.messages import MessageColumns

DEFAULT_MAX_ROWS = 65_536
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


class RecordBatchBuilder:
    """Accumulates entries of one partition; see the module docstring."""

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self._pending: list[MessageColumns] = []
        self._rows = 0
        self._bytes = 0

    def add(self, columns: MessageColumns) -> pa.RecordBatch | None:
        """Add one entry's messages; return a batch when the limits are reached."""
        self._pending.append(columns)
        self._rows += columns.count
        self._bytes += len(columns.values)
        if self._rows >= self.max_rows or self._bytes >= self.max_bytes:
            return self.flush()
        return None

    def flush(self) -> pa.RecordBatch | None:
        """The batch of everything added since the last one, or None if nothing was."""
        if not self._pending:
            return None
        batch = to_record_batch(self._pending, self.topic, self.partition)
        self._pending, self._rows, self._bytes = [], 0, 0
        return batch


def record_batches(
    entries: Iterable[MessageColumns],
    topic: str,
    partition: int,
    *,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Group a stream of entries into bounded record batches."""
    builder = RecordBatchBuilder(topic, partition, max_rows=max_rows, max_bytes=max_bytes)
    for columns in entries:
        batch = builder.add(columns)
        if batch is not None:
            yield batch
    batch = builder.flush()
    if batch is not None:
        yield batch


def to_record_batch(parts: Sequence[MessageColumns], topic: str, partition: int) -> pa.RecordBatch:
    """One record batch of :data:`ARROW_SCHEMA` from the entries in ``parts``."""
    counts = np.fromiter((p.count for p in parts), dtype=np.int64, count=len(parts))
    rows = int(counts.sum())
    arrays = [
        _keys(parts, rows),
        _values(parts, rows),
        _constant_string(topic, rows),
        pa.array(np.full(rows, partition, dtype=np.int32)),
        _message_ids(parts, counts),
        _timestamps(np.repeat([p.entry.publish_time for p in parts], counts), null_zero=False),
        _timestamps(np.concatenate([p.event_time for p in parts]), null_zero=True),
        _properties(parts, rows),
        _repeated_strings([p.entry.producer_name for p in parts], counts),
        pa.array(np.concatenate([p.sequence_id for p in parts])),
        _repeated_strings([p.entry.replicated_from for p in parts], counts),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def _keys(parts: Sequence[MessageColumns], rows: int) -> pa.Array:
    if all(p.key is None for p in parts):
        return pa.nulls(rows, pa.binary())
    keys: list[bytes | None] = []
    for p in parts:
        keys.extend(p.key if p.key is not None else [None] * p.count)
    return pa.array(keys, pa.binary())


def _values(parts: Sequence[MessageColumns], rows: int) -> pa.Array:
    data = b"".join(p.values for p in parts)
    offsets = np.empty(rows + 1, dtype=np.int32)
    offsets[0] = 0
    base = pos = 0
    for p in parts:
        offsets[pos + 1 : pos + 1 + p.count] = p.value_offsets[1:] + base
        base += len(p.values)
        pos += p.count
    validity = None
    if any(p.null_value is not None for p in parts):
        valid = np.concatenate(
            [~p.null_value if p.null_value is not None else np.ones(p.count, bool) for p in parts]
        )
        validity = pa.array(valid).buffers()[1]
    return pa.BinaryArray.from_buffers(
        pa.binary(), rows, [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def _constant_string(text: str, rows: int) -> pa.Array:
    return _repeated_strings([text], np.array([rows], dtype=np.int64))


def _repeated_strings(texts: Sequence[str | None], counts: npt.NDArray[np.int64]) -> pa.Array:
    """A string array where ``texts[i]`` (None: null) repeats ``counts[i]`` times."""
    rows = int(counts.sum())
    encoded = [t.encode() if t is not None else b"" for t in texts]
    lengths = np.repeat(np.fromiter(map(len, encoded), dtype=np.int32, count=len(encoded)), counts)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    data = b"".join(e * int(c) for e, c in zip(encoded, counts, strict=True))
    validity = None
    if any(t is None for t in texts):
        valid = np.repeat(np.array([t is not None for t in texts]), counts)
        validity = pa.array(valid).buffers()[1]
    return pa.StringArray.from_buffers(rows, pa.py_buffer(offsets), pa.py_buffer(data), validity)


def _message_ids(parts: Sequence[MessageColumns], counts: npt.NDArray[np.int64]) -> pa.Array:
    ledgers = np.repeat([p.entry.ledger_id for p in parts], counts).astype(np.int64)
    entries = np.repeat([p.entry.entry_id for p in parts], counts).astype(np.int64)
    batch = np.concatenate([p.batch_index for p in parts]).astype(np.int32, copy=False)
    return pa.StructArray.from_arrays(
        [pa.array(ledgers), pa.array(entries), pa.array(batch)],
        fields=list(MESSAGE_ID_TYPE),
    )


def _timestamps(millis: npt.NDArray[np.int64], *, null_zero: bool) -> pa.Array:
    micros = millis.astype(np.int64) * 1000
    mask = (millis == 0) if null_zero else None
    return pa.array(micros, type=TIMESTAMP_TYPE, mask=mask)


def _properties(parts: Sequence[MessageColumns], rows: int) -> pa.Array:
    offsets = np.zeros(rows + 1, dtype=np.int32)
    if all(p.properties is None for p in parts):
        empty = pa.array([], pa.string())
        return pa.MapArray.from_arrays(pa.array(offsets), empty, empty, type=PROPERTIES_TYPE)
    keys: list[str] = []
    items: list[str] = []
    row = 0
    for p in parts:
        if p.properties is None:
            offsets[row + 1 : row + 1 + p.count] = len(keys)
            row += p.count
            continue
        for props in p.properties:
            for k, v in props:
                keys.append(k)
                items.append(v)
            row += 1
            offsets[row] = len(keys)
    return pa.MapArray.from_arrays(
        pa.array(offsets),
        pa.array(keys, pa.string()),
        pa.array(items, pa.string()),
        type=PROPERTIES_TYPE,
    )
