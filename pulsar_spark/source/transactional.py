"""Transactional writes (``transactional=true``): what tasks open and what the driver ends.

How this works
--------------
Each task attempt opens one transaction when it creates its first producer, names to the
coordinator every topic-partition it then publishes to, and publishes every message in it.
A task that succeeds returns the transaction's id in its commit message. One that fails aborts
its transaction on the way out; one whose worker Spark kills (a failed or cancelled task) has
it aborted by its transaction guard, a child process that outlives the worker
(:mod:`~pulsar_spark.client.transaction_guard`). Before it sends anything in its transaction,
every attempt announces it in the write's transaction registry
(:mod:`~pulsar_spark.client.transaction_registry`), so that the driver also learns of the
attempts that Spark fails after their writer returned (a speculative copy refused at commit,
an error upstream after the last row), whose commit messages it never sees. Producer names
carry a random part per task attempt, so a broker with deduplication never takes a retried
attempt's messages for repeats of a failed attempt's aborted ones.

The driver commits the transactions of the commit messages Spark hands to
``DataSourceWriter.commit`` (one per partition, from the attempt Spark kept) and aborts every
other transaction announced in the registry, first; ``abort`` aborts them all. A failed,
retried or speculative attempt's transaction is never in those messages, so it is never
committed. The commits are one request per transaction: a failure between two of them leaves
the first ones committed; the error says how many. Announcements the driver cannot read (the
registry unreachable at commit) are left to the coordinator's timeout,
``transactionTimeoutMs``: never committed, but holding back readers of the partitions they
wrote to until then.

Streaming queries commit per micro-batch (``DataSourceStreamWriter.commit(messages,
batchId)``). Spark runs a micro-batch again when its commit was not logged in the checkpoint
(a query stopped or killed in between), and calls commit again with the new run's messages.
So that a micro-batch is never committed twice, the driver records each committed batch id in
``<checkpointLocation>/pulsar-transactions/<batchId>`` (the transaction ids, one a line) once
its transactions are committed, and aborts the new run's transactions instead of committing
them when the record exists. The record is written only for a checkpoint on the local file
system; a stop between the last commit and that write can still commit a micro-batch twice.
A query's registry subscription is named after its checkpoint (none without a
``checkpointLocation`` option) and stays as long as the query may run again.
"""

from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.transaction_guard import TransactionGuard
from pulsar_spark.client.transaction_registry import TransactionRegistry
from pulsar_spark.client.transactions import TransactionCoordinators
from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.transactions import TxnId
from pulsar_spark.source.planning import make_lookup
from pulsar_spark.source.write_options import WriteOptions

log = logging.getLogger(__name__)

RECORDS = "pulsar-transactions"
"""The checkpoint's subdirectory holding the committed micro-batches' records."""


class TaskTransaction:
    """One task attempt's transaction, opened on first use and watched by a
    :class:`~pulsar_spark.client.transaction_guard.TransactionGuard` until the task hands it
    to the driver (:meth:`release`) or aborts it."""

    def __init__(
        self, lookup: Lookup, timeout_ms: int, registry: TransactionRegistry | None
    ) -> None:
        self._lookup = lookup
        self._coordinators = TransactionCoordinators(lookup)
        self._client = lookup.settings
        self._timeout_ms = timeout_ms
        self._registry = registry
        self._guard: TransactionGuard | None = None
        self.txn: TxnId | None = None
        self.attempt = uuid.uuid4().hex[:8]  # in producer names: unique per attempt

    def join(self, partition: str) -> TxnId:
        """The transaction, opened if needed, with ``partition`` (a full topic or
        topic-partition name) added to it; before the first message to it."""
        if self.txn is None:
            self._guard = TransactionGuard(self._client)
            self.txn = self._coordinators.new_transaction(self._timeout_ms)
            self._guard.watch(self.txn)
            if self._registry is not None:
                self._registry.announce(self._lookup, self.txn)
        self._coordinators.add_partitions(self.txn, [partition])
        return self.txn

    def release(self) -> tuple[tuple[int, int], ...]:
        """Hand the transaction to the driver: what the commit message carries, (most, least
        significant bits) of each."""
        self._release_guard()
        return () if self.txn is None else ((self.txn.most_bits, self.txn.least_bits),)

    def abort_quietly(self) -> None:
        if self.txn is not None:
            self._coordinators.abort_quietly(self.txn)
        self._release_guard()

    def _release_guard(self) -> None:
        if self._guard is not None:
            self._guard.release()
            self._guard = None


