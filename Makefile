# Kairos task runner. `make run` starts the local stack with a demo job (flags for
# `kairos up` in ARGS: `make run ARGS="--port 8001"`); `make test` runs every test tier.
# Both create .venv and check the stores first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

CHROMIUM := /usr/bin/chromium
# Extra flags for `kairos up` in `make run`.
ARGS ?=

.PHONY: install services chromium run test test-unit test-integration test-e2e chaos lint format bench clean

# The client (clients/python, its own distribution) goes into the same .venv: the e2e
# tests drive the stack through it.
$(BIN)/kairos: pyproject.toml clients/python/pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Kairos needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e './clients/python[dev]'
	touch $(BIN)/kairos

install: $(BIN)/kairos

services:
	bash scripts/ensure-services.sh

# The console's browser tests drive Debian's chromium; Playwright downloads no browser.
chromium:
	@[ -x $(CHROMIUM) ] || { apt-get update -qq && apt-get install -y chromium; }

run: install services
	$(BIN)/kairos up --demo $(ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: install services chromium lint
	$(BIN)/pytest tests/unit -q
	$(BIN)/pytest clients/python/tests -q
	$(BIN)/pytest tests/integration -q
	$(BIN)/pytest tests/e2e -q -m "not serial"
	$(BIN)/pytest tests/chaos -q -rA -m "not serial"
	# Last and alone: these restart the machine's MariaDB, Redis and RabbitMQ.
	$(BIN)/pytest tests/e2e tests/chaos -q -rA -m serial

# Every chaos scenario (make test runs them too), server restarts included: run it when
# nothing else uses the machine's MariaDB, Redis and RabbitMQ.
chaos: install services
	$(BIN)/pytest tests/chaos -q -rA

test-unit: install
	$(BIN)/pytest tests/unit -q
	$(BIN)/pytest clients/python/tests -q

test-integration: install services
	$(BIN)/pytest tests/integration -q

test-e2e: install services chromium
	$(BIN)/pytest tests/e2e -q

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install services
	$(BIN)/pip install --quiet -r bench/requirements-peers.txt
	$(BIN)/python bench/pipeline.py --jobs 20000
	$(BIN)/python bench/pipeline.py --jobs 20000 --callback-share 0.33
	$(BIN)/python bench/e2e.py --jobs 2000
	$(BIN)/python bench/api.py
	$(BIN)/python bench/trigger_lag.py --jobs 100
	$(BIN)/python bench/trigger_lag.py --jobs 1000
	$(BIN)/python bench/vs_peers.py --jobs 10000 --rounds 3
	$(BIN)/pip install --quiet -r bench/requirements-callbacks.txt
	$(BIN)/python bench/cost.py --jobs 10000 --rounds 3 --profile-dir /tmp/kairos-cost-profile
	$(BIN)/python bench/cost.py --jobs 10000 --rounds 3 --single
	$(BIN)/python bench/worker_path.py --jobs 10000
	$(BIN)/python bench/scale.py
	$(BIN)/python bench/sweep.py --workers 200
	$(BIN)/python bench/cron.py
	$(BIN)/python bench/worker_store.py --workers 50 --calls 1000
	$(BIN)/python bench/app_store.py --apps 50 --calls 1000

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache *.egg-info
