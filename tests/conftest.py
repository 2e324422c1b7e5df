"""Shared fixtures: one pulsar-lite broker per test run, unique topic names, golden frames.

The broker is started lazily, the first time a test asks for ``broker`` (unit tests never
start it), and stopped when the session ends. pulsar-lite can only create partitioned topics
from its metadata file at startup, so every partitioned topic a test may need is seeded then:

- ``part2``, ``part3``, ``part4`` (see :data:`SEEDED_PARTITIONED_TOPICS`): shared by all
  tests, so only for checks that do not count messages;
- a pool of ``pool-p{n}-{i}`` topics (``n`` in :data:`POOL_PARTITIONS`, ``i`` below
  :data:`POOL_SIZE`) handed out one per request by ``pooled_partitioned_topic``, for tests
  that need a partitioned topic nobody else writes to.

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

from pulsar_spark.local import LocalBroker

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytest_plugins = ["support.fixtures", "support.broker_fixtures", "support.tubemq_fixtures"]

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
def partitioned_topic_pool() -> PartitionedTopicPool:
    """The session's pool of fresh partitioned topics (seeded into ``broker``)."""
    return PartitionedTopicPool()


@pytest.fixture(scope="session")
def broker(partitioned_topic_pool: PartitionedTopicPool) -> Iterator[LocalBroker]:
    """A pulsar-lite broker on free loopback ports, shared by the whole test run.

    It has the partitioned topics in :data:`SEEDED_PARTITIONED_TOPICS` and the pool; its
    data lives in a temporary directory removed at the end of the session. Tests must not
    stop or restart it: start their own :class:`LocalBroker` for that.
    """
    seeds = {**SEEDED_PARTITIONED_TOPICS, **partitioned_topic_pool.seeds()}
    local = LocalBroker.start(partitioned_topics=seeds)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def service_url(broker: LocalBroker) -> str:
    """The session broker's ``pulsar://127.0.0.1:PORT`` URL."""
    return broker.service_url


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A non-partitioned topic name unique to this test, prefixed with the test's name."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40] or "t"
    return unique_topic(stem)


@pytest.fixture
def pooled_partitioned_topic(
    broker: LocalBroker, partitioned_topic_pool: PartitionedTopicPool
) -> Callable[[int], str]:
    """A function ``(partitions) -> short topic name`` giving an unused partitioned topic.

    Topics come from the seeded pool, so ``partitions`` must be one of
    :data:`POOL_PARTITIONS`; each call returns a topic no other test has written to.
    """
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
