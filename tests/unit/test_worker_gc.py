"""Freezing a worker's objects: at the first task, then only when many outlived a collection.

Each case runs in a fresh interpreter, so nothing this test process froze or did before counts.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import gc, json
    from pulsar_spark.spark.worker_gc import SURVIVORS, freeze_worker_objects

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
