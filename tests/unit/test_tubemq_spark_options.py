"""The ``tubemq`` format without a cluster: options, streaming offsets, the schema and rows."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.bounds import Earliest, Latest
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.tubemq.arrow import TUBEMQ_ARROW_SCHEMA, messages_to_batch, msg_time
from pulsar_spark.tubemq.spark.offsets import TubeMQOffset
from pulsar_spark.tubemq.spark.options import (
    Mode,
    PerPartition,
    TubeMQReadOptions,
    TubeMQWriteOptions,
)
from pulsar_spark.tubemq.spark.writer import _attributes, check_write_schema
from pulsar_spark.tubemq.wire.messages import TubeMessage, TubeMessages

BASE = {"master.addresses": "m1:8715,m2:8716", "topic": "t"}

SPARK_SCHEMA = StructType(
    [
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", StringType()),
        StructField("offset", LongType()),
        StructField("attributes", MapType(StringType(), StringType())),
        StructField("timestamp", TimestampType()),
    ]
)


def read(mode: Mode | None = Mode.BATCH, **options: str) -> TubeMQReadOptions:
    return TubeMQReadOptions.parse({**BASE, **options}, mode=mode)


def test_defaults_per_mode() -> None:
    batch = read()
    assert batch.masters == (BrokerAddress("m1", 8715), BrokerAddress("m2", 8716))
    assert (batch.topic, batch.starting, batch.ending) == ("t", Earliest(), Latest())
    assert batch.group.startswith("pulsar_spark_")
    assert (batch.fail_on_data_loss, batch.timeout, batch.retry_for) == (True, 30.0, 120.0)
    assert batch.max_messages_per_trigger is None
    stream = read(
        Mode.STREAM,
        consumerGroup=" g1 ",
        requestTimeoutMs="5000",
        retryTimeoutMs="7000",
        maxMessagesPerTrigger="50",
    )
    assert (stream.starting, stream.group, stream.timeout) == (Latest(), "g1", 5.0)
    assert (stream.retry_for, stream.max_messages_per_trigger) == (7.0, 50)


def test_json_offsets() -> None:
    parsed = read(startingOffsets='{"1:t:1": 56, "1:t:0": -2}', endingOffsets='{"1:t:0": -1}')
    assert parsed.starting == PerPartition((("1:t:0", -2), ("1:t:1", 56)), Earliest())
    assert parsed.starting.for_partition("1:t:0") == Earliest()
    assert parsed.starting.for_partition("1:t:1") == 56
    assert parsed.starting.for_partition("1:t:2") == Earliest()
    assert isinstance(parsed.ending, PerPartition)
    assert parsed.ending.for_partition("1:t:0") == Latest()
    assert parsed.ending.for_partition("1:t:9") == Latest()


@pytest.mark.parametrize(
    ("options", "mode", "message"),
    [
        ({"master.addresses": None}, Mode.BATCH, "option 'master.addresses' is required"),
        ({"master.addresses": "m1"}, Mode.BATCH, "'m1' is not host:port"),
        ({"master.addresses": "m1:99999"}, Mode.BATCH, "'m1:99999' is not host:port"),
        ({"topic": None}, Mode.BATCH, "option 'topic' is required"),
        ({"topic": "a,b"}, Mode.BATCH, "option 'topic' takes one TubeMQ topic"),
        ({"startingOffsets": "latest"}, Mode.BATCH, "'latest' would read nothing"),
        ({"startingOffsets": "soon"}, None, "option 'startingOffsets': 'soon' is neither"),
        ({"startingOffsets": "[1]"}, None, "expected a non-empty JSON object of partition key"),
        ({"startingOffsets": '{"x": 1}'}, None, "'x' is not a partition key"),
        ({"startingOffsets": '{"1:u:0": 1}'}, None, "'1:u:0' is not of topic 't'"),
        ({"startingOffsets": '{"1:t:0": -3}'}, None, "must be an integer >= 0, or -2"),
        ({"startingOffsets": '{"1:t:0": "1"}'}, None, "must be an integer >= 0, or -2"),
        ({"endingOffsets": "earliest"}, Mode.BATCH, "option 'endingOffsets': 'earliest'"),
        ({"endingOffsets": "latest"}, Mode.STREAM, "'endingOffsets' is for batch reads only"),
        ({"failOnDataLoss": "maybe"}, None, "option 'failOnDataLoss' must be 'true' or"),
        ({"requestTimeoutMs": "0"}, None, "option 'requestTimeoutMs' must be a positive"),
        ({"maxMessagesPerTrigger": "10"}, Mode.BATCH, "'maxMessagesPerTrigger' applies to stream"),
        ({"maxMessagesPerTrigger": "0"}, None, "option 'maxMessagesPerTrigger' must be a positive"),
        ({"retryTimeoutMs": "soon"}, None, "option 'retryTimeoutMs' must be a positive integer"),
        ({"startingOffset": "earliest"}, None, "Did you mean 'startingOffsets'?"),
    ],
)
def test_option_errors_name_the_option(
    options: dict[str, str | None], mode: Mode | None, message: str
) -> None:
    given = {k: v for k, v in {**BASE, **options}.items() if v is not None}
    with pytest.raises(ConfigurationError, match=message.replace("?", r"\?")):
        TubeMQReadOptions.parse(given, mode=mode)


def test_write_options() -> None:
    parsed = TubeMQWriteOptions.parse({**BASE, "requestTimeoutMs": "2500"})
    assert (parsed.topic, parsed.timeout) == ("t", 2.5)
    with pytest.raises(ConfigurationError, match="unknown option 'startingoffsets' for writing"):
        TubeMQWriteOptions.parse({**BASE, "startingOffsets": "earliest"})


def test_offsets_are_canonical_json() -> None:
    offset = TubeMQOffset({"1:t:2": 56, "1:t:0": 0, "1:t:1": 28})
    assert list(offset.to_json().items()) == [("1:t:0", 0), ("1:t:1", 28), ("1:t:2", 56)]
    assert TubeMQOffset.from_json(offset.to_json()) == TubeMQOffset(dict(offset.positions))
    with pytest.raises(ConfigurationError, match="invalid TubeMQ offset"):
        TubeMQOffset.from_json({"1:t:0": -1})


def test_arrow_schema_is_sparks() -> None:
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC") == TUBEMQ_ARROW_SCHEMA


def test_messages_to_batch() -> None:
    full = "$msgType$=x,$msgTime$=202611251530,k=v"
    batch = messages_to_batch(
        "t",
        "1:t:0",
        np.array([84, 112, 140, 168]),
        TubeMessages.of(
            [
                TubeMessage(1, b"a", full, 1),
                TubeMessage(2, b"", None, 0),
                TubeMessage(3, b"c", "k=w", 1),
                TubeMessage(4, b"d", full, 1),
            ]
        ),
    )
    assert batch.schema == TUBEMQ_ARROW_SCHEMA
    with_full = {
        "attributes": [("$msgType$", "x"), ("$msgTime$", "202611251530"), ("k", "v")],
        "timestamp": dt.datetime(2026, 11, 25, 15, 30, tzinfo=dt.timezone.utc),
    }
    common = {"topic": "t", "partition": "1:t:0"}
    assert batch.to_pylist() == [
        {"value": b"a", **common, "offset": 84, **with_full},
        {"value": b"", **common, "offset": 112, "attributes": [], "timestamp": None},
        {"value": b"c", **common, "offset": 140, "attributes": [("k", "w")], "timestamp": None},
        {"value": b"d", **common, "offset": 168, **with_full},
    ]


def test_messages_to_batch_without_attributes() -> None:
    plain = TubeMessages.of([TubeMessage(i, bytes([i]), None, 0) for i in range(3)])
    batch = messages_to_batch("t", "1:t:2", np.array([0, 28, 56]), plain)
    assert batch.to_pylist() == [
        {
            "value": bytes([i]),
            "topic": "t",
            "partition": "1:t:2",
            "offset": 28 * i,
            "attributes": [],
            "timestamp": None,
        }
        for i in range(3)
    ]


def test_msg_time() -> None:
    assert msg_time("202602281159") == dt.datetime(2026, 2, 28, 11, 59, tzinfo=dt.timezone.utc)
    assert msg_time("202602301159") is None
    assert msg_time("2026") is None
    assert msg_time(None) is None


def test_written_attributes() -> None:
    assert _attributes({"$msgTime$": "202611251530", "a": "1", "$msgType$": "x"}) == (
        "$msgType$=x,$msgTime$=202611251530,a=1",
        "x",
        "202611251530",
    )
    assert _attributes({}) == (None, None, None)
    with pytest.raises(ConfigurationError, match="column 'attributes': attribute value 'a,b'"):
        _attributes({"k": "a,b"})
    with pytest.raises(ConfigurationError, match="attribute 'k' of a row has a null value"):
        _attributes({"k": None})


def test_write_schema() -> None:
    check_write_schema(StructType([StructField("value", StringType())]))
    with pytest.raises(ConfigurationError, match="needs a 'value' column"):
        check_write_schema(
            StructType([StructField("attributes", MapType(StringType(), StringType()))])
        )
    with pytest.raises(ConfigurationError, match="column 'key' of type string cannot be written"):
        check_write_schema(
            StructType([StructField("value", BinaryType()), StructField("key", StringType())])
        )
