"""Running Pulsar on this machine, for development, tests and the demo.

:class:`LocalBroker` starts an embedded pulsar-lite broker on loopback ports. pulsar-lite is
not a dependency of the connector: install it with the ``local`` extra,
``pip install "pulsar-spark[local]"``.
"""

from pulsar_spark.local.broker import LocalBroker, LocalBrokerError

__all__ = ["LocalBroker", "LocalBrokerError"]
