"""The long fuzz run (``make fuzz``): mutated inputs through the read path, generated batches
through every decoding path and generated Avro records through both Avro decoders, for as many
inputs or seconds as asked.

    python tests/fuzz/run_fuzz.py --inputs 10000000 --batches 1000000 [--seconds 3600]

Counts inputs, exceptions outside the project's error tree (each input saved under
``--findings`` with its traceback), the slowest input and those over ``--slow`` seconds, and
generated batches whose paths disagree. Exits non-zero when anything was found.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from fuzz_batches import check_batches  # noqa: E402
from fuzz_inputs import mutate_bytes, mutate_pulsar, pulsar_seeds, tubemq_seeds  # noqa: E402
from fuzz_targets import check_avro, read_pulsar, read_tubemq  # noqa: E402


@dataclass
class Tally:
    inputs: int = 0
    findings: int = 0
    slow: int = 0
    slowest: float = 0.0
    seconds: float = 0.0


def fuzz(
    name: str,
    target: Callable[[bytes], int],
    make: Callable[[random.Random], bytes],
    *,
    runs: tuple[int, float, float],
    findings: Path,
    seed: int,
) -> Tally:
    """``make``'s inputs through ``target`` until ``runs`` (inputs, seconds, slow limit) ends."""
    inputs, seconds, slow = runs
    rng = random.Random(seed)
    tally = Tally()
    start = time.monotonic()
    while tally.inputs < inputs and time.monotonic() - start < seconds:
        data = make(rng)
        began = time.perf_counter()
        try:
            target(data)
        except Exception:  # outside the error tree, or two paths disagreeing
            tally.findings += 1
            _save(findings, name, data, traceback.format_exc())
        took = time.perf_counter() - began
        if tally.inputs:  # the first input's time is mostly libraries loading their code
            tally.slowest = max(tally.slowest, took)
            if took > slow:
                tally.slow += 1
                _save(findings, f"{name}-slow", data, f"{took:.3f} s")
        tally.inputs += 1
        if tally.inputs % 100_000 == 0:
            print(f"  {name}: {tally.inputs:,} inputs, {tally.findings} findings", flush=True)
    tally.seconds = time.monotonic() - start
    return tally


def _save(findings: Path, name: str, data: bytes, why: str) -> None:
    findings.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-{hashlib.sha1(data).hexdigest()[:12]}"
    (findings / f"{stem}.bin").write_bytes(data)
    (findings / f"{stem}.txt").write_text(why)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=10_000_000, help="mutated inputs")
    parser.add_argument("--batches", type=int, default=1_000_000, help="generated batches")
    parser.add_argument("--seconds", type=float, default=float("inf"), help="per part")
    parser.add_argument("--slow", type=float, default=2.0, help="seconds an input may take")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--findings", type=Path, default=HERE / "findings")
    parser.add_argument("--parts", default="pulsar,tubemq,batches,avro")
    args = parser.parse_args()
    pulsar, tubemq = pulsar_seeds(), tubemq_seeds()
    parts: dict[str, tuple[Callable[[bytes], int], Callable[[random.Random], bytes], int]] = {
        "pulsar": (read_pulsar, lambda r: mutate_pulsar(r, r.choice(pulsar), pulsar), args.inputs),
        "tubemq": (
            read_tubemq,
            lambda r: mutate_bytes(r, r.choice(tubemq), tubemq),
            args.inputs // 10,
        ),
        "batches": (check_batches, lambda r: r.randbytes(8), args.batches),
        "avro": (check_avro, lambda r: r.randbytes(8), args.batches),
    }
    report = {}
    for name in args.parts.split(","):
        target, make, count = parts[name]
        runs = (count, args.seconds, args.slow)
        tally = fuzz(name, target, make, runs=runs, findings=args.findings, seed=args.seed)
        report[name] = asdict(tally)
        print(f"{name}: {json.dumps(report[name])}", flush=True)
    return 1 if any(t["findings"] or t["slow"] for t in report.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
