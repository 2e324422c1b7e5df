"""Installed as the top-level module ``pyspark_pulsar``.

Spark registers the ``DefaultSource`` of every importable top-level module named ``pyspark_*``
when a session first looks up a Python data source, so after ``pip install pulsar-spark``,
``spark.read.format("pulsar")`` works with no registration call.
"""

from pulsar_spark.spark.datasource import PulsarDataSource as DefaultSource

__all__ = ["DefaultSource"]
