"""pulsar-spark: read and write Apache Pulsar from PySpark over Pulsar's binary protocol.

After ``pip install pulsar-spark`` the ``pulsar`` format is available in new Spark sessions.
For an editable install, or a session started before the package was installed, call
:func:`register` once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pulsar_spark._version import __version__

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["__version__", "register"]


def register(spark: SparkSession) -> None:
    """Register the ``pulsar`` data source with ``spark`` (idempotent)."""
    from pulsar_spark.spark.datasource import PulsarDataSource

    spark.dataSource.register(PulsarDataSource)
