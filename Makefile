# Every target sets up what it needs itself (scripts/setup.sh is idempotent).
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=
# The suite mostly waits on real services and subprocesses, so more workers than cores pays;
# work stealing keeps the long end-to-end tests from piling up on one worker at the end.
PYTEST_WORKERS ?= 4

.PHONY: demo test lint unit bench setup clean

demo:
	@scripts/setup.sh
	$(BIN)/remediator demo

test:
	@scripts/setup.sh --system
	$(BIN)/ruff check remediator tests bench
	$(BIN)/ruff format --check remediator tests bench
	$(BIN)/mypy
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist worksteal --durations=40 $(PYTEST_ARGS)

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
