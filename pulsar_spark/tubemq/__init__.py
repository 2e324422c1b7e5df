"""The ``tubemq`` connector: Apache InLong TubeMQ, in the same layers as the Pulsar side.

``wire`` is the sans-IO protocol (frames, RPC envelopes, messages), ``client`` the sockets that
drive it, ``arrow`` the conversion of messages to Arrow batches, and ``spark`` the ``tubemq``
data source (``spark/autoload/`` becomes the ``pyspark_tubemq`` module). Its errors are in
``errors``, under the one root of :mod:`pulsar_spark.errors`. What both connectors use lives in
:mod:`pulsar_spark.common`.
"""
