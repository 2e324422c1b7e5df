"""The ``value`` column's type: the topic's schema, fetched when the DataFrame is defined.

With ``valueFormat`` ``auto`` the driver asks the broker for the latest schema of every topic
read; the ``value`` column follows it (see :mod:`pulsar_spark.arrow.values`), and for a
KeyValue schema the ``key`` column too (:mod:`pulsar_spark.arrow.key_values`). Topics without
a schema and with a schema that has no Spark mapping (Protobuf, ...) are read as bytes.
``topicsPattern`` is resolved to the topics it matches now, on the driver, and those follow
the same rule as ``topics``: topics with different schemas are refused, one column has one
type. Topics that match later (a stream sees them when it plans a micro-batch) are decoded
with the schema fixed here too. Executors decode with that schema, each message resolved from
the version it was written with.

``valueSchema`` (with ``valueSchema.definition`` for ``avro`` and ``json``) gives the values'
schema instead, for topics whose producers register none: nothing is asked of the broker
when the DataFrame is defined, and messages that name a schema version are still resolved from
it to the given schema.

A broker that cannot be asked when the DataFrame is defined (unreachable, credentials refused)
leaves ``value`` as bytes, with a warning: the read then fails on its own when it connects,
with the error it always gave, instead of at ``load()``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

from pulsar_spark.arrow.key_values import KeyValueDecoder, RowDecoder
from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.client.failover import reachable
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.schema import fetch_schema, keeps_schemas
from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.errors import ConfigurationError, PulsarSparkError, SchemaError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo, schema_topic
from pulsar_spark.source.planning import make_lookup, match_pattern
from pulsar_spark.source.read_options import ReadOptions
from pulsar_spark.source.schema_options import DEFINITION, VALUE_SCHEMA

log = logging.getLogger(__name__)


def resolve_value_schema(options: ReadOptions) -> ValueSchema | None:
    """The schema the ``value`` column follows; None for bytes."""
    if options.value_format == "raw":
        return None
    if options.given_schema is not None:
        return _given(options, options.given_schema)
    try:
        found = _fetch_all(options, answering_cluster(options))
    except (SchemaError, ConfigurationError):
        raise
    except PulsarSparkError as exc:
        log.warning("could not fetch the topics' schemas, so value is read as bytes: %s", exc)
        return None
    if not found:  # a pattern that matches nothing yet, or a broker without schemas
        return None
    if len({_identity(info) for info in found.values()}) > 1:
        listed = "; ".join(f"{topic}: {_describe(info)}" for topic, info in found.items())
        raise SchemaError(
            f"the topics have different schemas ({listed}); the value column has one type, so "
            "read them with valueFormat=raw or in one DataFrame per schema"
        )
    topic, info = next(iter(found.items()))
    return None if info is None else ValueSchema.of(topic, info)


def _given(options: ReadOptions, info: SchemaInfo) -> ValueSchema | None:
    """The schema ``valueSchema`` gives, checked to have a Spark type."""
    topics = options.topics
    named = topics.names[0] if topics.names else str(topics.pattern)
    try:
        return ValueSchema.of(named, info)
    except SchemaError as exc:
        raise ConfigurationError(f"option '{VALUE_SCHEMA}{DEFINITION}': {exc}") from exc


def answering_cluster(options: ReadOptions) -> ClientSettings:
    """The cluster to ask for schemas: with ``failover.secondaryServiceUrls``, the first of
    the list that a connection reaches (the last one failing that); else ``service.url``."""
    clusters = options.failover
    if clusters is None:
        return options.client
    for settings in clusters.settings[:-1]:
        if reachable(settings, clusters.probe_timeout(settings)):
            return settings
    return clusters.settings[-1]


def _fetch_all(options: ReadOptions, settings: ClientSettings) -> dict[str, SchemaInfo | None]:
    lookup = make_lookup(settings)
    topics = list(options.topics.names)
    if options.topics.pattern is not None:
        if not keeps_schemas(lookup.service_connection().server_version):
            return {}  # pulsar-lite: no schemas, and no answer to a listing either
        topics = lookup.retrying(
            lambda: match_pattern(lookup, options.topics),
            f"listing the topics matching {options.topics.pattern}",
        )
    # Partitions of one topic share their parent's schema: asked for once.
    kept: dict[str, SchemaInfo | None] = {}
    found: dict[str, SchemaInfo | None] = {}
    for topic in topics:
        parent = schema_topic(topic)
        if parent not in kept:
            fetch = functools.partial(fetch_schema, lookup, topic)
            kept[parent] = lookup.retrying(fetch, f"fetching the schema of {topic}")
        found[topic] = kept[parent]
    return found


def value_decoder(schema: ValueSchema | None, topic: str, lookup: Lookup) -> RowDecoder | None:
    """The executor's decoder for one topic's values, and keys of a KeyValue topic (schema
    versions asked of ``lookup``)."""
    if schema is None:
        return None

    def writer_info(version: bytes) -> SchemaInfo | None:
        return lookup.retrying(
            lambda: fetch_schema(lookup, topic, version), f"fetching a schema of {topic}"
        )

    def writer_schema(version: bytes) -> bytes | None:
        info = writer_info(version)
        return None if info is None else info.data

    schema = dataclasses.replace(schema, topic=topic)
    if schema.key is not None:
        return KeyValueDecoder(schema, writer_info)
    return ValueDecoder(schema, writer_schema)


def _identity(info: SchemaInfo | None) -> tuple[object, ...] | None:
    """What two topics' schemas must share to be read as one: type and data, and for a
    KeyValue schema its properties too (they name the halves' types and the encoding)."""
    if info is None:
        return None
    if info.type == pb.Schema.Type.Value("KeyValue"):
        return info.type, info.data, tuple(sorted(info.properties))
    return info.type, info.data


def _describe(info: SchemaInfo | None) -> str:
    if info is None:
        return "no schema"
    version = "" if info.version is None else f" version {int.from_bytes(info.version, 'big')}"
    return f"{info.type_name}{version}"
