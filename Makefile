# Every target sets up what it needs itself (scripts/setup.sh is idempotent).
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# The suite mostly waits on real services and subprocesses, so more workers than cores pays.
PYTEST_WORKERS ?= 3

.PHONY: demo test lint unit bench setup clean

demo:
	@scripts/setup.sh
	$(BIN)/remediator demo

test:
	@scripts/setup.sh --system
	$(BIN)/ruff check remediator tests bench
	$(BIN)/ruff format --check remediator tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --durations=15 $(PYTEST_ARGS)

lint:
	@scripts/setup.sh
	$(BIN)/ruff check remediator tests bench
	$(BIN)/ruff format --check remediator tests bench
	$(BIN)/mypy

unit:
	@scripts/setup.sh
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

bench:
	@scripts/setup.sh --system
	$(BIN)/python -m bench

setup:
	@scripts/setup.sh --system

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
