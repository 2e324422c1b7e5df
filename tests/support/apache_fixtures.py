"""The Apache Pulsar standalone of a test run, configured as a production cluster would be.

Registered from ``tests/conftest.py``. ``apache_broker`` is started the first time a test asks
for it (about 15 s, plus about 10 s the first time a machine fetches the release from Maven
Central) and stopped when the session ends. It has deduplication, batch-index
acknowledgements and the transaction coordinator on, keeps inactive topics, and has the
shared partitioned topics of ``tests/conftest.py`` created through its admin API.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from pulsar_spark.local import ApacheBroker
from pulsar_spark.topic import full_topic_name

APACHE_SETTINGS: Mapping[str, str] = {
    "brokerDeduplicationEnabled": "true",
    "acknowledgmentAtBatchIndexLevelEnabled": "true",
    "transactionCoordinatorEnabled": "true",
    # Keep messages no subscription holds for an hour (Apache's default is not at all: a
    # ledger closed by an unload or a restart would go within minutes, under a test's reads).
    "defaultRetentionTimeInMinutes": "60",
    "defaultRetentionSizeInMB": "1024",
    # 10 KB under Apache's 5 MB, which is what the official client assumes of a broker that
    # announces no limit (pulsar-lite): the C++ client keeps the last limit any broker
    # announced for the whole process, and chunks cut to a full 5 MB after talking to an
    # Apache broker make frames that pulsar-lite refuses, over and over.
    "maxMessageSize": str(5 * 1024 * 1024 - 10 * 1024),
}
"""``standalone.conf`` keys the session's Apache broker sets beyond ApacheBroker's own."""

STARTS: list[ApacheBroker] = []
"""Every Apache broker the session started, for the report at its end."""


def create_partitioned_topic(broker: ApacheBroker, topic: str, partitions: int) -> None:
    """Create ``topic`` (short or full name) with ``partitions`` partitions on ``broker``."""
    path = full_topic_name(topic).replace("persistent://", "/admin/v2/persistent/", 1)
    broker.admin("PUT", f"{path}/partitions", partitions)


class NewPartitionedTopics:
    """Partitioned topics of an Apache broker handed out as pulsar-lite's pool does them."""

    def __init__(self, broker: ApacheBroker, counts: tuple[int, ...]) -> None:
        """Create topics on ``broker`` with any of ``counts`` partitions."""
        self._broker = broker
        self._counts = counts

    def take(self, partitions: int) -> str:
        """Create and return a new topic with ``partitions`` partitions."""
        if partitions not in self._counts:
            raise ValueError(f"the pool has topics with {list(self._counts)} partitions only")
        name = f"pool-p{partitions}-{uuid.uuid4().hex[:12]}"
        create_partitioned_topic(self._broker, name, partitions)
        return name


def start_apache(config: Mapping[str, str] | None = None, **kwargs: Any) -> ApacheBroker:
    """Start an Apache broker with the session's settings, ``config`` added to them.

    ``kwargs`` go to :meth:`ApacheBroker.start`.
    """
    broker = ApacheBroker.start(config={**APACHE_SETTINGS, **(config or {})}, **kwargs)
    STARTS.append(broker)
    return broker


@pytest.fixture(scope="session")
def apache_broker(seeded_partitioned_topics: Mapping[str, int]) -> Iterator[ApacheBroker]:
    """The session's Apache Pulsar standalone, with the shared partitioned topics created.

    Tests must not stop or restart it: start their own with :func:`start_apache` for that.
    """
    broker = start_apache()
    try:
        for topic, partitions in seeded_partitioned_topics.items():
            create_partitioned_topic(broker, topic, partitions)
        yield broker
    finally:
        broker.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which Apache Pulsar the run used and how long it took to fetch and start."""
    if not STARTS:
        return
    first = STARTS[0]
    fetched = first.distribution.fetched_in
    terminalreporter.write_line(
        f"Apache Pulsar {first.version}: {len(STARTS)} broker(s) started, the first in "
        f"{first.started_in:.1f} s"
        + (f"; the release was fetched from Maven Central in {fetched:.1f} s" if fetched else "")
    )
