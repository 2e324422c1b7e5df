"""Permit accounting: the window in messages and bytes, in the broker's unit."""

from __future__ import annotations

import pytest

from pulsar_spark.client.flow_control import FIRST_GRANT, FlowControl, counts_entries
from pulsar_spark.protocol.connection import is_pulsar_lite

MIB = 1024 * 1024


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("Pulsar-Lite-0.1.0", True),
        ("pulsar-lite 0.2", True),
        ("Pulsar Server4.0.1", False),
        ("Pulsar Server", False),
        ("", False),
    ],
)
def test_brokers_that_count_entries(version: str, expected: bool) -> None:
    assert counts_entries(version) is expected
    assert is_pulsar_lite(version) is expected


def test_messages_counted_batched_entries() -> None:
    flow = FlowControl(50_000)
    assert flow.first_grant() == FIRST_GRANT == 4
    # one entry of 1000 x 100 B overshoots the first grant; the window opens to 50,000 messages
    assert flow.on_entry(1000, 100_000, queued_bytes=0) == 50_996
    assert flow.granted - flow.messages == 50_000
    # nothing more until half the window is spent
    for _ in range(24):
        assert flow.on_entry(1000, 100_000, queued_bytes=0) == 0
    assert flow.on_entry(1000, 100_000, queued_bytes=0) == 25_000
    assert flow.granted - flow.messages == 50_000


def test_entries_counted_batched_entries() -> None:
    flow = FlowControl(50_000, counts_entries=True)
    assert flow.first_grant() == 4  # entries, on such a broker
    # 1000 messages per entry: a window of 50,000 messages is 50 entries; 3 are outstanding
    assert flow.on_entry(1000, 100_000, queued_bytes=0) == 47
    for _ in range(24):
        assert flow.on_entry(1000, 100_000, queued_bytes=0) == 0
    # 25 more taken: half of the 50-entry window missing
    assert flow.on_entry(1000, 100_000, queued_bytes=0) == 25
    assert flow.granted - flow.entries == 50


def test_entries_counted_single_messages() -> None:
    flow = FlowControl(50_000, counts_entries=True)
    flow.first_grant()
    # one message per entry: the window is 50,000 entries
    assert flow.on_entry(1, 100, queued_bytes=0) == 49_997
    assert flow.granted - flow.entries == 50_000


def test_large_values_shrink_the_window_to_the_byte_budget() -> None:
    flow = FlowControl(50_000)
    flow.first_grant()
    # 12 values of 10 KiB: 16 MiB holds 1638 of them
    assert flow.on_entry(12, 12 * 10_240, queued_bytes=0) == 1638 + 12 - 4
    assert flow.granted - flow.messages == 1638


def test_no_grant_while_the_queue_is_over_its_bytes() -> None:
    flow = FlowControl(50_000, max_bytes=16 * MIB)
    flow.first_grant()
    assert flow.on_entry(1000, 100_000, queued_bytes=16 * MIB + 1) == 0
    # the queue drained: the grant comes with the next entry taken, missing what was held back
    assert flow.on_entry(1000, 100_000, queued_bytes=0) == 51_996


def test_nudges_count_as_granted() -> None:
    flow = FlowControl(1000)
    assert flow.first_grant() == 4
    assert flow.grant(1) == 1
    assert flow.on_entry(1, 100, queued_bytes=0) == 1000 - 4
    assert flow.granted == 1001


def test_a_window_smaller_than_the_first_grant() -> None:
    flow = FlowControl(3)
    assert flow.first_grant() == 3
    assert flow.on_entry(2, 200, queued_bytes=0) == 2
