"""One retry policy for everything that talks to brokers: reconnect while errors say it can
help, with growing pauses, until a time limit passes without progress.

Whether to retry is the exception's ``retriable`` flag (see :mod:`pulsar_spark.errors`):
a lost connection, a broker closing a consumer or producer, a broker not ready, a request
without an answer are retried; rejected credentials, a bad certificate, a missing topic or a
refused schema fail at once. The limit counts from the first failure after the last progress,
so a long read that loses its broker several times is never cut short by the sum of outages,
and one that makes no progress fails after ``timeout`` plus at most one pause. When it gives up,
the error says what was tried, how often and for how long, with the last failure as its cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pulsar_spark.errors import PulsarSparkError, RetriesExhaustedError

log = logging.getLogger(__name__)

T = TypeVar("T")

FIRST_PAUSE = 0.1
MAX_PAUSE = 2.0


@dataclass
class Retrier:
    """Tracks one operation's failures; call :meth:`failed` on each, :meth:`progressed` on
    success."""

    what: str
    timeout: float
    option: str = "pulsar.client.operationTimeoutMs"  # the setting ``timeout`` came from
    first_pause: float = FIRST_PAUSE
    max_pause: float = MAX_PAUSE
    attempts: int = 0
    _since: float | None = None
    _pause: float = FIRST_PAUSE

    def __post_init__(self) -> None:
        self._pause = self.first_pause

    def progressed(self) -> None:
        """The operation moved forward: the next failure starts a new time limit."""
        self._since = None
        self._pause = self.first_pause

    def failed(self, error: PulsarSparkError, *, retriable: bool | None = None) -> None:
        """Pause before the next attempt, or raise: ``error`` itself when it is not retriable
        (``retriable``, when given, decides instead of the error's flag: for a failure the
        caller knows to pass), :class:`RetriesExhaustedError` when the time limit has passed."""
        if not (error.retriable if retriable is None else retriable):
            raise error
        now = time.monotonic()
        if self._since is None:
            self._since = now
        self.attempts += 1
        waited = now - self._since
        if waited >= self.timeout:
            raise RetriesExhaustedError(
                f"{self.what}: gave up after {self.attempts} failed attempt(s) over "
                f"{waited:.1f}s without progress ({self.option} is "
                f"{self.timeout:g}s); last error: {error}"
            ) from error
        pause = min(self._pause, self.max_pause)
        self._pause = pause * 2
        log.warning("%s: retrying in %.2fs after: %s", self.what, pause, error)
        time.sleep(pause)


def retrying(
    operation: Callable[[], T], *, what: str, timeout: float, option: str | None = None
) -> T:
    """Run ``operation`` until it returns, retrying as :class:`Retrier` says."""
    retrier = Retrier(what, timeout) if option is None else Retrier(what, timeout, option)
    while True:
        try:
            return operation()
        except PulsarSparkError as exc:
            retrier.failed(exc)
