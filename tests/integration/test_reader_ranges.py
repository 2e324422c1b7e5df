"""RangeReader bounds: inclusive and exclusive starts and ends, by entry and by batch index, and
a start in a ledger that retention removed.
"""

from __future__ import annotations

import os

import pulsar
import pytest
from support.broker_proxy import apache_proxy
from support.clients import settings_for
from support.range_reading import FAST, Row, Sent, columns_rows, ids, publish, read

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.pool import ConnectionPool
from pulsar_spark.client.reader import RangeReader
from pulsar_spark.local import LocalBroker
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration


# --- ranges -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def single_topic(client: pulsar.Client, lookup: Lookup) -> tuple[str, list[Row]]:
    """10 non-batched messages: entries 0..9 of one ledger."""
    topic = full_topic_name(f"ranges-single-{os.urandom(6).hex()}")
    rows = publish(
        client,
        topic,
        [Sent(f"s{i}".encode(), sequence_id=i + 1) for i in range(10)],
        producer_name="ranges",
    ).rows
    assert [r.entry for r in rows] == list(range(10))
    return topic, rows


@pytest.fixture(scope="module")
def batched_topic(client: pulsar.Client, lookup: Lookup) -> tuple[str, list[Row]]:
    """Three batches of five: (entry, index) = (0..2, 0..4)."""
    topic = full_topic_name(f"ranges-batched-{os.urandom(6).hex()}")
    rows = publish(
        client,
        topic,
        [Sent(f"b{i}".encode(), key=f"k{i}", sequence_id=i + 1) for i in range(15)],
        producer_name="ranges",
        batching_enabled=True,
        batching_max_messages=5,
        batching_max_publish_delay_ms=5000,
    ).rows
    assert [(r.entry, r.batch_index) for r in rows] == [(i // 5, i % 5) for i in range(15)]
    return topic, rows


@pytest.mark.parametrize(
    "case",
    [
        # (start entry or None for earliest, inclusive, end entry, inclusive, expected entries)
        (3, True, 6, True, [3, 4, 5, 6]),
        (3, False, 6, True, [4, 5, 6]),
        (3, True, 6, False, [3, 4, 5]),
        (3, False, 6, False, [4, 5]),
        (None, True, 0, True, [0]),
        (None, True, 9, True, list(range(10))),
        (None, True, 4, False, [0, 1, 2, 3]),
        (0, False, 9, True, list(range(1, 10))),
        (-1, False, 2, True, [0, 1, 2]),
        (5, True, 5, True, [5]),
        (5, False, 6, False, []),
        (9, False, 9, True, []),
        (7, True, 3, True, []),
    ],
)
def test_ranges_by_entry(
    lookup: Lookup,
    single_topic: tuple[str, list[Row]],
    case: tuple[int | None, bool, int, bool, list[int]],
) -> None:
    start, start_inclusive, end, end_inclusive, expected = case
    topic, rows = single_topic
    ledger = rows[0].ledger
    got = read(
        lookup,
        topic,
        MessageId.earliest() if start is None else MessageId(ledger, start),
        MessageId(ledger, end),
        start_inclusive=start_inclusive,
        end_inclusive=end_inclusive,
    )
    assert got == [rows[i] for i in expected]
    assert ids(got) == [(ledger, i, -1) for i in expected]


@pytest.mark.parametrize(
    "case",
    [
        # (entry, batch index) bounds, None for earliest; -1 as index means the whole entry
        ((1, 2), True, (2, 1), True, [(1, 2), (1, 3), (1, 4), (2, 0), (2, 1)]),
        ((1, 2), False, (2, 1), True, [(1, 3), (1, 4), (2, 0), (2, 1)]),
        ((1, 2), True, (2, 1), False, [(1, 2), (1, 3), (1, 4), (2, 0)]),
        ((1, 2), False, (2, 1), False, [(1, 3), (1, 4), (2, 0)]),
        ((1, -1), True, (1, -1), True, [(1, i) for i in range(5)]),
        ((1, -1), False, (2, 2), True, [(2, 0), (2, 1), (2, 2)]),
        ((0, 3), True, (1, -1), False, [(0, 3), (0, 4)]),
        ((0, 4), True, (1, 0), True, [(0, 4), (1, 0)]),
        ((0, 4), False, (1, 0), False, []),
        ((1, 3), True, (1, 3), True, [(1, 3)]),
        ((1, 3), False, (1, 4), True, [(1, 4)]),
        ((2, 4), False, (2, -1), True, []),
        (None, True, (0, 0), True, [(0, 0)]),
        (None, True, (0, 0), False, []),
        (None, True, (2, -1), True, [(e, i) for e in range(3) for i in range(5)]),
        ((0, 0), True, (2, 4), True, [(e, i) for e in range(3) for i in range(5)]),
        ((0, -1), False, (1, 1), True, [(1, 0), (1, 1)]),
    ],
)
def test_ranges_by_batch_index(
    lookup: Lookup,
    batched_topic: tuple[str, list[Row]],
    case: tuple[tuple[int, int] | None, bool, tuple[int, int], bool, list[tuple[int, int]]],
) -> None:
    start, start_inclusive, end, end_inclusive, expected = case
    topic, rows = batched_topic
    ledger = rows[0].ledger
    got = read(
        lookup,
        topic,
        MessageId.earliest() if start is None else MessageId(ledger, *start),
        MessageId(ledger, *end),
        start_inclusive=start_inclusive,
        end_inclusive=end_inclusive,
    )
    assert ids(got) == [(ledger, e, i) for e, i in expected]
    assert got == [rows[e * 5 + i] for e, i in expected]


# --- a start that no longer exists ---------------------------------------------------------------


def test_a_start_in_a_removed_ledger_is_reported_before_anything_is_read(
    client: pulsar.Client, broker: LocalBroker, topic: str
) -> None:
    """Retention removes whole ledgers, and Apache Pulsar places a cursor that points into a
    removed one at the first entry left (here a proxy does it for pulsar-lite). A read whose
    start lies in a removed ledger tells ``on_start_gone`` the first entry delivered, once,
    before it yields anything, then reads what is left; a start whose ledger exists, inside
    it or just before its first entry, and an earliest start, are not reported."""
    publish(client, topic + "-earlier", [Sent(b"gives the topic below a later ledger")])
    sent = [Sent(f"r{i}".encode(), sequence_id=i) for i in range(6)]
    rows = publish(client, topic, sent, batching_enabled=False).rows
    ledger = rows[0].ledger
    assert ledger > 0 and [r.entry for r in rows] == list(range(6))
    proxy, answers = apache_proxy((broker.host, broker.port))
    answers.first_ledgers = {topic: ledger}
    pool = ConnectionPool()
    through = Lookup(settings_for(proxy.url, timeout=10), pool)

    def read_from(start: MessageId) -> tuple[list[Row], list[MessageId]]:
        gone: list[MessageId] = []
        reader = RangeReader(
            through,
            ReadRange(topic, start, MessageId(ledger, 5), start_inclusive=False),
            FAST,
            gone.append,
        )
        got = []
        for columns in reader:
            got.append((list(gone), columns_rows(columns)))
        assert all(reported == gone for reported, _ in got)  # reported before the first rows
        return [row for _, batch in got for row in batch], gone

    try:
        assert read_from(MessageId(ledger - 1, 4)) == (rows, [MessageId(ledger, 0)])
        assert read_from(MessageId(ledger, 2)) == (rows[3:], [])
        assert read_from(MessageId(ledger, -1)) == (rows, [])
        assert read_from(MessageId.earliest()) == (rows, [])
    finally:
        proxy.close()
        pool.close()
