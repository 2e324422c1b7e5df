"""pulsar_spark/jobs/topic_to_parquet.py run in this process (its session is the tests'): a
batch run replaces its output with what the topic holds, so a second run leaves each message
once; ``--option`` overrides the streaming run's defaults."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.streaming import Streams, drafts
from support.topics import full

from pulsar_spark.jobs import topic_to_parquet

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def copied_values(streams: Streams, output: Path) -> list[bytes]:
    return sorted(bytes(r["value"]) for r in streams.spark.read.parquet(str(output)).collect())


def run(streams: Streams, topic: str, output: Path, *argv: str) -> str:
    args = ["--service-url", streams.url, "--topic", topic, "--output", str(output), *argv]
    assert topic_to_parquet.main(args) == 0
    return str(output)


def test_a_batch_run_again_leaves_no_duplicates(
    streams: Streams,
    pooled_partitioned_topic: Callable[[int], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = full(pooled_partitioned_topic(2))
    first = streams.publish(topic, drafts(40, "a"), batch_size=5)
    output = streams.folder / "copy"
    run(streams, topic, output)
    assert copied_values(streams, output) == sorted(m.value for m in first)
    more = streams.publish(topic, drafts(15, "b"), batch_size=5)
    run(streams, topic, output)
    assert copied_values(streams, output) == sorted(m.value for m in first + more)
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"copied {topic} to {output}, which now holds 55 rows"
    )


def test_options_override_the_streaming_defaults(
    streams: Streams, pooled_partitioned_topic: Callable[[int], str]
) -> None:
    """The job starts a new checkpoint at earliest; ``--option startingOffsets=latest`` makes
    it start after what the topic holds, so a first run copies nothing and the second exactly
    what came between. ``--option maxBytesPerTrigger`` replaces the job's message limit."""
    topic = full(pooled_partitioned_topic(2))
    streams.publish(topic, drafts(30, "before"), batch_size=5)
    output = streams.folder / "copy"
    streaming = ["--streaming", "--checkpoint", str(streams.checkpoint)]
    given = ["--option", "startingOffsets=latest", "--option", "maxBytesPerTrigger=100"]
    run(streams, topic, output, *streaming, *given)
    assert copied_values(streams, output) == []
    after = streams.publish(topic, drafts(25, "after"), batch_size=5)
    run(streams, topic, output, *streaming, *given)
    assert copied_values(streams, output) == sorted(m.value for m in after)
