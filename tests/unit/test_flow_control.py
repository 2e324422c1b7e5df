"""Permit accounting: the window in messages and bytes, in the broker's unit, granted as
the entries a read brings."""

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
    # Apache Pulsar read four entries of 1000 x 100 B for the first 4 permits (-3996 left).
    # The window of 50,000 messages is 50 such entries; 3 are queued: the broker's permits
    # become the 47 missing, which is how many entries its next read brings
    assert flow.on_entry(1000, 100_000, queued_bytes=0, queued_entries=3) == 3996 + 47
    assert flow.broker_permits(3) == 47
    # the 47 arrive; nothing more until half of the 50 queued are taken
    for taken in range(2, 26):
        assert flow.on_entry(1000, 100_000, queued_bytes=0, queued_entries=51 - taken) == 0
    assert flow.on_entry(1000, 100_000, queued_bytes=0, queued_entries=25) == 46_953 + 25
    assert flow.broker_permits(25) == 25


def test_no_grant_while_a_broker_that_counts_messages_has_permits() -> None:
    flow = FlowControl(50_000)
    flow.first_grant()
    # one-message entries taken as they arrive: the broker has permits until all four came
    for _ in range(3):
        assert flow.on_entry(1, 100, queued_bytes=0, queued_entries=0) == 0
    assert flow.on_entry(1, 100, queued_bytes=0, queued_entries=0) == 50_000
    assert flow.broker_permits(0) == 50_000


def test_entries_counted_batched_entries() -> None:
    flow = FlowControl(50_000, counts_entries=True)
    assert flow.first_grant() == 4  # entries, on such a broker
    # 1000 messages per entry: a window of 50,000 messages is 50 entries; 3 are outstanding
    assert flow.on_entry(1000, 100_000, queued_bytes=0, queued_entries=0) == 47
    for _ in range(24):
        assert flow.on_entry(1000, 100_000, queued_bytes=0, queued_entries=0) == 0
    # 25 more taken: half of the 50-entry window missing
    assert flow.on_entry(1000, 100_000, queued_bytes=0, queued_entries=0) == 25
    assert flow.granted - flow.entries == 50


def test_entries_counted_single_messages() -> None:
    flow = FlowControl(50_000, counts_entries=True)
    flow.first_grant()
    # one message per entry: the window is 50,000 entries
    assert flow.on_entry(1, 100, queued_bytes=0, queued_entries=0) == 49_997
    assert flow.granted - flow.entries == 50_000


def test_large_values_shrink_the_window_to_the_byte_budget() -> None:
    flow = FlowControl(50_000)
    flow.first_grant()
    # entries of 12 values of 10 KiB: 16 MiB holds 1638 values, 136 entries
    assert flow.on_entry(12, 12 * 10_240, queued_bytes=0, queued_entries=0) == 136 + 8
    assert flow.broker_permits(0) == 136


def test_no_grant_while_the_queue_is_over_its_bytes() -> None:
    flow = FlowControl(50_000, max_bytes=16 * MIB)
    flow.first_grant()
    assert flow.on_entry(1000, 100_000, queued_bytes=16 * MIB + 1, queued_entries=3) == 0
    # the queue drained: the grant comes with the next entry taken
    assert flow.on_entry(1000, 100_000, queued_bytes=0, queued_entries=0) == 1996 + 50


def test_nudges_count_as_granted() -> None:
    flow = FlowControl(1000)
    assert flow.first_grant() == 4
    assert flow.grant(1) == 1
    assert flow.on_entry(1, 100, queued_bytes=0, queued_entries=4) == 1000 - 4
    assert flow.granted == 1001


def test_a_window_smaller_than_the_first_grant() -> None:
    flow = FlowControl(3)
    assert flow.first_grant() == 3
    # entries of two messages: the broker sent two (-1 permits); the window is one entry
    assert flow.on_entry(2, 200, queued_bytes=0, queued_entries=0) == 0
    assert flow.on_entry(2, 200, queued_bytes=0, queued_entries=0) == 1 + 1
