"""The command-line jobs' arguments, without Spark: the demo's output directory (an earlier
run's is cleared, any other that holds something is refused), and topic_to_parquet's
arguments and the read options they make (``--option`` overrides the job's defaults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_spark.jobs import demo, topic_to_parquet

# --- the demo's --output -------------------------------------------------------------------------


def test_the_demo_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("keep me", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        demo.output_directory(str(tmp_path))
    assert str(info.value) == (
        f"--output {tmp_path} is not empty and was not made by the demo, which would delete "
        "what it holds; give a new or empty directory"
    )
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "keep me"


def test_the_demo_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        demo.output_directory(str(tmp_path / "out"))
    assert str(info.value) == f"--output {tmp_path / 'out'} is a file; give a directory"


def test_the_demo_makes_a_new_directory_and_clears_its_own(tmp_path: Path) -> None:
    out = demo.output_directory(str(tmp_path / "demo"))
    assert out == tmp_path / "demo"
    assert [p.name for p in out.iterdir()] == [demo.MARKER]
    (out / "events").mkdir()
    (out / "events" / "part-0.parquet").write_bytes(b"x")
    again = demo.output_directory(str(out))
    assert [p.name for p in again.iterdir()] == [demo.MARKER]


def test_the_demo_takes_an_empty_directory(tmp_path: Path) -> None:
    assert demo.output_directory(str(tmp_path)) == tmp_path
    assert [p.name for p in tmp_path.iterdir()] == [demo.MARKER]


def test_the_demo_makes_a_temporary_directory_by_default() -> None:
    out = demo.output_directory(None)
    assert out.name.startswith("pulsar-spark-demo-")
    assert [p.name for p in out.iterdir()] == [demo.MARKER]


# --- topic_to_parquet's arguments ----------------------------------------------------------------

BASE = ["--service-url", "pulsar://b:6650", "--topic", "t", "--output", "/o"]


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The error argparse prints for ``argv`` after ``<program>: error:`` (it exits with
    status 2)."""
    with pytest.raises(SystemExit) as info:
        topic_to_parquet.parse_args([*BASE, *argv])
    assert info.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1].split(": error: ", 1)[1]


def test_checkpoint_without_streaming_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert refused(capsys, "--checkpoint", "/c") == (
        "--checkpoint goes with --streaming: a batch run reads the "
        "whole topic and keeps no checkpoint"
    )


@pytest.mark.parametrize(
    ("option", "argument"),
    [("service.url", "--service-url"), ("Topic", "--topic"), ("topics", "--topic")],
)
def test_options_the_arguments_set_are_refused(
    capsys: pytest.CaptureFixture[str], option: str, argument: str
) -> None:
    assert refused(capsys, "--option", f"{option}=x") == (
        f"--option {option}: give it with {argument}"
    )


def options(*argv: str) -> dict[str, str]:
    return topic_to_parquet.read_options(topic_to_parquet.parse_args([*BASE, *argv]))


def test_batch_read_options() -> None:
    assert options() == {"service.url": "pulsar://b:6650", "topic": "t"}
    assert options("--option", "endingTime=5") == {
        "endingTime": "5",
        "service.url": "pulsar://b:6650",
        "topic": "t",
    }


def test_streaming_defaults_and_their_overrides() -> None:
    streaming = ["--streaming", "--checkpoint", "/c"]
    assert options(*streaming) == {
        "startingOffsets": "earliest",
        "maxMessagesPerTrigger": "500000",
        "service.url": "pulsar://b:6650",
        "topic": "t",
    }
    assert options(
        *streaming, "--option", "STARTINGOFFSETS=latest", "--option", "maxMessagesPerTrigger=7"
    ) == {
        "STARTINGOFFSETS": "latest",
        "maxMessagesPerTrigger": "7",
        "service.url": "pulsar://b:6650",
        "topic": "t",
    }
    # a byte limit goes with the job's message limit: the tighter ends each micro-batch
    assert options(*streaming, "--option", "maxBytesPerTrigger=1048576") == {
        "startingOffsets": "earliest",
        "maxMessagesPerTrigger": "500000",
        "maxBytesPerTrigger": "1048576",
        "service.url": "pulsar://b:6650",
        "topic": "t",
    }


def test_a_list_of_topics() -> None:
    assert options("--topic", "a,b")["topics"] == "a,b"
