"""A blocking client of Pulsar's transaction coordinators: open, extend and end transactions.

How this works
--------------
The number of coordinators is the partition count of
:data:`~pulsar_spark.protocol.transactions.COORDINATOR_ASSIGN_TOPIC` (asked without creating
it); none means the broker has no transactions (Apache Pulsar with
``transactionCoordinatorEnabled=false``, or a broker such as pulsar-lite that has no
coordinator at all), which is :class:`TransactionsUnavailableError` at once. Coordinator ``N``
is reached on the broker that owns partition ``N`` of that topic, found by an ordinary
lookup; every connection used for it first sends TC_CLIENT_CONNECT_REQUEST. A broker that does
not answer that request within ``pulsar.client.operationTimeoutMs`` has no coordinator either.

New transactions go to the coordinators in turn. A transaction is ended at the coordinator
that opened it, whose id is its most significant bits, so any client (a Spark driver ending
what its tasks opened) can end it.

Failures go through :mod:`~pulsar_spark.common.retry`: a lost connection, a coordinator not
found (being loaded, or moved to another broker) or a request without an answer is tried again
after a fresh lookup; any other error is raised at once. Ending a transaction that the
coordinator no longer knows, or that is not open, raises
:class:`~pulsar_spark.errors.TransactionTimedOutError` for a commit (its timeout aborted it)
and is taken as done for an abort.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable
from typing import Any

from pulsar_spark.client.connection import Connection
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.errors import (
    InvalidTxnStatusError,
    NotAllowedError,
    PulsarSparkError,
    RequestTimeoutError,
    TopicNotFoundError,
    TransactionNotFoundError,
    TransactionsUnavailableError,
    TransactionTimedOutError,
    server_error_for,
)
from pulsar_spark.protocol import pb
from pulsar_spark.protocol import transactions as txn_commands
from pulsar_spark.protocol.transactions import TxnId

log = logging.getLogger(__name__)

_HOW_TO_ENABLE = (
    "transactions need an Apache Pulsar broker with transactionCoordinatorEnabled=true "
    "(pulsar-lite has no transaction coordinator)"
)


class TransactionCoordinators:
    """The coordinators behind one service URL; see the module docstring."""

    def __init__(self, lookup: Lookup) -> None:
        self._lookup = lookup
        self._count: int | None = None
        self._next: itertools.count[int] | None = None
        self._connected: dict[int, Connection] = {}

    @property
    def count(self) -> int:
        """How many coordinators the cluster has (raises when it has none)."""
        if self._count is None:
            count = self._lookup.retrying(self._ask_count, "counting transaction coordinators")
            if count <= 0:
                raise TransactionsUnavailableError(
                    f"the broker at {self._lookup.service_url} has no transaction coordinator "
                    f"({txn_commands.COORDINATOR_ASSIGN_TOPIC} has no partitions): "
                    + _HOW_TO_ENABLE
                )
            self._count = count
            self._next = itertools.count(random.randrange(count))
        return self._count

    def new_transaction(self, timeout_ms: int) -> TxnId:
        """Open a transaction the coordinator aborts if it is not ended within ``timeout_ms``."""
        count = self.count
        assert self._next is not None
        tc_id = next(self._next) % count
        body = self._call(
            tc_id,
            lambda rid: txn_commands.new_txn(request_id=rid, tc_id=tc_id, timeout_ms=timeout_ms),
            "newTxnResponse",
            f"opening a transaction at coordinator {tc_id}",
        )
        return TxnId(body.txnid_most_bits, body.txnid_least_bits)

    def add_partitions(self, txn: TxnId, partitions: list[str]) -> None:
        """Tell ``txn``'s coordinator it publishes to ``partitions`` (full names of topics or
        topic-partitions); before the first message to each."""
        self._call(
            txn.coordinator,
            lambda rid: txn_commands.add_partition_to_txn(
                request_id=rid, txn=txn, partitions=partitions
            ),
            "addPartitionToTxnResponse",
            f"adding {', '.join(partitions)} to transaction {txn}",
        )

    def commit(self, txn: TxnId) -> None:
        """Commit ``txn``: what was published in it becomes visible to every reader."""
        self._end(txn, commit=True)

    def abort(self, txn: TxnId) -> None:
        """Abort ``txn``: what was published in it is never delivered. A transaction its
        coordinator no longer knows (already ended or timed out) counts as aborted."""
        self._end(txn, commit=False)

    def abort_quietly(self, txn: TxnId) -> None:
        """Abort ``txn`` on a path that is failing already: errors are logged, not raised (its
        timeout aborts it anyway)."""
        try:
            self.abort(txn)
        except PulsarSparkError as exc:
            log.warning("could not abort transaction %s (its timeout will): %s", txn, exc)

    # --- internals -----------------------------------------------------------------------

    def _end(self, txn: TxnId, *, commit: bool) -> None:
        what = f"{'committing' if commit else 'aborting'} transaction {txn}"
        try:
            self._call(
                txn.coordinator,
                lambda rid: txn_commands.end_txn(request_id=rid, txn=txn, commit=commit),
                "endTxnResponse",
                what,
            )
        except (TransactionNotFoundError, InvalidTxnStatusError) as exc:
            if not commit:
                log.info("transaction %s was ended already: %s", txn, exc)
                return
            raise TransactionTimedOutError(
                f"transaction {txn} could not be committed: its coordinator no longer has it "
                "open, so it was aborted, most likely because it ran past its timeout "
                f"(the broker said: {exc.server_message})"
            ) from exc

    def _ask_count(self) -> int:
        try:
            body = (
                self._lookup.service_connection()
                .request(
                    txn_commands.coordinator_count,
                    what="partitioned metadata of " + txn_commands.COORDINATOR_ASSIGN_TOPIC,
                    timeout=self._lookup.timeout,
                )
                .partitionMetadataResponse
            )
        except TopicNotFoundError:
            return 0
        except RequestTimeoutError as exc:
            raise self._unavailable("did not answer a partitioned-metadata request") from exc
        if body.HasField("error") or body.response == body.Failed:
            if body.error == pb.TopicNotFound:
                return 0
            raise server_error_for(body.error, f"counting transaction coordinators: {body.message}")
        return body.partitions

    def _call(self, tc_id: int, build: Callable[[int], bytes], answer: str, what: str) -> Any:
        """``build``'s request sent to coordinator ``tc_id`` (connected to it first), retried
        as the module docstring says; the answer's ``answer`` field, checked."""

        def attempt() -> Any:
            connection = self._connection(tc_id)
            body = getattr(
                connection.request(build, what=what, timeout=self._lookup.timeout), answer
            )
            self._check(body, what)
            return body

        return self._lookup.retrying(attempt, what)

    def _connection(self, tc_id: int) -> Connection:
        lookup = self._lookup
        connection = lookup.connect_to_owner(txn_commands.coordinator_partition(tc_id))
        if self._connected.get(tc_id) is connection and not connection.closed:
            return connection
        what = f"connecting to transaction coordinator {tc_id}"
        try:
            body = connection.request(
                lambda rid: txn_commands.tc_client_connect(request_id=rid, tc_id=tc_id),
                what=what,
                timeout=lookup.timeout,
            ).tcClientConnectResponse
        except RequestTimeoutError as exc:
            raise self._unavailable(f"did not answer {what}") from exc
        except NotAllowedError as exc:
            raise self._unavailable(f"refused {what}: {exc.server_message}") from exc
        self._check(body, what)
        self._connected[tc_id] = connection
        return connection

    def _unavailable(self, how: str) -> TransactionsUnavailableError:
        return TransactionsUnavailableError(
            f"the broker at {self._lookup.service_url} {how} within "
            f"{self._lookup.timeout:g}s: {_HOW_TO_ENABLE}"
        )

    @staticmethod
    def _check(
        body: pb.CommandTcClientConnectResponse
        | pb.CommandNewTxnResponse
        | pb.CommandAddPartitionToTxnResponse
        | pb.CommandEndTxnResponse,
        what: str,
    ) -> None:
        error = txn_commands.answer_error(body, what)
        if error is not None:
            raise error
