"""Faults an Apache broker produces for real, through its admin API: unloads, and topics
without deduplication on a broker that has it on."""

from __future__ import annotations

from pulsar_spark.local import ApacheBroker
from pulsar_spark.topic import full_topic_name
from support.waiting import wait_until


def admin_path(topic: str) -> str:
    """``/admin/v2/persistent/tenant/namespace/topic`` for ``topic`` (short or full name)."""
    return full_topic_name(topic).replace("persistent://", "/admin/v2/persistent/", 1)


def unload(broker: ApacheBroker, topic: str) -> None:
    """Unload ``topic`` (a partitioned topic's every partition): the broker closes its
    producers and consumers, which must connect again, and serves it again."""
    broker.admin("PUT", f"{admin_path(topic)}/unload")


def deduplication_status(broker: ApacheBroker, topic: str) -> str:
    """What the broker applies to ``topic`` now: ``Enabled`` or ``Disabled``."""
    status: str = broker.admin("GET", f"{admin_path(topic)}/stats")["deduplicationStatus"]
    return status


def disable_deduplication(broker: ApacheBroker, topic: str) -> None:
    """Create ``topic`` (non-partitioned) with deduplication off, once the broker applies it
    (a topic policy reaches the topic a moment after the admin call answers)."""
    broker.admin("PUT", admin_path(topic))
    broker.admin("POST", f"{admin_path(topic)}/deduplicationEnabled", False)
    wait_until(
        lambda: deduplication_status(broker, topic) == "Disabled",
        f"deduplication off on {topic}",
    )
