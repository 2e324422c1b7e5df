"""Transactional writes (``transactional=true``): what tasks open and what the driver ends.

How this works
--------------
Each task attempt opens one transaction when it creates its first producer, names to the
coordinator every topic-partition it then publishes to, and publishes every message in it.
A task that succeeds returns the transaction's id in its commit message. One that fails aborts
its transaction on the way out; one whose worker Spark kills (a failed or cancelled task) has
it aborted by its transaction guard, a child process that outlives the worker
(:mod:`~pulsar_spark.client.transaction_guard`). An attempt that Spark fails after its writer
returned (a speculative copy refused at commit, an error upstream after the last row) leaves
its transaction to the coordinator's timeout, ``transactionTimeoutMs``: never committed, but
holding back readers of the partitions it wrote to until then. Producer names carry a random
part per task attempt, so a broker with deduplication never takes a retried attempt's messages
for repeats of a failed attempt's aborted ones.

The driver commits the transactions of the commit messages Spark hands to
``DataSourceWriter.commit`` (one per partition, from the attempt Spark kept) and aborts them
in ``abort``. A failed, retried or speculative attempt's transaction is never in those
messages, so it is never committed. The commits are one request per transaction: a failure
between two of them leaves the first ones committed; the error says how many.

Streaming queries commit per micro-batch (``DataSourceStreamWriter.commit(messages,
batchId)``). Spark runs a micro-batch again when its commit was not logged in the checkpoint
(a query stopped or killed in between), and calls commit again with the new run's messages.
So that a micro-batch is never committed twice, the driver records each committed batch id in
``<checkpointLocation>/pulsar-transactions/<batchId>`` (the transaction ids, one a line) once
its transactions are committed, and aborts the new run's transactions instead of committing
them when the record exists. The record is written only for a checkpoint on the local file
system; a stop between the last commit and that write can still commit a micro-batch twice.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlparse

from pyspark.sql.datasource import WriterCommitMessage

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.transaction_guard import TransactionGuard
from pulsar_spark.client.transactions import TransactionCoordinators
from pulsar_spark.errors import PulsarSparkError
from pulsar_spark.protocol.transactions import TxnId
from pulsar_spark.spark.planning import make_lookup
from pulsar_spark.spark.write_options import WriteOptions

log = logging.getLogger(__name__)

RECORDS = "pulsar-transactions"
"""The checkpoint's subdirectory holding the committed micro-batches' records."""


class TaskTransaction:
    """One task attempt's transaction, opened on first use and watched by a
    :class:`~pulsar_spark.client.transaction_guard.TransactionGuard` until the task hands it
    to the driver (:meth:`release`) or aborts it."""

    def __init__(self, lookup: Lookup, timeout_ms: int) -> None:
        self._coordinators = TransactionCoordinators(lookup)
        self._client = lookup.settings
        self._timeout_ms = timeout_ms
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


def transactions_of(messages: Sequence[WriterCommitMessage | None]) -> list[TxnId]:
    """The transactions the tasks' commit messages carry, in task order."""
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


def commit_batch(options: WriteOptions, messages: Sequence[WriterCommitMessage | None]) -> None:
    commit_all(options, transactions_of(messages), "transactional write")


def commit_epoch(
    options: WriteOptions, messages: Sequence[WriterCommitMessage | None], batch_id: int
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
        abort_all(options, txns)
        return
    commit_all(options, txns, f"transactional write of micro-batch {batch_id}")
    if record is not None:
        assert records is not None
        records.mkdir(parents=True, exist_ok=True)
        staged = records / f".{batch_id}.tmp"
        staged.write_text("".join(f"{t.most_bits},{t.least_bits}\n" for t in txns))
        os.replace(staged, record)


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
