"""Keeping the collection PySpark runs after every task cheap.

How this works
--------------
A reused PySpark worker runs a full ``gc.collect()`` after each task it finishes. A full
collection walks every object the cyclic collector tracks, and a worker that has read from
Pulsar tracks about 94,000: the functions, classes and dicts of PySpark, pyarrow, numpy,
protobuf and this package. Measured on two cores, that walk took 30-40 ms of CPU per task, a
third as much as decoding the task's 250,000 messages, and the worker's next task waits for it.

The first time a worker process runs one of this package's tasks, :func:`freeze_worker_objects`
moves every object then alive into the permanent generation (``gc.freeze``), which later
collections skip. Almost all of them are modules, classes and functions, which live as long as
the process anyway. What tasks create afterwards is collected as before. The running task's own
objects are frozen too: should they later become unreachable cycles, those cycles stay in
memory. That happens at most once per worker process, so it is bounded.
"""

from __future__ import annotations

import functools
import gc


@functools.cache
def freeze_worker_objects() -> None:
    """Freeze what is alive now, the first time a task of this process calls it."""
    gc.freeze()
