# Everything a fresh machine needs: `make test` and `make demo` create .venv and install into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
# The TubeMQ 2.4.0 build the TubeMQ tests run (beside this checkout, in ../shared/tubemq).
TUBEMQ_HOME ?= $(firstword $(wildcard $(abspath ../shared/tubemq) /work/shared/tubemq) $(abspath ../shared/tubemq))
export TUBEMQ_HOME

.PHONY: test demo install lint typecheck proto bench clean tubemq

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# A regular (non-editable) install, so Spark's data-source discovery sees `pyspark_pulsar`
# exactly as a `pip install pulsar-spark` user gets it. setuptools builds in build/ and puts
# everything it finds there into the wheel, modules since moved or deleted too: start clean.
install: $(PY)
	rm -rf build
	$(PY) -m pip install --quiet ".[test,dev]"

test: install tubemq
	$(PY) -m pytest

# The TubeMQ cluster runs on Debian's Java libraries: build.sh installs them (and rebuilds the
# jars) when any jar the cluster's classpath names is missing; otherwise nothing is done.
tubemq:
	@test -x "$(TUBEMQ_HOME)/build.sh" || { echo "no TubeMQ build in $(TUBEMQ_HOME): set TUBEMQ_HOME"; exit 1; }
	@missing=0; for jar in $(TUBEMQ_HOME)/lib/tubemq-server.jar $$(cat $(TUBEMQ_HOME)/lib/debian-classpath.txt 2>/dev/null || echo /nonexistent); do \
	    [ -f "$$jar" ] || missing=1; done; \
	 if [ $$missing = 1 ] || ! command -v javac >/dev/null; then "$(TUBEMQ_HOME)/build.sh"; fi

demo: install
	$(PY) -m pulsar_spark.jobs.demo $(DEMO_ARGS)

lint: install
	$(VENV)/bin/ruff check pulsar_spark tests benchmarks
	$(VENV)/bin/ruff format --check pulsar_spark tests benchmarks

typecheck: install
	$(VENV)/bin/mypy

proto: install
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m grpc_tools.protoc -Iproto \
	    --python_out=pulsar_spark/protocol/_generated \
	    --mypy_out=pulsar_spark/protocol/_generated \
	    proto/pulsar_api.proto
	PATH="$(abspath $(VENV))/bin:$$PATH" $(PY) -m grpc_tools.protoc -Iproto \
	    --python_out=pulsar_spark/protocol/tubemq/_generated \
	    --mypy_out=pulsar_spark/protocol/tubemq/_generated \
	    proto/tubemq_rpc.proto proto/tubemq_master.proto proto/tubemq_broker.proto

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The long fuzz run (tests/fuzz/run_fuzz.py): mutated frames through the read path and
# generated batches through every decoding path; FUZZ_ARGS narrows it (--seconds, --inputs,
# --batches, --parts). Inputs that fail outside the error tree go to tests/fuzz/findings.
.PHONY: fuzz
fuzz: install
	$(PY) tests/fuzz/run_fuzz.py $(FUZZ_ARGS)
