"""The search for the first entry published at or after a time: the exact entry, in every case,
and a bounded number of reads (each one a read from the broker), on even times, bursts, pauses,
equal times, and times all before or all after.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import pytest

from pulsar_spark.protocol.time_search import SPARE_READS, first_at_or_after


class Entries:
    """Publish times by entry id (``first`` is the id of ``times[0]``), counting the reads."""

    def __init__(self, times: Sequence[int], first: int = 0) -> None:
        self.times = list(times)
        self.first = first
        self.read: list[int] = []

    @property
    def last(self) -> int:
        return self.first + len(self.times) - 1

    def publish_time(self, entry_id: int) -> int:
        assert self.first <= entry_id <= self.last, entry_id
        assert entry_id not in self.read, f"entry {entry_id} read twice"
        self.read.append(entry_id)
        return self.times[entry_id - self.first]

    def search(self, millis: int) -> int | None:
        self.read = []
        return first_at_or_after(self.publish_time, self.first, self.last, millis)

    def expected(self, millis: int) -> int | None:
        return next((self.first + i for i, t in enumerate(self.times) if t >= millis), None)


def bound(entries: Entries) -> int:
    """Reads allowed: the two ends, then at most one more than bisection."""
    width = entries.last - entries.first
    return 2 + (math.ceil(math.log2(width)) + SPARE_READS if width > 1 else 0)


def around_each_time(times: Sequence[int]) -> list[int]:
    return sorted({t + d for t in times for d in (-1, 0, 1)})


def assert_every_time(entries: Entries, millis: Sequence[int], most: int) -> list[int]:
    """Search each of ``millis``: the exact entry, within ``most`` reads; the reads made."""
    counts = []
    for m in millis:
        assert entries.search(m) == entries.expected(m), m
        assert len(entries.read) <= most, (m, entries.read)
        counts.append(len(entries.read))
    return counts


def test_evenly_spaced_times_need_at_most_seven_reads_of_4000() -> None:
    entries = Entries([1_000 + 10 * i for i in range(4_000)])
    counts = assert_every_time(entries, range(990, 41_001, 3), most=7)
    assert bound(entries) == 15  # bisection alone: 14
    assert sum(counts) / len(counts) < 6.5


def test_a_pause_before_the_last_hundredth_stays_within_the_bound() -> None:
    # 3,960 entries 10 ms apart, a pause of 1.1 s, 40 more: a read of the last 1% after a pause
    times = [10 * i for i in range(3_960)] + [39_590 + 1_100 + 10 * i for i in range(40)]
    entries = Entries(times)
    for millis, most in ((40_000, 9), (40_690, 10), (39_591, 15)):
        assert entries.search(millis) == 3_960
        assert len(entries.read) <= most, entries.read
    assert_every_time(entries, around_each_time(times), most=bound(entries))


@pytest.mark.parametrize("burst", [1, 7, 500, 3_999])
def test_bursts_of_equal_times_find_the_first_entry_of_a_burst(burst: int) -> None:
    times = [1_000 * (i // burst) for i in range(4_000)]
    entries = Entries(times)
    assert entries.search(1_000) == burst
    assert_every_time(entries, around_each_time(times), most=bound(entries))


def test_all_times_equal() -> None:
    entries = Entries([5_000] * 100)
    assert (entries.search(5_000), entries.read) == (0, [99, 0])
    assert (entries.search(4_999), entries.read) == (0, [99, 0])
    assert (entries.search(5_001), entries.read) == (None, [99])


def test_all_before_reads_only_the_last_entry() -> None:
    entries = Entries([10, 20, 30], first=7)
    assert (entries.search(31), entries.read) == (None, [9])


def test_all_after_reads_the_last_and_the_first_entry() -> None:
    entries = Entries([10, 20, 30], first=7)
    assert (entries.search(10), entries.read) == (7, [9, 7])
    assert (entries.search(-5), entries.read) == (7, [9, 7])


def test_one_entry_and_two_entries() -> None:
    one = Entries([50], first=3)
    assert (one.search(50), one.read) == (3, [3])
    assert (one.search(51), one.read) == (None, [3])
    two = Entries([50, 60], first=3)
    assert (two.search(55), two.read) == (4, [4, 3])
    assert (two.search(60), two.read) == (4, [4, 3])
    assert (two.search(50), two.read) == (3, [4, 3])


def test_a_far_away_last_entry_and_a_far_away_first_entry() -> None:
    late = Entries([*range(3_999), 10**12])
    assert (late.search(3_999), len(late.read) <= bound(late)) == (3_999, True)
    assert_every_time(late, around_each_time(late.times), most=bound(late))
    early = Entries([0, *range(10**12, 10**12 + 3_999)])
    assert early.search(1) == 1
    assert_every_time(early, around_each_time(early.times), most=bound(early))


def test_times_growing_exponentially() -> None:
    entries = Entries([int(1.002**i) for i in range(4_000)], first=1_000)
    assert_every_time(entries, around_each_time(entries.times), most=bound(entries))


@pytest.mark.parametrize("seed", range(20))
def test_random_times_find_the_exact_entry_within_the_bound(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.choice([3, 4, 5, 17, 100, 1_000, 5_000])
    spread = rng.choice([3, 100, 10**6])
    times = sorted(rng.randint(0, spread) for _ in range(size))
    entries = Entries(times, first=rng.randint(0, 50))
    millis = around_each_time(times) + [rng.randint(-1, spread + 1) for _ in range(50)]
    assert_every_time(entries, millis, most=bound(entries))
