"""A process beside a task that aborts the task's transactions if the task dies holding them.

How this works
--------------
Spark ends a failed or cancelled task by killing its Python worker, so code in the worker
cannot be relied on to abort the transaction the task opened, and an open transaction holds
back every reader of the partitions it wrote to until its timeout. A task therefore starts
this module as a small child process (``python -m pulsar_spark.client.transaction_guard``, in
a session of its own so that it outlives the worker) and tells it, over the child's standard
input, the client settings and each transaction it opens. The child waits on that pipe:

- ``release``: the task hands its transactions to the driver, which commits or aborts them;
  the child exits.
- end of input without ``release`` (the worker exited or was killed): the child aborts every
  transaction it was told of, then exits.

The settings travel on the pipe, not the command line, so that no credential shows in a
process list. What a machine losing power leaves open, the transaction's timeout ends.
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import subprocess
import sys
from typing import IO, Any

from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.protocol.transactions import TxnId

log = logging.getLogger(__name__)

_RELEASE = "release"


class TransactionGuard:
    """The task's side: start the child, report transactions, release them."""

    def __init__(self, client: ClientSettings) -> None:
        self._child = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._send(client)

    def watch(self, txn: TxnId) -> None:
        """Abort ``txn`` if this process ends before :meth:`release`."""
        self._send(txn)

    def release(self) -> None:
        """The transactions are someone else's to end now (or ended already): the child
        exits without touching them."""
        self._send(_RELEASE)
        self._close()

    def _send(self, item: object) -> None:
        stdin = self._child.stdin
        assert stdin is not None
        try:
            pickle.dump(item, stdin)
            stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            log.warning("the transaction guard process is gone: %s", exc)

    def _close(self) -> None:
        stdin = self._child.stdin
        assert stdin is not None
        with contextlib.suppress(BrokenPipeError):
            stdin.close()
        self._child.wait()


def _read(pipe: IO[bytes]) -> Any:
    try:
        return pickle.load(pipe)
    except (EOFError, pickle.UnpicklingError):  # the end, or a write cut short by a kill
        return None


def guard(pipe: IO[bytes]) -> int:
    """The child's side: read settings and transactions from ``pipe`` until ``release`` or
    its end; at its end abort what was reported. Returns the exit status."""
    from pulsar_spark.client.lookup import Lookup
    from pulsar_spark.client.pool import ConnectionPool
    from pulsar_spark.client.transactions import TransactionCoordinators

    client = _read(pipe)
    if not isinstance(client, ClientSettings):
        return 0
    held: list[TxnId] = []
    while (item := _read(pipe)) is not None:
        if item == _RELEASE:
            return 0
        held.append(item)
    if held:
        coordinators = TransactionCoordinators(Lookup(client, ConnectionPool()))
        for txn in held:
            coordinators.abort_quietly(txn)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="pulsar-spark transaction guard: %(message)s")
    sys.exit(guard(sys.stdin.buffer))
