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

from collections.abc import Sequence
from datetime import datetime, timezone

import pyarrow as pa

from pulsar_spark.arrow.schema import PROPERTIES_TYPE, TIMESTAMP_TYPE
from pulsar_spark.tubemq.wire.messages import MSG_TIME_KEY, TubeMessage, parse_attributes

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


def msg_time(text: str | None) -> datetime | None:
    """``yyyyMMddHHmm`` as a UTC datetime; None when absent or not a valid time."""
    if not text or len(text) != 12 or not text.isdigit():
        return None
    try:
        return datetime.strptime(text, "%Y%m%d%H%M").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def messages_to_batch(
    topic: str, partition: str, offsets: Sequence[int], messages: Sequence[TubeMessage]
) -> pa.RecordBatch:
    """One record batch of ``messages``, the message at index i with offset ``offsets[i]``."""
    attributes = [parse_attributes(m.attributes) for m in messages]
    count = len(messages)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.value for m in messages], pa.binary()),
            pa.array([topic] * count, pa.string()),
            pa.array([partition] * count, pa.string()),
            pa.array(offsets, pa.int64()),
            pa.array([list(a.items()) for a in attributes], PROPERTIES_TYPE),
            pa.array([msg_time(a.get(MSG_TIME_KEY)) for a in attributes], TIMESTAMP_TYPE),
        ],
        schema=TUBEMQ_ARROW_SCHEMA,
    )
