"""The Pulsar source's and sink's own logic, without PySpark: options, positions, offsets,
planning, splitting, counting, subscriptions, failover and lag; :mod:`pulsar_spark.spark`
hands it to Spark."""
