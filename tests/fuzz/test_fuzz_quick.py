"""The fuzz suite's quick run, part of every test run (a few seconds); ``make fuzz`` runs the
same targets for hours (``run_fuzz.py``).

Why hypothesis rather than atheris: the targets are Python all the way down to numpy and
protobuf's C code, and what matters here is less coverage feedback inside those libraries than
inputs shaped like the protocol (layers rebuilt around a mutation, batches generated field by
field) and checks that compare decoders with each other. Hypothesis runs inside pytest on the
interpreter the project already uses, shrinks a failure to a small input, and enforces a time
limit per input (its deadline); atheris needs a libFuzzer build, runs its own loop outside
pytest, and would need the same structure-aware mutators written for it. The long run drives
the same mutators and generators from a seeded ``random.Random`` instead, for volume.
"""

from __future__ import annotations

import random
from datetime import timedelta

import pyarrow as pa
import pytest
from fuzz_batches import check, group
from fuzz_inputs import mutate_bytes, mutate_pulsar, pulsar_seeds, tubemq_seeds
from fuzz_targets import avro_agrees, read_pulsar, read_tubemq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.schemas import READING, avro_bytes

PULSAR = pulsar_seeds()
TUBEMQ = tubemq_seeds()
QUICK = settings(
    database=None,
    deadline=timedelta(seconds=2),
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class DrawnChooser:
    """The generators' choices as hypothesis draws, so that a failure shrinks."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def integer(self, low: int, high: int) -> int:
        return self.data.draw(st.integers(low, high))

    def binary(self, size: int) -> bytes:
        return self.data.draw(st.binary(max_size=size))


@pytest.mark.parametrize("seed", range(len(PULSAR)))
def test_every_seed_reaches_the_decoders(seed: int) -> None:
    assert read_pulsar(PULSAR[seed]) > 0


def test_every_tubemq_seed_is_read() -> None:
    assert sum(read_tubemq(seed) for seed in TUBEMQ) > 0


@settings(QUICK, max_examples=400)
@given(st.randoms(use_true_random=False), st.integers(0, len(PULSAR) - 1))
def test_mutated_frames_fail_only_within_the_error_tree(rng: random.Random, seed: int) -> None:
    read_pulsar(mutate_pulsar(rng, PULSAR[seed], PULSAR))


@settings(QUICK, max_examples=300)
@given(st.randoms(use_true_random=False), st.integers(0, len(TUBEMQ) - 1))
def test_mutated_tubemq_frames_fail_only_within_the_error_tree(
    rng: random.Random, seed: int
) -> None:
    read_tubemq(mutate_bytes(rng, TUBEMQ[seed], TUBEMQ))


@settings(QUICK, max_examples=60)
@given(st.data())
def test_generated_batches_read_as_written_on_every_path(data: st.DataObject) -> None:
    check(group(DrawnChooser(data)))


LONGS = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-300, 300))
TEXT = st.text(max_size=12)
RECORDS = st.fixed_dictionaries(
    {
        "name": TEXT,
        "count": LONGS,
        "ratio": st.floats(allow_nan=False),
        "ok": st.booleans(),
        "note": st.none() | TEXT,
        "at": st.integers(-(2**62), 2**62),
        "tags": st.lists(TEXT, max_size=3),
        "place": st.fixed_dictionaries({"city": TEXT, "zip": LONGS}),
    }
)


@settings(QUICK, max_examples=60)
@given(st.lists(RECORDS, min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_the_columnar_avro_decoder_declines_or_reads_as_fastavro(
    records: list[dict[str, object]], rng: random.Random
) -> None:
    """Records of full-range longs and timestamps (some outside Python's dates), some of them
    mutated: the columnar decoder may decline them, never read them otherwise."""
    payloads = [avro_bytes(record, READING) for record in records]
    for index in range(len(payloads)):
        if rng.random() < 0.2:
            payloads[index] = mutate_bytes(rng, payloads[index], payloads)
    avro_agrees(pa.array(payloads, pa.binary()))
