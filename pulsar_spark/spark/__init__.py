"""The Spark side: the ``pulsar`` Python data source, its readers and writers (the logic they
use lives in :mod:`pulsar_spark.source`)."""
