"""The ``tubemq`` data source: Apache InLong TubeMQ topics read and written from Spark."""
