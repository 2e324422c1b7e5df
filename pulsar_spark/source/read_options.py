"""Read options (``spark.read`` and ``spark.readStream``): parsed once into a frozen object.

Spark hands a data source its options as strings in a case-insensitive map. Everything is
checked here, when the DataFrame is defined, and every error names the option and what it
accepts. Unknown options are refused (a misspelt option silently ignored is a wrong result),
except the few that Spark itself adds.

Some rules depend on the mode: a batch read starts at ``earliest`` by default and may not
start at ``latest`` (it would read nothing) nor take ``maxMessagesPerTrigger``; a stream starts
at ``latest`` by default and has no end.

Jobs moved from streamnative/pulsar-spark keep their options where this connector does the
same: ``predefinedSubscription``, ``maxBytesPerTrigger``, ``waitingForNonExistedTopic`` (a topic
that does not exist yet is read as empty, and a stream reads it once it appears), and
``admin.url`` and ``pulsar.admin.*``, accepted with a warning because nothing here uses the
admin REST API. Those asking for something this connector does not do are refused with the
option to use instead. :meth:`ReadOptions.parse` applies the rules of the
:class:`ReadMode` it is given. Spark asks for the schema before it says whether the read is a
batch or a stream, so :func:`check_read_options` checks only what holds in both modes.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pulsar_spark.arrow.values import ValueSchema
from pulsar_spark.client.failover import Clusters
from pulsar_spark.client.reader import DEFAULT_QUEUE_SIZE
from pulsar_spark.client.settings import ClientSettings, ReaderDecryption
from pulsar_spark.common.bounds import Earliest, Latest
from pulsar_spark.common.option_values import (
    ADMIN_SETTINGS,
    ADMIN_URL,
    TOPIC,
    OptionValues,
    Unsupported,
)
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.protocol import pb
from pulsar_spark.protocol.schemas import SchemaInfo
from pulsar_spark.source.client_options import (
    CLIENT_OPTIONS,
    CLIENT_UNSUPPORTED,
    CLIENT_WITHOUT_EFFECT,
    SERVICE_URL,
    client_settings,
)
from pulsar_spark.source.crypto_options import (
    CRYPTO_FAILURE_ACTION,
    PRIVATE_KEY_FILES,
    failure_action,
    private_keys,
)
from pulsar_spark.source.failover_options import FAILOVER_OPTIONS, failover_clusters
from pulsar_spark.source.positions import (
    Bound,
    PositionSpec,
    Specific,
    parse_offsets,
    parse_time,
    parse_times,
)
from pulsar_spark.source.schema_options import (
    DEFINITION,
    SCHEMA_TYPES,
    VALUE_SCHEMA,
    schema_format,
)
from pulsar_spark.topic import TopicName, full_topic_name

SchemaType = pb.Schema.Type

TOPICS = "topics"
TOPICS_PATTERN = "topicsPattern"
STARTING_OFFSETS = "startingOffsets"
ENDING_OFFSETS = "endingOffsets"
STARTING_TIME = "startingTime"
ENDING_TIME = "endingTime"
STARTING_OFFSETS_BY_TIME = "startingOffsetsByTime"
ENDING_OFFSETS_BY_TIME = "endingOffsetsByTime"
POLL_TIMEOUT_MS = "pollTimeoutMs"
FAIL_ON_DATA_LOSS = "failOnDataLoss"
MAX_MESSAGES_PER_TRIGGER = "maxMessagesPerTrigger"
MAX_BYTES_PER_TRIGGER = "maxBytesPerTrigger"
MIN_MESSAGES_PER_TRIGGER = "minMessagesPerTrigger"
MAX_TRIGGER_DELAY = "maxTriggerDelay"
DEFAULT_MAX_TRIGGER_DELAY = "15m"  # Kafka's default for maxTriggerDelay
MIN_PARTITIONS = "minPartitions"
RECEIVER_QUEUE_SIZE = "pulsar.reader.receiverQueueSize"
SUBSCRIPTION_NAME = "subscriptionName"
PREDEFINED_SUBSCRIPTION = "predefinedSubscription"  # streamnative/pulsar-spark's name for it
REPLICATE_SUBSCRIPTION_STATE = "replicateSubscriptionState"  # the Java consumer's name
VALUE_FORMAT = "valueFormat"
VALUE_FORMATS = ("auto", "raw")
# streamnative/pulsar-spark's option: a stream on a topic that does not exist yet waits for it
# here anyway (see _waiting_for_topic).
WAITING_FOR_NON_EXISTED_TOPIC = "waitingForNonExistedTopic"

READ_OPTIONS = (
    SERVICE_URL,
    TOPIC,
    TOPICS,
    TOPICS_PATTERN,
    STARTING_OFFSETS,
    ENDING_OFFSETS,
    STARTING_TIME,
    ENDING_TIME,
    STARTING_OFFSETS_BY_TIME,
    ENDING_OFFSETS_BY_TIME,
    POLL_TIMEOUT_MS,
    FAIL_ON_DATA_LOSS,
    MAX_MESSAGES_PER_TRIGGER,
    MAX_BYTES_PER_TRIGGER,
    MIN_MESSAGES_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    MIN_PARTITIONS,
    RECEIVER_QUEUE_SIZE,
    SUBSCRIPTION_NAME,
    PREDEFINED_SUBSCRIPTION,
    REPLICATE_SUBSCRIPTION_STATE,
    VALUE_FORMAT,
    VALUE_SCHEMA,
    VALUE_SCHEMA + DEFINITION,
    WAITING_FOR_NON_EXISTED_TOPIC,
    PRIVATE_KEY_FILES,
    CRYPTO_FAILURE_ACTION,
    *FAILOVER_OPTIONS,
    *CLIENT_OPTIONS,
)
# Java reader settings accepted for compatibility, with a warning that they change nothing.
READER_WITHOUT_EFFECT = tuple(
    "pulsar.reader." + name
    for name in (
        "autoUpdatePartitions",
        "autoUpdatePartitionsIntervalSeconds",
        "poolMessages",
        "readerListener",
        "readerName",
        "resetIncludeHead",
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
# Java reader settings refused: ignoring them would read other messages than asked.
READER_UNSUPPORTED = (
    Unsupported(
        "pulsar.reader.cryptoKeyReader",
        "a Java class cannot be loaded here; give each key's private key file in "
        f"{PRIVATE_KEY_FILES!r} ('name=path,...')",
    ),
    Unsupported(
        "pulsar.reader.keyHashRanges",
        "every message would be read, whatever the hash of its key; filter the rows in Spark",
    ),
    Unsupported(
        "pulsar.reader.readCompacted",
        "every message of the topic would be read, not only the latest of each key",
        ("false",),
    ),
    Unsupported(
        "pulsar.reader.startMessageFromRollbackDurationInSec",
        f"the read would start at {STARTING_OFFSETS!r}; give a publish time in "
        f"{STARTING_TIME!r} instead",
        ("0",),
    ),
)
# streamnative/pulsar-spark options asking for what this connector does another way.
CONNECTOR_UNSUPPORTED = (
    Unsupported(
        "allowDifferentTopicSchemas",
        "topics with different schemas are refused when the DataFrame is defined; read them "
        f"with {VALUE_FORMAT!r}='raw' (the payload bytes of every topic) or in one DataFrame "
        "per schema",
        ("false",),
    ),
    Unsupported(
        "subscriptionPrefix",
        "a stream keeps no subscription of its own on each partition; give "
        f"{SUBSCRIPTION_NAME!r} to keep one durable subscription of that name on every "
        "partition read",
    ),
)


class ReadMode(enum.Enum):
    """``spark.read`` or ``spark.readStream``."""

    BATCH = "batch"
    STREAM = "stream"


@dataclass(frozen=True, slots=True)
class _Rules:
    """What a mode allows, and where it starts when no start is given."""

    default_start: Bound
    latest_start: bool  # startingOffsets may say 'latest'
    has_end: bool  # endingOffsets / endingTime / endingOffsetsByTime may be given
    per_trigger: bool  # the per-trigger limits and subscriptionName


_MODE_RULES = {
    ReadMode.BATCH: _Rules("earliest", latest_start=False, has_end=True, per_trigger=False),
    ReadMode.STREAM: _Rules("latest", latest_start=True, has_end=False, per_trigger=True),
}
# Before the mode is known: refuse only what neither mode accepts.
_EITHER_MODE = _Rules("earliest", latest_start=True, has_end=True, per_trigger=True)


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
    max_bytes_per_trigger: int | None = None
    # minMessagesPerTrigger, and maxTriggerDelay in seconds (only with it).
    min_messages_per_trigger: int | None = None
    max_trigger_delay: float | None = None
    min_partitions: int | None = None
    subscription: str | None = None  # durable subscription holding the stream's position
    # The subscription's position is replicated to the topic's other clusters.
    replicate_subscription_state: bool = False
    value_format: str = "auto"  # auto: value typed by the topic's schema; raw: payload bytes
    # The schema given for the values (valueSchema), instead of the topic's.
    given_schema: SchemaInfo | None = None
    # The topic's schema the value column follows (set on the driver, once resolved).
    value_schema: ValueSchema | None = None
    # Private keys of encrypted messages, and what to do with those none opens.
    decryption: ReaderDecryption = field(default_factory=ReaderDecryption)
    # The clusters a stream switches to when its own is gone (failover.*); None: no switch.
    failover: Clusters | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, mode: ReadMode) -> ReadOptions:
        """Validate read options for a read in ``mode``."""
        return _parse(OptionValues(options), _MODE_RULES[mode])


def check_read_options(options: Mapping[str, str]) -> ReadOptions:
    """Refuse read options that are wrong in either mode (for ``schema()``, which Spark calls
    before it says whether the read is a batch or a stream)."""
    return _parse(OptionValues(options), _EITHER_MODE)


def _parse(opts: OptionValues, rules: _Rules) -> ReadOptions:
    opts.refuse_unknown(
        READ_OPTIONS,
        "reading",
        (*CLIENT_WITHOUT_EFFECT, *READER_WITHOUT_EFFECT, ADMIN_URL),
        (*CLIENT_UNSUPPORTED, *READER_UNSUPPORTED, *CONNECTOR_UNSUPPORTED),
        prefixes_without_effect=(ADMIN_SETTINGS,),
    )
    _waiting_for_topic(opts, rules)
    starting = _starting(opts, rules)
    ending = _ending(opts, rules)
    value_format = _value_format(opts)
    subscription = _subscription(opts, rules)
    replicated = _replicate_subscription_state(opts, subscription)
    client = client_settings(opts)
    return ReadOptions(
        client=client,
        topics=_topics(opts),
        starting=starting,
        ending=ending,
        poll_timeout=opts.positive_int(POLL_TIMEOUT_MS, 120_000) / 1000,
        fail_on_data_loss=_fail_on_data_loss(opts, rules),
        max_messages_per_trigger=_per_trigger(opts, rules, MAX_MESSAGES_PER_TRIGGER),
        receiver_queue_size=opts.positive_int(RECEIVER_QUEUE_SIZE, DEFAULT_QUEUE_SIZE),
        max_bytes_per_trigger=_per_trigger(opts, rules, MAX_BYTES_PER_TRIGGER),
        min_messages_per_trigger=_per_trigger(opts, rules, MIN_MESSAGES_PER_TRIGGER),
        max_trigger_delay=_max_trigger_delay(opts, rules),
        min_partitions=opts.positive_int(MIN_PARTITIONS, 0) if opts.has(MIN_PARTITIONS) else None,
        subscription=subscription,
        replicate_subscription_state=replicated,
        value_format=value_format,
        given_schema=_given_schema(opts, value_format),
        decryption=ReaderDecryption(private_keys(opts), failure_action(opts)),
        failover=failover_clusters(
            opts, client, streaming=rules.per_trigger, replicated=replicated
        ),
    )


def _value_format(opts: OptionValues) -> str:
    text = (opts.get(VALUE_FORMAT) or "auto").strip().lower()
    if text not in VALUE_FORMATS:
        raise ConfigurationError(
            f"option {VALUE_FORMAT!r} must be 'auto' (value typed by the topic's schema) or "
            f"'raw' (the payload bytes), got {opts.get(VALUE_FORMAT)!r}"
        )
    return text


def _given_schema(opts: OptionValues, value_format: str) -> SchemaInfo | None:
    """The schema ``valueSchema`` (and ``valueSchema.definition``) gives for the values
    (refused with ``value_format`` raw)."""
    name = schema_format(VALUE_SCHEMA, opts.get(VALUE_SCHEMA))
    definition = opts.get(VALUE_SCHEMA + DEFINITION)
    if name is None:
        if definition is not None:
            raise ConfigurationError(
                f"option '{VALUE_SCHEMA}{DEFINITION}' needs option '{VALUE_SCHEMA}' "
                "('avro' or 'json')"
            )
        return None
    if value_format == "raw":
        raise ConfigurationError(
            f"options '{VALUE_SCHEMA}' and '{VALUE_FORMAT}'='raw' exclude each other: the first "
            "decodes the values, the second keeps their bytes"
        )
    if name in ("avro", "json") and definition is None:
        raise ConfigurationError(
            f"option '{VALUE_SCHEMA}'='{name}' needs option '{VALUE_SCHEMA}{DEFINITION}': the "
            "Avro schema of the values, as JSON text"
        )
    if name not in ("avro", "json") and definition is not None:
        raise ConfigurationError(
            f"option '{VALUE_SCHEMA}{DEFINITION}' goes with '{VALUE_SCHEMA}' 'avro' or 'json' "
            f"only, got '{VALUE_SCHEMA}'='{name}'"
        )
    data = b"" if definition is None else definition.encode()
    return SchemaInfo(SchemaType.Value(SCHEMA_TYPES[name]), data, "", (), None)


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


def _one_of(opts: OptionValues, names: tuple[str, str, str]) -> str | None:
    """Which of ``names`` (a position, a time, times by partition) is given, if any."""
    given = [name for name in names if opts.get(name) is not None]
    if len(given) > 1:
        raise ConfigurationError(
            f"options {' and '.join(repr(n) for n in given)} cannot be used together"
        )
    return given[0] if given else None


def _timed(opts: OptionValues, name: str) -> PositionSpec:
    """A bound given as a time (``startingTime``, say) or times by partition."""
    text = str(opts.get(name))
    if name in (STARTING_OFFSETS_BY_TIME, ENDING_OFFSETS_BY_TIME):
        return parse_times(name, text)
    return parse_time(name, text)


def _starting(opts: OptionValues, rules: _Rules) -> PositionSpec:
    names = (STARTING_OFFSETS, STARTING_TIME, STARTING_OFFSETS_BY_TIME)
    given = _one_of(opts, names)
    if given is not None and given != STARTING_OFFSETS:
        return _timed(opts, given)
    offsets = opts.get(STARTING_OFFSETS)
    default = rules.default_start
    spec = parse_offsets(STARTING_OFFSETS, offsets or default, default=default)
    if not rules.latest_start and _mentions(spec, Latest, "latest"):
        raise ConfigurationError(
            f"option {STARTING_OFFSETS!r}: 'latest' is not allowed for batch reads (it would "
            "read nothing); use 'earliest', a JSON position or 'startingTime'"
        )
    return spec


def _ending(opts: OptionValues, rules: _Rules) -> PositionSpec:
    names = (ENDING_OFFSETS, ENDING_TIME, ENDING_OFFSETS_BY_TIME)
    if not rules.has_end and any(opts.get(name) is not None for name in names):
        raise ConfigurationError(
            f"options {ENDING_OFFSETS!r}, {ENDING_TIME!r} and {ENDING_OFFSETS_BY_TIME!r} are "
            "for batch reads only; a stream has no end"
        )
    given = _one_of(opts, names)
    if given is not None and given != ENDING_OFFSETS:
        return _timed(opts, given)
    offsets = opts.get(ENDING_OFFSETS)
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


def _per_trigger(opts: OptionValues, rules: _Rules, name: str) -> int | None:
    if not opts.has(name):
        return None
    if not rules.per_trigger:
        raise ConfigurationError(f"option {name!r} applies to streaming reads only")
    return opts.positive_int(name, 0)


def _max_trigger_delay(opts: OptionValues, rules: _Rules) -> float | None:
    """``maxTriggerDelay``, in seconds: how long a stream with ``minMessagesPerTrigger`` waits
    at most for that many messages (Kafka's default, 15 minutes, when not given)."""
    if not opts.has(MIN_MESSAGES_PER_TRIGGER):
        if opts.has(MAX_TRIGGER_DELAY):
            raise ConfigurationError(
                f"option {MAX_TRIGGER_DELAY!r} goes with {MIN_MESSAGES_PER_TRIGGER!r}: it is how "
                "long a micro-batch waits at most for that many messages"
            )
        return None
    if not rules.per_trigger:
        raise ConfigurationError(f"option {MAX_TRIGGER_DELAY!r} applies to streaming reads only")
    return opts.duration(MAX_TRIGGER_DELAY, DEFAULT_MAX_TRIGGER_DELAY)


def _fail_on_data_loss(opts: OptionValues, rules: _Rules) -> bool:
    """``failOnDataLoss``: what a stream does when data it was to read is gone. A batch read
    has no checkpoint to compare with, so it refuses the option rather than ignore it."""
    fail = opts.boolean(FAIL_ON_DATA_LOSS, default=True)
    if opts.has(FAIL_ON_DATA_LOSS) and not rules.per_trigger:
        raise ConfigurationError(
            f"option {FAIL_ON_DATA_LOSS!r} applies to streaming reads only: a batch read has no "
            "checkpointed position whose data could be lost"
        )
    return fail


def _waiting_for_topic(opts: OptionValues, rules: _Rules) -> None:
    """``waitingForNonExistedTopic``: a stream reads a topic that does not exist yet as empty
    until it appears, with or without it; a batch read does not wait."""
    if opts.boolean(WAITING_FOR_NON_EXISTED_TOPIC, default=False) and not rules.per_trigger:
        raise ConfigurationError(
            f"option {WAITING_FOR_NON_EXISTED_TOPIC!r}='true' applies to streaming reads only: "
            "a batch read of a topic that does not exist yet reads no rows at once, and a "
            "stream reads it as empty until it appears, with or without the option"
        )


def _replicate_subscription_state(opts: OptionValues, subscription: str | None) -> bool:
    """``replicateSubscriptionState``: the durable subscription is a replicated one; there
    must be one."""
    replicated = opts.boolean(REPLICATE_SUBSCRIPTION_STATE, default=False)
    if replicated and subscription is None:
        raise ConfigurationError(
            f"option {REPLICATE_SUBSCRIPTION_STATE!r}='true' needs option {SUBSCRIPTION_NAME!r}: "
            "it replicates the position of that durable subscription to the topic's other "
            "clusters"
        )
    return replicated


def _subscription(opts: OptionValues, rules: _Rules) -> str | None:
    given = [n for n in (SUBSCRIPTION_NAME, PREDEFINED_SUBSCRIPTION) if opts.get(n) is not None]
    if not given:
        return None
    if len(given) > 1:
        raise ConfigurationError(
            f"options {SUBSCRIPTION_NAME!r} and {PREDEFINED_SUBSCRIPTION!r} are two names for "
            "one setting; give only one"
        )
    if not rules.per_trigger:
        raise ConfigurationError(
            f"option {given[0]!r} applies to streaming reads only: a batch read keeps no "
            "subscription"
        )
    name = opts.required(given[0], "the name of the durable subscription to keep")
    if "/" in name or any(c.isspace() for c in name):
        raise ConfigurationError(
            f"option {given[0]!r}: {name!r} is not a subscription name (no '/' or spaces)"
        )
    return name
