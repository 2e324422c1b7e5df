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
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pulsar_spark.protocol.encode import OutgoingMessage, routing_key

ACCEPTED_COLUMNS = {
    "value": "binary or string (required)",
    "key": "string or binary",
    "properties": "map<string,string>",
    "eventTime": "timestamp",
    "topic": "string",
}


@dataclass(frozen=True, slots=True)
class Rows:
    """One record batch, as the per-row lists the producer needs."""

    messages: list[OutgoingMessage]
    keys: list[str | None]
    topics: list[str | None] | None


def batch_to_rows(batch: pa.RecordBatch) -> Rows:
    count = batch.num_rows
    values = _values(batch.column("value"))
    keys, b64 = _keys(batch, count)
    props = _properties(batch, count)
    events = _event_times(batch, count)
    messages = [
        OutgoingMessage(value, key, is_b64, prop, event)
        for value, key, is_b64, prop, event in zip(values, keys, b64, props, events, strict=True)
    ]
    topics = batch.column("topic").to_pylist() if "topic" in batch.schema.names else None
    return Rows(messages, keys, topics)


def _values(column: pa.Array) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()  # type: ignore[no-any-return]


def _keys(batch: pa.RecordBatch, count: int) -> tuple[list[str | None], list[bool]]:
    if "key" not in batch.schema.names:
        return [None] * count, [False] * count
    column = batch.column("key")
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.to_pylist(), [False] * count
    pairs = [routing_key(k) for k in column.to_pylist()]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _properties(batch: pa.RecordBatch, count: int) -> Iterator[tuple[tuple[str, str], ...]]:
    if "properties" not in batch.schema.names:
        return iter([()] * count)
    return (tuple(p) if p else () for p in batch.column("properties").to_pylist())


def _event_times(batch: pa.RecordBatch, count: int) -> list[int]:
    if "eventTime" not in batch.schema.names:
        return [0] * count
    column = batch.column("eventTime")
    millis = pc.divide(column.cast(pa.timestamp("us")).cast(pa.int64()), 1000)
    return pc.fill_null(millis, 0).to_pylist()  # type: ignore[no-any-return]
