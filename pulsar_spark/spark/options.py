"""Option names, defaults and validation: parsed once into frozen objects.

Spark hands a data source its options as strings in a case-insensitive map. Everything is
checked here, when the DataFrame is defined, and every error names the option and what it
accepts. Unknown options are refused (a misspelt option silently ignored is a wrong result),
except the few that Spark itself adds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pulsar_spark.client.reader import DEFAULT_QUEUE_SIZE
from pulsar_spark.client.settings import ClientSettings, ProducerSettings
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.spark.client_options import (
    CLIENT_OPTIONS,
    CLIENT_WITHOUT_EFFECT,
    SERVICE_URL,
    client_settings,
)
from pulsar_spark.spark.option_values import OptionValues
from pulsar_spark.spark.positions import (
    Bound,
    Earliest,
    Latest,
    PositionSpec,
    Specific,
    parse_offsets,
    parse_time,
)
from pulsar_spark.topic import TopicName, full_topic_name

TOPIC = "topic"
TOPICS = "topics"
TOPICS_PATTERN = "topicsPattern"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_TIME = "startingTime"
ENDING_TIME = "endingTime"
POLL_TIMEOUT_MS = "pollTimeoutMs"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MAX_MESSAGES_PER_TRIGGER = "maxMessagesPerTrigger"
RECEIVER_QUEUE_SIZE = "pulsar.reader.receiverQueueSize"

READ_OPTIONS = (
    SERVICE_URL,
    TOPIC,
    TOPICS,
    TOPICS_PATTERN,
    STARTING_OFFSETS,
    ENDING_OFFSETS,
    STARTING_TIME,
    ENDING_TIME,
    POLL_TIMEOUT_MS,
    FAIL_ON_DATA_LOSS,
    MAX_MESSAGES_PER_TRIGGER,
    RECEIVER_QUEUE_SIZE,
    *CLIENT_OPTIONS,
)
# Java reader settings accepted for compatibility, with a warning that they change nothing.
READER_WITHOUT_EFFECT = tuple(
    "pulsar.reader." + name
    for name in (
        "autoUpdatePartitions",
        "autoUpdatePartitionsIntervalSeconds",
        "cryptoFailureAction",
        "cryptoKeyReader",
        "keyHashRanges",
        "poolMessages",
        "readCompacted",
        "readerListener",
        "readerName",
        "resetIncludeHead",
        "startMessageFromRollbackDurationInSec",
        "subscriptionInitialPosition",
        "subscriptionMode",
        "subscriptionName",
        "subscriptionRolePrefix",
        "topicNames",
        "expireTimeOfIncompleteChunkedMessageMillis",
        "maxPendingChunkedMessage",
        "autoAckOldestChunkedMessageOnQueueFull",
    )
)


@dataclass(frozen=True, slots=True)
class TopicSelection:
    """Exactly one of: topics by name, or a regex over one namespace."""

    names: tuple[str, ...] = ()
    pattern: str | None = None
    pattern_namespace: str | None = None


@dataclass(frozen=True, slots=True)
class ReadOptions:
    client: ClientSettings
    topics: TopicSelection
    starting: PositionSpec
    ending: PositionSpec
    poll_timeout: float
    fail_on_data_loss: bool
    max_messages_per_trigger: int | None
    receiver_queue_size: int

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool | None) -> ReadOptions:
        """Validate read options; ``streaming=None`` skips the checks that depend on the mode
        (Spark asks for the schema before saying whether the read is a batch or a stream)."""
        opts = OptionValues(options)
        opts.refuse_unknown(
            READ_OPTIONS, "reading", (*CLIENT_WITHOUT_EFFECT, *READER_WITHOUT_EFFECT)
        )
        starting = _starting(opts, streaming)
        ending = _ending(opts, streaming)
        return cls(
            client=client_settings(opts),
            topics=_topics(opts),
            starting=starting,
            ending=ending,
            poll_timeout=opts.positive_int(POLL_TIMEOUT_MS, 120_000) / 1000,
            fail_on_data_loss=opts.boolean(FAIL_ON_DATA_LOSS, default=True),
            max_messages_per_trigger=_max_per_trigger(opts, streaming),
            receiver_queue_size=opts.positive_int(RECEIVER_QUEUE_SIZE, DEFAULT_QUEUE_SIZE),
        )


def _topics(opts: OptionValues) -> TopicSelection:
    given = [name for name in (TOPIC, TOPICS, TOPICS_PATTERN) if opts.get(name) is not None]
    if len(given) != 1:
        problem = "none was given" if not given else f"got {', '.join(given)}"
        raise ConfigurationError(
            f"exactly one of the options 'topic', 'topics' or 'topicsPattern' is required; "
            f"{problem}"
        )
    value = opts.required(given[0], "a topic name")
    if given[0] == TOPIC:
        if "," in value:
            raise ConfigurationError(
                "option 'topic' takes one topic; use 'topics' for a comma-separated list"
            )
        return TopicSelection(names=(full_topic_name(value),))
    if given[0] == TOPICS:
        names = [n.strip() for n in value.split(",") if n.strip()]
        if not names:
            raise ConfigurationError("option 'topics' must list at least one topic")
        return TopicSelection(names=tuple(dict.fromkeys(full_topic_name(n) for n in names)))
    return _pattern(value)


def _pattern(value: str) -> TopicSelection:
    import re

    namespace_part, _, _ = value.rpartition("/")
    try:
        re.compile(value)
    except re.error as exc:
        raise ConfigurationError(
            f"option 'topicsPattern': {value!r} is not a regex: {exc}"
        ) from exc
    if "://" not in value:
        prefix = "persistent://" if namespace_part else "persistent://public/default/"
        value = prefix + value
    name = TopicName.parse(value.rpartition("/")[0] + "/x")
    return TopicSelection(pattern=value, pattern_namespace=name.namespace_name)


def _starting(opts: OptionValues, streaming: bool | None) -> PositionSpec:
    offsets, time = opts.get(STARTING_OFFSETS), opts.get(STARTING_TIME)
    if offsets is not None and time is not None:
        raise ConfigurationError(
            f"options {STARTING_OFFSETS!r} and {STARTING_TIME!r} cannot be used together"
        )
    if time is not None:
        return parse_time(STARTING_TIME, time)
    default: Bound = "latest" if streaming else "earliest"
    spec = parse_offsets(STARTING_OFFSETS, offsets or default, default=default)
    if streaming is False and _mentions(spec, Latest, "latest"):
        raise ConfigurationError(
            f"option {STARTING_OFFSETS!r}: 'latest' is not allowed for batch reads (it would "
            "read nothing); use 'earliest', a JSON position or 'startingTime'"
        )
    return spec


def _ending(opts: OptionValues, streaming: bool | None) -> PositionSpec:
    offsets, time = opts.get(ENDING_OFFSETS), opts.get(ENDING_TIME)
    if streaming and (offsets is not None or time is not None):
        raise ConfigurationError(
            f"options {ENDING_OFFSETS!r} and {ENDING_TIME!r} are for batch reads only; a "
            "stream has no end"
        )
    if offsets is not None and time is not None:
        raise ConfigurationError(
            f"options {ENDING_OFFSETS!r} and {ENDING_TIME!r} cannot be used together"
        )
    if time is not None:
        return parse_time(ENDING_TIME, time)
    spec = parse_offsets(ENDING_OFFSETS, offsets or "latest", default="latest")
    if _mentions(spec, Earliest, "earliest"):
        raise ConfigurationError(
            f"option {ENDING_OFFSETS!r}: 'earliest' is not allowed as an end; use 'latest' or a "
            "JSON position (inclusive)"
        )
    return spec


def _mentions(spec: PositionSpec, kind: type, word: str) -> bool:
    if isinstance(spec, kind):
        return True
    return isinstance(spec, Specific) and any(v == word for _, v in spec.positions)


def _max_per_trigger(opts: OptionValues, streaming: bool | None) -> int | None:
    if not opts.has(MAX_MESSAGES_PER_TRIGGER):
        return None
    if streaming is False:
        raise ConfigurationError(
            f"option {MAX_MESSAGES_PER_TRIGGER!r} applies to streaming reads only"
        )
    return opts.positive_int(MAX_MESSAGES_PER_TRIGGER, 0)


PRODUCER_COMPRESSION = "pulsar.producer.compressionType"
PRODUCER_BATCHING = "pulsar.producer.batchingEnabled"
PRODUCER_BATCH_MESSAGES = "pulsar.producer.batchingMaxMessages"
PRODUCER_BATCH_BYTES = "pulsar.producer.batchingMaxBytes"
PRODUCER_BATCH_DELAY = "pulsar.producer.batchingMaxPublishDelayMicros"
PRODUCER_MAX_PENDING = "pulsar.producer.maxPendingMessages"
PRODUCER_SEND_TIMEOUT = "pulsar.producer.sendTimeoutMs"

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
    *CLIENT_OPTIONS,
)
# Java producer settings accepted for compatibility, with a warning that they change nothing.
PRODUCER_WITHOUT_EFFECT = tuple(
    "pulsar.producer." + name
    for name in (
        "accessMode",
        "autoUpdatePartitions",
        "autoUpdatePartitionsIntervalSeconds",
        "batcherBuilder",
        "batchingPartitionSwitchFrequencyByPublishDelay",
        "blockIfQueueFull",
        "chunkMaxMessageSize",
        "chunkingEnabled",
        "compressMinMsgBodySize",
        "cryptoFailureAction",
        "cryptoKeyReader",
        "customMessageRouter",
        "encryptionKeys",
        "hashingScheme",
        "initialSequenceId",
        "lazyStartPartitionedProducers",
        "maxPendingMessagesAcrossPartitions",
        "messageRoutingMode",
        "multiSchema",
        "producerName",
        "properties",
        "topicName",
    )
)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    client: ClientSettings
    topic: str | None  # None: every row names its topic in a `topic` column
    producer: ProducerSettings

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriteOptions:
        from pulsar_spark.protocol.compression import codec_from_name

        opts = OptionValues(options)
        opts.refuse_unknown(
            WRITE_OPTIONS, "writing to", (*CLIENT_WITHOUT_EFFECT, *PRODUCER_WITHOUT_EFFECT)
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
        return cls(
            client=client_settings(opts),
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
            ),
        )
