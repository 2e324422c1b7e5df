"""The ``tubemq`` stream reader's driver side with the cluster's answers stubbed: where
micro-batches start and end, Trigger.AvailableNow, and what counts as lost data."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from pulsar_spark.errors import DataLossError
from pulsar_spark.tubemq.client.cluster import TubePartition
from pulsar_spark.tubemq.client.consumer import Batch, Bounds
from pulsar_spark.tubemq.spark import reader as reader_module
from pulsar_spark.tubemq.spark.limits import limited_ends
from pulsar_spark.tubemq.spark.options import Mode, TubeMQReadOptions
from pulsar_spark.tubemq.spark.reader import TubeMQStreamReader, TubeRead
from pulsar_spark.tubemq.wire.messages import TubeMessage, TubeMessages
from pulsar_spark.tubemq.wire.metadata import BrokerInfo

BROKER = BrokerInfo(1, "127.0.0.1", 8123)


def partition(pid: int) -> TubePartition:
    return TubePartition(BROKER, "t", pid)


class Cluster:
    """What current_bounds answers: partition id -> (first, end)."""

    def __init__(self, bounds: dict[int, tuple[int, int]]) -> None:
        self.bounds = bounds

    def __call__(self, options: TubeMQReadOptions) -> dict[str, tuple[TubePartition, Bounds]]:
        return {
            partition(p).key: (partition(p), Bounds(first, end))
            for p, (first, end) in self.bounds.items()
        }


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    stub = Cluster({0: (0, 84), 1: (0, 84)})
    monkeypatch.setattr(reader_module, "current_bounds", stub)
    return stub


def stream(**options: str) -> TubeMQStreamReader:
    given = {"master.addresses": "m:8715", "topic": "t", "consumerGroup": "g", **options}
    return TubeMQStreamReader(TubeMQReadOptions.parse(given, mode=Mode.STREAM))


def ranges(reads: object) -> list[tuple[str, int, int, bool]]:
    assert isinstance(reads, list)
    return [
        (r.partition.key, r.start, r.end, r.check_start) for r in reads if isinstance(r, TubeRead)
    ]


def test_starts_latest_and_reads_what_follows(cluster: Cluster) -> None:
    reader = stream()
    start = reader.initialOffset()
    assert start == {"1:t:0": 84, "1:t:1": 84}
    cluster.bounds = {0: (0, 140), 1: (0, 140)}
    assert reader.initialOffset() == start  # resolved once
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"1:t:0": 140, "1:t:1": 140}
    assert reader.reportLatestOffset() == end
    assert ranges(reader.partitions(start, end)) == [
        ("1:t:0", 84, 140, True),
        ("1:t:1", 84, 140, True),
    ]
    assert reader.partitions(end, end) == []


def test_available_now_stops_at_the_ends_found_first(cluster: Cluster) -> None:
    reader = stream(startingOffsets="earliest")
    reader.prepareForTriggerAvailableNow()
    start = reader.initialOffset()
    assert start == {"1:t:0": 0, "1:t:1": 0}
    cluster.bounds = {0: (0, 140), 1: (0, 140), 2: (0, 140)}
    end = reader.latestOffset(start, ReadAllAvailable())
    # partition 2 appeared after the query started: nothing of it in this run
    assert end == {"1:t:0": 84, "1:t:1": 84, "1:t:2": 0}
    assert ranges(reader.partitions(start, end)) == [
        ("1:t:0", 0, 84, True),
        ("1:t:1", 0, 84, True),
    ]


def test_a_new_partition_is_read_from_its_first_offset(cluster: Cluster) -> None:
    reader = stream(startingOffsets="earliest")
    start = reader.initialOffset()
    cluster.bounds = {0: (0, 84), 1: (0, 84), 2: (28, 84)}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ranges(reader.partitions(start, end)) == [
        ("1:t:0", 0, 84, True),
        ("1:t:1", 0, 84, True),
        ("1:t:2", 28, 84, False),
    ]


def test_a_vanished_partition_is_lost_data(cluster: Cluster) -> None:
    reader = stream()
    start = reader.initialOffset()
    cluster.bounds = {0: (0, 84)}
    with pytest.raises(DataLossError, match="partition 1:t:1 no longer exists"):
        reader.latestOffset(start, ReadAllAvailable())
    relaxed = stream(failOnDataLoss="false")
    assert relaxed.latestOffset(start, ReadAllAvailable()) == {"1:t:0": 84}


def test_an_end_that_moved_back_is_lost_data(cluster: Cluster) -> None:
    reader = stream()
    start = reader.initialOffset()
    cluster.bounds = {0: (0, 28), 1: (0, 84)}
    with pytest.raises(DataLossError, match="partition 1:t:0 was read up to offset 84 but now"):
        reader.latestOffset(start, ReadAllAvailable())
    relaxed = stream(failOnDataLoss="false")
    end = relaxed.latestOffset(start, ReadAllAvailable())
    assert end == {"1:t:0": 28, "1:t:1": 84}
    # what the partition holds now is read from its first offset
    assert ranges(relaxed.partitions(start, end)) == [("1:t:0", 0, 28, False)]


def test_a_replayed_batch_finds_its_partitions(cluster: Cluster) -> None:
    # A restarted query plans the batch of its offset log before asking for new offsets.
    reader = stream()
    assert ranges(reader.partitions({"1:t:0": 28}, {"1:t:0": 84})) == [("1:t:0", 28, 84, True)]


def test_tasks_get_the_options_only() -> None:
    reader = stream()
    reader._partitions = {"1:t:0": partition(0)}
    copy = TubeMQStreamReader.__new__(TubeMQStreamReader)
    copy.__setstate__(reader.__getstate__())
    assert copy.options == reader.options
    assert copy._partitions == {}


def test_a_start_the_store_no_longer_holds_is_lost_data(monkeypatch: pytest.MonkeyPatch) -> None:
    def moved_start(
        *args: object, on_start_moved: Callable[[int], None], **kwargs: object
    ) -> Iterator[Batch]:
        on_start_moved(56)  # retention removed what lay before offset 56
        yield Batch(56, TubeMessages.of([TubeMessage(7, b"v", None, 0)]))

    monkeypatch.setattr(reader_module, "read_range", moved_start)
    read = TubeRead(partition(0), 28, 84, "g", 1.0, fail_on_data_loss=True, retry_for=0.0)
    with pytest.raises(DataLossError, match="from offset 28, which the store no longer holds"):
        list(reader_module.read_partition(read))
    relaxed = TubeRead(partition(0), 28, 84, "g", 1.0, fail_on_data_loss=False, retry_for=0.0)
    [batch] = reader_module.read_partition(relaxed)
    assert batch.to_pylist()[0]["offset"] == 56
    # a partition that appeared is read from wherever its store starts
    quiet = TubeRead(
        partition(0), 0, 84, "g", 1.0, fail_on_data_loss=True, retry_for=0.0, check_start=False
    )
    assert len(list(reader_module.read_partition(quiet))) == 1


def test_message_offsets_are_known_when_a_read_scanned_only_its_messages() -> None:
    two = TubeMessages.of([TubeMessage(1, b"a", None, 0), TubeMessage(2, b"b", None, 0)])
    offsets = Batch(56, two, scanned_to=112).message_offsets()
    assert offsets is not None
    assert offsets.tolist() == [56, 84]
    assert Batch(56, two, scanned_to=140).message_offsets() is None  # another entry between
    assert Batch(56, two).message_offsets() is None


def test_a_limit_cuts_each_store_at_whole_index_entries() -> None:
    stores = {"1:t:0": "1:t:0", "1:t:1": "1:t:0", "1:t:10000": "1:t:1"}
    # one store of two partitions from 28 to 308 (10 entries), one from 0 to 56 (2 entries)
    starts = {"1:t:0": 28, "1:t:1": 28, "1:t:10000": 0}
    ends = {"1:t:0": 308, "1:t:1": 308, "1:t:10000": 56}
    # 6 messages: 3 for each store, but the second has only 2, so the first gets 4
    assert limited_ends(starts, ends, stores, 6) == {"1:t:0": 140, "1:t:1": 140, "1:t:10000": 56}
    assert limited_ends(starts, ends, stores, 100) == ends
    # a partition that starts past its store's cut stays where it is
    later = {**starts, "1:t:1": 196}
    assert limited_ends(later, ends, stores, 2) == {"1:t:0": 56, "1:t:1": 196, "1:t:10000": 28}


def test_a_stream_with_a_limit_plans_micro_batches_of_that_many_entries(cluster: Cluster) -> None:
    reader = stream(startingOffsets="earliest", maxMessagesPerTrigger="2")
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 2
    start = reader.initialOffset()
    # partitions 0 and 1 share store 0 (3 entries): 2 messages are its first 2 entries
    assert reader.latestOffset(start, limit) == {"1:t:0": 56, "1:t:1": 56}
    assert reader.latestOffset({"1:t:0": 56, "1:t:1": 56}, limit) == {"1:t:0": 84, "1:t:1": 84}
