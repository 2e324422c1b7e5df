"""Choosing partitions on write, without a broker: ``pulsar.producer.messageRoutingMode`` by
Java's names, the SinglePartition chooser, and the ``partition`` column's type and values."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import DataType, IntegerType, LongType, StringType, StructField, StructType

from pulsar_spark.arrow.encode import Rows
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol.routing import SinglePartition
from pulsar_spark.spark.write_options import WriteOptions
from pulsar_spark.spark.writer import check_schema

BASE = {"service.url": "pulsar://localhost:6650", "topic": "t"}
MODE = "pulsar.producer.messageRoutingMode"


def test_round_robin_partition_is_the_default() -> None:
    assert WriteOptions.parse(BASE).routing_mode == "RoundRobinPartition"


@pytest.mark.parametrize(
    ("given", "mode"),
    [
        ("RoundRobinPartition", "RoundRobinPartition"),
        ("roundrobinpartition", "RoundRobinPartition"),
        ("SinglePartition", "SinglePartition"),
        (" SINGLEPARTITION ", "SinglePartition"),
    ],
)
def test_routing_modes_by_java_name_in_any_case(given: str, mode: str) -> None:
    assert WriteOptions.parse({**BASE, MODE: given}).routing_mode == mode


@pytest.mark.parametrize("given", ["CustomPartition", "hash", ""])
def test_other_routing_modes_are_refused_naming_the_allowed_ones(given: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        WriteOptions.parse({**BASE, MODE: given})
    assert str(info.value) == (
        "option 'pulsar.producer.messageRoutingMode' must be 'RoundRobinPartition' or "
        "'SinglePartition' (keyed rows go by key hash in both; CustomPartition needs a Java "
        f"router class, which cannot be loaded here), got {given!r}"
    )


@pytest.mark.parametrize(("partitions", "start", "chosen"), [(4, 6, 2), (3, 1, 1), (0, 5, 0)])
def test_single_partition_keeps_to_one(partitions: int, start: int, chosen: int) -> None:
    chooser = SinglePartition(partitions, start=start)
    assert [chooser.next_partition() for _ in range(4)] == [chosen] * 4


def schema(partition_type: DataType) -> StructType:
    return StructType(
        [StructField("value", StringType()), StructField("partition", partition_type)]
    )


def test_the_partition_column_is_an_int() -> None:
    options = WriteOptions.parse(BASE)
    check_schema(schema(IntegerType()), options)
    for wrong in (LongType(), StringType()):
        with pytest.raises(ConfigurationError) as info:
            check_schema(schema(wrong), options)
        assert str(info.value) == (
            f"column 'partition' has type {wrong.simpleString()}; it must be int: the "
            "partition to send the row to (null: routed by key or mode)"
        )


def test_rows_give_their_partitions_and_which_are_null() -> None:
    batch = pa.RecordBatch.from_pydict(
        {"value": ["a", "b", "c"], "partition": pa.array([2, None, 0], pa.int32())}
    )
    found = Rows.of(batch).partitions()
    assert found is not None
    values, given = found
    assert (values.tolist(), given.tolist()) == ([2, 0, 0], [True, False, True])
    assert Rows.of(pa.RecordBatch.from_pydict({"value": ["a"]})).partitions() is None
