# gpusched — `make help` lists the targets (generated from the `##` comments below).
SHELL := /bin/bash
.DEFAULT_GOAL := help
UV ?= $(shell command -v uv 2>/dev/null || echo uv)
RUN := $(UV) run --frozen
PYTEST_ARGS ?=
RUN_ARGS ?=

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# --compile-bytecode: where PYTHONDONTWRITEBYTECODE is set (these machines), every process
# would compile its imports again: `gpusched --help` takes 3.8 s without the .pyc files, 1.5 s with.
.PHONY: install
install: ## Install uv (through pip) if missing and the locked Python deps (idempotent)
	@command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
	@$(UV) sync --frozen --quiet --compile-bytecode

.PHONY: run
run: install ## Start the whole platform (broker, services, simulated cluster, API, openb replay); Ctrl-C stops it
	$(RUN) gpusched up $(RUN_ARGS)

.PHONY: lint
lint: install ## Ruff (lint + format check), mypy (strict on libs/), the package boundaries (lint-imports), hadolint on the Dockerfile, the k8s overlays (kustomize + kubernetes-validate)
	$(RUN) ruff check .
	$(RUN) ruff format --check .
	$(RUN) mypy libs services infra/local cli tools bench
	$(RUN) lint-imports --no-cache
	$(RUN) hadolint Dockerfile
	@mkdir -p .cache/k8s
	@for overlay in k8s/overlays/*/; do \
	  name=$$(basename $$overlay); \
	  kubectl kustomize $$overlay > .cache/k8s/$$name.yaml || exit 1; \
	  $(RUN) kubernetes-validate -k 1.34.0 --strict --quiet --no-warn .cache/k8s/$$name.yaml || exit 1; \
	  echo "k8s/overlays/$$name: built-in kinds valid (Kubernetes 1.34, strict)"; \
	done

.PHONY: test
test: lint ## Install, lint, type-check, then run the whole test suite (starts and stops Kafka)
	$(RUN) pytest $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: install ## Only the fast unit tests (no broker)
	$(RUN) pytest tests/unit $(PYTEST_ARGS)

.PHONY: bench
bench: install ## Run every benchmark; writes .bench/results.json (flat name: number)
	$(RUN) python bench/run.py --out .bench/results.json

TRACES ?= ../shared/traces
REPLAY := $(RUN) gpusched replay

.PHONY: results
results: install ## Re-run the replays and backtest of docs/results.md into .bench/ and print their tables (~20 min)
	$(REPLAY) --jobs $(TRACES)/philly_dev.jobs.csv --cluster $(TRACES)/philly_512gpu.cluster.csv \
		--policies fifo,backfill,tiresias,srpt-oracle,dynamic,dynamic-noforecast \
		--json .bench/philly_dev_512.json --report .bench/philly_dev_512.html
	$(REPLAY) --jobs $(TRACES)/philly_dev.jobs.csv --cluster $(TRACES)/philly_1024gpu.cluster.csv \
		--policies fifo,tiresias,dynamic,dynamic-noforecast --json .bench/philly_dev_1024.json
	$(RUN) gpusched forecast backtest --jobs $(TRACES)/philly_dev.jobs.csv --step 10m \
		--horizons 1h,6h --json .bench/backtest_philly_dev.json
	$(REPLAY) --jobs $(TRACES)/openb_default.jobs.csv --cluster $(TRACES)/openb.cluster.csv \
		--json .bench/openb_default.json
	for v in gpushare40 multigpu20 cpu050; do for p in spread bestfit fgd; do \
		$(REPLAY) --jobs $(TRACES)/openb_pack_$$v.jobs.csv --cluster $(TRACES)/openb.cluster.csv \
			--policies fifo --experiment packing --placement $$p --json .bench/pack_$${v}_$$p.json; \
	done; done
	$(RUN) python tools/results_table.py .bench/philly_dev_512.json .bench/philly_dev_1024.json \
		.bench/openb_default.json

.PHONY: scenarios
scenarios: install ## Replay the dev scenario matrix (bench/scenarios.yaml) in parallel; tables, .bench/scenarios.json, reports in .bench/scenarios/index.html (11-18 min)
	$(REPLAY) --matrix bench/scenarios.yaml --json .bench/scenarios.json --report .bench/scenarios

.PHONY: tune
tune: install ## The parameter sweep on the tune set only (bench/tune.yaml) -> .bench/tune.json (~45 min)
	$(REPLAY) --matrix bench/tune.yaml --set tune --json .bench/tune.json

.PHONY: kafka-up
kafka-up: install ## Start the local Kafka broker (KRaft) and create the topics; no-op if running (KAFKA_AUTH=scram: SASL/SCRAM + ACLs; BROKERS=3: three nodes, RF 3, min ISR 2)
	$(RUN) python -m gpusched.local.kafka up $(if $(filter scram,$(KAFKA_AUTH)),--auth) $(if $(BROKERS),--brokers $(BROKERS))

.PHONY: kafka-down
kafka-down: install ## Stop the local Kafka broker
	$(RUN) python -m gpusched.local.kafka down

.PHONY: kafka-status
kafka-status: install ## Say whether the local Kafka broker runs
	$(RUN) python -m gpusched.local.kafka status

.PHONY: vendor
vendor: ## Re-fetch the console's vendored JS/CSS from npm (pinned versions) and their checksums
	python3 tools/vendor_console.py

.PHONY: asyncapi
asyncapi: install ## Regenerate docs/asyncapi.json from the event models
	$(RUN) python tools/generate_docs.py asyncapi

.PHONY: settings-doc
settings-doc: install ## Regenerate the settings table (README.md), the parameter table (docs/scheduling.md) and the KafkaTopics of k8s/overlays/distributed
	$(RUN) python tools/generate_docs.py settings
	$(RUN) python tools/generate_docs.py params
	$(RUN) python tools/generate_docs.py k8s-topics

.PHONY: fmt
fmt: install ## Format and auto-fix with ruff
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

.PHONY: clean
clean: ## Stop the local broker and remove local state (var/, .bench/, caches; keeps the Kafka jars)
	-@[ -x "$$(command -v uv)" ] && [ -d .venv ] && $(RUN) python -m gpusched.local.kafka down
	rm -rf var .bench .pytest_cache .mypy_cache .ruff_cache .hypothesis
