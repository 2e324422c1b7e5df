"""Keeping the collection PySpark runs after every task cheap.

How this works
--------------
A reused PySpark worker runs a full ``gc.collect()`` after each task it finishes. A full
collection walks every object the cyclic collector tracks, and a worker that has read from
Pulsar tracks about 94,000: the functions, classes and dicts of PySpark, pyarrow, numpy,
protobuf and this package. Measured on two cores, that walk took 30-40 ms of CPU per task,
half of this package's own time for a task of 250,000 small messages, and the worker's next
task waits for it.

PySpark plans each read and write in such workers too: ``schema()``, then ``reader()`` and
``partitions()`` (or ``writer()``), each call in a worker that collects after it. For a read
that was two more collections of 30-40 ms per query.

The first time a worker process runs one of this package's tasks or planning calls,
:func:`freeze_worker_objects` moves every object then alive into the permanent generation
(``gc.freeze``), which later collections skip. Almost all of them are modules, classes and
functions, which live as long as the process anyway. A task also imports modules on its way
(pyarrow's compute functions, pandas): 27,000 more objects, 6-9 ms a collection. So a later
task freezes again when more than :data:`SURVIVORS` objects outlived the collection after the
previous task; by then that collection has freed the previous task's garbage, so what is frozen
is what stays. What tasks create and drop is collected as before. The running task's own
objects are frozen too: should they later become unreachable cycles, those cycles stay in
memory. That happens at the first task and at the rare task that freezes again, so it is
bounded.

Whether this process froze already is kept in a flag, not asked of ``gc.get_freeze_count()``:
that walks every frozen object, 7 ms a task for a worker's 85,000.
"""

from __future__ import annotations

import gc

SURVIVORS = 10_000
"""Objects in the oldest generation at the start of a task above which it freezes them."""

_frozen = False  # whether this process has frozen its objects


def freeze_worker_objects() -> None:
    """Freeze what is alive now, at a process's first task and when :data:`SURVIVORS` objects
    have accumulated since."""
    global _frozen  # noqa: PLW0603 - one flag per process, as gc's own state is
    if not _frozen or len(gc.get_objects(generation=2)) >= SURVIVORS:
        gc.freeze()
        _frozen = True
