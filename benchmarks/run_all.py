"""Run the benchmarks one after another (``make bench``).

Each benchmark runs as its own process with this interpreter, the repository on
``PYTHONPATH`` and a time limit; a script that does not exist is skipped. The exit status is
non-zero if any benchmark failed or timed out. Results land in ``benchmarks/results/``.

    python benchmarks/run_all.py                 # all of them
    python benchmarks/run_all.py bench_read      # only the ones named
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BENCHMARKS = (
    "bench_codecs",
    "bench_decode",
    "bench_avro",
    "bench_read",
    "bench_scale",
    "bench_stream",
    "bench_latency",
    "bench_write",
    "bench_tls",
    "bench_tubemq",
    "bench_tubemq_decode",
    "bench_peers",
)
TIME_LIMIT = 1800.0  # seconds per benchmark


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"a subset of {', '.join(BENCHMARKS)}")
    parser.add_argument("--time-limit", type=float, default=TIME_LIMIT)
    args = parser.parse_args()
    names = [n.removesuffix(".py") for n in args.names] or list(BENCHMARKS)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    outcomes: list[tuple[str, str, float]] = []
    for name in names:
        script = HERE / f"{name}.py"
        if not script.exists():
            print(f"== {name}: skipped ({script.name} does not exist)", flush=True)
            outcomes.append((name, "skipped", 0.0))
            continue
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        outcome = run(script, env, args.time_limit)
        outcomes.append((name, outcome, time.perf_counter() - start))
        print(flush=True)

    print("== summary")
    for name, outcome, seconds in outcomes:
        print(f"  {name:14s} {outcome:28s} {seconds:7.1f} s")
    return 0 if all(o in ("ok", "skipped") for _, o, _ in outcomes) else 1


def run(script: Path, env: dict[str, str], time_limit: float) -> str:
    """Run one benchmark in its own process group, so a timeout also ends its JVM and broker."""
    process = subprocess.Popen(
        [sys.executable, str(script)], cwd=REPO, env=env, start_new_session=True
    )
    try:
        code = process.wait(timeout=time_limit)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        return f"timed out after {time_limit:g} s"
    return "ok" if code == 0 else f"failed (exit {code})"


if __name__ == "__main__":
    sys.exit(main())
