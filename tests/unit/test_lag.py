"""Lag from a query's progress: entries between the end of a micro-batch and the latest."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest

import pulsar_spark
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.lag import entries_behind, offset_lag
from pulsar_spark.spark.stream_reader import _log_lag

P0 = "persistent://public/default/t-partition-0"
P1 = "persistent://public/default/t-partition-1"


def at(ledger: int, entry: int, batch: int = -1) -> dict[str, int]:
    return {"batchIndex": batch, "entryId": entry, "ledgerId": ledger}


@pytest.mark.parametrize(
    ("end", "latest", "behind"),
    [
        (MessageId(2, 10), MessageId(2, 10), 0),
        (MessageId(2, 10), MessageId(2, 17), 7),
        (MessageId(2, 10, 4), MessageId(2, 17), 8),  # entry 10 read part-way counts
        (MessageId(2, 10, 4), MessageId(2, 10), 1),
        (MessageId(2, 17), MessageId(2, 10), 0),  # latest behind the end: nothing to read
        (MessageId(2, 10), MessageId.earliest(), 0),  # empty partition
        (MessageId.earliest(), MessageId.earliest(), 0),
        (MessageId(2, 10), MessageId(5, 3), None),  # other ledgers in between
        (MessageId.earliest(), MessageId(2, 3), None),  # where the first entry lies is unknown
    ],
)
def test_entries_behind(end: MessageId, latest: MessageId, behind: int | None) -> None:
    assert entries_behind(end, latest) == behind


def test_offset_lag_lists_the_latest_partitions() -> None:
    end = {P0: at(0, 4)}
    latest = {P0: at(0, 9), P1: at(1, 2)}
    assert offset_lag(end, latest) == {P0: 5, P1: None}


def query_with(progress: dict[str, Any] | None) -> SimpleNamespace:
    """What :func:`pulsar_spark.lag` uses of a StreamingQuery: its ``lastProgress``."""
    return SimpleNamespace(lastProgress=progress)


def test_lag_of_a_query_reads_its_last_progress() -> None:
    progress = {
        "sources": [
            {
                "description": "PythonMicroBatchStream",
                "startOffset": json.dumps({P0: at(0, 1)}),
                "endOffset": json.dumps({P0: at(0, 4), P1: at(1, 0, 3)}),
                "latestOffset": json.dumps({P0: at(0, 9), P1: at(1, 6)}),
            },
            {"description": "another source", "endOffset": "7", "latestOffset": "9"},
        ]
    }
    assert pulsar_spark.lag(query_with(progress)) == {P0: 5, P1: 7}


def test_lag_before_any_progress() -> None:
    assert pulsar_spark.lag(query_with(None)) == {}


def test_one_log_line_per_micro_batch(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pulsar_spark.spark.stream_reader")
    _log_lag({P0: at(0, 4), P1: at(1, 2)}, {P0: at(0, 9), P1: at(1, 2)})
    _log_lag({P0: at(0, 4)}, {P0: at(0, 9), P1: at(1, 2)})
    assert [r.getMessage() for r in caplog.records] == [
        "next micro-batch leaves 5 entries unread in 1 partition(s)",
        "next micro-batch leaves 5 entries unread in 1 partition(s) (1 not countable)",
    ]
