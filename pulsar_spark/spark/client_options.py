"""The ``pulsar.client.*`` options: service URL, TLS, authentication, timeouts, listener.

Names and parameter formats are the Java client's (``ClientConfigurationData``), as
streamnative/pulsar-spark and Flink's connector pass them through, so a job moved from them
keeps its options. Everything is checked when the DataFrame is defined: files are opened,
plugins configured, contradictions refused. No error shows the value of ``authParams``.
"""

from __future__ import annotations

from pulsar_spark.client.address import BrokerAddress, is_tls_url, parse_service_url
from pulsar_spark.client.auth import (
    Authentication,
    TlsAuthentication,
    parse_authentication,
)
from pulsar_spark.client.settings import ClientSettings, ConnectionSettings, TlsSettings
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.spark.option_values import OptionValues

SERVICE_URL = "service.url"
OPERATION_TIMEOUT_MS = "pulsar.client.operationTimeoutMs"
CONNECTION_TIMEOUT_MS = "pulsar.client.connectionTimeoutMs"
KEEP_ALIVE_SECONDS = "pulsar.client.keepAliveIntervalSeconds"
LISTENER_NAME = "pulsar.client.listenerName"
AUTH_PLUGIN = "pulsar.client.authPluginClassName"
AUTH_PARAMS = "pulsar.client.authParams"
TLS_TRUST_CERTS = "pulsar.client.tlsTrustCertsFilePath"
TLS_ALLOW_INSECURE = "pulsar.client.tlsAllowInsecureConnection"
TLS_VERIFY_HOSTNAME = "pulsar.client.tlsHostnameVerificationEnable"
TLS_CERT = "pulsar.client.tlsCertificateFilePath"
TLS_KEY = "pulsar.client.tlsKeyFilePath"
PROXY_SERVICE_URL = "pulsar.client.proxyServiceUrl"
PROXY_PROTOCOL = "pulsar.client.proxyProtocol"

# Besides service.url (which the option lists name first).
CLIENT_OPTIONS = (
    OPERATION_TIMEOUT_MS,
    CONNECTION_TIMEOUT_MS,
    KEEP_ALIVE_SECONDS,
    LISTENER_NAME,
    AUTH_PLUGIN,
    AUTH_PARAMS,
    TLS_TRUST_CERTS,
    TLS_ALLOW_INSECURE,
    TLS_VERIFY_HOSTNAME,
    TLS_CERT,
    TLS_KEY,
    PROXY_SERVICE_URL,
    PROXY_PROTOCOL,
)

# Java client settings accepted for compatibility, with a warning that they change nothing:
# thread pools, statistics, JVM key stores, and behaviour this client has built in.
CLIENT_WITHOUT_EFFECT = tuple(
    "pulsar.client." + name
    for name in (
        "authParamMap",
        "concurrentLookupRequest",
        "connectionMaxIdleSeconds",
        "connectionsPerBroker",
        "description",
        "dnsLookupBindAddress",
        "dnsLookupBindPort",
        "dnsServerAddresses",
        "enableBusyWait",
        "enableTransaction",
        "initialBackoffIntervalNanos",
        "lookupTimeoutMs",
        "maxBackoffIntervalNanos",
        "maxLookupRedirects",
        "maxLookupRequest",
        "maxNumberOfRejectedRequestPerConnection",
        "memoryLimitBytes",
        "numIoThreads",
        "numListenerThreads",
        "readTimeoutMs",
        "requestTimeoutMs",
        "socks5ProxyAddress",
        "socks5ProxyPassword",
        "socks5ProxyUsername",
        "sslFactoryPlugin",
        "sslFactoryPluginParams",
        "sslProvider",
        "statsIntervalSeconds",
        "tlsCiphers",
        "tlsKeyStorePassword",
        "tlsKeyStorePath",
        "tlsKeyStoreType",
        "tlsProtocols",
        "tlsTrustStorePassword",
        "tlsTrustStorePath",
        "tlsTrustStoreType",
        "useKeyStoreTls",
        "useTcpNoDelay",
        "useTls",
        "autoCertRefreshSeconds",
        "lookupProperties",
    )
)


