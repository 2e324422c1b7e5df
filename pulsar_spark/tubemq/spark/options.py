"""Options of the ``tubemq`` format, parsed once into frozen objects.

Checked when the DataFrame is defined; every error names the option and what it accepts, and
unknown options are refused (:class:`~pulsar_spark.common.option_values.OptionValues`).

``startingOffsets`` / ``endingOffsets`` take ``earliest``, ``latest`` or a JSON object from
partition key (``brokerId:topic:partitionId``) to a store offset; -2 in the JSON means
earliest and -1 latest, as in Spark's Kafka source. A start is inclusive, an end exclusive.
Partitions the JSON does not name start at the earliest offset and end at the latest.

``filterConds`` takes message types (the ``$msgType$`` a producer sets) separated by commas,
as the Java consumer's ``subscribe(topic, filterConds, ...)`` does: a read then returns only
the messages of those types. ``minPartitions`` cuts each partition's range into several tasks
(:mod:`pulsar_spark.tubemq.spark.reader`).

``tlsEnable`` (the Java client's name) turns TLS on for every connection, to the masters'
and brokers' TLS ports; the CAs to trust come as a PEM file (``tlsTrustCertsFilePath``, the
system's when absent) and a client certificate, which a TubeMQ server with TLS asks for, as
PEM files (``tlsCertificateFilePath``, ``tlsKeyFilePath``): the Java client's JVM trust and
key stores are refused, pointing at these. ``usrName`` and ``usrPassWord`` (the Java client's
``setAuthenticInfo``) sign every call; the password shows in no error, log or plan.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from pulsar_spark.common.address import BrokerAddress
from pulsar_spark.common.bounds import Earliest, Latest, bound_or_json
from pulsar_spark.common.option_values import TOPIC, OptionValues, Unsupported
from pulsar_spark.common.tls import TlsSettings, client_context
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.tubemq.client.connection import NO_SECURITY, TubeMQSecurity
from pulsar_spark.tubemq.wire.auth import Credentials

MASTER_ADDRESSES = "master.addresses"
CONSUMER_GROUP = "consumerGroup"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MAX_MESSAGES_PER_TRIGGER = "maxMessagesPerTrigger"
REQUEST_TIMEOUT_MS = "requestTimeoutMs"
RETRY_TIMEOUT_MS = "retryTimeoutMs"
FILTER_CONDS = "filterConds"
MIN_PARTITIONS = "minPartitions"
TLS_ENABLE = "tlsEnable"
TLS_TRUST_CERTS = "tlsTrustCertsFilePath"
TLS_CERT = "tlsCertificateFilePath"
TLS_KEY = "tlsKeyFilePath"
TLS_VERIFY_HOSTNAME = "tlsHostnameVerificationEnable"
USER_NAME = "usrName"
PASSWORD = "usrPassWord"

SECURITY_OPTIONS = (
    TLS_ENABLE,
    TLS_TRUST_CERTS,
    TLS_CERT,
    TLS_KEY,
    TLS_VERIFY_HOSTNAME,
    USER_NAME,
    PASSWORD,
)
_PEM = (
    f"JVM key and trust stores are not read; give the CAs to trust as a PEM file in "
    f"{TLS_TRUST_CERTS!r} and the client certificate and key as PEM files in {TLS_CERT!r} "
    f"and {TLS_KEY!r}"
)
# The Java client's JVM stores, refused with the PEM options they map to.
SECURITY_UNSUPPORTED = tuple(
    Unsupported(name, _PEM)
    for name in (
        "tlsTrustStorePath",
        "tlsTrustStorePassword",
        "tlsKeyStorePath",
        "tlsKeyStorePassword",
    )
)

READ_OPTIONS = (
    MASTER_ADDRESSES,
    TOPIC,
    CONSUMER_GROUP,
    STARTING_OFFSETS,
    ENDING_OFFSETS,
    FAIL_ON_DATA_LOSS,
    MAX_MESSAGES_PER_TRIGGER,
    REQUEST_TIMEOUT_MS,
    RETRY_TIMEOUT_MS,
    FILTER_CONDS,
    MIN_PARTITIONS,
    *SECURITY_OPTIONS,
)
WRITE_OPTIONS = (MASTER_ADDRESSES, TOPIC, REQUEST_TIMEOUT_MS, *SECURITY_OPTIONS)

# The most filter items a consumer may set on a topic, and the longest item: what the Java
# client's subscribe() and the master's and broker's web APIs accept. The brokers' register
# call checks neither.
MAX_FILTER_ITEMS = 500
MAX_FILTER_ITEM_LENGTH = 256

EARLIEST_IN_JSON = -2
LATEST_IN_JSON = -1


@dataclass(frozen=True, slots=True)
class PerPartition:
    """Offsets per partition key; -2 earliest, -1 latest; unnamed partitions use ``default``."""

    offsets: tuple[tuple[str, int], ...]
    default: Earliest | Latest

    def for_partition(self, key: str) -> int | Earliest | Latest:
        value = dict(self.offsets).get(key)
        if value is None:
            return self.default
        if value == EARLIEST_IN_JSON:
            return Earliest()
        if value == LATEST_IN_JSON:
            return Latest()
        return value


OffsetSpec = Earliest | Latest | PerPartition


class Mode(enum.Enum):
    BATCH = "batch"
    STREAM = "stream"


@dataclass(frozen=True, slots=True)
class TubeMQReadOptions:
    masters: tuple[BrokerAddress, ...]
    topic: str
    group: str
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    timeout: float
    retry_for: float
    max_messages_per_trigger: int | None
    filters: tuple[str, ...] = ()
    min_partitions: int | None = None
    security: TubeMQSecurity = NO_SECURITY

    @classmethod
    def parse(cls, options: Mapping[str, str], *, mode: Mode | None) -> TubeMQReadOptions:
        """Parse ``options`` for a batch or stream read; ``mode`` None checks only the rules
        both share (Spark asks for the schema before it says which the read is)."""
        opts = OptionValues(options)
        opts.refuse_unknown(
            READ_OPTIONS, "reading from", unsupported=SECURITY_UNSUPPORTED, system="TubeMQ"
        )
        topic = _topic(opts)
        stream = mode is Mode.STREAM
        starting = _offsets(opts, STARTING_OFFSETS, topic, Latest() if stream else Earliest())
        if mode is Mode.BATCH and isinstance(starting, Latest):
            raise ConfigurationError(
                f"option {STARTING_OFFSETS!r}: 'latest' would read nothing in a batch query; "
                "use 'earliest' or per-partition offsets"
            )
        if stream and opts.has(ENDING_OFFSETS):
            raise ConfigurationError(
                f"option {ENDING_OFFSETS!r} is for batch reads only; a stream has no end"
            )
        if mode is Mode.BATCH and opts.has(MAX_MESSAGES_PER_TRIGGER):
            raise ConfigurationError(
                f"option {MAX_MESSAGES_PER_TRIGGER!r} applies to streaming reads only"
            )
        ending = _offsets(opts, ENDING_OFFSETS, topic, Latest())
        if isinstance(ending, Earliest):
            raise ConfigurationError(
                f"option {ENDING_OFFSETS!r}: 'earliest' would read nothing; use 'latest' or "
                "per-partition offsets"
            )
        group = opts.get(CONSUMER_GROUP)
        return cls(
            masters=parse_masters(opts),
            topic=topic,
            group=group.strip() if group and group.strip() else generated_group(),
            starting=starting,
            ending=ending,
            fail_on_data_loss=opts.boolean(FAIL_ON_DATA_LOSS, default=True),
            timeout=opts.positive_int(REQUEST_TIMEOUT_MS, 30_000) / 1000,
            retry_for=opts.positive_int(RETRY_TIMEOUT_MS, 120_000) / 1000,
            max_messages_per_trigger=(
                opts.positive_int(MAX_MESSAGES_PER_TRIGGER, 1)
                if opts.has(MAX_MESSAGES_PER_TRIGGER)
                else None
            ),
            filters=_filters(opts),
            min_partitions=(
                opts.positive_int(MIN_PARTITIONS, 1) if opts.has(MIN_PARTITIONS) else None
            ),
            security=parse_security(opts),
        )


@dataclass(frozen=True, slots=True)
class TubeMQWriteOptions:
    masters: tuple[BrokerAddress, ...]
    topic: str
    timeout: float
    security: TubeMQSecurity = NO_SECURITY

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> TubeMQWriteOptions:
        opts = OptionValues(options)
        opts.refuse_unknown(
            WRITE_OPTIONS, "writing to", unsupported=SECURITY_UNSUPPORTED, system="TubeMQ"
        )
        return cls(
            masters=parse_masters(opts),
            topic=_topic(opts),
            timeout=opts.positive_int(REQUEST_TIMEOUT_MS, 30_000) / 1000,
            security=parse_security(opts),
        )


def generated_group() -> str:
    """A consumer group of its own for a query that names none."""
    return f"pulsar_spark_{uuid.uuid4().hex[:16]}"


def parse_masters(opts: OptionValues) -> tuple[BrokerAddress, ...]:
    text = opts.required(MASTER_ADDRESSES, "the TubeMQ master(s) as host:port[,host:port]")
    masters = []
    for item in text.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(
                f"option {MASTER_ADDRESSES!r}: {item.strip()!r} is not host:port "
                f"(expected host:port[,host:port], got {text!r})"
            )
        masters.append(BrokerAddress(host, int(port)))
    return tuple(masters)


def parse_security(opts: OptionValues) -> TubeMQSecurity:
    """TLS and credentials from their options (see the module); the TLS files are opened and
    checked now, on the driver."""
    return TubeMQSecurity(tls=_tls(opts), credentials=_credentials(opts))


def _tls(opts: OptionValues) -> TlsSettings | None:
    if not opts.boolean(TLS_ENABLE, default=False):
        given = [
            name
            for name in (TLS_TRUST_CERTS, TLS_CERT, TLS_KEY, TLS_VERIFY_HOSTNAME)
            if opts.has(name)
        ]
        if given:
            raise ConfigurationError(
                f"option(s) {', '.join(given)} need TLS: set {TLS_ENABLE!r} to true (and "
                f"name the masters' TLS ports in {MASTER_ADDRESSES!r})"
            )
        return None
    cert, key = opts.get(TLS_CERT) or None, opts.get(TLS_KEY) or None
    if (cert is None) != (key is None):
        raise ConfigurationError(
            f"options {TLS_CERT!r} and {TLS_KEY!r} go together: give both or neither"
        )
    settings = TlsSettings(
        trust_certs_file=opts.get(TLS_TRUST_CERTS) or None,
        verify_hostname=opts.boolean(TLS_VERIFY_HOSTNAME, default=True),
        cert_file=cert,
        key_file=key,
    )
    client_context(settings)
    return settings


def _credentials(opts: OptionValues) -> Credentials | None:
    user, password = opts.get(USER_NAME), opts.get(PASSWORD)
    if user is None and password is None:
        return None
    if not user or not user.strip():
        raise ConfigurationError(
            f"option {USER_NAME!r} (the TubeMQ user name) is needed, not blank, with {PASSWORD!r}"
        )
    if not password or not password.strip():
        raise ConfigurationError(
            f"option {PASSWORD!r} (the password of TubeMQ user {user.strip()!r}) is needed, "
            f"not blank, with {USER_NAME!r}"
        )
    return Credentials(user.strip(), password)


def _topic(opts: OptionValues) -> str:
    topic = opts.required(TOPIC, "the TubeMQ topic to read or write")
    if "," in topic or ":" in topic or any(c.isspace() for c in topic):
        raise ConfigurationError(f"option {TOPIC!r} takes one TubeMQ topic name, got {topic!r}")
    return topic


def _filters(opts: OptionValues) -> tuple[str, ...]:
    """The message types of ``filterConds``, sorted and each once (the Java client keeps
    them in a TreeSet); () when the option is absent."""
    text = opts.get(FILTER_CONDS)
    if text is None:
        return ()
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise ConfigurationError(
            f"option {FILTER_CONDS!r} takes message types separated by commas, none of them "
            f"blank; got {text!r}"
        )
    for item in items:
        if len(item) > MAX_FILTER_ITEM_LENGTH:
            raise ConfigurationError(
                f"option {FILTER_CONDS!r}: a message type is at most {MAX_FILTER_ITEM_LENGTH} "
                f"characters long in TubeMQ; {item[:40]!r}... has {len(item)}"
            )
        if "=" in item:
            raise ConfigurationError(
                f"option {FILTER_CONDS!r}: {item!r} cannot be a message type (no message "
                "attribute holds '=')"
            )
    unique = tuple(sorted(set(items)))
    if len(unique) > MAX_FILTER_ITEMS:
        raise ConfigurationError(
            f"option {FILTER_CONDS!r} names {len(unique)} message types; TubeMQ takes at most "
            f"{MAX_FILTER_ITEMS} filter items for a topic"
        )
    return unique


def _offsets(opts: OptionValues, name: str, topic: str, default: Earliest | Latest) -> OffsetSpec:
    text = opts.get(name)
    if text is None or not text.strip():
        return default
    parsed = bound_or_json(name, text, "partition key -> store offset", f'{{"1:{topic}:0": 0}}')
    if not isinstance(parsed, dict):
        return parsed
    offsets = []
    for key, offset in parsed.items():
        parts = str(key).split(":")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].isdigit():
            raise ConfigurationError(
                f"option {name!r}: {key!r} is not a partition key brokerId:topic:partitionId"
            )
        if parts[1] != topic:
            raise ConfigurationError(
                f"option {name!r}: partition {key!r} is not of topic {topic!r}"
            )
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST_IN_JSON:
            raise ConfigurationError(
                f"option {name!r}: the offset of {key!r} must be an integer >= 0, or -2 "
                f"(earliest) or -1 (latest); got {offset!r}"
            )
        offsets.append((str(key), offset))
    unnamed = Earliest() if name == STARTING_OFFSETS else Latest()
    return PerPartition(tuple(sorted(offsets)), unnamed)
