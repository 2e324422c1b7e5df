"""Receiving ahead on a thread: order, bounds, errors where they occurred, bounded waits and a
clean stop, on in-memory iterators."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator

import pytest

from pulsar_spark.common.lookahead import Lookahead, Stopped
from pulsar_spark.errors import PollTimeoutError, PulsarConnectionError


class Source:
    """Numbers 0, 1, 2, … (up to ``count``, then a ``failure`` if given), recording how many
    were pulled and on which thread the iterator ended."""

    def __init__(self, count: int | None = None, failure: Exception | None = None) -> None:
        self.count = count
        self.failure = failure
        self.pulled = 0
        self.ended_on: str | None = None

    def __call__(self, stopped: Stopped) -> Generator[int, None, None]:
        try:
            while self.count is None or self.pulled < self.count:
                self.pulled += 1
                yield self.pulled - 1
            if self.failure is not None:
                raise self.failure
        finally:
            self.ended_on = threading.current_thread().name


def ahead(
    source: Callable[[Stopped], Generator[int, None, None]],
    *,
    limit: int = 1_000_000,
    max_items: int = 1_000_000,
    patience: float = 5.0,
    weight: Callable[[int], int] = lambda _: 1,
) -> Lookahead[int]:
    return Lookahead(
        source, weight, limit=limit, max_items=max_items, patience=patience, name="ahead-test"
    )


def settled(read: Callable[[], int], seconds: float = 0.3) -> int:
    """``read()`` once it has not changed for ``seconds``."""
    value = read()
    while True:
        time.sleep(seconds)
        now = read()
        if now == value:
            return now
        value = now


def test_items_come_in_order_and_the_thread_stops_at_the_weight_limit() -> None:
    source = Source(count=1000)
    feed = ahead(source, limit=10)
    assert settled(lambda: source.pulled) == 10  # ten held: no room for an eleventh
    assert feed.next() == 0
    assert settled(lambda: source.pulled) == 11
    got = [feed.next() for _ in range(999)]
    assert got == list(range(1, 1000))
    assert feed.next() is None
    assert feed.next() is None
    feed.close(2.0)
    assert not feed.alive
    assert source.ended_on == "ahead-test"


def test_the_thread_stops_at_the_item_limit_whatever_the_weight() -> None:
    source = Source(count=1000)
    feed = ahead(source, limit=1_000_000, max_items=3, weight=lambda _: 0)
    assert settled(lambda: source.pulled) == 3
    feed.close(2.0)
    assert not feed.alive


def test_an_error_comes_after_the_items_before_it_and_stays() -> None:
    lost = PulsarConnectionError("connection lost")
    feed = ahead(Source(count=3, failure=lost))
    assert [feed.next(), feed.next(), feed.next()] == [0, 1, 2]
    for _ in range(2):  # raised again by a later call: never swallowed
        with pytest.raises(PulsarConnectionError, match="connection lost") as raised:
            feed.next()
        assert raised.value is lost
    feed.close(2.0)
    assert not feed.alive


def test_a_silent_source_raises_after_the_patience_instead_of_hanging() -> None:
    ended_on: list[str] = []

    def silent(stopped: Stopped) -> Generator[int, None, None]:
        try:
            while not stopped():
                time.sleep(0.01)
            yield from ()
        finally:
            ended_on.append(threading.current_thread().name)

    feed = ahead(silent, patience=0.3)
    began = time.monotonic()
    with pytest.raises(PollTimeoutError, match=r"ahead-test: nothing received for 0\.[3-9]s"):
        feed.next()
    assert 0.3 <= time.monotonic() - began < 2.0
    feed.close(2.0)
    assert not feed.alive
    assert ended_on == ["ahead-test"]


def test_close_stops_a_full_thread_and_it_closes_the_iterator_itself() -> None:
    source = Source()  # endless
    feed = ahead(source, limit=5)
    assert settled(lambda: source.pulled) == 5
    feed.close(2.0)
    assert not feed.alive
    assert source.pulled == 5
    assert source.ended_on == "ahead-test"  # closed on its own thread, not the caller's


def test_stop_soon_alone_ends_a_waiting_thread() -> None:
    source = Source()
    feed = ahead(source, limit=2)
    assert settled(lambda: source.pulled) == 2
    feed.stop_soon()  # no notification: the thread sees the flag on its next timed wake
    deadline = time.monotonic() + 2.0
    while feed.alive and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not feed.alive
    assert source.ended_on == "ahead-test"


def test_an_error_opening_the_items_is_raised_at_once_not_a_timeout() -> None:
    def refuse(stopped: Stopped) -> Generator[int, None, None]:
        raise PulsarConnectionError("broker unreachable")

    feed = ahead(refuse, patience=30.0)
    started = time.monotonic()
    with pytest.raises(PulsarConnectionError, match="broker unreachable"):
        feed.next()
    assert time.monotonic() - started < 5
    feed.close(5.0)
    assert not feed.alive
