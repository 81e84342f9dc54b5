# Two commands do everything on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SIM_SEEDS ?= 300
SIM_STEPS ?= 20000

.PHONY: run test lint typecheck unit sim clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The main job: a local 3-node cluster in the foreground (Ctrl-C stops it; data in ./data/dev).
run: $(STAMP)
	$(BIN)/cmq dev --nodes 3 --data-dir ./data/dev --http-port 8080

test: lint typecheck unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	PYTHONHASHSEED=0 SIM_SEEDS=$(SIM_SEEDS) SIM_STEPS=$(SIM_STEPS) $(BIN)/pytest -q

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# Load test (loadtest/README.md): a throwaway `cmq dev` cluster on free ports, Locust headless for
# LOADTEST_SECONDS with LOADTEST_SHAPE (steps|soak), CSV + HTML reports in loadtest/out/; the exit
# code is non-zero if an SLO failed. Extra Locust flags: LOADTEST_ARGS='--loglevel DEBUG'.
LOADTEST_SECONDS ?= 60
LOADTEST_SHAPE ?= steps
LOADTEST_ARGS ?=
LOADTEST_STAMP := $(VENV)/.installed-loadtest

.PHONY: loadtest

$(LOADTEST_STAMP): $(STAMP) pyproject.toml
	$(BIN)/pip install --quiet -e '.[loadtest]'
	touch $(LOADTEST_STAMP)

loadtest: $(LOADTEST_STAMP)
	LOADTEST_SECONDS=$(LOADTEST_SECONDS) LOADTEST_SHAPE=$(LOADTEST_SHAPE) BIN=$(BIN) \
		loadtest/run.sh $(LOADTEST_ARGS)