def client_settings(opts: OptionValues) -> ClientSettings:
    """Validate and build the client settings from the ``pulsar.client.*`` options."""
    url = opts.required(SERVICE_URL, "the Pulsar broker URL, e.g. pulsar://localhost:6650")
    parse_service_url(url)
    auth = parse_authentication(
        opts.get(AUTH_PLUGIN),
        opts.get(AUTH_PARAMS),
        plugin_option=AUTH_PLUGIN,
        params_option=AUTH_PARAMS,
    )
    listener = opts.get(LISTENER_NAME)
    tls = _tls_settings(opts, url, auth)
    return ClientSettings(
        service_url=url,
        operation_timeout=opts.positive_int(OPERATION_TIMEOUT_MS, 30_000) / 1000,
        connection=ConnectionSettings(
            tls=tls,
            auth=auth,
            connect_timeout=opts.positive_int(CONNECTION_TIMEOUT_MS, 10_000) / 1000,
            keepalive_interval=float(opts.positive_int(KEEP_ALIVE_SECONDS, 30)),
            sni_proxy=_sni_proxy(opts, tls),
        ),
        listener_name=listener.strip() if listener and listener.strip() else None,
    )


def _sni_proxy(opts: OptionValues, tls: TlsSettings | None) -> BrokerAddress | None:
    """The SNI proxy every connection goes through (``proxyProtocol=SNI``), if any."""
    url, protocol = opts.get(PROXY_SERVICE_URL), opts.get(PROXY_PROTOCOL)
    if not url and not protocol:
        return None
    if not url or (protocol or "").strip().upper() != "SNI":
        raise ConfigurationError(
            f"options {PROXY_SERVICE_URL!r} and {PROXY_PROTOCOL!r} go together, and the only "
            "proxy protocol is SNI: give both, e.g. pulsar+ssl://proxy:4443 and SNI"
        )
    if tls is None:
        raise ConfigurationError(
            f"option {PROXY_SERVICE_URL!r}: SNI routing needs TLS; use pulsar+ssl:// in "
            f"{SERVICE_URL!r}"
        )
    try:
        return parse_service_url(url)[0]
    except ConfigurationError as exc:
        raise ConfigurationError(f"option {PROXY_SERVICE_URL!r}: {exc}") from exc


def _tls_settings(opts: OptionValues, url: str, auth: Authentication) -> TlsSettings | None:
    given = [name for name in (TLS_TRUST_CERTS, TLS_CERT, TLS_KEY) if opts.get(name)]
    if not is_tls_url(url):
        if given or isinstance(auth, TlsAuthentication):
            what = ", ".join(given) or f"{AUTH_PLUGIN} AuthenticationTls"
            raise ConfigurationError(
                f"{what} need TLS, but {SERVICE_URL} uses pulsar://; use pulsar+ssl://host:6651"
            )
        return None
    cert, key = _client_identity(opts, auth)
    settings = TlsSettings(
        trust_certs_file=opts.get(TLS_TRUST_CERTS) or None,
        allow_insecure=opts.boolean(TLS_ALLOW_INSECURE, default=False),
        verify_hostname=opts.boolean(TLS_VERIFY_HOSTNAME, default=True),
        cert_file=cert,
        key_file=key,
    )
    from pulsar_spark.client.tls import client_context

    client_context(settings)  # opens and checks every file now, not in a task
    return settings


def _client_identity(opts: OptionValues, auth: Authentication) -> tuple[str | None, str | None]:
    """The client certificate and key: from the TLS options or the AuthenticationTls params."""
    cert, key = opts.get(TLS_CERT) or None, opts.get(TLS_KEY) or None
    if (cert is None) != (key is None):
        raise ConfigurationError(
            f"options {TLS_CERT!r} and {TLS_KEY!r} go together: give both or neither"
        )
    if isinstance(auth, TlsAuthentication):
        if cert is not None and (cert, key) != (auth.cert_file, auth.key_file):
            raise ConfigurationError(
                f"options {TLS_CERT!r}/{TLS_KEY!r} and the AuthenticationTls parameters in "
                f"{AUTH_PARAMS!r} name different files; give the client certificate once"
            )
        return auth.cert_file, auth.key_file
    return cert, key
