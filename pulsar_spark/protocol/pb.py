"""The generated protobuf classes, under one short import name.

``from pulsar_spark.protocol import pb`` then ``pb.BaseCommand``. The generated module is
produced from ``proto/pulsar_api.proto`` (see proto/README.md) and never edited by hand.
"""

from pulsar_spark.protocol._generated.pulsar_api_pb2 import *  # noqa: F403
