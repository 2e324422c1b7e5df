"""``df.write.format("pulsar")`` and ``df.writeStream.format("pulsar")``.

Each Spark task opens one producer per topic-partition it writes to and returns only once
every message it sent has a SendReceipt; a send error, a lost connection or a timeout fails
the task (Spark then retries it). Delivery is therefore at-least-once.

Producer names and sequence ids are deterministic: a task's producer on partition ``p`` is
named after the write (the streaming query id and micro-batch id, or the batch write's id),
the task's partition and ``p``, and numbers its messages from 0. Given the same input, a
retried task sends the same rows under the same (name, sequence id) pairs again. A broker with
deduplication enabled confirms such a producer with the highest sequence id it has stored from
the failed attempt, and the producer sends only what follows (``skip_stored``): effectively
exactly-once. Without broker deduplication a retry can duplicate what the failed attempt had
already written.

With ``transactional=true`` each task attempt publishes in a transaction of its own, which the
driver commits once Spark commits the write (:mod:`pulsar_spark.source.transactional`):
readers see a task's rows only then, each once.

A row with a ``partition`` goes to that partition (checked against the topic's partition
count before any row of its record batch is sent). Other keyed rows go to the partition a Java
producer would pick, ``(hash(key) & 0x7FFFFFFF) % partitions`` with the hash of
``pulsar.producer.hashingScheme`` (``String.hashCode`` by default); unkeyed rows rotate
over partitions one producer batch at a time (Java's ``RoundRobinPartition`` mode, the default),
starting at the task's partition number (every attempt of a task starts at the same one,
different tasks at different ones), or with ``SinglePartition`` all go to that one.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    MapType,
    StringType,
    StructType,
    TimestampType,
)

from pulsar_spark.arrow.encode import ACCEPTED_COLUMNS, Rows
from pulsar_spark.client.failover import ActiveCluster, Clusters
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.producer import Producer
from pulsar_spark.client.transaction_registry import TransactionRegistry
from pulsar_spark.common.worker_gc import freeze_worker_objects
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.routing import (
    UNKEYED,
    RoundRobin,
    SinglePartition,
    partitions_for_keys,
)
from pulsar_spark.source.planning import make_lookup
from pulsar_spark.source.schema_options import WriteSchemas
from pulsar_spark.source.transactional import (
    TaskTransaction,
    abort_batch,
    abort_epoch,
    batch_registry,
    commit_batch,
    commit_epoch,
    stream_registry,
)
from pulsar_spark.source.write_options import SINGLE_PARTITION, WriteOptions
from pulsar_spark.topic import TopicName

T = TypeVar("T")

_TYPES: dict[str, tuple[type[DataType], ...]] = {
    "value": (BinaryType, StringType),
    "key": (StringType, BinaryType),
    "properties": (MapType,),
    "eventTime": (TimestampType,),
    "topic": (StringType,),
    "partition": (IntegerType,),
}


def check_schema(schema: StructType, options: WriteOptions) -> None:
    """Refuse, before any row is sent, a DataFrame the writer cannot send exactly.

    A ``value`` or ``key`` written with a schema is checked against it instead
    (:mod:`pulsar_spark.spark.write_schemas`)."""
    accepted = ", ".join(f"{k} ({v})" for k, v in ACCEPTED_COLUMNS.items())
    fields = {f.name: f.dataType for f in schema.fields}
    with_schema = {"value": options.value_schema, "key": options.key_schema}
    for name, data_type in fields.items():
        if name not in _TYPES:
            raise ConfigurationError(
                f"column {name!r} cannot be written to Pulsar; accepted columns: {accepted}"
            )
        if with_schema.get(name) is not None:
            continue
        if not isinstance(data_type, _TYPES[name]) or not _map_of_strings(name, data_type):
            raise ConfigurationError(
                f"column {name!r} has type {data_type.simpleString()}; "
                f"it must be {ACCEPTED_COLUMNS[name]}"
            )
    if "value" not in fields:
        raise ConfigurationError(
            f"writing to Pulsar needs a 'value' column (binary or string); got columns "
            f"{', '.join(fields) or 'none'}"
        )
    if options.topic is None and "topic" not in fields:
        raise ConfigurationError(
            "say where to write: set the 'topic' option, or give the DataFrame a 'topic' column"
        )


def _map_of_strings(name: str, data_type: DataType) -> bool:
    if name != "properties":
        return True
    assert isinstance(data_type, MapType)
    return isinstance(data_type.keyType, StringType) and isinstance(data_type.valueType, StringType)


def _check_properties(batch: pa.RecordBatch) -> None:
    """Refuse a null property value, before any row of the batch is sent (Spark's maps may
    hold nulls; a Pulsar property is a pair of strings)."""
    if "properties" not in batch.schema.names:
        return
    column = batch.column("properties")
    first, end = column.offsets[0].as_py(), column.offsets[-1].as_py()
    values = column.items.slice(first, end - first)
    if values.null_count:
        index = pc.index(values.is_null(), True).as_py()
        raise ConfigurationError(
            f"column 'properties': property {column.keys[first + index].as_py()!r} of a row has "
            "a null value; property values must be strings (drop the entry or give it a value)"
        )


@dataclass
class PulsarCommitMessage(WriterCommitMessage):
    """What one task wrote: messages per topic-partition, and the transaction it wrote them
    in (most and least significant bits) when the write is transactional."""

    counts: dict[str, int] = field(default_factory=dict)
    transactions: tuple[tuple[int, int], ...] = ()


class _TaskWriter:
    """One task's producers, created on first use per topic-partition."""

    def __init__(
        self, options: WriteOptions, write_id: str, registry: TransactionRegistry | None
    ) -> None:
        self.options = options
        self._active = None if options.failover is None else active_cluster(options.failover)
        self.lookup: Lookup = (
            make_lookup(options.client) if self._active is None else (self._active.lookup)
        )
        context = TaskContext.get()
        self.task = context.partitionId() if context is not None else 0
        self.name_prefix = f"spark-{write_id}-{self.task}"
        self._partitions: dict[str, int] = {}
        self._unkeyed: dict[str, RoundRobin | SinglePartition] = {}
        self._producers: dict[tuple[str, int], Producer] = {}
        self._open = contextlib.ExitStack()  # every producer, closed on the way out
        self.counts: dict[str, int] = {}
        self.transaction: TaskTransaction | None = None
        if options.transaction_timeout_ms is not None:
            self.transaction = TaskTransaction(
                self.lookup, options.transaction_timeout_ms, registry
            )
            self.name_prefix += f"-{self.transaction.attempt}"

    def write(self, batches: Iterator[pa.RecordBatch]) -> PulsarCommitMessage:
        """Send every row, wait for every receipt, close the producers.

        Each producer is closed on its own, so one failing does not keep the others open. If
        anything fails, the remaining producers are let go without waiting for receipts and
        the first error is raised.
        """
        freeze_worker_objects()
        try:
            with self._open:
                for batch in batches:
                    self._write_batch(batch)
                for producer in self._producers.values():
                    producer.flush()
        except BaseException:
            if self.transaction is not None:
                self.transaction.abort_quietly()
            raise
        ids = () if self.transaction is None else self.transaction.release()
        return PulsarCommitMessage(dict(self.counts), ids)

    def _write_batch(self, batch: pa.RecordBatch) -> None:
        _check_properties(batch)
        if self.options.schemas is not None:
            batch = _encoded(batch, self.options.schemas)
        rows = Rows.of(batch)
        if self.options.topic is not None:
            self._route(self.options.topic, rows)
            return
        by_topic = rows.by_topic()
        if any(topic is None for topic, _ in by_topic):
            raise ConfigurationError(
                "a row has a null 'topic' and no 'topic' option is set: every row must "
                "name its topic"
            )
        for topic, group in by_topic:
            assert topic is not None
            self._route(topic, group)

    def _route(self, topic: str, rows: Rows) -> None:
        """Send ``rows`` to ``topic`` (a full name): all of a record batch's rows for that
        topic, in row order, so that rows with the same key stay in order."""
        partitions = self._partition_count(topic)
        for partition, group in self._by_partition(topic, rows, partitions):
            producer = self._producer(topic, partition, partitions)
            producer.send_columns(group.columns())
            self.counts[producer.topic] = self.counts.get(producer.topic, 0) + len(group)

    def _by_partition(self, topic: str, rows: Rows, partitions: int) -> list[tuple[int, Rows]]:
        """``rows`` grouped by partition, each group in row order.

        Rows with a ``partition`` go there; other keyed rows go where a Java producer would
        send them; unkeyed ones go round-robin, a run of ``batch_max_messages`` rows to a
        partition (as slices when no row has a key or partition), or all to one partition.
        """
        run = self.options.producer.batch_max_messages
        chooser = self._unkeyed[topic]
        keys, chosen = rows.keys(), rows.partitions()
        if keys is None and chosen is None:
            starts = range(0, len(rows), run)
            return [(chooser.next_partition(), rows.slice(start, run)) for start in starts]
        routes = (
            np.full(len(rows), UNKEYED, dtype=np.int64)
            if keys is None
            else np.array(
                partitions_for_keys(keys, partitions, self.options.hashing_scheme), dtype=np.int64
            )
        )
        if chosen is not None:
            values, given = chosen
            _check_partitions(topic, values[given], partitions)
            routes[given] = values[given]
        unkeyed = np.flatnonzero(routes == UNKEYED)
        runs = [chooser.next_partition() for _ in range(0, len(unkeyed), run)]
        routes[unkeyed] = np.array(runs, dtype=np.int64)[np.arange(len(unkeyed)) // run]
        return [(int(p), rows.take(np.flatnonzero(routes == p))) for p in np.unique(routes)]

    def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            count = self._partitions[topic] = self._on_cluster(
                lambda lookup: lookup.partitions(topic), f"looking up the partitions of {topic}"
            )
            single = self.options.routing_mode == SINGLE_PARTITION
            chooser = SinglePartition if single else RoundRobin
            self._unkeyed[topic] = chooser(count, start=self.task)
        return count

    def _producer(self, topic: str, partition: int, partitions: int) -> Producer:
        producer = self._producers.get((topic, partition))
        if producer is None:
            target = TopicName.parse(topic).partition(partition) if partitions else topic
            txn = None if self.transaction is None else self.transaction.join(target)
            producer = self._producers[(topic, partition)] = Producer.create(
                self.lookup,
                target,
                self.options.producer,
                name=f"{self.name_prefix}-{max(partition, 0)}",
                skip_stored=txn is None,
                schema=self._schema(topic),
                txn=txn,
                failover=self._active,
            )
            self._open.push(producer)
        return producer

    def _on_cluster(self, operation: Callable[[Lookup], T], what: str) -> T:
        """``operation`` on the cluster written to, retried (with ``failover.*``, moving on
        to the next cluster as :meth:`ActiveCluster.run` does)."""
        if self._active is not None:
            return self._active.run(operation, what)
        return self.lookup.retrying(lambda: operation(self.lookup), what)

    def _schema(self, topic: str) -> pb.Schema | None:
        schemas = self.options.schemas
        return None if schemas is None else schemas.producer_schema(topic)


def _check_partitions(topic: str, chosen: np.ndarray, partitions: int) -> None:
    """Refuse a row's ``partition`` that ``topic`` (of ``partitions`` partitions, 0 when it is
    not partitioned) does not have."""
    wrong = chosen[(chosen < 0) | (chosen >= partitions)]
    if not len(wrong):
        return
    if partitions == 0:
        raise ConfigurationError(
            f"column 'partition': a row asks for partition {int(wrong[0])} of {topic}, which is "
            "not partitioned; leave 'partition' null for its rows"
        )
    raise ConfigurationError(
        f"column 'partition': a row asks for partition {int(wrong[0])} of {topic}, which has "
        f"{partitions} partitions (0 to {partitions - 1})"
    )


def _encoded(batch: pa.RecordBatch, schemas: WriteSchemas) -> pa.RecordBatch:
    """``batch`` with its ``value`` (and ``key``, with a key schema) encoded by their schemas:
    binary columns, as the rest of the writer takes them (binary keys travel base64)."""
    for name, column_schema in (("value", schemas.value), ("key", schemas.key)):
        if column_schema is None:
            continue
        index = batch.schema.get_field_index(name)
        encoded = column_schema.encoding.encode(batch.column(index), f"column {name!r}")
        batch = batch.set_column(index, name, encoded)
    return batch


class PulsarBatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.write_id = uuid.uuid4().hex[:12]  # made once on the driver: retries share it
        self.registry = batch_registry(options, self.write_id)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PulsarCommitMessage:
        return _TaskWriter(self.options, self.write_id, self.registry).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit the tasks' transactions (transactional writes); nothing to do otherwise."""
        commit_batch(self.options, messages, self.registry)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Abort the tasks' transactions (transactional writes); sent messages of a plain
        write cannot be taken back."""
        abort_batch(self.options, messages, self.registry)


class PulsarStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions) -> None:
        self.options = options
        self.registry = stream_registry(options)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PulsarCommitMessage:
        return _TaskWriter(self.options, _streaming_write_id(), self.registry).write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Every message already has its receipt; a transactional write commits the
        micro-batch's transactions, once per micro-batch."""
        commit_epoch(self.options, messages, batchId, self.registry)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Sent messages cannot be taken back (the retried micro-batch resends them); a
        transactional write aborts its transactions."""
        abort_epoch(self.options, messages, self.registry)


def _streaming_write_id() -> str:
    """The query id and micro-batch id, which a restarted query keeps for a replayed batch."""
    context = TaskContext.get()
    query = context.getLocalProperty("sql.streaming.queryId") if context else None
    batch = context.getLocalProperty("streaming.sql.batchId") if context else None
    if query is None or batch is None:
        return uuid.uuid4().hex[:12]
    return f"{query.replace('-', '')[:12]}-{batch}"


_ACTIVE: dict[Clusters, ActiveCluster] = {}
_ACTIVE_LOCK = threading.Lock()


def active_cluster(clusters: Clusters) -> ActiveCluster:
    """The cluster this process writes to among ``clusters`` (one for all its tasks, so that
    a task started after a switch writes to the cluster switched to); a switch back to the
    primary, when due, happens here, as a task starts."""
    with _ACTIVE_LOCK:
        active = _ACTIVE.get(clusters)
        if active is None:
            active = _ACTIVE[clusters] = ActiveCluster(clusters, make_lookup)
    active.refresh()
    return active
