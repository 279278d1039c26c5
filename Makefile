# The one test command (README's Quick start; .ci/run calls exactly this).
PY ?= python3

.PHONY: install test lint audit unit e2e
install:
	$(PY) -m pip install -q -e '.[dev]'

lint:
	$(PY) -m ruff check py_scheduler tests bench
	$(PY) -m mypy --strict py_scheduler
	lint-imports  # layers point down, no cycles between sibling modules (pyproject.toml [tool.importlinter])
	bash .ci/lint-dockerfile

# Known vulnerabilities in the project's dependency closure (pip-audit; see .ci/audit: never fails
# on network trouble, AUDIT_STRICT=1 makes "could not audit" fatal).
audit:
	$(PY) .ci/audit

test: install lint audit
	$(PY) -m pytest -q tests
