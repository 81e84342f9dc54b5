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

# The main job. Until the queue service exists: a deterministic simulation run of raftlog.
run: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m raftlog.sim --seeds 20 --steps 3000 --nodes 3 --groups 2

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
