# Set-up is implicit: every target that runs code first builds .venv if it is missing or stale.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Spark (tests, demo) binds to loopback only: this machine's other interfaces are not ours to use.
export SPARK_LOCAL_IP ?= 127.0.0.1
# Extra flags of `make demo` for jobs/demo.py, e.g. `make demo DEMO_ARGS=--forever` or
# `make demo DEMO_ARGS="--rate 500 --seconds 60"`; empty: the bounded demo.
DEMO_ARGS ?=

.PHONY: test demo bench lint unit integration clean

$(STAMP): pyproject.toml setup.py connectors/replication/_forward.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# ruff and mypy strict first: a lint or type error fails `make test` (and CI) before any test runs.
test: lint
	$(PY) -m pytest -q

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP)
	$(PY) -m pytest -q tests/integration

demo: $(STAMP)
	$(PY) -m jobs.demo --config conf/cluster-local.yaml $(DEMO_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/broker.py

lint: $(STAMP)
	$(PY) -m ruff check broker_store connectors jobs tests benchmarks
	$(PY) -m mypy

clean:
	rm -rf $(VENV) run data .pytest_cache
