"""TopicName: parsing short and full names, partitions, and names that are refused."""

from __future__ import annotations

import pytest

from pulsar_spark.errors import ConfigurationError
from pulsar_spark.topic import TopicName, full_topic_name


@pytest.mark.parametrize(
    ("name", "domain", "tenant", "namespace", "local"),
    [
        ("events", "persistent", "public", "default", "events"),
        ("  events  ", "persistent", "public", "default", "events"),
        ("acme/prod/events", "persistent", "acme", "prod", "events"),
        ("persistent://acme/prod/events", "persistent", "acme", "prod", "events"),
        ("non-persistent://acme/prod/events", "non-persistent", "acme", "prod", "events"),
        ("part3-partition-2", "persistent", "public", "default", "part3-partition-2"),
    ],
)
def test_topic_name_parse(name: str, domain: str, tenant: str, namespace: str, local: str) -> None:
    topic = TopicName.parse(name)
    assert topic == TopicName(domain, tenant, namespace, local)
    assert topic.full_name == f"{domain}://{tenant}/{namespace}/{local}"
    assert str(topic) == topic.full_name
    assert topic.namespace_name == f"{tenant}/{namespace}"
    assert full_topic_name(name) == topic.full_name


def test_topic_partitions() -> None:
    base = TopicName.parse("acme/prod/events")
    assert base.partition_index == -1
    assert base.base_name == "persistent://acme/prod/events"
    assert base.partition(3) == "persistent://acme/prod/events-partition-3"
    part = TopicName.parse(base.partition(3))
    assert part.local_name == "events-partition-3"
    assert part.partition_index == 3
    assert part.base_name == "persistent://acme/prod/events"
    ten = TopicName.parse("x-partition-10")
    assert ten.partition_index == 10
    assert ten.base_name == "persistent://public/default/x"
    odd = TopicName.parse("x-partition-")
    assert odd.partition_index == -1
    assert odd.base_name == "persistent://public/default/x-partition-"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", r"^topic name is empty$"),
        ("   ", r"^topic name is empty$"),
        (
            "http://a/b/c",
            r"^topic 'http://a/b/c': domain must be one of persistent, non-persistent$",
        ),
        (
            "a/b",
            r"^topic 'a/b' is not a valid name: use 'name', 'tenant/namespace/name' or 'persistent://tenant/namespace/name'$",
        ),
        ("a//c", r"is not a valid name"),
        ("a/b/c/d", r"is not a valid name"),
        ("/b/c", r"is not a valid name"),
        ("a/b/", r"is not a valid name"),
        ("persistent://a/b", r"is not a valid name"),
        ("persistent://", r"is not a valid name"),
    ],
)
def test_topic_name_invalid(name: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        TopicName.parse(name)


def test_fully_qualified_name_needs_tenant_and_namespace() -> None:
    """Pulsar rejects ``persistent://events``: the short form without a domain is the only
    one that defaults tenant and namespace (Java TopicName throws 'Invalid topic name')."""
    with pytest.raises(ConfigurationError, match=r"is not a valid name"):
        TopicName.parse("persistent://events")
