# Everything a fresh machine needs: `make test` and `make demo` create .venv and install into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))

.PHONY: test demo install lint typecheck proto bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# A regular (non-editable) install, so Spark's data-source discovery sees `pyspark_pulsar`
# exactly as a `pip install pulsar-spark` user gets it. setuptools builds in build/ and puts
# everything it finds there into the wheel, modules since moved or deleted too: start clean.
install: $(PY)
	rm -rf build
	$(PY) -m pip install --quiet ".[test,dev]"

test: install
	$(PY) -m pytest

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
