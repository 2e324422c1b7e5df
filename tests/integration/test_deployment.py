"""docs/deployment.md, run: the package shipped to a Spark cluster whose machines lack it.

A Spark standalone cluster (a master and two workers) runs on loopback ports. Its workers'
Python is a bare virtual environment: no pulsar_spark, nor anything else. The package reaches
the executors only as the page says: a virtualenv with this checkout's wheel and its
dependencies, packed by venv-pack and given to spark-submit with ``--archives
env.tar.gz#environment``, ``PYSPARK_PYTHON=./environment/bin/python``. The job writes rows
to a pulsar-lite topic of two partitions and reads them back; every value is checked, and so
is the Python each executor ran.

A second test runs the page's Spark Connect section.

The packed environment leaves out pyspark, as the page's optional ``pip uninstall pyspark
py4j`` does: Spark puts its own pyspark first on its Python workers' path, and installing
PySpark's 400 MB would take most of the test's time. Its other dependencies come from PyPI, or
pip's cache after the first run.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.packaging import (
    build_wheel,
    clean_env,
    new_venv,
    pip_install,
    requirements,
    run,
    see_test_environment,
    spark_home,
    venv_script,
)
from support.standalone import HOST, StandaloneCluster

from pulsar_spark.local import LocalBroker

if TYPE_CHECKING:
    from conftest import PartitionedTopicPool

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROWS = 300
WORKERS = 2

WRITE_AND_READ = """
import json
import sys

import pulsar_spark


def write_and_read(spark, service_url, topic, rows):
    # Writes keyed rows to the topic, reads the topic back: (key, value, partition) each.
    pulsar_spark.register(spark)
    (
        spark.range(rows)
        .selectExpr(
            "CAST(id % 7 AS STRING) AS key", "CAST(concat('event-', id) AS BINARY) AS value"
        )
        .write.format("pulsar")
        .option("service.url", service_url)
        .option("topic", topic)
        .mode("append")
        .save()
    )
    read = (
        spark.read.format("pulsar").option("service.url", service_url).option("topic", topic).load()
    )
    return [(r.key.decode(), r.value.decode(), r.partition) for r in read.collect()]


service_url, topic, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
"""

JOB = (
    WRITE_AND_READ
    + """
from pyspark.sql import SparkSession


def where(_rows):  # runs in an executor's Python worker
    import sys

    import pulsar_spark

    yield sys.executable, pulsar_spark.__file__


spark = SparkSession.builder.appName("pulsar-spark-deployment").getOrCreate()
found = write_and_read(spark, service_url, topic, rows)
pythons = spark.sparkContext.parallelize(range(8), 8).mapPartitions(where).distinct().collect()
print("RESULT " + json.dumps({"rows": found, "pythons": pythons}))
spark.stop()
"""
)

CONNECT_CLIENT = (
    WRITE_AND_READ
    + """
