"""Running Pulsar on this machine, for development, tests and the demo.

:class:`LocalBroker` starts an embedded pulsar-lite broker on loopback ports. pulsar-lite is
not a dependency of the connector: install it with the ``local`` extra,
``pip install "pulsar-spark[local]"``. :class:`ApacheBroker` starts Apache Pulsar's own
standalone broker, fetched from Maven Central (it needs Java 17 or later and Maven); its
module is imported when first named, so that ``python -m pulsar_spark.local.apache`` runs it
without importing it twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pulsar_spark.local.broker import LocalBroker
from pulsar_spark.local.process import LocalBrokerError

if TYPE_CHECKING:
    from pulsar_spark.local.apache import ApacheBroker

__all__ = ["ApacheBroker", "LocalBroker", "LocalBrokerError"]


def __getattr__(name: str) -> object:
    if name == "ApacheBroker":
        from pulsar_spark.local.apache import ApacheBroker

        return ApacheBroker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
