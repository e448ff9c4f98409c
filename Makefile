# GPU Portal — `make run` for the demo, `make test` for the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: run test install lint typecheck format bench migrate seed clean help

help:
	@echo "make run        portal + worker + beat with demo data on http://127.0.0.1:8000"
	@echo "make test       lint, type-check and the whole test suite (PostgreSQL, Redis)"
	@echo "make bench      benchmarks under bench/ (NAME=\"submit pages\" for some)"
	@echo "make lint | typecheck | format | migrate | seed | clean"

$(STAMP): pyproject.toml cli/pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed: found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]' -e ./cli
	@touch $(STAMP)

install: $(STAMP)

run: install
	@bash scripts/run.sh

test: install
	@bash scripts/test.sh

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: install
	$(BIN)/mypy

# make bench [NAME="submit pages"]: results in bench/results/, a summary table on stdout.
bench: install
	@bash scripts/bench.sh $(NAME)

migrate: install
	$(BIN)/python manage.py migrate

seed: install
	$(BIN)/python manage.py seed_demo

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache artifacts
