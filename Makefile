# The one test command (README's Quick start; .ci/run calls exactly this).
PY ?= python3

.PHONY: install test lint audit unit e2e image-test
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

# The container image, built from the Dockerfile without a Docker daemon (buildah; a Debian stand-in
# base where no container registry answers) and run as deploy/'s Deployment runs it against the e2e
# test bed: probes, one leader of two, binding, hand-over, no writes outside its tmpfs (README
# "Deploying"). As root it installs buildah/podman/runc/debootstrap with apt-get when missing.
image-test:
	bash .ci/image-build
	$(PY) tests/e2e/testbed/testbed build
	PY_SCHEDULER_IMAGE_TEST=1 $(PY) -m pytest -q -s -p no:cacheprovider tests/image
