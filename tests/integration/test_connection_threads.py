"""Code that runs on a connection's reader thread without being called by it: a reader dropped
unfinished and finalized there by the garbage collector closes its consumer without waiting for
the answer only that thread could read, and the connection goes on serving everyone."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from support.range_reading import FAST, Sent, publish

from pulsar_spark.client.consumer import Consumer
from pulsar_spark.client.lookup import Lookup
from pulsar_spark.client.reader import RangeReader
from pulsar_spark.errors import LocalProtocolError
from pulsar_spark.message_id import MessageId
from pulsar_spark.protocol import commands, pb
from pulsar_spark.protocol.read_stage import ReadRange
from pulsar_spark.topic import full_topic_name

pytestmark = pytest.mark.integration


class Collecting(Consumer):
    """A consumer whose first delivery runs a garbage collection and a request on the reader
    thread, as a finalizer due at that moment would."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.collected_in: float | None = None
        self.refused: Exception | None = None

    def on_message(self, message: pb.CommandMessage, payload: memoryview | None) -> None:
        if self.collected_in is None:
            started = time.monotonic()
            gc.collect()
            self.collected_in = time.monotonic() - started
            try:
                self.connection.request(
                    lambda rid: commands.get_last_message_id(
                        consumer_id=self.consumer_id, request_id=rid
                    ),
                    what="a request on the reader thread",
                    timeout=5.0,
                )
            except LocalProtocolError as exc:
                self.refused = exc
        super().on_message(message, payload)


def abandoned_reader(lookup: Lookup, topic: str, last: MessageId) -> None:
    """Start reading ``topic``, stop after the first entry and drop the reader inside a
    reference cycle, so that only a garbage collection finalizes (and closes) it."""
    reader = RangeReader(lookup, ReadRange(topic, MessageId.earliest(), last), FAST)
    entries: Iterator[Any] = reader.entries()
    next(entries)
    cycle: dict[str, Any] = {"entries": entries}
    cycle["self"] = cycle


def test_a_reader_finalized_on_the_reader_thread_does_not_stall_it(
    client: pulsar.Client, lookup: Lookup
) -> None:
    topic = full_topic_name(f"finalized-{os.urandom(6).hex()}")
    rows = publish(client, topic, [Sent(b"m%d" % i, sequence_id=i) for i in range(5)]).rows
    last = MessageId(rows[-1].ledger, rows[-1].entry, -1)
    gc.disable()  # the collection must happen where the test puts it
    try:
        abandoned_reader(lookup, topic, last)
        watcher = Collecting(lookup, topic, MessageId.earliest(), timeout=10.0)
        try:
            watcher.flow(1)
            assert watcher.receive(10.0) is not None
            assert watcher.collected_in is not None
            assert watcher.collected_in < 2.0  # no wait for an answer only this thread reads
            assert isinstance(watcher.refused, LocalProtocolError)
            assert "cannot wait for an answer on the thread that reads" in str(watcher.refused)
            # the connection still serves the other threads
            done = threading.Event()
            found: list[MessageId | None] = []

            def ask() -> None:
                found.append(watcher.last_message_id())
                done.set()

            threading.Thread(target=ask, daemon=True).start()
            assert done.wait(10.0), "the connection stopped answering"
            assert found == [last]
        finally:
            watcher.close()
    finally:
        gc.enable()