def batch_registry(options: WriteOptions, write_id: str) -> TransactionRegistry | None:
    """A batch write's registry, opened at the topic's end (on the driver, before any task
    runs); None for a plain write."""
    if options.transaction_registry is None:
        return None
    registry = _registry(options, f"pulsar-spark-write-{write_id}")
    registry.open(make_lookup(options.client), from_end=True)
    return registry


def stream_registry(options: WriteOptions) -> TransactionRegistry | None:
    """A streaming query's registry, named after its checkpoint; None for a plain write or
    a query without a ``checkpointLocation`` option. Opened without moving it: it may hold a
    micro-batch's announcements not read yet."""
    if options.transaction_registry is None or not options.checkpoint:
        return None
    digest = hashlib.sha256(options.checkpoint.encode()).hexdigest()[:16]
    registry = _registry(options, f"pulsar-spark-query-{digest}")
    registry.open(make_lookup(options.client), from_end=False)
    return registry


def _registry(options: WriteOptions, name: str) -> TransactionRegistry:
    """The registry of a write named ``name``; raises
    :class:`~pulsar_spark.errors.TransactionsUnavailableError` first when the broker has no
    transaction coordinator, so such a write fails before any task runs."""
    assert options.transaction_registry is not None
    _coordinator_count(options)
    return TransactionRegistry(options.transaction_registry, name, options.client.operation_timeout)


def _coordinator_count(options: WriteOptions) -> int:
    return TransactionCoordinators(make_lookup(options.client)).count


def transactions_of(messages: Sequence[object]) -> list[TxnId]:
    """The transactions the tasks' commit messages (PySpark's ``WriterCommitMessage``, or
    None) carry, in task order."""
    found = []
    for message in messages:
        for most, least in getattr(message, "transactions", ()):
            found.append(TxnId(most, least))
    return found


def commit_all(options: WriteOptions, txns: list[TxnId], what: str) -> None:
    """Commit ``txns`` one after the other; at the first failure abort the rest and raise,
    saying how many were committed."""
    if not txns:
        return
    coordinators = TransactionCoordinators(make_lookup(options.client))
    for index, txn in enumerate(txns):
        try:
            coordinators.commit(txn)
        except PulsarSparkError as exc:
            for rest in txns[index + 1 :]:
                coordinators.abort_quietly(rest)
            message = (
                f"{what}: committed {index} of {len(txns)} transaction(s), then committing "
                f"{txn} failed, and the {len(txns) - index - 1} after it were aborted: {exc}"
            )
            try:
                error = type(exc)(message)
            except TypeError:
                error = PulsarSparkError(message)
            raise error from exc
    log.info("%s: committed %d transaction(s)", what, len(txns))


def abort_all(options: WriteOptions, txns: list[TxnId]) -> None:
    """Abort ``txns``, best effort (the coordinator's timeout aborts what this cannot)."""
    if not txns:
        return
    coordinators = TransactionCoordinators(make_lookup(options.client))
    for txn in txns:
        coordinators.abort_quietly(txn)


def commit_batch(
    options: WriteOptions,
    messages: Sequence[object],
    registry: TransactionRegistry | None,
) -> None:
    """Abort the write's transactions that Spark did not keep, then commit those it kept."""
    txns = transactions_of(messages)
    _abort_others(options, registry, txns)
    commit_all(options, txns, "transactional write")
    _close(options, registry)


def abort_batch(
    options: WriteOptions,
    messages: Sequence[object],
    registry: TransactionRegistry | None,
) -> None:
    """Abort every transaction of the write: the tasks' and the announced ones."""
    _abort_every(options, messages, registry)
    _close(options, registry)


