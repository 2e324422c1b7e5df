# Everything a fresh machine needs: `make test` and `make demo` create .venv and install into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
# What an install is made of: when one of these changes, the next make installs again.
SOURCES := pyproject.toml setup.py README.md LICENSE \
    $(shell find pulsar_spark -path '*/__pycache__' -prune -o -type f -print)

.PHONY: test test-apache apache demo install lint typecheck proto bench bench-peers clean tubemq jdk docs

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# A regular (non-editable) install, so Spark's data-source discovery sees `pyspark_pulsar`
# exactly as a `pip install pulsar-spark` user gets it. setuptools builds in build/ and puts
# everything it finds there into the wheel, modules since moved or deleted too: start clean.
# Each stamp records one install: the tests' (with the `test` and `dev` extras) or the demo's
# (`local` only); make installs again only when a source is newer than the stamp.
$(STAMP)-test: $(SOURCES) | $(PY)
	rm -rf build
	$(PY) -m pip install --quiet ".[test,dev]"
	touch $@

$(STAMP)-local: $(SOURCES) | $(PY)
	rm -rf build
	$(PY) -m pip install --quiet ".[local]"
	touch $@

install: $(STAMP)-test

test: install jdk tubemq docs
	$(PY) -m pytest

# The documentation site (mkdocs.yml, docs/), built with warnings as errors: a broken link or
# anchor, a missing page or a README section that a page includes and that is gone fails it.
# A make target rather than a test: it needs no broker and takes about a second, so `make test`
# fails on it before pytest starts any broker, and `make docs` runs it alone. The pages'
# examples run in tests/integration/test_readme.py. The site goes to site/, ignored by git.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Apache Pulsar and TubeMQ come from Maven Central and run on Java: Maven and a JDK are
# installed from Debian when either is missing.
jdk:
	@command -v mvn >/dev/null && command -v javac >/dev/null || { \
	    sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); $$sudo apt-get update -q && \
	    DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends maven default-jdk-headless; }

# The TubeMQ tests run the official TubeMQ 2.4.0 jars from Maven Central
# (tests/support/tubemq_maven/pom.xml), copied once into ~/.cache/pulsar-spark/tubemq-2.4.0.
tubemq: install jdk
	PYTHONPATH=tests $(PY) -m support.tubemq_cluster

# The integration tests' runs against Apache Pulsar alone.
test-apache: install jdk
	$(PY) -m pytest -m apache

# An Apache Pulsar standalone in the foreground (its release is fetched from Maven Central the
# first time); Ctrl-C or SIGTERM stops it and deletes its data. APACHE_ARGS="--port 6650
# --web-port 8080" fixes its ports.
apache: install jdk
	@$(PY) -m pulsar_spark.local.apache $(APACHE_ARGS)

demo: $(STAMP)-local
	$(PY) -m pulsar_spark.jobs.demo $(DEMO_ARGS)

lint: install
	$(VENV)/bin/ruff check pulsar_spark tests benchmarks
	$(VENV)/bin/ruff format --check pulsar_spark tests benchmarks

typecheck: install
	$(VENV)/bin/mypy

# The generated modules are written by grpcio-tools $(PROTO_TOOLS_VERSION), whose protoc makes
# code that protobuf 6.31.1 and every later runtime load (see the protobuf bound in
# pyproject.toml). That grpcio-tools needs a protobuf older than the one in .venv, so it lives
# in a virtualenv of its own, $(PROTO_VENV); the .pyi stubs come from .venv's mypy-protobuf.
PROTO_TOOLS_VERSION := 1.76.0
PROTO_VENV := .venv-proto
PROTOC := $(PROTO_VENV)/bin/python -m grpc_tools.protoc -Iproto

$(PROTO_VENV)/.grpcio-tools-$(PROTO_TOOLS_VERSION):
	rm -rf $(PROTO_VENV)
	$(PYTHON) -m venv $(PROTO_VENV)
	$(PROTO_VENV)/bin/python -m pip install --quiet "grpcio-tools==$(PROTO_TOOLS_VERSION)"
	touch $@

proto: install $(PROTO_VENV)/.grpcio-tools-$(PROTO_TOOLS_VERSION)
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PROTOC) \
	    --python_out=pulsar_spark/protocol/_generated \
	    --mypy_out=pulsar_spark/protocol/_generated \
	    proto/pulsar_api.proto
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PROTOC) \
	    --python_out=pulsar_spark/tubemq/wire/_generated \
	    --mypy_out=pulsar_spark/tubemq/wire/_generated \
	    proto/tubemq_rpc.proto proto/tubemq_master.proto proto/tubemq_broker.proto

bench: install jdk
	$(PY) benchmarks/run_all.py

# Ours against StreamNative's Pulsar connector and Spark's Kafka source (benchmarks/bench_peers.py):
# PySpark 3.1.3 comes from PyPI into a virtualenv of its own, the connectors' jars and Kafka's
# from Maven Central, all into ~/.cache/pulsar-spark/peers the first time. PEERS_ARGS="--quick"
# runs the plain case only.
bench-peers: install jdk
	PYTHONPATH=$(CURDIR) $(PY) benchmarks/bench_peers.py $(PEERS_ARGS)

clean:
	rm -rf $(VENV) $(PROTO_VENV) build site *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The long fuzz run (tests/fuzz/run_fuzz.py): mutated frames through the read path and
# generated batches through every decoding path; FUZZ_ARGS narrows it (--seconds, --inputs,
# --batches, --parts). Inputs that fail outside the error tree go to tests/fuzz/findings.
.PHONY: fuzz
fuzz: install
	$(PY) tests/fuzz/run_fuzz.py $(FUZZ_ARGS)
