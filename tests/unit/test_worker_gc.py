"""Freezing a worker's objects: at the first task, then only when many outlived a collection.

Each case runs in a fresh interpreter, so nothing this test process froze or did before counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import gc, json
    from pulsar_spark.common.worker_gc import SURVIVORS, freeze_worker_objects

    def tracked(obj):
        return any(o is obj for o in gc.get_objects())

    before = [1, 2]
    at_start = gc.get_freeze_count()
    freeze_worker_objects()  # the first task
    first = gc.get_freeze_count()
    few = [[n] for n in range(100)]
    gc.collect()  # what PySpark does after every task
    freeze_worker_objects()  # a task after a few objects were kept
    second = gc.get_freeze_count()
    many = [[n] for n in range(SURVIVORS)]
    gc.collect()
    freeze_worker_objects()  # a task after many were
    third = gc.get_freeze_count()
    print(json.dumps({
        "at_start": at_start,
        "first_froze": first > 0,
        "second_froze": second != first,
        "third_froze": third > second,
        "before_collected": tracked(before),
        "few_collected": tracked(few),
        "many_collected": tracked(many),
    }))
    """
)


def test_freezes_at_the_first_task_and_when_many_objects_outlived_a_collection() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == {
        "at_start": 0,
        "first_froze": True,
        "second_froze": False,
        "third_froze": True,
        "before_collected": False,
        "few_collected": False,
        "many_collected": False,
    }


PLANNING = textwrap.dedent(
    """
    import gc, json, sys
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import BinaryType, StructField, StructType
    from pulsar_spark.arrow.schema import ARROW_SCHEMA
    from pulsar_spark.spark.datasource import PulsarDataSource
    from pulsar_spark.tubemq.spark.datasource import TubeMQDataSource

    pulsar = {"service.url": "pulsar://127.0.0.1:1", "topic": "t"}
    raw = {**pulsar, "valueFormat": "raw"}  # nothing to look up: no broker is asked
    tubemq = {"master.addresses": "127.0.0.1:1", "topic": "t"}
    written = StructType([StructField("value", BinaryType())])
    calls = {
        "pulsar schema": lambda: PulsarDataSource(raw).schema(),
        "pulsar reader": lambda: PulsarDataSource(raw).reader(from_arrow_schema(ARROW_SCHEMA)),
        "pulsar writer": lambda: PulsarDataSource(pulsar).writer(written, False),
        "tubemq schema": lambda: TubeMQDataSource(tubemq).schema(),
    }
    before = gc.get_freeze_count()
    calls[sys.argv[1]]()
    print(json.dumps({"before": before, "frozen": gc.get_freeze_count() > 0}))
    """
)


@pytest.mark.parametrize(
    "call", ["pulsar schema", "pulsar reader", "pulsar writer", "tubemq schema"]
)
def test_planning_calls_freeze_the_planning_worker(call: str) -> None:
    """PySpark runs these in reused workers that collect after each call, as after a task."""
    done = subprocess.run(
        [sys.executable, "-c", PLANNING, call],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout) == {"before": 0, "frozen": True}
