"""The ``pulsar.client.*`` options: service URL, TLS, authentication, timeouts, listener.

Names and parameter formats are the Java client's (``ClientConfigurationData``), as
streamnative/pulsar-spark and Flink's connector pass them through, so a job moved from them
keeps its options. Everything is checked when the DataFrame is defined: files are opened,
plugins configured, contradictions refused, and Java settings that would silently weaken the
connection (JVM key stores, TLS versions and ciphers, proxies) refused. No error shows the
value of ``authParams``.
"""

from __future__ import annotations

from pulsar_spark.client.auth import Authentication, TlsAuthentication
from pulsar_spark.client.auth_plugins import parse_authentication
from pulsar_spark.client.settings import ClientSettings, ConnectionSettings
from pulsar_spark.common.address import BrokerAddress, is_tls_url, parse_service_url
from pulsar_spark.common.option_values import OptionValues, Unsupported
from pulsar_spark.common.tls import TlsSettings
from pulsar_spark.errors import ConfigurationError

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
USE_TLS = "pulsar.client.useTls"

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
    USE_TLS,
)

# Java client settings accepted for compatibility, with a warning that they change nothing:
# thread pools, statistics, the type of a JVM store (the stores themselves are refused), and
# behaviour this client has built in.
CLIENT_WITHOUT_EFFECT = tuple(
    "pulsar.client." + name
    for name in (
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
        "sslProvider",
        "statsIntervalSeconds",
        "tlsKeyStoreType",
        "tlsTrustStoreType",
        "useTcpNoDelay",
        "autoCertRefreshSeconds",
        "lookupProperties",
    )
)

_PEM_TRUST = f"give the CAs to trust as a PEM file in {TLS_TRUST_CERTS!r}"
_PEM_IDENTITY = f"give the client certificate and key as PEM files in {TLS_CERT!r} and {TLS_KEY!r}"
_NO_SOCKS = "connections would go straight to the brokers, not through the SOCKS5 proxy"
_NO_PLUGIN = (
    "TLS would be set up from the PEM files of the tls*FilePath options (or the system's "
    "trusted CAs), not by an SSL factory plugin"
)
# Java client settings refused: ignoring them would weaken what the job asked for.
CLIENT_UNSUPPORTED = (
    Unsupported(
        "pulsar.client.authParamMap",
        "the connection would not authenticate with these parameters; give them in "
        f"{AUTH_PARAMS!r} (a JSON object)",
    ),
    Unsupported("pulsar.client.socks5ProxyAddress", _NO_SOCKS),
    Unsupported("pulsar.client.socks5ProxyPassword", _NO_SOCKS),
    Unsupported("pulsar.client.socks5ProxyUsername", _NO_SOCKS),
    Unsupported(
        "pulsar.client.sslFactoryPlugin",
        _NO_PLUGIN,
        ("org.apache.pulsar.common.util.DefaultPulsarSslFactory",),
    ),
    Unsupported("pulsar.client.sslFactoryPluginParams", _NO_PLUGIN, ("",)),
    Unsupported(
        "pulsar.client.tlsCiphers",
        "the connection would offer Python's default cipher suites, not only those listed",
    ),
    Unsupported(
        "pulsar.client.tlsProtocols",
        "the connection would accept every TLS version Python's default allows (TLSv1.2 and "
        "later), not only those listed",
    ),
    Unsupported(
        "pulsar.client.tlsTrustStorePath",
        "JVM trust stores are not read, so the broker's certificate would be checked against "
        f"the system's trusted CAs instead; {_PEM_TRUST}",
    ),
    Unsupported(
        "pulsar.client.tlsTrustStorePassword",
        f"JVM trust stores are not read; {_PEM_TRUST}",
    ),
    Unsupported(
        "pulsar.client.tlsKeyStorePath",
        "JVM key stores are not read, so no client certificate would be presented; "
        + _PEM_IDENTITY,
    ),
    Unsupported(
        "pulsar.client.tlsKeyStorePassword",
        f"JVM key stores are not read; {_PEM_IDENTITY}",
    ),
    Unsupported(
        "pulsar.client.useKeyStoreTls",
        f"JVM key and trust stores are not read; {_PEM_TRUST}, and {_PEM_IDENTITY}",
        ("false",),
    ),
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
    # The URL's scheme decides, as in Java, where useTls=false does not turn TLS off; but
    # useTls=true with a pulsar:// URL asks for TLS, which Java does and plain text is not.
    if opts.boolean(USE_TLS, default=False):
        given.append(USE_TLS)
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
    from pulsar_spark.common.tls import client_context

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
