"""The fixed schema of rows read from TubeMQ, and the messages of a partition as Arrow.

==========  ==================  ===========================================================
column      type                meaning
==========  ==================  ===========================================================
value       binary              the message body, without its attributes
topic       string              the topic
partition   string              ``brokerId:topic:partitionId``
offset      bigint              the message's store offset when the read that returned it
                                scanned only this partition's messages; otherwise the offset
                                where that read started, an earlier one (messages carry no
                                offset of their own; see
                                :mod:`pulsar_spark.tubemq.client.consumer`)
attributes  map<string,string>  the ``k=v`` attribute items, system items ``$msgType$`` and
                                ``$msgTime$`` included; empty map when none
timestamp   timestamp           ``$msgTime$`` (minute precision, read as UTC); null when
                                the message has none
==========  ==================  ===========================================================

``TUBEMQ_ARROW_SCHEMA`` equals what Spark derives from ``TUBEMQ_SCHEMA_DDL`` with
``to_arrow_schema(..., timezone="UTC")``; a test holds the two together.
"""

from __future__ import annotations

import functools
from datetime import datetime, timezone

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from pulsar_spark.common.arrow_types import PROPERTIES_TYPE, TIMESTAMP_TYPE
from pulsar_spark.common.binary_arrays import binary_array
from pulsar_spark.tubemq.wire.messages import MSG_TIME_KEY, TubeMessages, parse_attributes

TUBEMQ_SCHEMA_DDL = (
    "value binary, topic string, partition string, offset bigint, "
    "attributes map<string,string>, timestamp timestamp"
)

TUBEMQ_ARROW_SCHEMA = pa.schema(
    [
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.string()),
        ("offset", pa.int64()),
        ("attributes", PROPERTIES_TYPE),
        ("timestamp", TIMESTAMP_TYPE),
    ]
)


@functools.lru_cache(maxsize=4096)
def msg_time(text: str | None) -> datetime | None:
    """``yyyyMMddHHmm`` as a UTC datetime; None when absent or not a valid time. Producers
    stamp the minute, so the same few texts come again and again: answers are kept."""
    if not text or len(text) != 12 or not text.isdigit():
        return None
    try:
        return datetime.strptime(text, "%Y%m%d%H%M").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def messages_to_batch(
    topic: str, partition: str, offsets: npt.NDArray[np.int64], messages: TubeMessages
) -> pa.RecordBatch:
    """One record batch of ``messages``, the message at index i with offset ``offsets[i]``.

    Each distinct attribute string is parsed once, and its map and time are taken for every
    message that has it; the values are copied from the reply's bytes once, by Arrow.
    """
    count = len(messages)
    parsed = [parse_attributes(text) for text in messages.texts]
    maps = pa.array([list(items.items()) for items in parsed], PROPERTIES_TYPE)
    times = pa.array([msg_time(items.get(MSG_TIME_KEY)) for items in parsed], TIMESTAMP_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            binary_array(messages.values),
            pa.repeat(topic, count),
            pa.repeat(partition, count),
            pa.array(offsets, pa.int64()),
            maps.take(messages.codes),
            times.take(messages.codes),
        ],
        schema=TUBEMQ_ARROW_SCHEMA,
    )
