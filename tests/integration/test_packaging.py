"""The wheel, installed the way a user installs it: every module is in it, and the job runs.

The wheel is built from a copy of the source tree, so files left in ``build/`` by an earlier
build cannot slip into it, and installed (not editable) into a new virtual environment. That
environment sees the test environment's packages (pyspark, pyarrow, ...) through a ``.pth``
file, whose paths come after its own site-packages: the wheel installs in seconds with
``--no-deps``, and its ``pulsar_spark`` comes first on ``sys.path``, ahead of any copy the test
environment has. The job then runs with ``spark-submit`` from a directory outside the
repository and without ``PYTHONPATH``, as the README's recipe runs it.
"""

from __future__ import annotations

import email
import json
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pyarrow.parquet as pq
import pytest
from support.packaging import (
    ROOT,
    build_wheel,
    clean_env,
    copy_source,
    new_venv,
    pip_install,
    run,
    see_test_environment,
    venv_script,
)

from pulsar_spark.local import LocalBroker

pytestmark = pytest.mark.integration

NS = "persistent://public/default/"
MESSAGES = 120


@dataclass(frozen=True)
class Installed:
    wheel: Path
    python: Path
    site_packages: Path
    outside: Path  # a working directory outside the repository


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel built from this checkout, installed into a fresh virtual environment."""
    work = tmp_path_factory.mktemp("packaging")
    wheel = build_wheel(work)
    python, site_packages = new_venv(work / "venv")
    see_test_environment(site_packages)
    pip_install(python, "--no-deps", "--no-index", "--ignore-installed", str(wheel))
    outside = work / "elsewhere"
    outside.mkdir()
    return Installed(wheel, python, site_packages, outside)


def test_wheel_holds_every_module_of_the_source(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        names = set(archive.namelist())
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(archive.read(metadata_name))

    autoload = "pulsar_spark/spark/autoload/"
    autoload_tubemq = "pulsar_spark/tubemq/spark/autoload/"
    source = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "pulsar_spark").rglob("*")
        if path.suffix in {".py", ".pyi", ".typed"} and "__pycache__" not in path.parts
    }
    expected = {
        n.replace(autoload, "pyspark_pulsar/").replace(autoload_tubemq, "pyspark_tubemq/")
        for n in source
    }
    assert {n for n in names if ".dist-info/" not in n} == expected

    for module in (
        "pyspark_pulsar/__init__.py",  # Spark's data-source auto-discovery imports it
        "pyspark_tubemq/__init__.py",
        "pulsar_spark/jobs/__init__.py",
        "pulsar_spark/jobs/topic_to_parquet.py",
        "pulsar_spark/jobs/demo.py",
        "pulsar_spark/local/__init__.py",
        "pulsar_spark/local/broker.py",
        "pulsar_spark/py.typed",
        "pulsar_spark/protocol/_generated/pulsar_api_pb2.pyi",
    ):
        assert module in names, module
    assert "local" in metadata.get_all("Provides-Extra")
    assert 'pulsar-lite==0.2.0; extra == "local"' in metadata.get_all("Requires-Dist")


CLASSIFIERS = [
    "Development Status :: 3 - Alpha",
    "Intended Audience :: Developers",
    "Operating System :: OS Independent",
    "Programming Language :: Python :: 3",
    "Programming Language :: Python :: 3 :: Only",
    "Topic :: Database",
    "Topic :: System :: Distributed Computing",
    "Typing :: Typed",
]


def test_wheel_metadata_carries_the_license(installed: Installed) -> None:
    """The Apache License 2.0: named in the metadata and its text in the wheel."""
    with zipfile.ZipFile(installed.wheel) as archive:
        [info] = {n.split("/")[0] for n in archive.namelist() if ".dist-info/" in n}
        metadata = email.message_from_bytes(archive.read(f"{info}/METADATA"))
        license_text = archive.read(f"{info}/licenses/LICENSE")
    assert license_text == (ROOT / "LICENSE").read_bytes()
    assert b"Apache License\n                           Version 2.0, January 2004" in license_text
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]
    assert metadata.get_all("Classifier") == CLASSIFIERS
    assert metadata.get_all("Project-URL") is None  # no public repository address yet


def test_sdist_builds_with_the_license(tmp_path: Path) -> None:
    """The source distribution builds (setuptools' PEP 517 hook, as pip calls it) and holds
    the license, the metadata and the sources the wheel is built from."""
    source = copy_source(tmp_path)
    dist = tmp_path / "sdist"
    build = (
        "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    )
    result = run([sys.executable, "-c", build, str(dist)], cwd=source, timeout=300)
    name = result.stdout.strip().splitlines()[-1]
    assert name.startswith("pulsar_spark-") and name.endswith(".tar.gz")
    top = name.removesuffix(".tar.gz")
    with tarfile.open(dist / name) as archive:
        members = set(archive.getnames())
        license_file = archive.extractfile(f"{top}/LICENSE")
        assert license_file is not None
        assert license_file.read() == (ROOT / "LICENSE").read_bytes()
        pkg_info = archive.extractfile(f"{top}/PKG-INFO")
        assert pkg_info is not None
        metadata = email.message_from_bytes(pkg_info.read())
    for path in (
        "pyproject.toml",
        "setup.py",
        "README.md",
        "pulsar_spark/__init__.py",
        "pulsar_spark/spark/autoload/__init__.py",
        "pulsar_spark/protocol/_generated/pulsar_api_pb2.pyi",
    ):
        assert f"{top}/{path}" in members, path
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata.get_all("License-File") == ["LICENSE"]


def test_modules_import_from_the_installed_wheel(installed: Installed) -> None:
    script = (
        "import json, pulsar_spark, pyspark_pulsar, pulsar_spark.jobs.topic_to_parquet as job, "
        "pulsar_spark.jobs.demo as demo, pulsar_spark.local as local; "
        "from pulsar_spark.spark.datasource import PulsarDataSource; "
        "print(json.dumps({'files': [m.__file__ for m in "
        "(pulsar_spark, pyspark_pulsar, job, demo, local)], "
        "'default_source': pyspark_pulsar.DefaultSource is PulsarDataSource}))"
    )
    result = run(
        [str(installed.python), "-c", script],
        cwd=installed.outside,
        env=clean_env(installed.python),
        timeout=120,
    )
    found = json.loads(result.stdout)
    assert found["default_source"]
    for file in found["files"]:
        assert Path(file).resolve().is_relative_to(installed.site_packages), file


def test_spark_submit_runs_the_installed_job(
    installed: Installed,
    broker: LocalBroker,
    pooled_partitioned_topic: Callable[[int], str],
) -> None:
    topic = NS + pooled_partitioned_topic(2)
    client = pulsar.Client(
        broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        producer = client.create_producer(topic)
        for i in range(MESSAGES):
            producer.send(f"click-{i}".encode(), partition_key=str(i % 10))
    finally:
        client.close()

    env = clean_env(installed.python)
    # The README's recipe: ask the installed package where its job file is.
    locate = "import pulsar_spark.jobs.topic_to_parquet as job; print(job.__file__)"
    job = Path(
        run(
            [str(installed.python), "-c", locate], cwd=installed.outside, env=env, timeout=120
        ).stdout.strip()
    )
    assert job.resolve().is_relative_to(installed.site_packages)

    spark_submit = venv_script("spark-submit")
    output = installed.outside / "clicks"
    result = run(
        [
            spark_submit,
            *("--master", "local[2]", "--conf", "spark.ui.enabled=false"),
            *(
                "--conf",
                "spark.driver.host=127.0.0.1",
                "--conf",
                "spark.driver.bindAddress=127.0.0.1",
            ),
            *(
                str(job),
                "--service-url",
                broker.service_url,
                "--topic",
                topic,
                "--output",
                str(output),
            ),
        ],
        cwd=installed.outside,
        env=env,
        timeout=300,
    )
    assert f"copied {topic} to {output}, which now holds {MESSAGES} rows" in result.stdout
    copied = pq.read_table(output, columns=["key", "value"]).to_pylist()
    assert sorted((r["key"].decode(), r["value"].decode()) for r in copied) == sorted(
        (str(i % 10), f"click-{i}") for i in range(MESSAGES)
    )
