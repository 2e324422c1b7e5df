"""Shared fixtures: the brokers of a test run, unique topic names, golden frames.

Every test that asks for ``broker`` runs twice, once against each broker of the run (see
:data:`BROKERS`): a pulsar-lite broker, fast to start and the one the demo embeds, and an
Apache Pulsar standalone (``support/apache_fixtures.py``), the broker users run. A test of
pulsar-lite itself or of one of its quirks is marked ``pulsar_lite`` and runs against
pulsar-lite only; ``apache`` marks a test of Apache-only behaviour (it asks for
``apache_broker``). Both brokers are started lazily, the first time a test asks for one
(unit tests never start them), and stopped when the session ends.

pulsar-lite can only create partitioned topics from its metadata file at startup, so every
partitioned topic a test may need is seeded then; the Apache broker creates the same ones
through its admin API:

- ``part2``, ``part3``, ``part4`` (see :data:`SEEDED_PARTITIONED_TOPICS`): shared by all
  tests, so only for checks that do not count messages;
- on pulsar-lite, a pool of ``pool-p{n}-{i}`` topics (``n`` in :data:`POOL_PARTITIONS`,
  ``i`` below :data:`POOL_SIZE`) handed out one per request by ``pooled_partitioned_topic``,
  for tests that need a partitioned topic nobody else writes to; on Apache, that fixture
  creates a new topic each time.

Any other topic name is auto-created non-partitioned on first use; :func:`unique_topic`
makes names that no other test uses.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pulsar_spark.local import ApacheBroker, LocalBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from support.apache_fixtures import NewPartitionedTopics

pytest_plugins = [
    "support.fixtures",
    "support.broker_fixtures",
    "support.apache_fixtures",
    "support.apache_secure",
    "support.geo_fixtures",
    "support.tubemq_fixtures",
]

BROKERS: tuple[str, ...] = ("pulsar-lite", "apache")
"""The brokers a test asking for ``broker`` runs against, as its parameter ids."""

SEEDED_PARTITIONED_TOPICS: dict[str, int] = {"part2": 2, "part3": 3, "part4": 4}
"""Partitioned topics every test run has, shared by all tests."""

POOL_PARTITIONS: tuple[int, ...] = (2, 3, 4)
"""Partition counts available from ``pooled_partitioned_topic``."""

POOL_SIZE = 48
"""How many fresh topics of each partition count a test run can hand out."""

FRAMES_DIR = Path(__file__).parent / "data" / "frames"
"""Golden broker->client frames written by ``tests/tools/capture_frames.py``."""


def unique_topic(prefix: str = "t") -> str:
    """Return a short topic name no other test uses, e.g. ``t-1f3a9c0b2d4e``."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class PartitionedTopicPool:
    """Names of pre-seeded partitioned topics, each handed out at most once per test run."""

    def __init__(
        self, partitions: tuple[int, ...] = POOL_PARTITIONS, size: int = POOL_SIZE
    ) -> None:
        """Prepare ``size`` names ``pool-p{n}-{i}`` for every ``n`` in ``partitions``."""
        self._free = {n: [f"pool-p{n}-{i}" for i in range(size)] for n in partitions}
        self._seeds = {name: n for n, names in self._free.items() for name in names}

    def seeds(self) -> dict[str, int]:
        """Every pool topic with its partition count, to seed the broker with."""
        return dict(self._seeds)

    def take(self, partitions: int) -> str:
        """Return an unused partitioned topic with ``partitions`` partitions."""
        if partitions not in self._free:
            raise ValueError(f"the pool has topics with {sorted(self._free)} partitions only")
        if not self._free[partitions]:
            raise RuntimeError(f"the pool of {partitions}-partition topics is used up")
        return self._free[partitions].pop(0)


