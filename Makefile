# The one test command (README's Quick start; .ci/run calls exactly this).
PY ?= python3

.PHONY: install test lint audit unit e2e image-test realnodes-test lock
# Dependencies from the lock (exact versions, hashes checked), then the package itself without resolving.
install:
	$(PY) -m pip install -q --require-hashes -r requirements/dev.lock
	$(PY) -m pip install -q --no-deps -e .

# Refresh requirements/{runtime,dev}.lock to the newest versions pyproject.toml allows (hashes of every
# file of each pin, resolved for CPython 3.11 on manylinux x86_64: the image's Python), install the dev
# lock in a scratch venv and run there the tests that must pass before the refresh is committed:
# LOCK_TESTS (the third-party internals' contract and their users); then `make test` as always.
UV_VERSION ?= 0.13.9
LOCK_VENV ?= /tmp/py-scheduler-lock-venv
LOCK_TESTS ?= tests/unit/test_third_party.py tests/unit/app/test_lazy_k8s.py tests/unit/app/test_kube_env.py \
	tests/unit/app/test_lifecycle.py tests/unit/app/test_main.py tests/unit/offline tests/unit/test_config.py
LOCK_FLAGS = --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-emit-package pip --upgrade
lock:
	$(PY) -m pip install -q "uv==$(UV_VERSION)"
	$(PY) -m uv pip compile pyproject.toml $(LOCK_FLAGS) -o requirements/runtime.lock
	$(PY) -m uv pip compile pyproject.toml --extra dev $(LOCK_FLAGS) -o requirements/dev.lock
	$(PY) -m venv --clear $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install -q --require-hashes -r requirements/dev.lock
	$(LOCK_VENV)/bin/python -m pip install -q --no-deps .
	$(LOCK_VENV)/bin/python -m pytest -q -p no:cacheprovider $(LOCK_TESTS)

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

# The e2e tests on real nodes (kubelet + containerd + kube-proxy in namespaces the bed makes; issue 27):
# 2 nodes, py-scheduler beside kube-scheduler. As root it installs runc, containernetworking-plugins,
# iptables, conntrack, busybox-static, gcc with apt-get when missing; builds into ~/.cache.
# (`make test` collects tests/e2e/realnodes too; this target runs only them.)
realnodes-test:
	$(PY) tests/e2e/testbed/testbed build --nodes
	$(PY) -m pytest -q -p no:cacheprovider tests/e2e/realnodes
