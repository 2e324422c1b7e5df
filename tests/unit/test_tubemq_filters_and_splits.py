"""``filterConds`` and ``minPartitions`` of the ``tubemq`` format without a cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from pulsar_spark.common.task_shares import even_cuts, task_shares
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.tubemq.client.cluster import TubePartition
from pulsar_spark.tubemq.client.consumer import REGISTER, UNREGISTER, Batch, Bounds
from pulsar_spark.tubemq.client.consumer import PartitionConsumer as Consumer
from pulsar_spark.tubemq.spark import reader as reader_module
from pulsar_spark.tubemq.spark.options import Mode, TubeMQReadOptions
from pulsar_spark.tubemq.spark.reader import (
    TubeMQBatchReader,
    TubeMQStreamReader,
    TubeRead,
    split_reads,
)
from pulsar_spark.tubemq.wire.messages import TubeMessage, TubeMessages
from pulsar_spark.tubemq.wire.metadata import BrokerInfo

BROKER = BrokerInfo(1, "127.0.0.1", 8123)
BASE = {"master.addresses": "m:8715", "topic": "t", "consumerGroup": "g"}


def partition(pid: int) -> TubePartition:
    return TubePartition(BROKER, "t", pid)


def options(mode: Mode | None = Mode.BATCH, **given: str) -> TubeMQReadOptions:
    return TubeMQReadOptions.parse({**BASE, **given}, mode=mode)


def test_filter_conditions_are_sorted_and_each_once() -> None:
    assert options().filters == ()
    assert options(filterConds=" t_b, t-a ,t_b").filters == ("t-a", "t_b")
    assert options(None, filterConds="x").filters == ("x",)
    assert options(filterConds=",".join(f"t{i}" for i in range(500))).filters[:2] == ("t0", "t1")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "option 'filterConds' takes message types separated by commas, none of them blank"),
        ("a,,b", "option 'filterConds' takes message types separated by commas"),
        ("a, ", "option 'filterConds' takes message types separated by commas"),
        ("a=b", "option 'filterConds': 'a=b' cannot be a message type"),
        ("x" * 257, "option 'filterConds': a message type is at most 256 characters long"),
        (
            ",".join(f"t{i}" for i in range(501)),
            "option 'filterConds' names 501 message types; TubeMQ takes at most 500 filter "
            "items for a topic",
        ),
    ],
)
def test_bad_filter_conditions_name_the_option(value: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message.replace("(", r"\(")):
        options(None, filterConds=value)


def test_min_partitions() -> None:
    assert options().min_partitions is None
    assert options(minPartitions="8").min_partitions == 8
    assert options(Mode.STREAM, minPartitions="3").min_partitions == 3
    with pytest.raises(ConfigurationError, match="option 'minPartitions' must be a positive"):
        options(minPartitions="0")


def test_the_shared_rule() -> None:
    assert task_shares([10, 10], 8) == [4, 4]
    assert task_shares([30, 10, 0], 8) == [6, 2, 1]
    assert task_shares([10, 10], 2) == [1, 1]
    assert task_shares([10], None) == [1]
    assert even_cuts(0, 10, 4) == [2, 5, 7]
    assert even_cuts(5, 2, 4) == [6]  # one piece per unit at most
    assert even_cuts(0, 7, 1) == []


def read(pid: int, start: int, end: int, group: str = "g") -> TubeRead:
    return TubeRead(partition(pid), start, end, group, 1.0, True, 5.0, filters=("a",))


def test_ranges_are_cut_at_index_entries_under_groups_of_their_own() -> None:
    reads = [read(0, 28, 308), read(1, 28, 308)]  # 10 entries each
    pieces = split_reads(reads, 8)
    assert [(p.partition.partition_id, p.start, p.end, p.group) for p in pieces] == [
        (0, 28, 84, "g"),
        (0, 84, 168, "g_piece1"),
        (0, 168, 224, "g_piece2"),
        (0, 224, 308, "g_piece3"),
        (1, 28, 84, "g"),
        (1, 84, 168, "g_piece1"),
        (1, 168, 224, "g_piece2"),
        (1, 224, 308, "g_piece3"),
    ]
    assert {(p.client, p.filters, p.check_start) for p in pieces[:4]} == {
        ("g-1-0", ("a",), True),
        ("g_piece1-1-0", ("a",), True),
        ("g_piece2-1-0", ("a",), True),
        ("g_piece3-1-0", ("a",), True),
    }
    # a range of two entries is cut in two at most; enough ranges are left whole
    assert [(p.start, p.end) for p in split_reads([read(0, 0, 56)], 5)] == [(0, 28), (28, 56)]
    assert split_reads(reads, 2) == reads
    assert split_reads(reads, None) == reads


def test_batch_and_stream_plans_take_min_partitions(monkeypatch: pytest.MonkeyPatch) -> None:
    def bounds(_: TubeMQReadOptions) -> dict[str, tuple[TubePartition, Bounds]]:
        return {partition(p).key: (partition(p), Bounds(0, 280)) for p in (0, 1)}

    monkeypatch.setattr(reader_module, "current_bounds", bounds)
    planned = TubeMQBatchReader(options(minPartitions="8")).partitions()
    assert len(planned) == 8
    stream = TubeMQStreamReader(options(Mode.STREAM, minPartitions="4"))
    stream.initialOffset()
    planned = stream.partitions({"1:t:0": 0, "1:t:1": 140}, {"1:t:0": 280, "1:t:1": 280})
    assert [(r.partition.partition_id, r.start, r.end) for r in planned] == [  # type: ignore[attr-defined]
        (0, 0, 84),
        (0, 84, 168),
        (0, 168, 280),
        (1, 140, 280),
    ]


def test_the_register_call_carries_the_filters() -> None:
    consumer = Consumer(None, partition(0), "g", "c", filters=("a", "b"))  # type: ignore[arg-type]
    assert list(consumer._register_request(REGISTER, 0).filterCondStr) == ["a", "b"]
    assert list(consumer._register_request(UNREGISTER, None).filterCondStr) == []
    plain = Consumer(None, partition(0), "g", "c")  # type: ignore[arg-type]
    assert list(plain._register_request(REGISTER, 0).filterCondStr) == []


def typed(message_id: int, msg_type: str | None) -> TubeMessage:
    attributes = None if msg_type is None else f"$msgType$={msg_type},k=v"
    return TubeMessage(message_id, f"v{message_id}".encode(), attributes, 1 if msg_type else 0)


def test_messages_of_other_types_the_broker_let_through_are_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "Aa" and "BB" share Java's String.hashCode, so the broker cannot tell them apart.
    sent = [typed(1, "Aa"), typed(2, "BB"), typed(3, None), typed(4, "Aa")]

    def replies(*args: object, filters: tuple[str, ...], **kwargs: object) -> Iterator[Batch]:
        assert filters == ("Aa",)
        yield Batch(0, TubeMessages.of(sent), scanned_to=4 * 28)  # each message's offset is known
        yield Batch(112, TubeMessages.of([typed(5, "BB")]), scanned_to=196)

    monkeypatch.setattr(reader_module, "read_range", replies)
    task = TubeRead(partition(0), 0, 196, "g", 1.0, True, 0.0, filters=("Aa",))
    [batch] = reader_module.read_partition(task)
    assert [(r["value"], r["offset"]) for r in batch.to_pylist()] == [(b"v1", 0), (b"v4", 84)]
