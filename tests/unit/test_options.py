"""ReadOptions.parse and check_read_options: every read option, its default, and every error
it raises, in each mode; position parsing; short topic names expanded to their canonical form."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from pulsar_spark.common.bounds import Earliest, Latest
from pulsar_spark.errors import ConfigurationError
from pulsar_spark.message_id import MessageId
from pulsar_spark.source.planning import PartitionRef, resolve_partitions
from pulsar_spark.source.positions import (
    AtTime,
    Specific,
    TimesByPartition,
    parse_offsets,
    parse_time,
)
from pulsar_spark.source.read_options import (
    ReadMode,
    ReadOptions,
    TopicSelection,
    check_read_options,
)

URL = "pulsar://localhost:6650"
T = "persistent://public/default/t"
BATCH, STREAM = ReadMode.BATCH, ReadMode.STREAM


def completed(options: dict[str, str]) -> dict[str, str]:
    """``options`` plus a service URL and a topic unless the test gives its own."""
    base = {"service.url": URL}
    if not {"topic", "topics", "topicsPattern"} & set(options):
        base["topic"] = "t"
    merged = {**base, **options}
    return {k: v for k, v in merged.items() if v is not None}


def parse(mode: ReadMode = BATCH, **options: str) -> ReadOptions:
    return ReadOptions.parse(completed(options), mode=mode)


def check(**options: str) -> None:
    """What ``schema()`` runs: the checks that hold in both modes."""
    check_read_options(completed(options))


def parse_error(mode: ReadMode = BATCH, **options: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        parse(mode, **options)
    return str(info.value)


def check_error(**options: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        check(**options)
    return str(info.value)


VALIDATORS: dict[str, Callable[..., object]] = {
    "batch": lambda **options: parse(BATCH, **options),
    "stream": lambda **options: parse(STREAM, **options),
    "schema": check,
}


def opts(**options: Any) -> dict[str, str]:
    """Options whose names are not Python identifiers: ``opts(**{"service.url": ...})``."""
    return options


# --- defaults ---------------------------------------------------------------------------------


def test_batch_defaults() -> None:
    parsed = parse(BATCH)
    assert parsed.client.service_url == URL
    assert parsed.client.operation_timeout == 30.0
    assert parsed.client.connection_timeout == 10.0
    assert parsed.topics == TopicSelection(names=(T,))
    assert parsed.starting == Earliest()
    assert parsed.ending == Latest()
    assert parsed.poll_timeout == 120.0
    assert parsed.fail_on_data_loss is True
    assert parsed.max_messages_per_trigger is None


def test_stream_defaults_start_at_latest() -> None:
    parsed = parse(STREAM)
    assert parsed.starting == Latest()
    assert parsed.ending == Latest()
    assert parsed.max_messages_per_trigger is None


def test_mode_unknown_when_spark_asks_for_the_schema() -> None:
    """schema() runs check_read_options: it skips the checks that depend on the mode."""
    check()
    check(startingOffsets="latest")
    check(maxMessagesPerTrigger="5")
    check(endingOffsets="latest")


def test_option_names_are_case_insensitive() -> None:
    parsed = ReadOptions.parse(
        {
            "SERVICE.URL": URL,
            "TOPIC": "t",
            "startingoffsets": "earliest",
            "POLLTIMEOUTMS": "1500",
            "FailOnDataLoss": "false",
            "Pulsar.Client.OperationTimeoutMs": "2000",
        },
        mode=STREAM,
    )
    assert parsed.client.service_url == URL
    assert parsed.poll_timeout == 1.5
    assert parsed.fail_on_data_loss is False
    assert parsed.client.operation_timeout == 2.0


def test_options_spark_adds_are_accepted() -> None:
    parse(BATCH, path="/some/where", checkpointLocation="/tmp/cp", queryName="q")


# --- unknown options --------------------------------------------------------------------------


def test_unknown_option_with_did_you_mean() -> None:
    message = parse_error(startingOffset="earliest")
    assert "unknown option 'startingoffset' for reading Pulsar." in message
    assert "Did you mean 'startingOffsets'?" in message
    assert "Known options: service.url, topic, topics, topicsPattern, startingOffsets" in message


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("serviceUrl", "service.url"),
        ("topicPattern", "topicsPattern"),
        ("endingOffset", "endingOffsets"),
        ("pollTimeout", "pollTimeoutMs"),
        ("failOnDataLost", "failOnDataLoss"),
        ("pulsar.client.operationTimeout", "pulsar.client.operationTimeoutMs"),
        ("maxMessagePerTrigger", "maxMessagesPerTrigger"),
    ],
)
def test_unknown_option_hints(typo: str, meant: str) -> None:
    assert f"Did you mean {meant!r}?" in parse_error(**{typo: "1"})


def test_unknown_option_without_a_close_match_has_no_hint() -> None:
    message = parse_error(zzzzzz="1")
    assert "unknown option 'zzzzzz'" in message
    assert "Did you mean" not in message


# --- service.url and client options -----------------------------------------------------------


def test_service_url_is_required() -> None:
    with pytest.raises(ConfigurationError, match=r"option 'service\.url' is required: the Pulsar"):
        ReadOptions.parse({"topic": "t"}, mode=BATCH)
    message = parse_error(**opts(**{"service.url": "  "}))
    assert "option 'service.url' is required" in message


def test_service_url_is_stripped_and_may_list_hosts() -> None:
    assert parse(**opts(**{"service.url": f"  {URL} "})).client.service_url == URL
    many = "pulsar://a:6650,b:6651"
    assert parse(**opts(**{"service.url": many})).client.service_url == many


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://localhost:8080", "must look like pulsar://host:6650"),
        ("localhost:6650", "must look like pulsar://host:6650"),
        ("pulsar+tls://localhost:6651", "or pulsar+ssl://host:6651"),
        ("pulsar://:6650", "missing host"),
        ("pulsar://localhost:port", "invalid host or port"),
    ],
)
def test_bad_service_url(url: str, fragment: str) -> None:
    message = parse_error(**opts(**{"service.url": url}))
    assert fragment in message
    assert url in message


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("pulsar://app:s3cret@localhost:6650", "pulsar://***@localhost:6650"),
        ("pulsar+ssl://s3cret@a:6651,b:6651/", "pulsar+ssl://***@a:6651,b:6651/"),
        ("http://app:s3cret@localhost:8080", "http://***@localhost:8080"),
    ],
)
def test_a_service_url_with_credentials_is_refused_without_showing_them(
    url: str, shown: str
) -> None:
    message = parse_error(**opts(**{"service.url": url}))
    assert message == (
        f"service.url {shown!r} carries user information before '@': a service URL takes no "
        "credentials; give them in authPluginClassName and authParams"
    )
    assert "s3cret" not in message


@pytest.mark.parametrize(
    "option", ["pulsar.client.operationTimeoutMs", "pulsar.client.connectionTimeoutMs"]
)
def test_client_timeouts(option: str) -> None:
    parsed = parse(**opts(**{option: "2500"}))
    attr = "operation_timeout" if "operation" in option else "connection_timeout"
    assert getattr(parsed.client, attr) == 2.5
    assert f"option {option!r} must be a positive integer, got 'soon'" in parse_error(
        **opts(**{option: "soon"})
    )
    assert f"option {option!r} must be a positive integer, got 0" in parse_error(
        **opts(**{option: "0"})
    )
    assert f"option {option!r} must be a positive integer, got -5" in parse_error(
        **opts(**{option: "-5"})
    )


# --- topic selection --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("events", "persistent://public/default/events"),
        ("  events  ", "persistent://public/default/events"),
        ("tenant1/ns1/events", "persistent://tenant1/ns1/events"),
        ("persistent://tenant1/ns1/events", "persistent://tenant1/ns1/events"),
        ("non-persistent://tenant1/ns1/events", "non-persistent://tenant1/ns1/events"),
        ("events-partition-3", "persistent://public/default/events-partition-3"),
    ],
)
def test_topic_short_names_are_canonical(given: str, canonical: str) -> None:
    assert parse(topic=given).topics == TopicSelection(names=(canonical,))
    assert parse(topics=given).topics == TopicSelection(names=(canonical,))


def test_topics_list_is_split_stripped_canonical_and_deduplicated() -> None:
    parsed = parse(topics=" b , a,public/default/b,, persistent://t1/ns/c ")
    assert parsed.topics.names == (
        "persistent://public/default/b",
        "persistent://public/default/a",
        "persistent://t1/ns/c",
    )
    assert parsed.topics.pattern is None


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"topic": "a", "topics": "b"},
        {"topic": "a", "topicsPattern": "b.*"},
        {"topics": "a", "topicsPattern": "b.*"},
        {"topic": "a", "topics": "b", "topicsPattern": "c.*"},
    ],
)
def test_exactly_one_topic_option(given: dict[str, str]) -> None:
    with pytest.raises(ConfigurationError) as info:
        ReadOptions.parse({"service.url": URL, **given}, mode=BATCH)
    message = str(info.value)
    assert "exactly one of the options 'topic', 'topics' or 'topicsPattern' is required" in message
    assert ("none was given" if not given else "got " + ", ".join(given)) in message


def test_topic_takes_one_name() -> None:
    assert "option 'topic' takes one topic; use 'topics'" in parse_error(topic="a,b")


def test_empty_topic_values() -> None:
    assert "option 'topic' is required" in parse_error(topic="  ")
    assert "option 'topics' must list at least one topic" in parse_error(topics=" , ,")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("a/b", "is not a valid name"),
        ("a//b", "is not a valid name"),
        ("t/ns/x/y", "is not a valid name"),
        ("http://public/default/x", "domain must be one of persistent, non-persistent"),
    ],
)
def test_invalid_topic_names(name: str, fragment: str) -> None:
    assert fragment in parse_error(topic=name)
    assert fragment in parse_error(topics=f"ok,{name}")


def test_topics_pattern_in_the_default_namespace() -> None:
    selection = parse(topicsPattern="ev-.*").topics
    assert selection.names == ()
    assert selection.pattern == "persistent://public/default/ev-.*"
    assert selection.pattern_namespace == "public/default"


def test_topics_pattern_fully_qualified() -> None:
    selection = parse(topicsPattern="persistent://tenant1/ns1/ev-[0-9]+").topics
    assert selection.pattern == "persistent://tenant1/ns1/ev-[0-9]+"
    assert selection.pattern_namespace == "tenant1/ns1"


def test_topics_pattern_tenant_namespace_form_matches_full_names() -> None:
    """'tenant/ns/regex' is short for 'persistent://tenant/ns/regex', as for topic names."""
    selection = parse(topicsPattern="tenant1/ns1/ev-.*").topics
    assert selection.pattern_namespace == "tenant1/ns1"
    assert selection.pattern is not None
    assert re.fullmatch(selection.pattern, "persistent://tenant1/ns1/ev-1")


def test_bad_topics_pattern() -> None:
    message = parse_error(topicsPattern="ev-[")
    assert "option 'topicsPattern': 'ev-[' is not a regex" in message


class FakeLookup:
    """Answers partition counts and namespace listings like a broker would."""

    def __init__(self, partitions: dict[str, int], namespace: list[str]) -> None:
        self._partitions = partitions
        self._namespace = namespace
        self.listed: list[str] = []

    def partitions(self, topic: str) -> int:
        return self._partitions.get(topic, 0)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        self.listed.append(namespace)
        return list(self._namespace)


@pytest.mark.parametrize(
    "pattern", ["ev-.*", "public/default/ev-.*", "persistent://public/default/ev-.*"]
)
def test_pattern_resolves_to_base_topics_and_their_partitions(pattern: str) -> None:
    lookup = FakeLookup(
        partitions={"persistent://public/default/ev-p": 2},
        namespace=[
            "persistent://public/default/ev-p-partition-0",
            "persistent://public/default/ev-p-partition-1",
            "persistent://public/default/ev-a",
            "persistent://public/default/other",
            "persistent://public/default/xev-b",
        ],
    )
    selection = parse(topicsPattern=pattern).topics
    refs = resolve_partitions(lookup, selection)  # type: ignore[arg-type]
    assert lookup.listed == ["public/default"]
    assert refs == [
        PartitionRef("persistent://public/default/ev-a", -1, "persistent://public/default/ev-a"),
        PartitionRef(
            "persistent://public/default/ev-p", 0, "persistent://public/default/ev-p-partition-0"
        ),
        PartitionRef(
            "persistent://public/default/ev-p", 1, "persistent://public/default/ev-p-partition-1"
        ),
    ]


def test_named_topics_resolve_in_the_order_given() -> None:
    lookup = FakeLookup(partitions={"persistent://public/default/p": 2}, namespace=[])
    refs = resolve_partitions(lookup, parse(topics="p,a").topics)  # type: ignore[arg-type]
    assert [(r.topic, r.partition, r.name) for r in refs] == [
        ("persistent://public/default/p", 0, "persistent://public/default/p-partition-0"),
        ("persistent://public/default/p", 1, "persistent://public/default/p-partition-1"),
        ("persistent://public/default/a", -1, "persistent://public/default/a"),
    ]
    assert lookup.listed == []


# --- startingOffsets / endingOffsets ----------------------------------------------------------


@pytest.mark.parametrize("word", ["earliest", "EARLIEST", " Earliest "])
def test_starting_offsets_earliest(word: str) -> None:
    assert parse(BATCH, startingOffsets=word).starting == Earliest()
    assert parse(STREAM, startingOffsets=word).starting == Earliest()


def test_starting_offsets_latest_streaming_only() -> None:
    assert parse(STREAM, startingOffsets="latest").starting == Latest()
    message = parse_error(BATCH, startingOffsets="latest")
    assert "option 'startingOffsets': 'latest' is not allowed for batch reads" in message


def test_starting_offsets_json_latest_refused_for_batch() -> None:
    message = parse_error(BATCH, startingOffsets='{"t": "latest"}')
    assert "option 'startingOffsets': 'latest' is not allowed for batch reads" in message
    spec = parse(STREAM, startingOffsets='{"t": "latest"}').starting
    assert spec == Specific(((T, "latest"),), "latest")


def test_ending_offsets_latest_and_earliest() -> None:
    assert parse(BATCH, endingOffsets="LATEST").ending == Latest()
    for error in (parse_error, check_error):
        message = error(endingOffsets="earliest")
        assert "option 'endingOffsets': 'earliest' is not allowed as an end" in message
        message = error(endingOffsets='{"t": "earliest"}')
        assert "option 'endingOffsets': 'earliest' is not allowed as an end" in message


def test_json_positions_with_short_and_partition_names() -> None:
    spec = parse(
        startingOffsets=(
            '{"t-partition-1": {"ledgerId": 7, "entryId": 12, "batchIndex": -1},'
            ' "tenant1/ns/u": {"ledgerId": 0, "entryId": 3},'
            ' "persistent://public/default/t-partition-0": "earliest"}'
        )
    ).starting
    assert spec == Specific(
        (
            (f"{T}-partition-0", "earliest"),
            (f"{T}-partition-1", MessageId(7, 12, -1)),
            ("persistent://tenant1/ns/u", MessageId(0, 3, -1)),
        ),
        "earliest",
    )


def test_json_position_batch_index_and_defaults_per_side() -> None:
    json = '{"t": {"ledgerId": 1, "entryId": 2, "batchIndex": 3}}'
    start = parse(startingOffsets=json).starting
    end = parse(endingOffsets=json).ending
    assert start == Specific(((T, MessageId(1, 2, 3)),), "earliest")
    assert end == Specific(((T, MessageId(1, 2, 3)),), "latest")


def test_specific_positions_per_partition_then_topic_then_default() -> None:
    spec = Specific(
        ((f"{T}-partition-1", MessageId(1, 1)), (T, MessageId(2, 2))),
        "earliest",
    )
    assert spec.for_partition(f"{T}-partition-1", T) == MessageId(1, 1)
    assert spec.for_partition(f"{T}-partition-0", T) == MessageId(2, 2)
    other = "persistent://public/default/o"
    assert spec.for_partition(f"{other}-partition-0", other) == "earliest"


@pytest.mark.parametrize("option", ["startingOffsets", "endingOffsets"])
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("soon", "'soon' is neither 'earliest', 'latest' nor a JSON object"),
        ("{not json", "is neither 'earliest', 'latest' nor a JSON object"),
        ("{}", "expected a non-empty JSON object of topic-partition -> position"),
        ("[1, 2]", "expected a non-empty JSON object of topic-partition -> position"),
        ('"earliest-ish"', "expected a non-empty JSON object"),
        ('{"t": 5}', "position of 't' must be 'earliest', 'latest' or"),
        ('{"t": "sometime"}', "position of 't' must be 'earliest', 'latest' or"),
        ('{"t": {"entryId": 1}}', "missing 'ledgerId'"),
        ('{"t": {"ledgerId": 1}}', "missing 'entryId'"),
        ('{"t": {"ledgerId": "1", "entryId": 1}}', "ledgerId must be an integer"),
        ('{"t": {"ledgerId": 1, "entryId": 1.5}}', "entryId must be an integer"),
        ('{"t": {"ledgerId": 1, "entryId": 1, "batchIndex": true}}', "batchIndex must be"),
        ('{"a/b": {"ledgerId": 1, "entryId": 1}}', "topic 'a/b' is not a valid name"),
    ],
)
def test_bad_offsets(option: str, value: str, fragment: str) -> None:
    message = parse_error(**{option: value})
    assert message.startswith(f"option {option!r}")
    assert fragment in message


def test_parse_offsets_directly() -> None:
    assert parse_offsets("o", "earliest", default="latest") == Earliest()
    assert parse_offsets("o", "latest", default="earliest") == Latest()
    assert parse_offsets("o", '{"x": "LATEST"}', default="earliest") == Specific(
        (("persistent://public/default/x", "latest"),), "earliest"
    )


# --- startingTime / endingTime ----------------------------------------------------------------


def test_times() -> None:
    parsed = parse(startingTime="1700000000000", endingTime=" 1700000000500 ")
    assert parsed.starting == AtTime(1_700_000_000_000)
    assert parsed.ending == AtTime(1_700_000_000_500)
    assert parse(STREAM, startingTime="0").starting == AtTime(0)
    assert parse_time("x", "42") == AtTime(42)


@pytest.mark.parametrize("option", ["startingTime", "endingTime"])
def test_bad_times(option: str) -> None:
    message = parse_error(**{option: "yesterday"})
    assert f"option {option!r}: 'yesterday' is not a publish time in ms since the epoch" in message
    assert f"option {option!r}: time must be >= 0, got -1" in parse_error(**{option: "-1"})
    assert "is not a publish time" in parse_error(**{option: "1.5"})


@pytest.mark.parametrize("side", ["starting", "ending"])
def test_time_and_offsets_of_one_side_exclude_each_other(side: str) -> None:
    message = parse_error(**{f"{side}Offsets": "latest", f"{side}Time": "1"})
    assert f"options '{side}Offsets' and '{side}Time' cannot be used together" in message


def test_times_by_partition() -> None:
    parsed = parse(
        startingOffsetsByTime='{"t": {"1": 20, "0": 10}, "other-partition-3": 5, "e": 7}',
        endingOffsetsByTime='{"persistent://public/default/t": {"0": 99}}',
    )
    assert parsed.starting == TimesByPartition(
        "startingOffsetsByTime",
        (
            ("persistent://public/default/e", 7),
            ("persistent://public/default/other-partition-3", 5),
            (f"{T}-partition-0", 10),
            (f"{T}-partition-1", 20),
        ),
    )
    assert parsed.ending == TimesByPartition("endingOffsetsByTime", ((f"{T}-partition-0", 99),))
    stream = parse(STREAM, startingOffsetsByTime='{"t": 0}').starting
    assert stream == TimesByPartition("startingOffsetsByTime", ((T, 0),))


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("{}", "expected a non-empty JSON object of topic -> partition -> publish time"),
        ("[1]", "expected a non-empty JSON object of topic -> partition -> publish time"),
        ("noon", "'noon' is not a JSON object of topic -> partition -> publish time in ms"),
        ('{"t": {}}', "'persistent://public/default/t' lists no partition"),
        ('{"t": {"x": 5}}', "partitions of 'persistent://public/default/t' are indexes 0, 1, "),
        ('{"t": {"-1": 5}}', "partitions of 'persistent://public/default/t' are indexes"),
        ('{"t": {"0": -5}}', f"the time of '{T}-partition-0' must be a publish time in ms"),
        ('{"t": {"0": 1.5}}', "(a whole number >= 0), got 1.5"),
        ('{"t": true}', "the time of 'persistent://public/default/t' must be a publish time"),
        ('{"t": "5"}', 'got "5"'),
        ('{"a/b": 5}', "topic 'a/b' is not a valid name"),
    ],
)
def test_bad_times_by_partition(value: str, error: str) -> None:
    for option in ("startingOffsetsByTime", "endingOffsetsByTime"):
        message = parse_error(**{option: value})
        assert message.startswith(f"option {option!r}: ")
        assert error in message


@pytest.mark.parametrize("side", ["starting", "ending"])
def test_times_by_partition_exclude_the_other_bounds_of_their_side(side: str) -> None:
    by_time = f"{side}OffsetsByTime"
    for other in (f"{side}Offsets", f"{side}Time"):
        message = parse_error(**{other: "1" if other.endswith("Time") else "latest", by_time: "{}"})
        assert message == f"options {other!r} and {by_time!r} cannot be used together"


def test_time_and_offsets_of_different_sides_combine() -> None:
    parsed = parse(startingTime="5", endingOffsets='{"t": {"ledgerId": 1, "entryId": 2}}')
    assert parsed.starting == AtTime(5)
    assert parsed.ending == Specific(((T, MessageId(1, 2)),), "latest")
    parsed = parse(startingOffsets="earliest", endingTime="9")
    assert (parsed.starting, parsed.ending) == (Earliest(), AtTime(9))


@pytest.mark.parametrize(
    "given",
    [
        {"endingOffsets": "latest"},
        {"endingTime": "5"},
        {"endingOffsets": '{"t": {"ledgerId": 1, "entryId": 2}}'},
        {"endingOffsetsByTime": '{"t": {"0": 5}}'},
    ],
)
def test_stream_has_no_end(given: dict[str, str]) -> None:
    message = parse_error(STREAM, **given)
    assert message == (
        "options 'endingOffsets', 'endingTime' and 'endingOffsetsByTime' are for batch reads "
        "only; a stream has no end"
    )


# --- pollTimeoutMs, failOnDataLoss, maxMessagesPerTrigger ------------------------------------


def test_poll_timeout() -> None:
    assert parse(pollTimeoutMs="500").poll_timeout == 0.5
    assert parse(pollTimeoutMs=" 2000 ").poll_timeout == 2.0
    for bad, shown in (("0", "0"), ("-1", "-1"), ("1s", "'1s'"), ("", "''")):
        message = parse_error(pollTimeoutMs=bad)
        assert f"option 'pollTimeoutMs' must be a positive integer, got {shown}" in message


@pytest.mark.parametrize(
    ("text", "value"), [("true", True), ("false", False), ("FALSE", False), (" True ", True)]
)
def test_fail_on_data_loss(text: str, value: bool) -> None:
    assert parse(STREAM, failOnDataLoss=text).fail_on_data_loss is value
    check(failOnDataLoss=text)


@pytest.mark.parametrize("text", ["yes", "0", "1", ""])
@pytest.mark.parametrize("mode", [STREAM, BATCH])
def test_bad_fail_on_data_loss(text: str, mode: ReadMode) -> None:
    message = parse_error(mode, failOnDataLoss=text)
    assert message == f"option 'failOnDataLoss' must be 'true' or 'false', got {text!r}"


@pytest.mark.parametrize("text", ["true", "false"])
def test_fail_on_data_loss_is_streaming_only(text: str) -> None:
    assert parse_error(BATCH, failOnDataLoss=text) == (
        "option 'failOnDataLoss' applies to streaming reads only: a batch read has no "
        "checkpointed position whose data could be lost"
    )


def test_max_messages_per_trigger_is_streaming_only() -> None:
    assert parse(STREAM, maxMessagesPerTrigger="1000").max_messages_per_trigger == 1000
    message = parse_error(BATCH, maxMessagesPerTrigger="1000")
    assert "option 'maxMessagesPerTrigger' applies to streaming reads only" in message


@pytest.mark.parametrize("error", [lambda **o: parse_error(STREAM, **o), check_error])
def test_bad_max_messages_per_trigger(error: Callable[..., str]) -> None:
    for bad, shown in (("0", "0"), ("-3", "-3"), ("many", "'many'")):
        message = error(maxMessagesPerTrigger=bad)
        assert f"option 'maxMessagesPerTrigger' must be a positive integer, got {shown}" in message


def test_min_messages_per_trigger_and_its_delay() -> None:
    plain = parse(STREAM)
    assert (plain.min_messages_per_trigger, plain.max_trigger_delay) == (None, None)
    waiting = parse(STREAM, minMessagesPerTrigger="500")
    assert (waiting.min_messages_per_trigger, waiting.max_trigger_delay) == (500, 900)
    for text, seconds in (("30s", 30), ("5m", 300), ("5min", 300), ("2h", 7200), ("1d", 86400)):
        given = parse(STREAM, minMessagesPerTrigger="1", maxTriggerDelay=text)
        assert given.max_trigger_delay == seconds
    for text in ("250", " 250MS "):
        given = parse(STREAM, minMessagesPerTrigger="1", maxTriggerDelay=text)
        assert given.max_trigger_delay == 0.25
    check(minMessagesPerTrigger="10", maxTriggerDelay="1m")


def test_min_messages_per_trigger_is_streaming_only() -> None:
    message = parse_error(BATCH, minMessagesPerTrigger="10")
    assert message == "option 'minMessagesPerTrigger' applies to streaming reads only"


@pytest.mark.parametrize("error", [lambda **o: parse_error(STREAM, **o), check_error])
def test_bad_min_messages_per_trigger(error: Callable[..., str]) -> None:
    for bad, shown in (("0", "0"), ("-3", "-3"), ("few", "'few'")):
        assert error(minMessagesPerTrigger=bad) == (
            f"option 'minMessagesPerTrigger' must be a positive integer, got {shown}"
        )


@pytest.mark.parametrize("bad", ["", "soon", "0s", "-5s", "1.5m", "3 weeks", "10y"])
def test_bad_max_trigger_delay(bad: str) -> None:
    assert parse_error(STREAM, minMessagesPerTrigger="10", maxTriggerDelay=bad) == (
        "option 'maxTriggerDelay' must be a positive duration such as '30s', '5m' or '1h' "
        f"(units: ms, s, m, min, h, d; a bare number is milliseconds), got {bad!r}"
    )


@pytest.mark.parametrize("mode", [BATCH, STREAM])
def test_max_trigger_delay_needs_min_messages_per_trigger(mode: ReadMode) -> None:
    assert parse_error(mode, maxTriggerDelay="30s") == (
        "option 'maxTriggerDelay' goes with 'minMessagesPerTrigger': it is how long a "
        "micro-batch waits at most for that many messages"
    )


def test_per_trigger_limits_combine() -> None:
    given = parse(
        STREAM,
        minMessagesPerTrigger="100",
        maxTriggerDelay="10s",
        maxMessagesPerTrigger="1000",
        maxBytesPerTrigger="65536",
    )
    assert (
        given.min_messages_per_trigger,
        given.max_trigger_delay,
        given.max_messages_per_trigger,
        given.max_bytes_per_trigger,
    ) == (100, 10, 1000, 65536)


@pytest.mark.parametrize("validate", VALIDATORS.values(), ids=VALIDATORS.keys())
def test_every_error_is_a_configuration_error(validate: Callable[..., object]) -> None:
    with pytest.raises(ValueError):
        validate(pollTimeoutMs="x")
    with pytest.raises(ConfigurationError):
        validate(bogus="x")


# --- subscriptionName / predefinedSubscription ------------------------------------------------


@pytest.mark.parametrize("name", ["subscriptionName", "predefinedSubscription", "SUBSCRIPTIONNAME"])
def test_subscription_name_for_streams(name: str) -> None:
    assert parse(STREAM, **{name: " orders-etl "}).subscription == "orders-etl"
    check(**{name: "orders-etl"})


def test_no_subscription_by_default() -> None:
    assert parse(STREAM).subscription is None
    assert parse(BATCH).subscription is None


@pytest.mark.parametrize("name", ["subscriptionName", "predefinedSubscription"])
def test_subscription_name_is_streaming_only(name: str) -> None:
    message = parse_error(BATCH, **{name: "orders-etl"})
    assert (
        f"option {name!r} applies to streaming reads only: a batch read keeps no subscription"
        in message
    )


def test_subscription_name_and_its_alias_together() -> None:
    message = parse_error(STREAM, subscriptionName="a", predefinedSubscription="b")
    assert (
        "options 'subscriptionName' and 'predefinedSubscription' are two names for one setting; "
        "give only one" in message
    )


@pytest.mark.parametrize(("bad", "shown"), [("a/b", "'a/b'"), ("two words", "'two words'")])
def test_bad_subscription_name(bad: str, shown: str) -> None:
    message = parse_error(STREAM, subscriptionName=bad)
    assert f"option 'subscriptionName': {shown} is not a subscription name" in message


def test_empty_subscription_name() -> None:
    message = parse_error(STREAM, subscriptionName=" ")
    assert "option 'subscriptionName' is required: the name of the durable subscription" in message


# --- replicateSubscriptionState -------------------------------------------------------------------


@pytest.mark.parametrize(("given", "replicated"), [("true", True), (" FALSE ", False)])
def test_replicate_subscription_state(given: str, replicated: bool) -> None:
    options = parse(STREAM, subscriptionName="geo-etl", replicateSubscriptionState=given)
    assert options.replicate_subscription_state is replicated


def test_subscription_not_replicated_by_default() -> None:
    assert parse(STREAM, subscriptionName="geo-etl").replicate_subscription_state is False


@pytest.mark.parametrize("mode", [STREAM, BATCH])
def test_replicate_subscription_state_needs_a_subscription(mode: ReadMode) -> None:
    message = parse_error(mode, replicateSubscriptionState="true")
    assert message == (
        "option 'replicateSubscriptionState'='true' needs option 'subscriptionName': it "
        "replicates the position of that durable subscription to the topic's other clusters"
    )


def test_replicate_subscription_state_is_a_boolean() -> None:
    message = parse_error(STREAM, subscriptionName="geo-etl", replicateSubscriptionState="yes")
    assert message == "option 'replicateSubscriptionState' must be 'true' or 'false', got 'yes'"
