"""failOnDataLoss and the ranges of the next micro-batch, on partition ends given in memory.

Each check is run with ``failOnDataLoss=true`` (the exact error) and ``false`` (the exact
warning, and the query going on).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from pulsar_spark.common.data_loss import DataLossPolicy, ends_before
from pulsar_spark.errors import DataLossError
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.offsets import NOTHING_CONSUMED
from pulsar_spark.source.planning import PartitionRef
from pulsar_spark.source.stream_ranges import EndOf, Ranges, next_ranges

T = "persistent://public/default/t"
P0 = PartitionRef(T, 0, f"{T}-partition-0")
P1 = PartitionRef(T, 1, f"{T}-partition-1")
FAIL, WARN = DataLossPolicy(fail_on_data_loss=True), DataLossPolicy(fail_on_data_loss=False)
LOGGER = "pulsar_spark.spark.stream_reader"
ADVICE = (
    ": data the query expected is gone. Set failOnDataLoss=false to continue from what exists "
    "(the missing messages are skipped)"
)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


# --- the policy ---------------------------------------------------------------------------------


def test_report_fails_with_advice() -> None:
    with pytest.raises(DataLossError) as info:
        FAIL.report("partition x no longer exists")
    assert str(info.value) == "partition x no longer exists" + ADVICE


def test_report_warns_when_told_to_go_on(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        WARN.report("partition x no longer exists")
    assert warnings(caplog) == ["partition x no longer exists" + ADVICE]


def test_vanished_partitions_are_reported_in_name_order(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        WARN.check_vanished(["c", "a", "b"], ["b"])
    assert warnings(caplog) == [
        "partition a no longer exists" + ADVICE,
        "partition c no longer exists" + ADVICE,
    ]
    FAIL.check_vanished(["a"], ["a", "b"])  # a new partition is no loss


@pytest.mark.parametrize(
    ("first", "last", "before"),
    [
        (NOTHING_CONSUMED, None, False),  # nothing consumed: any partition holds it
        (MessageId(3, 4), None, True),  # emptied
        (MessageId(3, 4), MessageId(3, 3), True),
        (MessageId(3, 4), MessageId(3, 4), False),
        (MessageId(3, 4, 2), MessageId(3, 4), False),  # a whole entry holds its indexes
        (MessageId(3, 4), MessageId(3, 4, 2), True),  # the entry ends at index 2 now
        (MessageId(3, 4), MessageId(2, 9), True),  # back in an older ledger
        (MessageId(3, 4), MessageId(4, 0), False),
    ],
)
def test_ends_before(first: MessageId, last: MessageId | None, before: bool) -> None:
    assert ends_before(first, last) is before


def test_check_start_reports_a_partition_that_ends_before_the_start() -> None:
    assert FAIL.check_start(P0.name, MessageId(3, 4), MessageId(3, 5)) is False
    with pytest.raises(DataLossError) as info:
        FAIL.check_start(P0.name, MessageId(3, 4), MessageId(3, 2))
    lost = f"partition {P0.name} was read up to 3:4:-1 but now ends at 3:2:-1"
    assert str(info.value) == lost + ADVICE
    with pytest.raises(DataLossError, match="but now ends at nothing \\(it is empty\\)"):
        FAIL.check_start(P0.name, MessageId(3, 4), None)


def test_check_start_against_the_current_end_under_available_now() -> None:
    asked: list[str] = []

    def current(end: MessageId | None) -> Callable[[], MessageId | None]:
        def ask() -> MessageId | None:
            asked.append("now")
            return end

        return ask

    # within the recorded end: the current end is not asked
    assert FAIL.check_start(P0.name, MessageId(3, 4), MessageId(3, 5), current(None)) is False
    assert asked == []
    # beyond the recorded end, but the partition reaches it now: no loss
    assert (
        FAIL.check_start(P0.name, MessageId(3, 4), MessageId(3, 2), current(MessageId(3, 9)))
        is False
    )
    assert asked == ["now"]
    # beyond both: the message names the current end
    with pytest.raises(DataLossError, match="was read up to 3:4:-1 but now ends at 3:3:-1:"):
        FAIL.check_start(P0.name, MessageId(3, 4), MessageId(3, 2), current(MessageId(3, 3)))


def test_start_gone_names_the_start_and_what_is_left() -> None:
    with pytest.raises(DataLossError) as info:
        FAIL.start_gone(P1.name, MessageId(3, 4), MessageId(6, 0, -1, 1))
    assert str(info.value) == (
        f"partition {P1.name} was read up to 3:4:-1, which no longer exists (removed by "
        "retention, or the topic was re-created); the first message left is in 6:0:-1" + ADVICE
    )


# --- the next micro-batch's ranges ------------------------------------------------------------


def ends(table: dict[str, MessageId | None]) -> EndOf:
    return lambda ref: table.get(ref.name)


def test_ranges_run_from_the_last_end_to_the_last_message() -> None:
    begin = {P0.name: MessageId(3, 4)}
    ranges = next_ranges(begin, [P0, P1], FAIL, ends({P0.name: MessageId(3, 9), P1.name: None}))
    assert ranges == Ranges(
        starts={P0.name: MessageId(3, 4), P1.name: NOTHING_CONSUMED},
        ends={P0.name: MessageId(3, 9), P1.name: NOTHING_CONSUMED},
    )


def test_a_partition_without_news_ends_where_it_starts() -> None:
    begin = {P0.name: MessageId(3, 9)}
    ranges = next_ranges(begin, [P0], FAIL, ends({P0.name: MessageId(3, 9)}))
    assert ranges == Ranges({P0.name: MessageId(3, 9)}, {P0.name: MessageId(3, 9)})


def test_a_lost_start_fails_the_query() -> None:
    with pytest.raises(DataLossError, match="was read up to 3:9:-1 but now ends at 1:0:-1"):
        next_ranges({P0.name: MessageId(3, 9)}, [P0], FAIL, ends({P0.name: MessageId(1, 0)}))


def test_a_lost_start_starts_over_when_the_query_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    begin = {P0.name: MessageId(3, 9), P1.name: MessageId(4, 1), "gone": MessageId(1, 1)}
    table = {P0.name: MessageId(1, 0), P1.name: MessageId(4, 5)}
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        ranges = next_ranges(begin, [P0, P1], WARN, ends(table))
    assert ranges == Ranges(
        starts={P0.name: NOTHING_CONSUMED, P1.name: MessageId(4, 1)},
        ends={P0.name: NOTHING_CONSUMED, P1.name: MessageId(4, 5)},
    )
    assert warnings(caplog) == [
        "partition gone no longer exists" + ADVICE,
        f"partition {P0.name} was read up to 3:9:-1 but now ends at 1:0:-1" + ADVICE,
    ]


def test_available_now_reads_up_to_the_recorded_end_and_checks_the_current_one() -> None:
    recorded = ends({P0.name: MessageId(3, 5), P1.name: MessageId(4, 5)})
    now = ends({P0.name: MessageId(3, 20), P1.name: MessageId(4, 20)})
    begin = {P0.name: MessageId(3, 8), P1.name: MessageId(4, 1)}
    ranges = next_ranges(begin, [P0, P1], FAIL, recorded, now)
    # P0 started after its recorded end (at `latest`, say): nothing to read, no loss
    assert ranges == Ranges(
        starts={P0.name: MessageId(3, 8), P1.name: MessageId(4, 1)},
        ends={P0.name: MessageId(3, 8), P1.name: MessageId(4, 5)},
    )
