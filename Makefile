# docflow: `make ingest` builds the sample index, `make test` runs the whole suite.
# Each target creates .venv and installs the pinned dependencies first if needed.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.docflow-installed
PRISTINE := $(VENV)/prefect-pristine/prefect.db
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
CONSTRAINTS := requirements/constraints.txt
# create or upgrade the database of Prefect's temporary server in PREFECT_HOME
MAKE_DATABASE := from flows.temporary_server import make_database; make_database()

# offline machine: never reach for a model hub, never send telemetry
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export ANONYMIZED_TELEMETRY := False
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS := 90

.PHONY: install ingest test lint bench clean-data

install: $(STAMP)

# torch goes first, pinned: with no torch installed, sentence-transformers would pull a
# multi-GB CUDA build; 2.13.0 is the CPU build this machine keeps on local disk.
$(STAMP): pyproject.toml $(CONSTRAINTS)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install "torch==2.13.0" -c $(CONSTRAINTS)
	$(PIP) install -c $(CONSTRAINTS) -e ".[test]"
	# what the default embed backend needs, made once per install: on a CPU the ONNX
	# export of the bundled model (keyed by the installed files; ~15 s), not in a first run
	$(BIN)/python -c "from tasks.embed.model import Embedder; Embedder().warm_up()"
	# and the database of Prefect's temporary server, migrated (PREFECT_HOME, unless a
	# server is configured): a first `make ingest` then starts in ~14 s, not ~25
	$(BIN)/python -c "$(MAKE_DATABASE)"
	touch $(STAMP)

ingest: install
	$(BIN)/docflow ingest

# an empty, migrated Prefect database the tests copy for their servers (tests/servers.py):
# each pytest worker's server then starts in ~6 s, not the ~17 s of 114 migrations
$(PRISTINE): $(STAMP)
	env -u PREFECT_API_URL PREFECT_HOME=$(CURDIR)/$(VENV)/prefect-pristine \
	  $(BIN)/python -c "$(MAKE_DATABASE)"
	touch -c $@  # an upgrade that had nothing to do leaves the file as it was

# every core: one pytest worker each, a test file's tests on one worker (they share its
# module fixtures: a Prefect server, an ingest)
test: install $(PRISTINE)
	$(BIN)/python -m pytest -n auto --dist loadfile

lint: install
	$(BIN)/ruff check docflow tasks flows deployments tests
	$(BIN)/mypy

bench: install
	$(PIP) install -c $(CONSTRAINTS) -e ".[test,bench]"
	$(BIN)/python -m tests.benchmarks

clean-data:
	rm -rf data/tables data/chroma data/cache data/state.db
