"""The ``failover.*`` read options: the clusters a stream switches to when its own is gone.

Names follow Apache Pulsar's Java ``AutoClusterFailover`` (the primary is ``service.url``).
Without ``failover.switchBackDelayMs`` a stream stays on the cluster it switched to; with it,
the stream goes back to the primary once the primary has answered for that long.
A stream switches clusters only with a replicated durable subscription: its position, copied
between clusters, is where the stream starts on the next one. A write (batch or stream) needs
nothing more: what the cluster left had not acknowledged is sent to the next one.
"""

from __future__ import annotations

from dataclasses import replace

from pulsar_spark.client.failover import FAILOVER_DELAY_OPTION, Clusters
from pulsar_spark.client.settings import ClientSettings
from pulsar_spark.common.address import cluster_name, is_tls_url
from pulsar_spark.common.option_values import OptionValues
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.source.client_options import SERVICE_URL

SECONDARY_SERVICE_URLS = "failover.secondaryServiceUrls"
FAILOVER_DELAY_MS = FAILOVER_DELAY_OPTION
CHECK_INTERVAL_MS = "failover.checkIntervalMs"
SWITCH_BACK_DELAY_MS = "failover.switchBackDelayMs"
FAILOVER_OPTIONS = (
    SECONDARY_SERVICE_URLS,
    FAILOVER_DELAY_MS,
    CHECK_INTERVAL_MS,
    SWITCH_BACK_DELAY_MS,
)
DEFAULT_FAILOVER_DELAY_MS = 30_000
DEFAULT_CHECK_INTERVAL_MS = 1_000


def failover_clusters(
    opts: OptionValues,
    primary: ClientSettings,
    *,
    streaming: bool,
    replicated: bool,
) -> Clusters | None:
    """The clusters a read may switch to: those the ``failover.*`` options list after
    ``primary``, None without them.

    ``streaming``: the read is (or may be) a stream; ``replicated``: it keeps a replicated
    durable subscription (``subscriptionName`` with ``replicateSubscriptionState=true``)."""
    if _secondaries_given(opts) is None:
        return None
    if not streaming:
        raise ConfigurationError(
            f"option {SECONDARY_SERVICE_URLS!r} applies to streaming reads only: a batch read "
            "has no position to carry to another cluster"
        )
    if not replicated:
        raise ConfigurationError(
            f"option {SECONDARY_SERVICE_URLS!r} needs options 'subscriptionName' and "
            "'replicateSubscriptionState'='true': the stream starts on the next cluster from "
            "that subscription's replicated position"
        )
    return _clusters(opts, primary)


def write_clusters(
    opts: OptionValues, primary: ClientSettings, *, transactional: bool
) -> Clusters | None:
    """The clusters a write may switch to (see :func:`failover_clusters`)."""
    if _secondaries_given(opts) is None:
        return None
    if transactional:
        raise ConfigurationError(
            f"option {SECONDARY_SERVICE_URLS!r} cannot be combined with a transactional write: "
            "a transaction belongs to one cluster's coordinator"
        )
    return _clusters(opts, primary)


def _secondaries_given(opts: OptionValues) -> str | None:
    """Option ``failover.secondaryServiceUrls``, None when no ``failover.*`` option is given;
    refused when another is given without it."""
    given = [name for name in FAILOVER_OPTIONS if opts.get(name) is not None]
    if given and opts.get(SECONDARY_SERVICE_URLS) is None:
        raise ConfigurationError(
            f"option {given[0]!r} needs option {SECONDARY_SERVICE_URLS!r}: the service URLs "
            "of the clusters to switch to, in order"
        )
    return opts.get(SECONDARY_SERVICE_URLS)


def _clusters(opts: OptionValues, primary: ClientSettings) -> Clusters:
    delay = opts.positive_int(FAILOVER_DELAY_MS, DEFAULT_FAILOVER_DELAY_MS)
    interval = opts.positive_int(CHECK_INTERVAL_MS, DEFAULT_CHECK_INTERVAL_MS)
    if interval > delay:
        raise ConfigurationError(
            f"option {CHECK_INTERVAL_MS!r} ({interval}) must not exceed option "
            f"{FAILOVER_DELAY_MS!r} ({delay}): a cluster is probed at least once before it is "
            "left"
        )
    back = opts.get(SWITCH_BACK_DELAY_MS)
    switch_back = None if back is None else opts.positive_int(SWITCH_BACK_DELAY_MS, 0) / 1000
    secondaries = _secondary_urls(opts, primary.service_url)
    return Clusters(
        (primary, *(replace(primary, service_url=url) for url in secondaries)),
        failover_delay=delay / 1000,
        check_interval=interval / 1000,
        switch_back_delay=switch_back,
    )


def _secondary_urls(opts: OptionValues, primary_url: str) -> tuple[str, ...]:
    text = opts.required(SECONDARY_SERVICE_URLS, "the service URLs of the other clusters")
    urls = tuple(url.strip() for url in text.split(";") if url.strip())
    seen = [cluster_name(primary_url)]
    for url in urls:
        try:
            name = cluster_name(url)
        except ConfigurationError as exc:
            raise ConfigurationError(f"option {SECONDARY_SERVICE_URLS!r}: {exc}") from exc
        if name in seen:
            raise ConfigurationError(
                f"option {SECONDARY_SERVICE_URLS!r}: cluster {name} is listed twice (or is "
                f"{SERVICE_URL!r}); separate the clusters with ';'"
            )
        if is_tls_url(url) != is_tls_url(primary_url):
            raise ConfigurationError(
                f"option {SECONDARY_SERVICE_URLS!r}: {name} and {SERVICE_URL!r} must both use "
                "pulsar+ssl:// or both pulsar://: every cluster is reached with the same TLS "
                "settings"
            )
        seen.append(name)
    return urls
