"""The Arrow types both connectors' rows use: Spark's timestamp (microseconds, UTC) and a
``map<string,string>`` (Pulsar's properties, TubeMQ's attributes)."""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
