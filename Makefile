# Strata: every entry point. `make help` lists them.
SHELL := /bin/bash
PYTHON_BOOT ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
SERVICES_CLI := $(VENV)/bin/strata-services
ONLY ?=
DEMO_ARGS ?=

export PYSPARK_PYTHON := $(abspath $(PY))
export PYSPARK_DRIVER_PYTHON := $(abspath $(PY))
export TESTCONTAINERS_RYUK_DISABLED := true

.DEFAULT_GOAL := help
.PHONY: help venv demo test test-fast test-integration simulate bench bench-report docs lint format services-install services-up services-down services-check images compose-up compose-down trino-shell tpch helm-check clean

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}'

$(STAMP): engine/pyproject.toml platform/pyproject.toml
	$(PYTHON_BOOT) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e 'engine[all,dev]' -e 'platform[docs]'
	$(PY) -m compileall -q engine/strata platform/strata_platform > /dev/null
	touch $@

venv: $(STAMP) ## Create the virtualenv and install Strata with every extra

demo: $(STAMP) ## Spark streams generated orders into a PK table, a 2nd query reads its changelog (DEMO_ARGS="--batches 100")
	$(PY) -m strata_platform.demo $(DEMO_ARGS)

# make test, phase by phase (times, logs and the summary in $(RUN_DIR)):
# - install the engine tests' services (cached); every other one in the background, Kubernetes'
#   binaries (a Go build of minutes) too: only the integration tests need them, and they wait for them;
# - the engine tests on local disk and MinIO in 3 workers (object-store round trips overlap), while
#   `strata-services prebuild` does in the background what the container tests' set-ups would do one
#   test at a time: the stack's images, helm, the images' copy in the cluster node. Background jobs run
#   at the lowest CPU priority, their logs kept;
# - the integration tests in $(IT_WORKERS) workers, a group of modules per worker at a time (groups share
#   no service one of them restarts: integration_tests/conftest.py); the modules that need the background
#   builds wait for them, the others run meanwhile. Then the few tests that restart a service every
#   module shares, on their own;
# - the background jobs' logs and status, and a summary: phase times, counts, the 10 slowest tests.
#   Any failure (a background job's included) fails the run, after the summary.
RUN_DIR := build/test-run
RUN := $(PY) -m strata_platform.test_run
BACKGROUND := nice -n 19
IT_WORKERS ?= 1
# the engine tests' services are installed first; the others in the background while those tests run
ENGINE_SERVICES := minio postgres kafka
OTHER_SERVICES := --except kubernetes $(foreach s,$(ENGINE_SERVICES),--except $(s))
ENGINE_TESTS ?= engine/tests
IT_TESTS ?= integration_tests
TIMED = -p strata_platform.pytest_timing --timing-json $(RUN_DIR)/$(1).json
IT_PARALLEL := $(PY) -m pytest $(IT_TESTS) -n $(IT_WORKERS) --dist loadgroup --no-loadscope-reorder \
	--exclusive-modules=skip -p no:cacheprovider --durations=25
IT_EXCLUSIVE := $(PY) -m pytest $(IT_TESTS) --exclusive-modules=only -p no:cacheprovider --durations=10
test: ## Everything: lint, unit tests, integration tests against real services
	@rm -rf $(RUN_DIR) && mkdir -p $(RUN_DIR) && echo "began $$(date +%s.%N)" > $(RUN_DIR)/phases
	@$(MAKE) --no-print-directory venv && $(RUN) mark venv
	@$(MAKE) --no-print-directory lint || $(RUN) fail lint
	@$(MAKE) --no-print-directory docs || $(RUN) fail docs
	@$(RUN) mark lint
	@$(RUN) spawn kubernetes-build $(BACKGROUND) $(SERVICES_CLI) install kubernetes
	$(SERVICES_CLI) install $(ENGINE_SERVICES) || $(RUN) fail install
	@$(RUN) mark install
	@$(RUN) spawn services-install $(BACKGROUND) $(SERVICES_CLI) install $(OTHER_SERVICES)
	@$(RUN) spawn prebuild $(BACKGROUND) bash -c '$(RUN) wait services-install >/dev/null && $(SERVICES_CLI) prebuild'
	$(SERVICES_CLI) run $(ENGINE_SERVICES) -- $(PY) -m pytest $(ENGINE_TESTS) -n 3 -p no:cacheprovider \
		--durations=15 $(call TIMED,engine) || $(RUN) fail engine
	@$(RUN) mark engine
	@$(RUN) wait services-install || $(RUN) fail services-install
	$(IT_PARALLEL) $(call TIMED,integration) || $(RUN) failed integration
	$(IT_EXCLUSIVE) $(call TIMED,integration-exclusive) || $(RUN) failed integration-exclusive
	@$(RUN) mark integration
	@$(RUN) wait kubernetes-build || $(RUN) failed kubernetes-build
	@$(RUN) wait prebuild || $(RUN) failed prebuild
	@$(RUN) summary