def commit_epoch(
    options: WriteOptions,
    messages: Sequence[object],
    batch_id: int,
    registry: TransactionRegistry | None,
) -> None:
    """Commit micro-batch ``batch_id`` unless the checkpoint records it as committed already
    (then its new transactions are aborted). Nothing to do for a plain write."""
    if options.transaction_timeout_ms is None:
        return
    txns = transactions_of(messages)
    records = _records_dir(options.checkpoint)
    record = None if records is None else records / str(batch_id)
    if record is not None and record.exists():
        log.warning(
            "micro-batch %d was committed before (%s): aborting the %d transaction(s) of its "
            "new run instead of committing them",
            batch_id,
            record,
            len(txns),
        )
        abort_epoch(options, messages, registry)
        return
    through = _abort_others(options, registry, txns)
    commit_all(options, txns, f"transactional write of micro-batch {batch_id}")
    _acknowledge(options, registry, through)
    if record is not None:
        assert records is not None
        records.mkdir(parents=True, exist_ok=True)
        staged = records / f".{batch_id}.tmp"
        staged.write_text("".join(f"{t.most_bits},{t.least_bits}\n" for t in txns))
        os.replace(staged, record)


def abort_epoch(
    options: WriteOptions,
    messages: Sequence[object],
    registry: TransactionRegistry | None,
) -> None:
    """Abort every transaction of a micro-batch run: the tasks' and the announced ones."""
    _acknowledge(options, registry, _abort_every(options, messages, registry))


def _abort_every(
    options: WriteOptions,
    messages: Sequence[object],
    registry: TransactionRegistry | None,
) -> MessageId | None:
    """Abort the transactions of ``messages`` and every other one announced in ``registry``;
    return where the read of the announcements ended."""
    txns = transactions_of(messages)
    abort_all(options, txns)
    return _abort_others(options, registry, txns)


def _abort_others(
    options: WriteOptions, registry: TransactionRegistry | None, kept: list[TxnId]
) -> MessageId | None:
    """Abort the transactions announced in ``registry`` that are not in ``kept``; return
    where the read of the announcements ended (None: nothing read)."""
    if registry is None:
        return None
    try:
        announced = registry.read(make_lookup(options.client))
    except PulsarSparkError as exc:
        log.warning(
            "could not read the transactions announced in %s (%s): those of attempts Spark "
            "dropped stay open until their timeout",
            registry.topic,
            exc,
        )
        return None
    keep = set(kept)
    others = [txn for txn in dict.fromkeys(announced.txns) if txn not in keep]
    if others:
        log.info("aborting %d transaction(s) of attempts Spark did not keep", len(others))
        abort_all(options, others)
    return announced.through


def _acknowledge(
    options: WriteOptions, registry: TransactionRegistry | None, through: MessageId | None
) -> None:
    if registry is None or through is None:
        return
    try:
        registry.acknowledge(make_lookup(options.client), through)
    except PulsarSparkError as exc:
        log.warning("could not acknowledge the announcements read from %s: %s", registry.topic, exc)


def _close(options: WriteOptions, registry: TransactionRegistry | None) -> None:
    if registry is None:
        return
    try:
        registry.close(make_lookup(options.client))
    except PulsarSparkError as exc:
        log.warning(
            "could not delete subscription %s of %s: %s", registry.name, registry.topic, exc
        )


def _records_dir(checkpoint: str | None) -> Path | None:
    """Where committed micro-batches are recorded: only in a local checkpoint."""
    if not checkpoint:
        return None
    parsed = urlparse(checkpoint)
    if parsed.scheme not in ("", "file"):
        log.warning(
            "checkpoint %s is not on the local file system: committed micro-batches are not "
            "recorded, so one run again after a stop between its commit and Spark's commit "
            "log would be committed twice",
            checkpoint,
        )
        return None
    return Path(parsed.path if parsed.scheme else checkpoint) / RECORDS
