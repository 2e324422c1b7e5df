"""Write options (``df.write`` and ``df.writeStream``): parsed once into a frozen object.

Checked when the DataFrame is defined, like the read options: every error names the option and
what it accepts, unknown options are refused, the Java producer's settings that mean nothing
here are accepted with a warning, and those it would not honour (routing) are refused.
Encryption: :mod:`pulsar_spark.source.crypto_options`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pulsar_spark.client.failover import Clusters
from pulsar_spark.client.settings import ClientSettings, ProducerSettings
from pulsar_spark.client.transaction_registry import REGISTRY_TOPIC
from pulsar_spark.common.option_values import (
    ADMIN_SETTINGS,
    ADMIN_URL,
    TOPIC,
    OptionValues,
    Unsupported,
)
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol.routing import HASHING_SCHEMES, JAVA_STRING_HASH
from pulsar_spark.source.client_options import (
    CLIENT_OPTIONS,
    CLIENT_UNSUPPORTED,
    CLIENT_WITHOUT_EFFECT,
    SERVICE_URL,
    client_settings,
)
from pulsar_spark.source.crypto_options import (
    ENCRYPTION_KEYS,
    PUBLIC_KEY_FILES,
    producer_encryption,
)
from pulsar_spark.source.failover_options import FAILOVER_OPTIONS, write_clusters
from pulsar_spark.source.schema_options import (
    DEFINITION,
    KEY_SCHEMA,
    VALUE_SCHEMA,
    WriteSchemas,
    schema_format,
)
from pulsar_spark.topic import TopicName, full_topic_name

PRODUCER_COMPRESSION = "pulsar.producer.compressionType"
PRODUCER_BATCHING = "pulsar.producer.batchingEnabled"
PRODUCER_BATCH_MESSAGES = "pulsar.producer.batchingMaxMessages"
PRODUCER_BATCH_BYTES = "pulsar.producer.batchingMaxBytes"
PRODUCER_BATCH_DELAY = "pulsar.producer.batchingMaxPublishDelayMicros"
PRODUCER_MAX_PENDING = "pulsar.producer.maxPendingMessages"
PRODUCER_SEND_TIMEOUT = "pulsar.producer.sendTimeoutMs"
PRODUCER_ROUTING_MODE = "pulsar.producer.messageRoutingMode"
# Java's MessageRoutingMode names this writer follows (CustomPartition needs a Java class).
ROUND_ROBIN_PARTITION = "RoundRobinPartition"
SINGLE_PARTITION = "SinglePartition"
ROUTING_MODES = (ROUND_ROBIN_PARTITION, SINGLE_PARTITION)
PRODUCER_HASHING_SCHEME = "pulsar.producer.hashingScheme"
TRANSACTIONAL = "transactional"
TRANSACTION_TIMEOUT_MS = "transactionTimeoutMs"
TRANSACTION_REGISTRY_TOPIC = "transactionRegistryTopic"
ENABLE_TRANSACTION = "pulsar.client.enableTransaction"

WRITE_OPTIONS = (
    SERVICE_URL,
    TOPIC,
    PRODUCER_COMPRESSION,
    PRODUCER_BATCHING,
    PRODUCER_BATCH_MESSAGES,
    PRODUCER_BATCH_BYTES,
    PRODUCER_BATCH_DELAY,
    PRODUCER_MAX_PENDING,
    PRODUCER_SEND_TIMEOUT,
    PRODUCER_ROUTING_MODE,
    PRODUCER_HASHING_SCHEME,
    ENCRYPTION_KEYS,
    PUBLIC_KEY_FILES,
    VALUE_SCHEMA,
    VALUE_SCHEMA + DEFINITION,
    KEY_SCHEMA,
    KEY_SCHEMA + DEFINITION,
    TRANSACTIONAL,
    TRANSACTION_TIMEOUT_MS,
    TRANSACTION_REGISTRY_TOPIC,
    *CLIENT_OPTIONS,
    *FAILOVER_OPTIONS,
)
# Java producer settings accepted for compatibility, with a warning that they change nothing.
PRODUCER_WITHOUT_EFFECT = tuple(
    "pulsar.producer." + name
    for name in (
        "autoUpdatePartitions",
        "autoUpdatePartitionsIntervalSeconds",
        "batchingPartitionSwitchFrequencyByPublishDelay",
        "blockIfQueueFull",
        "chunkMaxMessageSize",
        "chunkingEnabled",
        "compressMinMsgBodySize",
        "initialSequenceId",
        "lazyStartPartitionedProducers",
        "maxPendingMessagesAcrossPartitions",
        "multiSchema",
        "producerName",
        "properties",
        "topicName",
    )
)
_KEY_FILES = (
    f"give each key's public key file in {PUBLIC_KEY_FILES!r} ('name=path,...') and the names "
    f"in {ENCRYPTION_KEYS!r}"
)
# Java producer settings refused: ignoring them would send plain text, or route messages
# otherwise than asked.
PRODUCER_UNSUPPORTED = (
    Unsupported(
        "pulsar.producer.cryptoKeyReader", f"a Java class cannot be loaded here; {_KEY_FILES}"
    ),
    Unsupported(
        "pulsar.producer.cryptoFailureAction",
        "a message that cannot be encrypted fails the write; it is never sent in plain text",
        ("FAIL",),
    ),
    Unsupported(
        "pulsar.producer.accessMode",
        "every task opens its own producer in Shared mode; no other producer would be kept off "
        "the topic",
        ("Shared",),
    ),
    Unsupported(
        "pulsar.producer.batcherBuilder",
        "a batch would hold messages of several keys, which Key_Shared consumers receive "
        f"together; set {PRODUCER_BATCHING!r} to false to send each message in its own entry",
        ("DEFAULT",),
    ),
    Unsupported(
        "pulsar.producer.customMessageRouter",
        f"messages would be routed as by the Java producer's own routers: keyed ones by the "
        f"hash {PRODUCER_HASHING_SCHEME!r} names, the others as {PRODUCER_ROUTING_MODE!r} says",
    ),
)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    client: ClientSettings
    topic: str | None  # None: every row names its topic in a `topic` column
    producer: ProducerSettings
    value_schema: str | None = None  # a valueSchema format; None: bytes
    key_schema: str | None = None  # a keySchema format; None: the key as it is
    definitions: tuple[tuple[str, str], ...] = ()  # (option, its Avro schema text)
    schemas: WriteSchemas | None = None  # resolved against the DataFrame's schema
    transaction_timeout_ms: int | None = None  # None: not transactional
    transaction_registry: str | None = None  # the registry topic of a transactional write
    checkpoint: str | None = None  # a streaming query's checkpointLocation
    routing_mode: str = ROUND_ROBIN_PARTITION  # where unkeyed rows go, by Java's mode names
    hashing_scheme: str = JAVA_STRING_HASH  # how keyed rows are hashed, by Java's scheme names
    failover: Clusters | None = None  # the clusters to go on writing to; None: service.url only

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        from pulsar_spark.protocol.compression import codec_from_name

        opts = OptionValues(options)
        opts.refuse_unknown(
            WRITE_OPTIONS,
            "writing to",
            (*CLIENT_WITHOUT_EFFECT, *PRODUCER_WITHOUT_EFFECT, ADMIN_URL),
            (*CLIENT_UNSUPPORTED, *PRODUCER_UNSUPPORTED),
            prefixes_without_effect=(ADMIN_SETTINGS,),
        )
        topic = opts.get(TOPIC)
        if topic is not None and "," in topic:
            raise ConfigurationError(
                "option 'topic' takes one topic; to write to several, leave it out and give "
                "each row a 'topic' column"
            )
        try:
            codec = codec_from_name(opts.get(PRODUCER_COMPRESSION) or "none")
        except ConfigurationError as exc:
            raise ConfigurationError(f"option {PRODUCER_COMPRESSION!r}: {exc}") from exc
        definitions = tuple(
            (option, text)
            for option in (VALUE_SCHEMA, KEY_SCHEMA)
            if (text := opts.get(option + DEFINITION)) is not None
        )
        client = client_settings(opts)
        return cls(
            transaction_timeout_ms=_transaction_timeout(opts),
            transaction_registry=_transaction_registry(opts, topic),
            checkpoint=opts.get("checkpointLocation"),
            routing_mode=_routing_mode(opts),
            hashing_scheme=_hashing_scheme(opts),
            value_schema=schema_format(VALUE_SCHEMA, opts.get(VALUE_SCHEMA)),
            key_schema=schema_format(KEY_SCHEMA, opts.get(KEY_SCHEMA)),
            definitions=definitions,
            client=client,
            failover=write_clusters(
                opts, client, transactional=opts.boolean(TRANSACTIONAL, default=False)
            ),
            topic=full_topic_name(topic) if topic is not None else None,
            producer=ProducerSettings(
                codec=codec,
                batching=opts.boolean(PRODUCER_BATCHING, default=True),
                batch_max_messages=opts.positive_int(PRODUCER_BATCH_MESSAGES, 1000),
                batch_max_bytes=opts.positive_int(PRODUCER_BATCH_BYTES, 128 * 1024),
                # µs to whole ms, rounded up: a delay below 1 ms must not become 0 (no batching)
                batch_max_delay_ms=-(-opts.positive_int(PRODUCER_BATCH_DELAY, 10_000) // 1000),
                max_pending_messages=opts.positive_int(PRODUCER_MAX_PENDING, 10_000),
                send_timeout=opts.positive_int(PRODUCER_SEND_TIMEOUT, 30_000) / 1000,
                encryption=producer_encryption(opts),
            ),
        )


def _transaction_registry(opts: OptionValues, topic: str | None) -> str | None:
    """The topic where a transactional write's tasks announce their transactions: the option,
    or :data:`REGISTRY_TOPIC` in the written topic's namespace (``public/default`` when the
    rows name their topics); None for a plain write."""
    given = opts.get(TRANSACTION_REGISTRY_TOPIC)
    if not opts.boolean(TRANSACTIONAL, default=False):
        if given is not None:
            raise ConfigurationError(
                f"option {TRANSACTION_REGISTRY_TOPIC!r} applies to transactional writes only: "
                f"set {TRANSACTIONAL!r} to true, or leave it out"
            )
        return None
    if given is not None:
        name = TopicName.parse(given)
        if name.partition_index >= 0:
            raise ConfigurationError(
                f"option {TRANSACTION_REGISTRY_TOPIC!r} names a partition ({given!r}): give "
                "a non-partitioned topic"
            )
        return name.full_name
    namespace = TopicName.parse(topic).namespace_name if topic is not None else "public/default"
    return f"persistent://{namespace}/{REGISTRY_TOPIC}"


def _routing_mode(opts: OptionValues) -> str:
    """``pulsar.producer.messageRoutingMode``, by Java's name (any case)."""
    return _java_name(
        opts,
        PRODUCER_ROUTING_MODE,
        ROUTING_MODES,
        " (keyed rows go by key hash in both; CustomPartition needs a Java router class, which "
        "cannot be loaded here)",
    )


