"""pulsar-spark: read and write Apache Pulsar from PySpark over Pulsar's binary protocol, and
Apache InLong TubeMQ over TubeMQ's.

After ``pip install pulsar-spark`` the ``pulsar`` and ``tubemq`` formats are available in new
Spark sessions.
For an editable install, or a session started before the package was installed, call
:func:`register` once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pulsar_spark._version import __version__

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["__version__", "lag", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``pulsar`` and ``tubemq`` data sources with ``spark`` (idempotent)."""
    from pulsar_spark.spark.datasource import PulsarDataSource
    from pulsar_spark.tubemq.spark.datasource import TubeMQDataSource

    spark.dataSource.register(PulsarDataSource)
    spark.dataSource.register(TubeMQDataSource)


def lag(query: Any) -> dict[str, int | None]:
    """Per partition, the entries a streaming query's last micro-batch left unread: from its
    ``lastProgress`` (``endOffset`` against ``latestOffset``); see
    :mod:`pulsar_spark.source.lag` for what is exact and when a partition's lag is None."""
    from pulsar_spark.source.lag import lag as lag_of

    return lag_of(query)
