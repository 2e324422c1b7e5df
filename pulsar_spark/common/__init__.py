"""What both connectors use and neither owns: the stream decoder, varints, retrying, option
values, a worker's set-up, task shares, the data-loss policy and the message budget of a
micro-batch.

Nothing here imports a connector (``protocol``, ``client``, ``arrow``, ``spark``, ``tubemq``):
only :mod:`pulsar_spark.errors`, the standard library and third-party packages.
"""
