"""The documentation's examples, run as written against the session's pulsar-lite broker.

The pages are README.md and the documentation site's pages (docs/*.md). Every example is a
fenced block preceded by ``<!-- example: NAME -->``. The Python ones run in one namespace, in
the order a reader meets them (the README's five-minute example, then the pages that build on
it), as a reader would paste them into one session, with the names the README's setup block
defines (``spark``, ``url``, ``topic``, ``out``, ``ckpt``) bound to the test's session, broker,
a fresh 4-partition topic and temporary directories. After each block, what it did is checked
exactly against what the test knows was written. The ``spark-submit`` example runs as a
command, with the broker, topic and paths substituted.

Every Python block of every page must be a named example checked here, so an example cannot be
added without being run.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from support.readme import README, example, page_examples, page_name, pages, source

from pulsar_spark.local import LocalBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = README.parent
NS = "persistent://public/default/"

# Each page's Python examples, in page order; pages not named here may have none.
PYTHON_EXAMPLES = {
    "README.md": ["intro", "setup", "batch-write", "batch-read", "streaming-read"],
    "docs/getting-started.md": ["local-broker", "register"],
    "docs/migration.md": ["migration-columns"],
    "docs/reading.md": ["batch-read-range"],
    "docs/schemas.md": ["typed-read"],
    # The secure examples run in test_secure_spark.py.
    "docs/security.md": ["secure-token", "secure-mtls", "secure-oauth2"],
    # tubemq runs in test_tubemq_spark.py, tubemq-dedup in test_tubemq_write_retries.py.
    "docs/tubemq.md": ["tubemq", "tubemq-dedup"],
    "docs/writing.md": ["streaming-write"],
}
# Pages whose Python blocks are not named examples yet, with how many they hold: no page may
# add one, and these are to become named examples run by their own tests.
UNCHECKED_PYTHON_BLOCKS = {"docs/encryption.md": 2, "docs/transactions.md": 1}
SETUP_NAMES = {"spark", "url", "topic", "out", "ckpt"}
FIRST_WRITE = 1000
SECOND_WRITE = 200
EPOCH_MS = 1767225600000  # 2026-01-01T00:00:00Z, the README's first event time
Click = tuple[str, int, str, tuple[tuple[str, str], ...], int]
"""key, the value's id and action, properties, event time in ms"""


# --- what the README's write example sends, computed here independently -------------------------


def expected_clicks(ids: range) -> list[Click]:
    """The README's clicks: 50 users, every 10th click a purchase, one event per second."""
    return sorted(
        (
            str(i % 50),
            i,
            "buy" if i % 10 == 0 else "view",
            (("source", "readme"),),
            EPOCH_MS + i * 1000,
        )
        for i in ids
    )


def write_more_clicks(spark: SparkSession, url: str, topic: str, ids: range) -> None:
    """Append clicks like the README's, with ids ``ids``."""
    (
        spark.range(ids.start, ids.stop)
        .selectExpr(
            "CAST(id % 50 AS STRING) AS key",
            "to_json(named_struct('id', id, 'action', IF(id % 10 = 0, 'buy', 'view'))) AS value",
            "map('source', 'readme') AS properties",
            "timestamp_millis(1767225600000 + id * 1000) AS eventTime",
        )
        .write.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .mode("append")
        .save()
    )


def read_topic(spark: SparkSession, url: str, topic: str) -> DataFrame:
    """The topic as the test reads it, with key, value and event time as plain values."""
    return (
        spark.read.format("pulsar")
        .option("service.url", url)
        .option("topic", topic)
        .load()
        .selectExpr(
            "CAST(key AS STRING) AS key",
            "CAST(value AS STRING) AS value",
            "properties",
            "unix_millis(eventTime) AS ms",
            "partition",
            "messageId",
        )
    )


def clicks_of(df: DataFrame) -> list[Click]:
    return sorted(
        (r["key"], *id_action(r["value"]), tuple(sorted(r["properties"].items())), r["ms"])
        for r in df.collect()
    )


def id_action(value: str | bytes) -> tuple[int, str]:
    """The id and action of a README click's JSON value, checking it has nothing else."""
    parsed = json.loads(value)
    assert set(parsed) == {"id", "action"}, parsed
    return parsed["id"], parsed["action"]


def message_id(row: Any) -> tuple[int, int, int]:
    return (row["ledgerId"], row["entryId"], row["batchIndex"])


def offset(text: str) -> dict[str, tuple[int, int, int]]:
    """A streaming offset from the query's progress, checked to be in canonical form."""
    parsed = json.loads(text) if isinstance(text, str) else text
    assert list(parsed) == sorted(parsed)
    assert all(
        list(position) == ["batchIndex", "entryId", "ledgerId"] for position in parsed.values()
    )
    assert json.dumps(parsed) == text
    return {name: message_id(position) for name, position in parsed.items()}


