"""Choosing partitions on write, without a broker: ``pulsar.producer.messageRoutingMode`` and
``pulsar.producer.hashingScheme`` by Java's names, the SinglePartition chooser, and the
``partition`` column's type and values."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import DataType, IntegerType, LongType, StringType, StructField, StructType

from pulsar_spark.arrow.encode import Rows
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol.routing import SinglePartition
from pulsar_spark.source.write_options import WriteOptions
from pulsar_spark.spark.writer import check_schema

BASE = {"service.url": "pulsar://localhost:6650", "topic": "t"}
MODE = "pulsar.producer.messageRoutingMode"
HASHING = "pulsar.producer.hashingScheme"


def test_defaults() -> None:
    options = WriteOptions.parse(BASE)
    assert (options.routing_mode, options.hashing_scheme) == (
        "RoundRobinPartition",
        "JavaStringHash",
    )


@pytest.mark.parametrize(
    ("option", "given", "chosen"),
    [
        (MODE, "RoundRobinPartition", ("RoundRobinPartition", "JavaStringHash")),
        (MODE, "roundrobinpartition", ("RoundRobinPartition", "JavaStringHash")),
        (MODE, "SinglePartition", ("SinglePartition", "JavaStringHash")),
        (MODE, " SINGLEPARTITION ", ("SinglePartition", "JavaStringHash")),
        (HASHING, "JavaStringHash", ("RoundRobinPartition", "JavaStringHash")),
        (HASHING, "javastringhash", ("RoundRobinPartition", "JavaStringHash")),
        (HASHING, "Murmur3_32Hash", ("RoundRobinPartition", "Murmur3_32Hash")),
        (HASHING, " MURMUR3_32HASH ", ("RoundRobinPartition", "Murmur3_32Hash")),
    ],
)
def test_modes_and_schemes_by_java_name_in_any_case(
    option: str, given: str, chosen: tuple[str, str]
) -> None:
    options = WriteOptions.parse({**BASE, option: given})
    assert (options.routing_mode, options.hashing_scheme) == chosen


ROUTING_REFUSED = (
    "option 'pulsar.producer.messageRoutingMode' must be 'RoundRobinPartition' or "
    "'SinglePartition' (keyed rows go by key hash in both; CustomPartition needs a Java "
    "router class, which cannot be loaded here), got {!r}"
)
HASHING_REFUSED = (
    "option 'pulsar.producer.hashingScheme' must be 'JavaStringHash' or 'Murmur3_32Hash', got {!r}"
)


@pytest.mark.parametrize(
    ("option", "given", "refusal"),
    [
        *((MODE, given, ROUTING_REFUSED) for given in ("CustomPartition", "hash", "")),
        *((HASHING, given, HASHING_REFUSED) for given in ("Murmur3", "BoostHash", "")),
    ],
)
def test_other_values_are_refused_naming_the_allowed_ones(
    option: str, given: str, refusal: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        WriteOptions.parse({**BASE, option: given})
    assert str(info.value) == refusal.format(given)


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
