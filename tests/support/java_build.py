"""Java programs of the tests: their jars from Maven Central and their classes, both cached.

- :func:`maven_jars` copies the dependencies a ``pom.xml`` lists into a folder of the cache
  Apache Pulsar's release goes to (:func:`pulsar_spark.local.apache.cache_dir`), once per
  content of the POM and Maven arguments: a stamp file holds their hash.
- :func:`compiled` compiles Java sources with ``javac`` into a folder of that cache named after
  a hash of the sources and the classpath, so a run compiles them only when they change.

Both hold a lock file while they work, so test processes started together share the result.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pulsar_spark.local.apache import cache_dir, locked


def maven_jars(
    pom: Path, into: Path, goals: Sequence[str], *, what: str, progress: bool = False
) -> Path:
    """``into/lib`` holding the jars ``mvn -f pom goals... -DoutputDirectory=...`` copies,
    fetched the first time ``pom`` or ``goals`` are seen (the time it took goes to stderr;
    with ``progress``, Maven's own output too, each download as it happens).

    Raises:
        RuntimeError: ``mvn`` is missing or failed (the message ends with its output).
    """
    lib = into / "lib"
    stamp = into / "pom.sha256"
    wanted = hashlib.sha256(pom.read_bytes() + "\0".join(goals).encode()).hexdigest()
    into.mkdir(parents=True, exist_ok=True)
    with locked(into / ".lock"):
        if stamp.exists() and stamp.read_text() == wanted and lib.is_dir():
            return lib
        if shutil.which("mvn") is None:
            raise RuntimeError(f"{what} needs Maven (mvn) on PATH")
        partial = into / "lib.partial"
        shutil.rmtree(partial, ignore_errors=True)
        started = time.monotonic()
        quiet = [] if progress else ["-q"]
        command = ["mvn", "-B", *quiet, "-f", str(pom), *goals, f"-DoutputDirectory={partial}"]
        if progress:
            print(f"{what}: fetching jars from Maven Central ...", file=sys.stderr, flush=True)
        run(command, timeout=900, echo=progress)
        shutil.rmtree(lib, ignore_errors=True)
        partial.rename(lib)
        stamp.write_text(wanted)
        jars = len(list(lib.glob("*.jar")))
        took = time.monotonic() - started
        print(f"{what}: {jars} jars from Maven Central in {took:.1f} s, in {lib}", file=sys.stderr)
        return lib


def compiled(sources: Sequence[Path], classpath: str, *, what: str) -> Path:
    """The folder of ``sources`` compiled against ``classpath``, compiled on the first call
    after either changes (the time it took goes to stderr).

    Raises:
        RuntimeError: ``javac`` is missing or failed (the message ends with its output).
    """
    digest = hashlib.sha256(classpath.encode())
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    root = cache_dir() / "java-classes"
    classes = root / digest.hexdigest()[:16]
    root.mkdir(parents=True, exist_ok=True)
    with locked(root / ".lock"):
        if (classes / ".done").exists():
            return classes
        if shutil.which("javac") is None:
            raise RuntimeError(f"{what} needs a JDK (javac) on PATH")
        shutil.rmtree(classes, ignore_errors=True)
        started = time.monotonic()
        command = ["javac", "-nowarn", "-cp", classpath, "-d", str(classes)]
        run([*command, *(str(source) for source in sources)], timeout=300)
        (classes / ".done").touch()
        took = time.monotonic() - started
        print(f"{what}: compiled in {took:.1f} s, into {classes}", file=sys.stderr)
        return classes


def run(command: list[str], *, timeout: float, echo: bool = False) -> str:
    """Run ``command``; its standard output, or RuntimeError with both outputs' ends (with
    ``echo``, both go to stderr as they come instead, and the error says where to look)."""
    if echo:
        try:
            echoed = subprocess.run(command, check=False, stdout=sys.stderr, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{' '.join(command[-6:])} took over {timeout:g} s") from None
        if echoed.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[-6:])} failed ({echoed.returncode}): see its output above"
            )
        return ""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[-6:])} failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result.stdout
