"""I/O for Apache InLong TubeMQ: sockets that drive the sans-IO protocol in
:mod:`pulsar_spark.tubemq.wire`."""
