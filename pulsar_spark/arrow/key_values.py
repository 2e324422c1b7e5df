"""KeyValue topics: the ``key`` and ``value`` columns both typed, by the two schemas of a
KEY_VALUE schema (see :mod:`pulsar_spark.protocol.key_value` for the layout).

INLINE: each payload is split into its key and its value, and each half is decoded with its
schema. SEPARATED: the ``key`` column (the message key, already base64-decoded when the
producer sent it so) is decoded with the key schema and the payload with the value schema. A
half of type BYTES stays binary. Schema versions are the KEY_VALUE schema's: each half of a
message is decoded with that half of the version it was written with, resolved to the latest.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import pyarrow as pa

from pulsar_spark.arrow.values import ValueDecoder, ValueSchema
from pulsar_spark.errors import SchemaError
from pulsar_spark.protocol.key_value import KeyValueSchemas, key_value_schemas, split_all
from pulsar_spark.protocol.schemas import SchemaInfo

WriterInfos = Callable[[bytes], SchemaInfo | None]
"""A schema version of the topic as the broker keeps it (None if it has none)."""


class KeyValueDecoder:
    """Decodes the keys and payloads of one KeyValue topic to the types of a
    :class:`ValueSchema` with a ``key``."""

    def __init__(self, schema: ValueSchema, writer_infos: WriterInfos) -> None:
        assert schema.key is not None
        self.schema = schema
        self.arrow_schema = schema.arrow_schema()

        @functools.cache
        def halves(version: bytes) -> KeyValueSchemas | None:
            info = writer_infos(version)
            return None if info is None else key_value_schemas(info, schema.topic)

        def key_data(version: bytes) -> bytes | None:
            found = halves(version)
            return None if found is None else found.key.data

        def value_data(version: bytes) -> bytes | None:
            found = halves(version)
            return None if found is None else found.value.data

        self._keys = ValueDecoder(schema.key, key_data)
        self._values = ValueDecoder(dataclasses.replace(schema, key=None), value_data)

    def decode_columns(
        self, keys: pa.Array, values: pa.Array, versions: Sequence[bytes | None]
    ) -> tuple[pa.Array, pa.Array]:
        """The typed ``key`` and ``value`` columns of messages with these ``keys`` (binary
        message keys), ``values`` (binary payloads) and schema ``versions``."""
        if not self.schema.separated:
            try:
                inline_keys, inline_values = split_all(values.to_pylist())
            except SchemaError as exc:
                raise SchemaError(f"topic {self.schema.topic}: {exc}") from exc
            keys = pa.array(inline_keys, pa.binary())
            values = pa.array(inline_values, pa.binary())
        return self._keys.decode(keys, versions), self._values.decode(values, versions)


RowDecoder = ValueDecoder | KeyValueDecoder
"""What types the ``key`` and ``value`` columns of a record batch."""