test-fast: $(STAMP) ## Unit tests only (no services)
	$(PY) -m pytest engine/tests -p no:cacheprovider

SEED ?=
STEPS ?= 60
HOURS ?=
ONLY ?=
ORACLES ?=

simulate: $(STAMP) ## Deterministic simulation: SEED=S STEPS=N [ONLY=i,j] [ORACLES=1] replays a seed; HOURS=H runs seeds, report in build/simulation.{json,txt}
	$(PY) -m strata.testing.simulation --steps $(STEPS) $(if $(SEED),--seed $(SEED)) $(if $(ONLY),--only $(ONLY)) \
		$(if $(ORACLES),--oracles) $(if $(HOURS),--hours $(HOURS) --report build/simulation)

test-integration: $(STAMP) ## Integration tests only, as make test runs them (provisions the services they need)
	$(IT_PARALLEL); status=$$?; $(IT_EXCLUSIVE) && exit $$status

BENCH_SERVICES := minio postgres kafka iceberg_rest trino

bench: $(STAMP) ## Benchmarks vs raw pyarrow, incl. MinIO/Kafka/Spark ones; writes build/bench.json (ONLY=W1,W3 for a subset)
	$(SERVICES_CLI) install $(BENCH_SERVICES) paimon_java
	$(SERVICES_CLI) run $(BENCH_SERVICES) -- $(PY) -m strata.bench --out build/bench.json $(if $(ONLY),--only $(ONLY),)

bench-report: $(STAMP) ## The benchmark page's results and plots (docs/benchmarks) from build/bench.json
	$(PY) -m strata_platform.bench_report build/bench.json

docs: $(STAMP) ## Build the docs site into build/site (strict: a broken link or an undocumented option fails)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

lint: $(STAMP) ## ruff, mypy and the import contract (layers of engine/strata, pyproject.toml)
	$(VENV)/bin/ruff check engine platform integration_tests
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

format: $(STAMP) ## Apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix engine platform integration_tests

services-install: $(STAMP) ## Download/build every service once (cached under ~/.cache/strata)
	$(SERVICES_CLI) install

services-up: $(STAMP) ## Start every local service (127.0.0.1, non-default ports)
	$(SERVICES_CLI) up

services-down: $(STAMP) ## Stop every local service this project started
	$(SERVICES_CLI) down

services-check: $(STAMP) ## Bring each service up, prove it with a real operation, bring it down
	$(SERVICES_CLI) check

images: $(STAMP) ## Build the stack's container images locally (skips those already up to date)
	$(PY) -m strata_platform.images

compose-up: $(STAMP) ## Run compose/docker-compose.yml here with the local images (demo profile; no Grafana)
	$(PY) -m strata_platform.compose up

compose-down: $(STAMP) ## Stop the compose stack and remove its volumes
	$(PY) -m strata_platform.compose down

trino-shell: $(STAMP) ## SQL prompt on Trino's strata catalog (Strata tables as Iceberg); starts MinIO, the REST catalog and Trino if needed
	$(SERVICES_CLI) run minio iceberg_rest trino -- $(PY) -m strata_platform.trino_shell

SF ?= 1
REFRESH ?= 2
tpch: $(STAMP) ## TPC-H SF=1 REFRESH=2: Spark loads/refreshes Strata tables, Trino and Spark run the 22 queries vs Trino's own Iceberg tables; table + build/tpch-sf<SF>.svg
	$(SERVICES_CLI) run minio postgres iceberg_rest trino -- $(PY) -m strata_platform.tpch --sf $(SF) --refresh $(REFRESH)

helm-check: $(STAMP) ## Lint the Helm chart, render it with helm/strata/ci/*.yaml, validate against Kubernetes schemas
	$(PY) -m pytest integration_tests/test_helm.py -p no:cacheprovider -q

clean: ## Remove build outputs (keeps the download cache)
	rm -rf build
