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
