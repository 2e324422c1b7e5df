"""Ready-to-run Spark programs, installed with the package.

- ``demo``: ``python -m pulsar_spark.jobs.demo`` (what ``make demo`` runs);
- ``topic_to_parquet``: a job for ``spark-submit`` that copies a topic into Parquet.
"""