import google.protobuf
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.remote("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
found = write_and_read(spark, service_url, topic, rows)
session, protobuf = type(spark).__module__, google.protobuf.__version__
print("RESULT " + json.dumps({"rows": found, "session": session, "protobuf": protobuf}))
spark.stop()
"""
)


def _result(stdout: str) -> dict[str, Any]:
    """What the script printed on its ``RESULT`` line."""
    [line] = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    found: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return found


def _check_rows(found: list[list[Any]]) -> None:
    """Every row written was read back, once, from both partitions."""
    assert sorted((key, value) for key, value, _ in found) == sorted(
        (str(i % 7), f"event-{i}") for i in range(ROWS)
    )
    assert {partition for _, _, partition in found} == {0, 1}


def _pack_environment(work: Path, wheel: Path) -> tuple[Path, Path]:
    """The virtualenv to ship: the wheel and its dependencies but pyspark, packed with
    venv-pack. Returns its Python (the driver's) and the archive."""
    python, _ = new_venv(work / "env")
    pip_install(python, "--no-deps", str(wheel))
    pip_install(python, *(str(r) for r in requirements(wheel) if r.name != "pyspark"))
    archive = work / "env.tar.gz"
    run(
        [venv_script("venv-pack"), "--prefix", str(work / "env"), "--output", str(archive)],
        timeout=300,
    )
    return python, archive


def test_spark_submit_ships_the_package_in_a_packed_virtualenv(
    tmp_path: Path, lite_broker: LocalBroker, lite_topic_pool: PartitionedTopicPool
) -> None:
    started = time.monotonic()
    bare, _ = new_venv(tmp_path / "bare")  # the workers' own Python
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    missing = run(
        [str(bare), "-c", "import importlib.util as u; print(u.find_spec('pulsar_spark'))"],
        cwd=tmp_path,
        env=env,
    )
    assert missing.stdout.strip() == "None"

    cluster = StandaloneCluster.start(tmp_path / "cluster", workers=WORKERS, python=bare)
    try:
        # The cluster's JVMs start while the environment is built and packed.
        wheel = build_wheel(tmp_path / "build")
        driver_python, archive = _pack_environment(tmp_path, wheel)
        cluster.wait_ready(timeout=60)

        topic = "persistent://public/default/" + lite_topic_pool.take(2)
        job = tmp_path / "job.py"
        job.write_text(JOB, encoding="utf-8")
        outside = tmp_path / "submit"
        outside.mkdir()
        # Client mode: the driver starts Python workers too (the data source's planning), with
        # the same relative PYSPARK_PYTHON, from the directory spark-submit runs in.
        (outside / "environment").symlink_to(tmp_path / "env")
        env["SPARK_HOME"] = str(spark_home())  # the driver's Python has no pyspark to find it
        env["PYSPARK_DRIVER_PYTHON"] = str(driver_python)
        env["PYSPARK_PYTHON"] = "./environment/bin/python"
        result = run(
            [
                str(spark_home() / "bin" / "spark-submit"),
                *("--master", cluster.master_url, "--deploy-mode", "client"),
                *("--archives", f"{archive}#environment"),
                *("--conf", "spark.ui.enabled=false"),
                *(
                    "--conf",
                    f"spark.driver.host={HOST}",
                    "--conf",
                    f"spark.driver.bindAddress={HOST}",
                ),
                *("--conf", "spark.executor.memory=512m", "--conf", "spark.executor.cores=1"),
                *(str(job), lite_broker.service_url, topic, str(ROWS)),
            ],
            cwd=outside,
            env=env,
            timeout=240,
        )
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()

    found = _result(result.stdout)
    _check_rows(found["rows"])
    # Each worker's executor ran the archive's Python, and imported the package from there.
    assert len(found["pythons"]) == WORKERS
    for executable, module in found["pythons"]:
        assert "/environment/bin/python" in executable, executable
        assert "/environment/lib/" in module, module
        assert Path(executable).is_relative_to(tmp_path / "cluster"), executable
    print(f"deployment test took {time.monotonic() - started:.0f}s")


def test_a_connect_client_writes_and_reads(
    tmp_path: Path, lite_broker: LocalBroker, lite_topic_pool: PartitionedTopicPool
) -> None:
    """The page's Spark Connect section. A new virtual environment gets what the Connect client
    needs (grpcio-status, googleapis-common-protos) with the newest protobuf 6, and the wheel,
    before a ``.pth`` file lets it import the test environment's other packages (pyspark,
    pyarrow, ...) after its own. There a Connect session on a local server (``remote("local[2]")``
    starts one in the process) registers the data source, writes the rows and reads them back."""
    wheel = build_wheel(tmp_path)
    python, site_packages = new_venv(tmp_path / "venv")
    # The newest protobuf 6: PySpark 4.3's own Connect modules need 6.33.5 or later.
    pip_install(python, "grpcio-status", "googleapis-common-protos", "protobuf>=6.33.5,<7")
    pip_install(python, "--no-deps", str(wheel))
    see_test_environment(site_packages)
    topic = "persistent://public/default/" + lite_topic_pool.take(2)
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    result = run(
        [str(python), "-c", CONNECT_CLIENT, lite_broker.service_url, topic, str(ROWS)],
        cwd=outside,
        env=clean_env(python),
        timeout=300,
    )
    found = _result(result.stdout)
    assert found["session"] == "pyspark.sql.connect.session"
    assert found["protobuf"].startswith("6.")
    _check_rows(found["rows"])
