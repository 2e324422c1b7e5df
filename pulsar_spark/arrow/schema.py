"""The one fixed schema of rows read from Pulsar, for Spark and for Arrow.

=================  ==============================================  ================================
column             type                                            meaning
=================  ==============================================  ================================
key                binary                                          partition key: UTF-8 of a string
                                                                   key, decoded bytes of a binary
                                                                   (base64) key; null when absent
value              binary                                          payload; null for a null value
topic              string                                          the topic asked for, fully
                                                                   qualified, without -partition-N
partition          int                                             partition index, -1 when the
                                                                   topic is not partitioned
messageId          struct<ledgerId bigint, entryId bigint,         position; batchIndex -1 when the
                   batchIndex int>                                 message was not batched
publishTime        timestamp                                       set by the producing client
eventTime          timestamp                                       set by the application; null
                                                                   when none was set
properties         map<string,string>                              message properties; empty map
                                                                   when none
producerName       string                                          name of the producer
sequenceId         bigint                                          producer's sequence id
replicatedFrom     string                                          source cluster of a
                                                                   geo-replicated message, or null
=================  ==============================================  ================================

A read with ``pulsar.reader.cryptoFailureAction`` CONSUME has one more column, last:

=================  ==============================================  ================================
encrypted          boolean                                         true where ``value`` is the
                                                                   payload left encrypted (no key
                                                                   opened it): a whole entry, so
                                                                   batchIndex -1
=================  ==============================================  ================================

``ARROW_SCHEMA`` equals what Spark derives from ``SCHEMA_DDL`` with
``to_arrow_schema(..., timezone="UTC")``; a test holds the two together.
"""

from __future__ import annotations

import pyarrow as pa

from pulsar_spark.common.arrow_types import PROPERTIES_TYPE, TIMESTAMP_TYPE

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, "
    "messageId struct<ledgerId: bigint, entryId: bigint, batchIndex: int>, "
    "publishTime timestamp, eventTime timestamp, properties map<string,string>, "
    "producerName string, sequenceId bigint, replicatedFrom string"
)

MESSAGE_ID_TYPE = pa.struct(
    [("ledgerId", pa.int64()), ("entryId", pa.int64()), ("batchIndex", pa.int32())]
)

ARROW_SCHEMA = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("messageId", MESSAGE_ID_TYPE),
        ("publishTime", TIMESTAMP_TYPE),
        ("eventTime", TIMESTAMP_TYPE),
        ("properties", PROPERTIES_TYPE),
        ("producerName", pa.string()),
        ("sequenceId", pa.int64()),
        ("replicatedFrom", pa.string()),
    ]
)

ENCRYPTED_DDL = ", encrypted boolean"
"""Appended to the read schema's DDL by a read with cryptoFailureAction CONSUME."""
ENCRYPTED_FIELD = pa.field("encrypted", pa.bool_())
