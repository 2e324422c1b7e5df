"""Freezing a worker's objects: once per process, and only what was alive at the first call.

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
    from pulsar_spark.spark.worker_gc import freeze_worker_objects

    def tracked(obj):
        return any(o is obj for o in gc.get_objects())

    before = [1, 2]
    frozen_at_start = gc.get_freeze_count()
    freeze_worker_objects()
    frozen_after_first = gc.get_freeze_count()
    after = [3, 4]
    freeze_worker_objects()
    print(json.dumps({
        "at_start": frozen_at_start,
        "first_froze": frozen_after_first > 0,
        "second_froze_more": gc.get_freeze_count() != frozen_after_first,
        "before_collected": tracked(before),
        "after_collected": tracked(after),
    }))
    """
)


def test_the_first_call_freezes_what_is_alive_and_later_calls_nothing() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == {
        "at_start": 0,
        "first_froze": True,
        "second_froze_more": False,
        "before_collected": False,
        "after_collected": True,
    }
