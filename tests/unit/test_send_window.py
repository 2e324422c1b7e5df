"""The producer's window of frames without a receipt, and the retry policy, without I/O."""

from __future__ import annotations

import logging

import pytest

from pulsar_spark.client.send_window import SendWindow, Sent
from pulsar_spark.common.retry import Retrier, retrying
from pulsar_spark.errors import (
    AuthorizationError,
    ConnectionClosedError,
    RemoteProtocolError,
    RetriesExhaustedError,
)


def sent(first: int, last: int, *, messages: int | None = None) -> Sent:
    count = last - first + 1
    return Sent(first, last, count if messages is None else messages, count, False, b"s%d" % first)


def test_receipts_confirm_in_order() -> None:
    window = SendWindow("producer p on t")
    window.add(sent(0, 9))
    window.add(sent(10, 10))
    assert (window.pending, len(window)) == (11, 2)
    assert window.confirm(0, 9) == 10
    assert window.confirm(10, None) == 1  # a broker may leave the highest id out
    assert (window.pending, window.confirmed, bool(window)) == (0, 11, False)


@pytest.mark.parametrize("highest", [None, 0, 7, 2**64 - 1])
def test_a_receipt_for_one_message_may_carry_any_highest_id_up_to_its_own(
    highest: int | None,
) -> None:
    # Apache Pulsar answers a SEND without a highest id with Java's -1 as a uint64.
    window = SendWindow("producer p on t")
    window.add(sent(7, 7))
    window.add(sent(8, 12))
    assert window.confirm(7, highest) == 1
    assert window.confirm(8, 12) == 5
    assert (window.pending, window.confirmed) == (0, 6)


@pytest.mark.parametrize(
    ("sequence_id", "highest", "text"),
    [
        (
            5,
            None,
            "producer p on t: receipt for sequence id 5 but the oldest SEND in flight has 0..9",
        ),
        (
            0,
            8,
            "producer p on t: receipt for sequence id 0..8 but the oldest SEND in flight has 0..9",
        ),
    ],
)
def test_a_receipt_for_something_else_is_a_protocol_error(
    sequence_id: int, highest: int | None, text: str
) -> None:
    window = SendWindow("producer p on t")
    window.add(sent(0, 9))
    with pytest.raises(RemoteProtocolError) as info:
        window.confirm(sequence_id, highest)
    assert str(info.value) == text


def test_a_receipt_with_nothing_in_flight() -> None:
    with pytest.raises(RemoteProtocolError) as info:
        SendWindow("producer p on t").confirm(3, None)
    assert str(info.value) == (
        "producer p on t: receipt for sequence id 3 while no message is in flight"
    )


def test_resend_after_a_reconnect_skips_what_the_broker_stored() -> None:
    window = SendWindow("p")
    entries = [sent(0, 9), sent(10, 19), sent(20, 20), sent(21, 21, messages=0), sent(21, 21)]
    for entry in entries:
        window.add(entry)
    assert window.resend_after(19) == entries[2:]  # a deduplicating broker has 0..19
    assert (window.pending, window.confirmed) == (2, 20)
    assert window.resend_after(-1) == entries[2:]  # a plain broker reports nothing
    assert window.resend_after(21) == []
    assert (window.pending, window.confirmed) == (0, 22)


def test_stored_counts_what_a_retried_task_skips() -> None:
    window = SendWindow("p", stored_through=14)
    assert window.stored(0, 10) == 10
    assert window.stored(10, 10) == 5
    assert window.stored(20, 10) == 0
    assert window.skipped == 15


def test_retrier_pauses_double_and_give_up_after_the_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [100.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr("pulsar_spark.common.retry.time.monotonic", lambda: clock[0])
    monkeypatch.setattr("pulsar_spark.common.retry.time.sleep", sleep)
    retrier = Retrier("reading t", timeout=5.0)
    lost = ConnectionClosedError("lost")
    with caplog.at_level(logging.WARNING, logger="pulsar_spark.common.retry"):
        for _ in range(5):
            retrier.failed(lost)
        assert pauses == [0.1, 0.2, 0.4, 0.8, 1.6]
        retrier.progressed()  # progress: a new limit, pauses start small again
        retrier.failed(lost)
        assert pauses[-1] == 0.1
        for _ in range(3):
            retrier.failed(lost)
        assert pauses[-3:] == [0.2, 0.4, 0.8]
        retrier.failed(lost)
        retrier.failed(lost)
        assert pauses[-2:] == [1.6, 2.0]  # capped
        with pytest.raises(RetriesExhaustedError) as info:
            retrier.failed(lost)
    assert str(info.value) == (
        "reading t: gave up after 12 failed attempt(s) over 5.1s without progress "
        "(pulsar.client.operationTimeoutMs is 5s); last error: lost"
    )
    assert info.value.__cause__ is lost
    assert caplog.records[0].getMessage() == "reading t: retrying in 0.10s after: lost"


def test_errors_that_a_retry_cannot_fix_are_raised_at_once() -> None:
    refused = AuthorizationError("not allowed")
    calls = []

    def operation() -> int:
        calls.append(1)
        raise refused

    with pytest.raises(AuthorizationError) as info:
        retrying(operation, what="x", timeout=60)
    assert info.value is refused
    assert len(calls) == 1


def test_retrying_returns_once_the_operation_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("pulsar_spark.common.retry.time.sleep", lambda _seconds: None)
    outcomes: list[Exception | int] = [ConnectionClosedError("a"), ConnectionClosedError("b"), 7]

    def operation() -> int:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert retrying(operation, what="x", timeout=60) == 7