@pytest.fixture(scope="session")
def lite_topic_pool() -> PartitionedTopicPool:
    """The pool of fresh partitioned topics seeded into ``lite_broker``."""
    return PartitionedTopicPool()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test that asks for ``broker`` against every broker it applies to."""
    if "broker" not in metafunc.fixturenames:
        return
    only_lite = metafunc.definition.get_closest_marker("pulsar_lite") is not None
    brokers = BROKERS[:1] if only_lite else BROKERS
    metafunc.parametrize("broker", brokers, indirect=True, scope="session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test's run against Apache ``apache``, so ``-m apache`` selects them all."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("broker") == "apache":
            item.add_marker(pytest.mark.apache)


@pytest.fixture(scope="session")
def seeded_partitioned_topics() -> dict[str, int]:
    """The partitioned topics every broker of the run has (:data:`SEEDED_PARTITIONED_TOPICS`)."""
    return dict(SEEDED_PARTITIONED_TOPICS)


@pytest.fixture(scope="session")
def lite_broker(lite_topic_pool: PartitionedTopicPool) -> Iterator[LocalBroker]:
    """A pulsar-lite broker on free loopback ports, shared by the whole test run.

    It has the partitioned topics in :data:`SEEDED_PARTITIONED_TOPICS` and the pool; its
    data lives in a temporary directory removed at the end of the session. Tests must not
    stop or restart it: start their own :class:`LocalBroker` for that.
    """
    seeds = {**SEEDED_PARTITIONED_TOPICS, **lite_topic_pool.seeds()}
    local = LocalBroker.start(partitioned_topics=seeds)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="session")
def broker(request: pytest.FixtureRequest) -> LocalBroker | ApacheBroker:
    """The session broker this run of the test is against (see :data:`BROKERS`)."""
    fixture = "apache_broker" if request.param == "apache" else "lite_broker"
    started: LocalBroker | ApacheBroker = request.getfixturevalue(fixture)
    return started


@pytest.fixture
def service_url(broker: LocalBroker | ApacheBroker) -> str:
    """The session broker's ``pulsar://127.0.0.1:PORT`` URL."""
    return broker.service_url


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A non-partitioned topic name unique to this test, prefixed with the test's name."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40] or "t"
    return unique_topic(stem)


@pytest.fixture(scope="session")
def partitioned_topic_pool(
    broker: LocalBroker | ApacheBroker, lite_topic_pool: PartitionedTopicPool
) -> PartitionedTopicPool | NewPartitionedTopics:
    """Fresh partitioned topics of the session broker: ``take(partitions)`` gives one.

    On pulsar-lite they come from the seeded pool, so ``partitions`` must be one of
    :data:`POOL_PARTITIONS`; on Apache, each is created then. Either way, no other test has
    written to the topic.
    """
    from support.apache_fixtures import NewPartitionedTopics

    if isinstance(broker, LocalBroker):
        return lite_topic_pool
    return NewPartitionedTopics(broker, POOL_PARTITIONS)


@pytest.fixture
def pooled_partitioned_topic(
    partitioned_topic_pool: PartitionedTopicPool | NewPartitionedTopics,
) -> Callable[[int], str]:
    """A function ``(partitions) -> short topic name`` giving an unused partitioned topic."""
    return partitioned_topic_pool.take


@pytest.fixture(scope="session")
def golden_frame() -> Callable[[str], bytes]:
    """A function ``(file name) -> bytes`` reading a captured frame from ``tests/data/frames``."""

    def read(name: str) -> bytes:
        return (FRAMES_DIR / name).read_bytes()

    return read


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local SparkSession for the whole test run, with the ``pulsar`` format registered.

    Started the first time a test asks for it (starting the JVM takes several seconds) and
    stopped when the session ends. Spark's Python workers run ``python3`` from ``PATH`` unless
    told otherwise, so the worker and driver interpreter is pinned to this one before the JVM
    starts: tasks then import the same pyarrow and pulsar_spark as the tests.
    """
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PYSPARK_PYTHON", sys.executable)
        env.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        import pulsar_spark

        session = (
            SparkSession.builder.master("local[2]")
            .appName("pulsar-spark-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        try:
            pulsar_spark.register(session)
            yield session
        finally:
            session.stop()
