# The one test command (README's Quick start; .ci/run calls exactly this).
PY ?= python3

.PHONY: install test lint unit e2e
install:
	$(PY) -m pip install -q -e '.[dev]'

lint:
	$(PY) -m ruff check scheduler tests bench
	$(PY) -m mypy --strict scheduler
	bash .ci/lint-dockerfile

test: install lint
	$(PY) -m pytest -q tests
