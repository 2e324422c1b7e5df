"""Apache Pulsar's own Java client as a peer of the interop tests: ``java_peer/JavaPeer.java``.

The client's jars are those of ``java_peer/pom.xml`` at the release the tests' broker runs
(:data:`pulsar_spark.local.apache.PULSAR_VERSION`), copied from Maven Central once into
``java-peer-VERSION/lib`` of the cache Apache Pulsar's release goes to; ``javac`` compiles the
peer once per content of its source (:mod:`support.java_build`). :class:`JavaPeer` runs it as
one JVM for the whole session and sends it JSON requests (see the header of the Java file).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pulsar_spark.local.apache import PULSAR_VERSION, cache_dir
from support.java_build import compiled, maven_jars

HERE = Path(__file__).parent / "java_peer"
TIMEOUT = 120.0
JVM = ("java", "-Xmx1g", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")

Schema = Mapping[str, Any]


def peer_classpath(version: str = PULSAR_VERSION) -> str:
    """The client's jars (fetched the first time) and the compiled peer, as a classpath."""
    goals = [f"-Dpulsar.version={version}", "dependency:copy-dependencies"]
    goals.append("-DincludeScope=runtime")
    lib = maven_jars(
        HERE / "pom.xml", cache_dir() / f"java-peer-{version}", goals, what="Java peer"
    )
    jars = f"{lib}{os.sep}*"
    classes = compiled([HERE / "JavaPeer.java"], jars, what="JavaPeer.java")
    return f"{classes}{os.pathsep}{jars}"


class JavaPeerError(RuntimeError):
    """The Java client failed a request; the message is its exception's class and text."""


class JavaPeer:
    """One JVM running the Java client against a broker; :meth:`produce` and :meth:`consume`."""

    def __init__(self, service_url: str) -> None:
        """Start the peer and wait until its client is built."""
        began = time.monotonic()
        classpath = peer_classpath()
        self.prepared_in = time.monotonic() - began
        """Seconds the jars and the compilation took (nearly none once cached)."""
        self._process = subprocess.Popen(
            [*JVM, "-cp", classpath, "JavaPeer", service_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self._stderr: list[str] = []
        threading.Thread(target=self._drain, daemon=True).start()
        self._lock = threading.Lock()
        self._answer()  # {"ready": true}
        self.started_in = time.monotonic() - began
        """Seconds from the call to a client ready, preparation included."""

    def produce(
        self,
        topic: str,
        schema: Schema,
        messages: Sequence[Mapping[str, Any]],
        **producer: Any,
    ) -> list[dict[str, int]]:
        """Send ``messages`` (``value``, ``key``, ``keyBytes``, ``properties``,
        ``eventTime``) with a producer set up as ``producer`` says (``encryptionKeys`` with
        ``publicKeys``, key name: PEM file path, to encrypt); their message ids."""
        request = {"op": "produce", "topic": topic, "schema": schema, "producer": producer}
        ids: list[dict[str, int]] = self._request({**request, "messages": list(messages)})["ids"]
        return ids

    def consume(
        self,
        topic: str,
        schema: Schema,
        count: int,
        *,
        private_keys: Mapping[str, Path] | None = None,
    ) -> list[dict[str, Any]]:
        """The first ``count`` messages of ``topic`` (fewer after 10 s without one), each
        with every field the Java client shows; with ``private_keys`` (key name: PEM file),
        decrypted by the Java client's own key reader."""
        request: dict[str, Any] = {"op": "consume", "topic": topic, "schema": schema}
        request["count"] = count
        if private_keys is not None:
            request["privateKeys"] = {name: str(path) for name, path in private_keys.items()}
        messages: list[dict[str, Any]] = self._request(request)["messages"]
        return messages

    def close(self) -> None:
        """End the peer: closing its stdin ends its loop and its client."""
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=30)

    def _request(self, request: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
            answer = self._answer()
        if "error" in answer:
            raise JavaPeerError(answer["error"])
        return answer

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        found: list[str] = []
        stdout = self._process.stdout
        reader = threading.Thread(target=lambda: found.append(stdout.readline()))
        reader.start()
        reader.join(TIMEOUT)
        if not found or not found[0]:
            self._process.kill()
            tail = "".join(self._stderr[-40:])
            raise JavaPeerError(f"the Java peer gave no answer; its stderr ends with:\n{tail}")
        answer: dict[str, Any] = json.loads(found[0])
        return answer

    def _drain(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            self._stderr.append(line)
