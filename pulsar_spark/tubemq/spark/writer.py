"""``df.write.format("tubemq")`` and ``df.writeStream.format("tubemq")``.

Columns: ``value`` (binary or string, required; a string is sent as UTF-8) and ``attributes``
(map<string,string>, optional). The attribute items ``$msgType$`` and ``$msgTime$``
(``yyyyMMddHHmm``) become the message's type and time, as the Java client's
``putSystemHeader`` sets them; the other items are sent in map order. Keys and values cannot
contain ``,`` or ``=``, and a row with a null value is refused.

Each task sends its rows round-robin over the topic's partitions, starting at the task's own
partition number, in windows of :data:`WINDOW` messages (fewer when their values exceed
:data:`WINDOW_BYTES`) sent back to back. Up to :data:`WINDOWS_IN_FLIGHT` windows more go out
before the first one's acknowledgements are waited for, so the broker stores one window while
the task encodes the next; a task waits for every acknowledgement before it returns, so a task
that returns has all its rows stored. A window's frames are built all at once from its
columns, without attributes straight from the value column's Arrow buffers (see
:mod:`pulsar_spark.tubemq.wire.send_request`).
Any failure fails the task, which Spark retries; a retry resends all its rows: delivery is
at-least-once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from pulsar_spark.common.worker_gc import freeze_worker_objects
from pulsar_spark.errors import ConfigurationError, LocalProtocolError
from pulsar_spark.tubemq.client.producer import Sending, TubeMQProducer
from pulsar_spark.tubemq.spark.options import TubeMQWriteOptions
from pulsar_spark.tubemq.wire.messages import (
    MSG_TIME_KEY,
    MSG_TYPE_KEY,
    encode_payload,
    format_attributes,
)
from pulsar_spark.tubemq.wire.send_request import SendColumns, send_columns

# Messages sent back to back as one window.
WINDOW = 1000
# Bytes of values in one window, at most (unless one value is larger): what a task holds in
# flight stays near (WINDOWS_IN_FLIGHT + 1) * WINDOW_BYTES whatever the messages' size.
WINDOW_BYTES = 4 * 1024 * 1024
# Windows sent before the acknowledgements of the first are waited for.
WINDOWS_IN_FLIGHT = 4
ACCEPTED = "value (binary or string), attributes (map<string,string>)"
_NO_BYTES = np.zeros(0, dtype=np.uint8)


def check_write_schema(schema: StructType) -> None:
    """Refuse, before any row is sent, a DataFrame the writer cannot send exactly."""
    fields = {f.name: f.dataType for f in schema.fields}
    for name, data_type in fields.items():
        if name == "value" and isinstance(data_type, (BinaryType, StringType)):
            continue
        if (
            name == "attributes"
            and isinstance(data_type, MapType)
            and isinstance(data_type.keyType, StringType)
            and isinstance(data_type.valueType, StringType)
        ):
            continue
        raise ConfigurationError(
            f"column {name!r} of type {data_type.simpleString()} cannot be written to TubeMQ; "
            f"accepted columns: {ACCEPTED}"
        )
    if "value" not in fields:
        raise ConfigurationError(
            f"writing to TubeMQ needs a 'value' column (binary or string); got columns "
            f"{', '.join(fields) or 'none'}"
        )


@dataclass
class TubeMQCommitMessage(WriterCommitMessage):
    """How many messages one task stored."""

    count: int


def write_rows(options: TubeMQWriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row and wait for each acknowledgement; the number of rows sent."""
    freeze_worker_objects()
    context = TaskContext.get()
    first = context.partitionId() if context is not None else 0
    count = 0
    with TubeMQProducer.open(
        options.masters,
        options.topic,
        first=first,
        timeout=options.timeout,
        security=options.security,
    ) as producer:
        in_flight: deque[Sending] = deque()
        for batch in batches:
            for window in windows(batch):
                in_flight.append(producer.submit_columns(_columns(window)))
                if len(in_flight) > WINDOWS_IN_FLIGHT:
                    count += in_flight.popleft().confirm()
        while in_flight:
            count += in_flight.popleft().confirm()
    return count


def windows(batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
    """``batch`` in windows of at most :data:`WINDOW` rows whose values take at most
    :data:`WINDOW_BYTES` (a longer value makes a window of its own)."""
    sizes = pc.binary_length(batch.column("value")).fill_null(0).to_numpy(zero_copy_only=False)
    ends = np.cumsum(sizes, dtype=np.int64)
    start = 0
    while start < batch.num_rows:
        before = int(ends[start - 1]) if start else 0
        fits = int(np.searchsorted(ends, before + WINDOW_BYTES, side="right"))
        stop = max(start + 1, min(start + WINDOW, fits))
        yield batch.slice(start, stop - start)
        start = stop


def _columns(batch: pa.RecordBatch) -> SendColumns:
    """The rows as messages: without attributes, the value column's own buffers (a string's
    UTF-8 bytes are its value)."""
    column = batch.column("value")
    if column.null_count:
        raise ConfigurationError(
            "column 'value': a row has a null value; TubeMQ messages need a body"
        )
    if "attributes" not in batch.schema.names:
        return _value_columns(column)
    values = column.cast(pa.binary()).to_pylist()
    attributes = batch.column("attributes").to_pylist()
    rows = []
    for value, items in zip(values, attributes, strict=True):
        text, msg_type, msg_time = _attributes(dict(items or []))
        rows.append((*encode_payload(value, text), msg_type, msg_time))
    return send_columns(rows)


def _value_columns(column: pa.Array) -> SendColumns:
    """Messages of the values alone (flag 0), their bytes where Arrow keeps them."""
    large = pa.types.is_large_binary(column.type) or pa.types.is_large_string(column.type)
    if not (large or pa.types.is_binary(column.type) or pa.types.is_string(column.type)):
        column, large = column.cast(pa.large_binary()), True  # laid out as offsets and bytes
    _, offsets_buffer, data_buffer = column.buffers()
    width = np.int64 if large else np.int32
    offsets = np.frombuffer(offsets_buffer, dtype=width)[column.offset :][: len(column) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else _NO_BYTES
    flags = np.zeros(len(column), dtype=np.int64)
    return SendColumns(data, offsets.astype(np.int64), flags)


def _attributes(items: dict[str, str | None]) -> tuple[str | None, str | None, str | None]:
    """(attribute string, msgType, msgTime) for a row's ``attributes`` map."""
    msg_type = items.pop(MSG_TYPE_KEY, None)
    msg_time = items.pop(MSG_TIME_KEY, None)
    for key, item in items.items():
        if item is None:
            raise ConfigurationError(
                f"column 'attributes': attribute {key!r} of a row has a null value"
            )
    try:
        text = format_attributes(
            {k: v for k, v in items.items() if v is not None}, msg_type=msg_type, msg_time=msg_time
        )
    except LocalProtocolError as exc:
        raise ConfigurationError(f"column 'attributes': {exc}") from exc
    return text or None, msg_type or None, msg_time or None


class TubeMQBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: TubeMQWriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TubeMQCommitMessage:
        return TubeMQCommitMessage(write_rows(self.options, iterator))


class TubeMQStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: TubeMQWriteOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TubeMQCommitMessage:
        return TubeMQCommitMessage(write_rows(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Every message already has its acknowledgement; nothing is left to commit."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Stored messages cannot be taken back; the retried micro-batch resends them."""
