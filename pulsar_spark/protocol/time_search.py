"""The first entry published at or after a time, among entry ids, in few reads.

How this works
--------------
The caller gives the entry ids to search, ``first`` to ``last``, and ``publish_time(entry_id)``,
which costs one read from the broker each time: the search asks as few of them as it can. The
answer is the first entry whose publish time is at or after ``millis``; publish times are
assumed to grow with the entry id (equal times are fine).

1. ``last`` is asked first: published before ``millis``, nothing qualifies (one read). Then
   ``first``: published at or after, it is the answer (two reads).
2. Otherwise the answer lies in ``(low, high]``, where ``low`` is known to be published before
   ``millis`` and ``high`` at or after it, and each read narrows that interval. Producers publish
   at a fairly steady rate, so publish times grow roughly in proportion to entry ids, and the
   entry where the straight line from ``(low, its time)`` to ``(high, its time)`` reaches
   ``millis`` is a good guess: on evenly spaced times, two reads find the answer and the entry
   before it, whatever the number of entries.
3. The guess is kept near the middle as in the ITP method (Oliveira and Takahashi, 2020):
   it is moved towards the middle by a margin that shrinks with the square of the interval
   (a guess exactly on the line tends to land on the same side again and again when the
   times bend, here a pause or a burst), and never lies farther from the middle than the
   reads still allowed permit. So the number of reads stays within one more than bisection
   would need: at most ``2 + ceil(log2(last - first)) + 1``, however the times are spread.

No I/O happens here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

PublishTime = Callable[[int], int]
"""The publish time (ms) of the entry with this id, read from the broker."""

SPARE_READS = 1
"""Reads allowed beyond what bisection would need (ITP's n0)."""
TRUNCATION = 0.05
"""How far a guess moves towards the middle: this share of ``width**2 / initial width``."""


def first_at_or_after(publish_time: PublishTime, first: int, last: int, millis: int) -> int | None:
    """The first entry id in ``first..last`` published at or after ``millis`` (ms), or None
    when ``last`` was published before it."""
    last_time = publish_time(last)
    if last_time < millis:
        return None
    if last == first:
        return first
    first_time = publish_time(first)
    if first_time >= millis:
        return first
    return _narrow(
        publish_time,
        millis,
        low=first,
        below=first_time - millis,
        high=last,
        above=last_time - millis,
    )


def _narrow(
    publish_time: PublishTime, millis: int, *, low: int, below: int, high: int, above: int
) -> int:
    """The answer in ``(low, high]``: ``low`` was published ``-below`` ms before ``millis``,
    ``high`` ``above`` ms at or after it."""
    initial = high - low
    allowed = math.ceil(math.log2(initial)) + SPARE_READS
    read = 0
    while high - low > 1:
        width = high - low
        middle = low + width / 2
        guess = low + width * (-below / (above - below))  # where the line reaches millis
        towards = 1 if middle >= guess else -1
        margin = TRUNCATION * width * width / initial
        guess = guess + towards * margin if margin <= abs(middle - guess) else middle
        slack = max(0.0, 2 ** (allowed - read - 1) - width / 2)  # how far from the middle
        if abs(guess - middle) > slack:
            guess = middle - towards * slack
        entry = min(max(math.ceil(guess), low + 1), high - 1)
        offset = publish_time(entry) - millis
        if offset < 0:
            low, below = entry, offset
        else:
            high, above = entry, offset
        read += 1
    return high
