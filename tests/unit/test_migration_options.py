"""streamnative/pulsar-spark's option names: accepted where this connector does the same
(``maxBytesPerTrigger``, ``waitingForNonExistedTopic`` on streams, ``admin.url`` and
``pulsar.admin.*``, which nothing here needs), refused with the option to use instead where it
does not (``allowDifferentTopicSchemas``, ``subscriptionPrefix``). All when the DataFrame is
defined."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_options import BATCH, STREAM, VALIDATORS, check, opts, parse, parse_error
from test_unsupported_options import warning as no_effect
from test_unsupported_options import warnings  # noqa: F401 (the fixture, used by name)

from pulsar_spark.errors import ConfigurationError
from pulsar_spark.source.write_options import WriteOptions

URL = "pulsar://localhost:6650"


# the no-effect warnings are captured from the start of a test marked so
logged = pytest.mark.usefixtures("warnings")


def warned(request: pytest.FixtureRequest) -> list[str]:
    """The no-effect warnings logged so far in this test."""
    found: Callable[[], list[str]] = request.getfixturevalue("warnings")
    return found()


def refused(validate: Callable[..., object], **options: str) -> str:
    with pytest.raises(ConfigurationError) as info:
        validate(**options)
    return str(info.value)


# --- maxBytesPerTrigger ------------------------------------------------------------------------


def test_max_bytes_per_trigger_is_streaming_only() -> None:
    assert parse(STREAM, maxBytesPerTrigger="1048576").max_bytes_per_trigger == 1_048_576
    assert parse(STREAM).max_bytes_per_trigger is None
    check(maxBytesPerTrigger="10")
    assert (
        parse_error(BATCH, maxBytesPerTrigger="1000")
        == "option 'maxBytesPerTrigger' applies to streaming reads only"
    )


@pytest.mark.parametrize(("bad", "shown"), [("0", "0"), ("-5", "-5"), ("1MB", "'1MB'")])
def test_bad_max_bytes_per_trigger(bad: str, shown: str) -> None:
    assert (
        parse_error(STREAM, maxBytesPerTrigger=bad)
        == f"option 'maxBytesPerTrigger' must be a positive integer, got {shown}"
    )


def test_max_bytes_and_max_messages_combine() -> None:
    both = parse(STREAM, maxBytesPerTrigger="1000", maxMessagesPerTrigger="10")
    assert (both.max_bytes_per_trigger, both.max_messages_per_trigger) == (1000, 10)


# --- waitingForNonExistedTopic -----------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "false", "TRUE"])
def test_waiting_for_a_topic_is_what_a_stream_does_anyway(value: str) -> None:
    parse(STREAM, waitingForNonExistedTopic=value)
    check(waitingForNonExistedTopic=value)


def test_a_batch_read_does_not_wait_for_a_topic() -> None:
    parse(BATCH, waitingForNonExistedTopic="false")
    assert parse_error(BATCH, waitingForNonExistedTopic="true") == (
        "option 'waitingForNonExistedTopic'='true' applies to streaming reads only: a batch "
        "read of a topic that does not exist yet reads no rows at once, and a stream reads it "
        "as empty until it appears, with or without the option"
    )


def test_bad_waiting_for_a_topic() -> None:
    assert (
        parse_error(STREAM, waitingForNonExistedTopic="yes")
        == "option 'waitingForNonExistedTopic' must be 'true' or 'false', got 'yes'"
    )


# --- admin.url and pulsar.admin.* --------------------------------------------------------------


@pytest.mark.parametrize("validate", VALIDATORS.values(), ids=VALIDATORS.keys())
@logged
def test_admin_url_and_settings_are_accepted_with_a_warning(
    validate: Callable[..., object], request: pytest.FixtureRequest
) -> None:
    validate(
        **opts(
            **{
                "admin.url": "http://localhost:8080",
                "pulsar.admin.authPluginClassName": "org.example.Auth",
                "pulsar.admin.authParams": "secret-token",
            }
        )
    )
    assert warned(request) == [
        no_effect("admin.url"),
        no_effect("pulsar.admin.authpluginclassname"),
        no_effect("pulsar.admin.authparams"),
    ]


@logged
def test_admin_url_and_settings_are_accepted_on_writes(request: pytest.FixtureRequest) -> None:
    WriteOptions.parse(
        {
            "service.url": URL,
            "topic": "t",
            "admin.url": "http://localhost:8080",
            "pulsar.admin.requestTimeoutMs": "1000",
        }
    )
    assert warned(request) == [no_effect("admin.url"), no_effect("pulsar.admin.requesttimeoutms")]


# --- refused with the option to use instead ----------------------------------------------------


@pytest.mark.parametrize("validate", VALIDATORS.values(), ids=VALIDATORS.keys())
@logged
def test_different_topic_schemas_are_read_as_raw_values(
    validate: Callable[..., object], request: pytest.FixtureRequest
) -> None:
    validate(allowDifferentTopicSchemas="false")
    assert warned(request) == [no_effect("allowDifferentTopicSchemas")]
    assert refused(validate, allowDifferentTopicSchemas="true") == (
        "option 'allowDifferentTopicSchemas' is not supported yet (only 'false' is accepted): "
        "topics with different schemas are refused when the DataFrame is defined; read them "
        "with 'valueFormat'='raw' (the payload bytes of every topic) or in one DataFrame per "
        "schema"
    )


@pytest.mark.parametrize("validate", VALIDATORS.values(), ids=VALIDATORS.keys())
def test_subscription_prefix_names_subscription_name(validate: Callable[..., object]) -> None:
    assert refused(validate, subscriptionPrefix="spark-pulsar") == (
        "option 'subscriptionPrefix' is not supported yet: a stream keeps no subscription of "
        "its own on each partition; give 'subscriptionName' to keep one durable subscription "
        "of that name on every partition read"
    )
