"""Running Pulsar on this machine, for development, tests and the demo.

:class:`LocalBroker` starts an embedded pulsar-lite broker on loopback ports. pulsar-lite is
not a dependency of the connector: install it with the ``local`` extra,
``pip install "pulsar-spark[local]"``. :class:`ApacheBroker` starts Apache Pulsar's own
standalone broker, fetched from Maven Central (it needs Java 17 or later and Maven).
"""

from pulsar_spark.local.apache import ApacheBroker
from pulsar_spark.local.broker import LocalBroker
from pulsar_spark.local.process import LocalBrokerError

__all__ = ["ApacheBroker", "LocalBroker", "LocalBrokerError"]
