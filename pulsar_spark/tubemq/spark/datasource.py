"""The ``tubemq`` Python data source: Apache InLong TubeMQ for Spark.

Like the ``pulsar`` source, ``schema()`` checks the read options when the DataFrame is defined
and nothing connects before Spark plans a read or a write.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pulsar_spark.common.option_values import refuse_overwrite
from pulsar_spark.common.worker_gc import freeze_worker_objects
from pulsar_spark.tubemq.arrow import TUBEMQ_SCHEMA_DDL
from pulsar_spark.tubemq.spark.options import Mode, TubeMQReadOptions, TubeMQWriteOptions

NAME = "tubemq"


class TubeMQDataSource(DataSource):
    """Read and write Apache InLong TubeMQ topics; see the README for options and columns."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        freeze_worker_objects()
        TubeMQReadOptions.parse(self.options, mode=None)  # fail fast on bad read options
        return TUBEMQ_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from pulsar_spark.tubemq.spark.reader import TubeMQBatchReader

        freeze_worker_objects()
        return TubeMQBatchReader(TubeMQReadOptions.parse(self.options, mode=Mode.BATCH))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from pulsar_spark.tubemq.spark.reader import TubeMQStreamReader

        freeze_worker_objects()
        return TubeMQStreamReader(TubeMQReadOptions.parse(self.options, mode=Mode.STREAM))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from pulsar_spark.tubemq.spark.writer import TubeMQBatchWriter

        freeze_worker_objects()
        return TubeMQBatchWriter(_write_options(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from pulsar_spark.tubemq.spark.writer import TubeMQStreamWriter

        freeze_worker_objects()
        return TubeMQStreamWriter(_write_options(self.options, schema, overwrite))


def _write_options(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> TubeMQWriteOptions:
    from pulsar_spark.tubemq.spark.writer import check_write_schema

    refuse_overwrite(overwrite, "TubeMQ")
    parsed = TubeMQWriteOptions.parse(options)
    check_write_schema(schema)
    return parsed
