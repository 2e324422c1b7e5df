"""Receiving ahead of the caller: a thread that drains an iterator into a bounded buffer.

A Pulsar stream's driver uses it to count the messages of each micro-batch by receiving
their entries (:mod:`pulsar_spark.source.counting`): once it has returned an end, the
executors read that micro-batch while the driver has nothing to do, and the thread goes on
pulling items (an entry's id and countable indexes, never its payload) so that the next count
mostly takes items already received.

Bounds, so that nothing grows or waits without limit:

- the buffer holds at most ``limit`` units of weight (messages) and ``max_items`` items; the
  thread pauses while it is full;
- :meth:`Lookahead.next` waits at most ``patience`` seconds without a new item, then raises
  :class:`~pulsar_spark.errors.PollTimeoutError`; the iterator has its own, shorter limits
  (poll and request timeouts), so this one only guards against a stuck thread;
- :meth:`Lookahead.close` asks the thread to stop (the iterator is given a ``stopped`` check
  for its idle waits), joins it for at most ``join_timeout`` seconds, and the thread closes the
  iterator itself, so a reader generator is never left to the garbage collector (which may
  finalize it on a connection's reader thread, see :mod:`pulsar_spark.client.connection`).

An error raised by the iterator is kept and raised by the :meth:`Lookahead.next` that reaches
it, after the items received before it: the caller sees it exactly where reading in its own
thread would have raised it, never later and never lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from typing import Generic, TypeVar

from pulsar_spark.errors import PollTimeoutError

log = logging.getLogger(__name__)

T = TypeVar("T")

Stopped = Callable[[], bool]
"""Whether the consumer of an iterator has asked it to stop (checked while it waits)."""

_WAKE = 0.25
"""Longest sleep of either side between checks of a flag set without a notification."""


class Lookahead(Generic[T]):
    """Items of ``open_items(stopped)``, received by a daemon thread ahead of :meth:`next`."""

    def __init__(
        self,
        open_items: Callable[[Stopped], Generator[T, None, None]],
        weight: Callable[[T], int],
        *,
        limit: int,
        max_items: int,
        patience: float,
        name: str,
    ) -> None:
        self._open = open_items
        self._weight = weight
        self._limit = max(limit, 1)
        self._max_items = max(max_items, 1)
        self._patience = patience
        self._name = name
        self._cond = threading.Condition(threading.RLock())
        self._buffer: deque[T] = deque()
        self._held = 0  # total weight in the buffer
        self._done = False
        self._error: BaseException | None = None
        # A plain attribute, so that setting it takes no lock (see stop_soon).
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        """Whether the thread still runs."""
        return self._thread.is_alive()

    def next(self) -> T | None:
        """The next item; None once the iterator ended. Raises what the iterator raised."""
        with self._cond:
            quiet_since = time.monotonic()
            while not self._buffer:
                if self._error is not None:
                    raise self._error
                if self._done:
                    return None
                waited = time.monotonic() - quiet_since
                if waited >= self._patience:
                    raise PollTimeoutError(
                        f"{self._name}: nothing received for {waited:.1f}s while counting ahead"
                    )
                self._cond.wait(min(self._patience - waited, _WAKE))
            item = self._buffer.popleft()
            self._held -= self._weight(item)
            self._cond.notify_all()
            return item

    def set_limit(self, limit: int) -> None:
        """Hold at most ``limit`` units of weight from now on (the thread resumes if there is
        room; what it already holds stays)."""
        with self._cond:
            self._limit = max(limit, 1)
            self._cond.notify_all()

    def close(self, join_timeout: float) -> None:
        """Stop the thread and wait for it (the iterator is closed by the thread)."""
        self.stop_soon()
        with self._cond:
            self._cond.notify_all()
        self._thread.join(join_timeout)
        if self._thread.is_alive():
            log.warning("%s: still ending after %gs; it ends on its own", self._name, join_timeout)

    def stop_soon(self) -> None:
        """Ask the thread to stop, taking no lock: safe from a finalizer on any thread."""
        self._stopping = True

    def _run(self) -> None:
        items: Generator[T, None, None] | None = None
        try:
            items = self._open(lambda: self._stopping)
            while self._wait_for_room():
                try:
                    item = next(items)
                except StopIteration:
                    break
                with self._cond:
                    self._buffer.append(item)
                    self._held += self._weight(item)
                    self._cond.notify_all()
        except BaseException as exc:  # kept for next(), which raises it in the caller
            with self._cond:
                self._error = exc
        finally:
            if items is not None:
                self._close_items(items)
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _wait_for_room(self) -> bool:
        """Wait while the buffer is full; False once asked to stop."""
        with self._cond:
            while not self._stopping and (
                self._held >= self._limit or len(self._buffer) >= self._max_items
            ):
                self._cond.wait(_WAKE)
            return not self._stopping

    def _close_items(self, items: Generator[T, None, None]) -> None:
        try:
            items.close()
        except Exception as exc:  # ending a read early must not hide an earlier error
            log.warning("%s: closing the reader failed: %s", self._name, exc)
            with self._cond:
                if self._error is None and not self._stopping:
                    self._error = exc


class Direct(Generic[T]):
    """The same interface as :class:`Lookahead`, reading in the caller's thread."""

    def __init__(self, open_items: Callable[[Stopped], Generator[T, None, None]]) -> None:
        self._items = open_items(lambda: False)

    def next(self) -> T | None:
        return next(self._items, None)

    def close(self, join_timeout: float) -> None:
        self._items.close()
