"""Ready-to-run Spark jobs: ``python -m pulsar_spark.demo`` and the spark-submit examples."""