def input_rows(query: Any) -> list[int]:
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


# --- the pages' Python examples ----------------------------------------------------------------


def test_every_python_block_is_a_checked_example() -> None:
    for page in pages():
        named = [(name, lang) for name, lang, _ in page_examples(page)]
        expected = PYTHON_EXAMPLES.get(page_name(page), [])
        unchecked = (
            f"{page_name(page)}: each Python block must follow <!-- example: NAME --> and be "
            "run by a test, and PYTHON_EXAMPLES must list it"
        )
        assert [n for n, lang in named if lang == "python"] == expected, unchecked
        blocks = page.read_text(encoding="utf-8").count("```python\n")
        assert blocks == len(expected) + UNCHECKED_PYTHON_BLOCKS.get(page_name(page), 0), unchecked
    names = [name for page in pages() for name, _, _ in page_examples(page)]
    assert len(names) == len(set(names)), "an example name is used twice"
    assert "spark-submit" in names
    assert set(PYTHON_EXAMPLES) <= {page_name(page) for page in pages()}


def test_readme_links_resolve() -> None:
    """The README's relative links name files of the repository (the docs site checks its own)."""
    text = README.read_text(encoding="utf-8")
    targets = re.findall(r"\]\((?!https?://)([^)#]+)(?:#[^)]*)?\)", text)
    assert targets
    assert [t for t in targets if not (ROOT / t).exists()] == []


