"""Fetching a topic's schema from the broker (GET_SCHEMA).

Schemas are kept per topic, not per partition: a partition's name is asked for as its parent
topic. The request goes over the service URL's connection, as lookups do, and waits at most
the operation timeout. A broker known to keep no schemas (pulsar-lite, which also never
answers GET_SCHEMA) is not asked: its topics have no schema.
"""

from __future__ import annotations

from pulsar_spark.client.lookup import Lookup
from pulsar_spark.protocol import commands
from pulsar_spark.protocol.connection import is_pulsar_lite
from pulsar_spark.protocol.schemas import SchemaInfo, schema_from_response, schema_topic


def keeps_schemas(server_version: str) -> bool:
    """Whether a broker has a schema registry; pulsar-lite ignores schemas altogether."""
    return not is_pulsar_lite(server_version)


def fetch_schema(lookup: Lookup, topic: str, version: bytes | None = None) -> SchemaInfo | None:
    """The latest schema of ``topic`` (or ``version`` of it); None when it has none."""
    name = schema_topic(topic)
    connection = lookup.service_connection()
    if not keeps_schemas(connection.server_version):
        return None
    response = connection.request(
        lambda rid: commands.get_schema(topic=name, request_id=rid, schema_version=version),
        what=f"GET_SCHEMA {name}",
        timeout=lookup.timeout,
    )
    return schema_from_response(response.getSchemaResponse, name)
