"""Package list for setuptools; everything else is in pyproject.toml.

pyproject.toml cannot both discover packages and add one more under another name: its
``packages`` is either a fixed list or a search of the file tree. Spark's data-source
auto-discovery needs ``pyspark_pulsar`` and ``pyspark_tubemq``, which pyproject.toml maps to
``pulsar_spark/spark/autoload`` and ``pulsar_spark/tubemq/spark/autoload``, so the list is built
here: every ``pulsar_spark`` package the search finds (a new subpackage is included without
being listed), and the two ``pyspark_*`` modules.
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(
            include=["pulsar_spark", "pulsar_spark.*"],
            exclude=["*.autoload"],
        ),
        "pyspark_pulsar",
        "pyspark_tubemq",
    ]
)