def _hashing_scheme(opts: OptionValues) -> str:
    """``pulsar.producer.hashingScheme``, by Java's name (any case)."""
    return _java_name(opts, PRODUCER_HASHING_SCHEME, HASHING_SCHEMES)


def _java_name(opts: OptionValues, option: str, names: tuple[str, str], why: str = "") -> str:
    """The one of ``names`` (the default first) that ``option`` gives in any case."""
    text = opts.get(option)
    if text is None:
        return names[0]
    for name in names:
        if text.strip().lower() == name.lower():
            return name
    raise ConfigurationError(
        f"option {option!r} must be {names[0]!r} or {names[1]!r}{why}, got {text!r}"
    )


def _transaction_timeout(opts: OptionValues) -> int | None:
    """The timeout (ms) of a transactional write's transactions; None for a plain write."""
    timeout = opts.positive_int(TRANSACTION_TIMEOUT_MS, 60_000)
    if not opts.boolean(TRANSACTIONAL, default=False):
        if opts.has(TRANSACTION_TIMEOUT_MS):
            raise ConfigurationError(
                f"option {TRANSACTION_TIMEOUT_MS!r} applies to transactional writes only: set "
                f"{TRANSACTIONAL!r} to true, or leave it out"
            )
        return None
    if (opts.get(ENABLE_TRANSACTION) or "").strip().lower() == "false":
        raise ConfigurationError(
            f"options {TRANSACTIONAL!r}=true and {ENABLE_TRANSACTION!r}=false contradict each "
            f"other: {TRANSACTIONAL!r} alone turns transactions on; leave the other out"
        )
    return timeout