def test_readme_examples(
    spark: SparkSession,
    broker: LocalBroker,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    url = broker.service_url
    topic = NS + pooled_partitioned_topic(4)
    partitions = [f"{topic}-partition-{i}" for i in range(4)]
    out, ckpt = tmp_path / "clicks", tmp_path / "checkpoints"
    bound = {"spark": spark, "url": url, "topic": topic, "out": str(out), "ckpt": str(ckpt)}
    ns: dict[str, Any] = {"__name__": "readme", **bound}

    def run(name: str) -> None:
        exec(compile(example(name), source(name), "exec"), ns)

    # The one-line teaser: a DataFrame with the read schema (the topic is still empty).
    run("intro")
    assert ns["df"].columns == [
        "key",
        "value",
        "topic",
        "partition",
        "messageId",
        "publishTime",
        "eventTime",
        "properties",
        "producerName",
        "sequenceId",
        "replicatedFrom",
    ]

    # The embedded broker, in a namespace of its own: it binds ``url`` to its own broker.
    local: dict[str, Any] = {"__name__": "readme"}
    exec(compile(example("local-broker"), source("local-broker"), "exec"), local)
    assert local["url"].startswith("pulsar://127.0.0.1:")
    assert local["url"] != url
    assert not local["broker"].is_running  # stopped when the with block ended

    run("register")

    # The setup block defines the shared names; the test then points them at its own broker.
    setup: dict[str, Any] = {}
    exec(compile(example("setup"), source("setup"), "exec"), setup)
    assert set(setup) >= SETUP_NAMES
    assert setup["spark"] is spark  # getOrCreate() returns the running session
    run("setup")
    ns.update(bound)

    run("batch-write")
    written = read_topic(spark, url, topic)
    first = expected_clicks(range(FIRST_WRITE))
    assert clicks_of(written) == first
    rows = written.collect()
    assert {r["partition"] for r in rows} == {0, 1, 2, 3}
    partition_of_user = {r["key"]: r["partition"] for r in rows}
    assert all(partition_of_user[r["key"]] == r["partition"] for r in rows)  # keyed routing

    run("batch-read")
    assert ns["df"].count() == FIRST_WRITE
    events = ns["events"].collect()
    assert Counter((e["user"], e["action"], e["source"]) for e in events) == Counter(
        (key, action, "readme") for key, _, action, _, _ in first
    )
    assert sorted((e["user"], e["partition"]) for e in events) == sorted(
        (r["key"], r["partition"]) for r in rows
    )

    # The migration page renames the columns to the other connector's names.
    run("migration-columns")
    legacy = ns["legacy"]
    assert legacy.columns == [
        "__key",
        "__topic",
        "__publishTime",
        "__eventTime",
        "__messageProperties",
        "value",
    ]
    assert sorted(
        (r["__key"].decode(), r["__topic"], *id_action(r["value"])) for r in legacy.collect()
    ) == [(key, topic, value_id, action) for key, value_id, action, _, _ in first]

    run("batch-read-range")
    partition_0 = sorted((r for r in rows if r["partition"] == 0), key=lambda r: r["messageId"])
    rest = ns["rest"].orderBy("messageId").collect()
    assert [(message_id(r["messageId"]), r["partition"], r["topic"]) for r in rest] == [
        (message_id(r["messageId"]), 0, topic) for r in partition_0[10:]
    ]
    assert [r["value"].decode() for r in rest] == [r["value"] for r in partition_0[10:]]

    run("typed-read")
    assert ns["typed"].schema["value"].dataType.simpleString() == "struct<id:bigint,action:string>"
    assert sorted(
        (r["id"], r["action"]) for r in ns["typed"].select("value.*").collect()
    ) == sorted((value_id, action) for _, value_id, action, _, _ in first)

    run("streaming-read")
    query = ns["query"]
    assert input_rows(query) == [300, 300, 300, 100]
    landed = spark.read.parquet(str(out))
    assert sorted(
        (r["user"], id_action(r["json"]), r["partition"], message_id(r["messageId"]))
        for r in landed.collect()
    ) == sorted(
        (r["key"], id_action(r["value"]), r["partition"], message_id(r["messageId"])) for r in rows
    )
    # The offsets docs/offsets.md documents: per partition, the id of the last message consumed,
    # exact to the batch index, as canonical JSON (keys sorted at every level).
    ids = {
        name: sorted(message_id(r["messageId"]) for r in rows if r["partition"] == i)
        for i, name in enumerate(partitions)
    }
    assert min(len(v) for v in ids.values()) > 75  # so 300 split equally is 75 each
    progress = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
    start, first_end, last_end = (
        progress[0]["startOffset"],
        offset(progress[0]["endOffset"]),
        offset(progress[-1]["endOffset"]),
    )
    assert start == "null"  # Spark reports no start for a query's first micro-batch
    for before, after in itertools.pairwise(progress):  # each end is the next start
        assert after["startOffset"] == before["endOffset"]
    assert first_end == {name: ids[name][74] for name in partitions}  # the 75th message each
    # The last micro-batch ends at each partition's last entry, as a whole (batch index -1).
    assert last_end == {name: (*ids[name][-1][:2], -1) for name in partitions}
    assert progress[-1]["latestOffset"] == progress[-1]["endOffset"]

    # Run again after more clicks arrive: exactly the new ones are copied.
    write_more_clicks(spark, url, topic, range(FIRST_WRITE, FIRST_WRITE + SECOND_WRITE))
    again = ns["copy_new_clicks"]()
    assert input_rows(again) == [SECOND_WRITE]
    [resumed] = [p["sources"][0] for p in again.recentProgress if p["numInputRows"]]
    assert offset(resumed["startOffset"]) == last_end  # continues from the checkpoint
    all_clicks = expected_clicks(range(FIRST_WRITE + SECOND_WRITE))
    landed = spark.read.parquet(str(out)).collect()
    assert sorted((r["user"], *id_action(r["json"])) for r in landed) == [
        (key, id_, action) for key, id_, action, _, _ in all_clicks
    ]

    run("streaming-write")
    assert sum(p["numInputRows"] for p in ns["query"].recentProgress) == len(all_clicks)
    buys = read_topic(spark, url, f"{topic}-buys")
    assert clicks_of(buys) == [c for c in all_clicks if c[2] == "buy"]
    assert {r["partition"] for r in buys.collect()} == {-1}  # auto-created, not partitioned


# --- the spark-submit command --------------------------------------------------------------------


def spark_submit_command(url: str, topic: str, output: Path, checkpoint: Path) -> list[str]:
    """The streaming spark-submit command of docs/spark-submit.md, pointed at the test's broker
    and paths."""
    text = example("spark-submit").replace("\\\n", " ")
    for placeholder, value in (
        ("pulsar://broker:6650", url),
        ("persistent://public/default/clicks", topic),
        ("/data/clicks-checkpoint", str(checkpoint)),
        ("/data/clicks", str(output)),
    ):
        assert placeholder in text, placeholder
        text = text.replace(placeholder, value)
    command = shlex.split(text)
    assert command[0] == "spark-submit"
    local = Path(sys.executable).parent / "spark-submit"
    found = str(local) if local.exists() else shutil.which("spark-submit")
    assert found, "spark-submit is not installed (it comes with pyspark)"
    return [found, *command[1:]]


def test_spark_submit_job(
    spark: SparkSession,
    broker: LocalBroker,
    pooled_partitioned_topic: Callable[[int], str],
    tmp_path: Path,
) -> None:
    topic = NS + pooled_partitioned_topic(2)
    write_more_clicks(spark, broker.service_url, topic, range(120))
    output = tmp_path / "clicks"
    command = spark_submit_command(
        broker.service_url, topic, output, tmp_path / "clicks-checkpoint"
    )
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"copied {topic} to {output}, which now holds 120 rows" in result.stdout
    copied = spark.read.parquet(str(output))
    assert sorted(
        (r["key"].decode(), id_action(r["value"])[0]) for r in copied.collect()
    ) == sorted((str(i % 50), i) for i in range(120))
