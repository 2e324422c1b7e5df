"""The ``pulsar`` Python data source: Spark's entry point into the connector.

``DataSource.__init__`` and ``schema()`` run in short-lived planner processes. Options are
validated in ``schema()``, which Spark calls when the DataFrame is defined, so a wrong option
fails at ``load()`` rather than when the job runs. With ``valueFormat=auto`` (the default)
``schema()`` also asks the broker for the topics' schemas, which fix the ``value`` column's
type (:mod:`pulsar_spark.source.value_schemas`); that is its one connection, and the
resolved schema travels with this object to ``reader()``/``streamReader()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import BinaryType, StructType

from pulsar_spark.arrow.schema import ENCRYPTED_DDL, SCHEMA_DDL
from pulsar_spark.arrow.values import ValueSchema
from pulsar_spark.common.option_values import refuse_overwrite
from pulsar_spark.common.worker_gc import freeze_worker_objects
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol.crypto import CryptoFailureAction
from pulsar_spark.source.crypto_options import CRYPTO_FAILURE_ACTION
from pulsar_spark.source.read_options import ReadMode, ReadOptions, check_read_options
from pulsar_spark.source.write_options import WriteOptions

NAME = "pulsar"


class PulsarDataSource(DataSource):
    """Read and write Apache Pulsar topics; see the README for options and columns."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        from pulsar_spark.source.value_schemas import resolve_value_schema

        freeze_worker_objects()
        options = check_read_options(self.options)  # fail fast on bad read options
        self._value_schema = resolve_value_schema(options)
        ddl = SCHEMA_DDL if self._value_schema is None else self._value_schema.read_schema_ddl()
        if options.decryption.action is not CryptoFailureAction.CONSUME:
            return ddl
        if self._value_schema is not None:
            raise ConfigurationError(
                f"option {CRYPTO_FAILURE_ACTION!r} CONSUME delivers encrypted payloads as "
                "bytes, which a typed value column cannot hold: set valueFormat to 'raw'"
            )
        return ddl + ENCRYPTED_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from pulsar_spark.spark.batch_reader import PulsarBatchReader

        freeze_worker_objects()
        return PulsarBatchReader(self._read_options(schema, ReadMode.BATCH))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pulsar_spark.spark.stream_reader import PulsarStreamReader

        freeze_worker_objects()
        return PulsarStreamReader(self._read_options(schema, ReadMode.STREAM))

    def _read_options(self, schema: StructType, mode: ReadMode) -> ReadOptions:
        """The options, with the value schema ``schema()`` fixed (or resolved now, when Spark
        was given a schema and did not ask for one)."""
        from pulsar_spark.source.value_schemas import resolve_value_schema

        options = ReadOptions.parse(self.options, mode=mode)
        if "_value_schema" in self.__dict__:
            resolved = self._value_schema
        else:
            resolved = resolve_value_schema(options)
        return _with_value_schema(options, schema, resolved)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pulsar_spark.spark.writer import PulsarBatchWriter

        freeze_worker_objects()
        return PulsarBatchWriter(_write_options(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pulsar_spark.spark.writer import PulsarStreamWriter

        freeze_worker_objects()
        return PulsarStreamWriter(_write_options(self.options, schema, overwrite))


def _with_value_schema(
    options: ReadOptions, schema: StructType, resolved: ValueSchema | None
) -> ReadOptions:
    """``options`` carrying the value schema, unless the DataFrame's schema (one the user may
    have given) has a binary ``value``."""
    if isinstance(schema["value"].dataType, BinaryType):
        resolved = None
    return dataclasses.replace(options, value_schema=resolved)


def _write_options(options: Mapping[str, str], schema: StructType, overwrite: bool) -> WriteOptions:
    from pulsar_spark.spark.write_schemas import write_schemas
    from pulsar_spark.spark.writer import check_schema

    refuse_overwrite(overwrite, "Pulsar")
    parsed = WriteOptions.parse(options)
    check_schema(schema, parsed)
    schemas = write_schemas(
        schema, parsed.value_schema, parsed.key_schema, dict(parsed.definitions)
    )
    return dataclasses.replace(parsed, schemas=schemas)
