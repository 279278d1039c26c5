# syntax=docker/dockerfile:1.7
# py-scheduler container image.
#   docker build -t py-scheduler:0.1.0 .
# Without a Docker daemon (root, buildah; a Debian stand-in base where no registry answers):
#   bash .ci/image-build        (make image-test also runs the image as deploy/ runs it)
# Stage 1 builds the py-scheduler wheel and wheels of exactly the versions of requirements/runtime.lock
# (hashes checked; refreshed by `make lock`); stage 2 installs them from that local wheel house (no
# index, no compiler) and runs as the non-root uid 65532.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
RUN pip install --no-cache-dir build==1.2.2.post1
COPY pyproject.toml README.md ./
COPY requirements/runtime.lock ./requirements/
COPY py_scheduler/ ./py_scheduler/
RUN python -m build --wheel --outdir /dist . \
    && pip wheel --no-cache-dir --require-hashes --wheel-dir /wheels -r requirements/runtime.lock \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /wheels /dist/*.whl

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="py-scheduler" \
      org.opencontainers.image.description="Out-of-tree Kubernetes scheduler: kube-scheduler v1.37's default profile plus GPU plugins" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# A named user for uid 65532: getpass.getuser() (used by kopf for its identity) needs a passwd entry.
RUN groupadd --system --gid 65532 nonroot \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin nonroot
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/py_scheduler-*.whl
USER 65532:65532
EXPOSE 10259
ENTRYPOINT ["py-scheduler"]
CMD ["run"]
