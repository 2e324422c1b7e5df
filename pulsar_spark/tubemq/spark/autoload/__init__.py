"""Installed as the top-level module ``pyspark_tubemq``.

Spark registers the ``DefaultSource`` of every importable top-level module named ``pyspark_*``
(one per module), so after ``pip install pulsar-spark``, ``spark.read.format("tubemq")`` works
with no registration call, like ``pyspark_pulsar`` for ``pulsar``.
"""

from pulsar_spark.tubemq.spark.datasource import TubeMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
